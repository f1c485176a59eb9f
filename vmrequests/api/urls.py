"""Routers of the request API, mounted at ``/api/v1/`` (``vm-requests``, ``teams``, ``images``)."""

from __future__ import annotations

from rest_framework.routers import SimpleRouter

from vmrequests.api import views

router = SimpleRouter()
router.register("vm-requests", views.VMRequestViewSet, basename="vmrequest")
router.register("teams", views.TeamViewSet, basename="team")
router.register("images", views.VmImageViewSet, basename="vmimage")

urlpatterns = router.urls
