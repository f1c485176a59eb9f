"""URLs of the inventory pages, mounted at ``/inventory/`` (names ``gpuinventory:<name>``)."""

from __future__ import annotations

from django.urls import path

from gpuinventory import views

app_name = "gpuinventory"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("nodes/", views.gpunode_list, name="gpunode_list"),
    path("nodes/<str:name>/", views.gpunode, name="gpunode"),
    path("vgpu-configs/", views.vgpuconfig_list, name="vgpuconfig_list"),
    path("permitted-devices/", views.permitteddevice_list, name="permitteddevice_list"),
    path("sync/", views.sync_now, name="sync_now"),
]
