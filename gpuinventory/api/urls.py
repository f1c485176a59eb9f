"""Router of the inventory API, mounted at ``/api/v1/inventory/`` (namespace ``api:inventory``)."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter

from gpuinventory.api import views

app_name = "inventory"

router = DefaultRouter()
router.register("nodes", views.GpuNodeViewSet, basename="gpunode")
router.register("summary", views.SummaryViewSet, basename="summary")
router.register("vgpu-configs", views.VgpuConfigViewSet, basename="vgpuconfig")
router.register("permitted-devices", views.PermittedDeviceViewSet, basename="permitteddevice")

urlpatterns = router.urls
