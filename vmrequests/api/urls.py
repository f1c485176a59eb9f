"""Routers of the request API, mounted at ``/api/v1/`` (``vm-requests``, ``teams``, ``images``), and ``me``."""

from __future__ import annotations

from django.urls import URLPattern, URLResolver, path
from rest_framework.routers import SimpleRouter

from vmrequests.api import views
from vmrequests.api.me import MeView

router = SimpleRouter()
router.register("vm-requests", views.VMRequestViewSet, basename="vmrequest")
router.register("teams", views.TeamViewSet, basename="team")
router.register("images", views.VmImageViewSet, basename="vmimage")

urlpatterns: list[URLPattern | URLResolver] = [path("me/", MeView.as_view(), name="me"), *router.urls]
