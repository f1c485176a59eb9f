"""URL configuration of the portal."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, URLResolver, include, path, re_path
from django.views.generic import RedirectView
from django.views.i18n import set_language
from drf_spectacular.views import SpectacularAPIView

from portal import health, views, views_tokens
from portal.api import openapi, problems

#: The versioned REST API (namespace ``api``); each app mounts its router here (CONVENTIONS "REST API");
#: ``/api/v1/me/`` is the requests app's.
api_v1_patterns: list[URLPattern | URLResolver] = [
    path("inventory/", include("gpuinventory.api.urls")),
    path("", include("vmrequests.api.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("inventory/", include("gpuinventory.urls")),
    path("requests/", include("vmrequests.urls")),
    path("account/tokens/", views_tokens.api_tokens, name="api_tokens"),
    path("account/tokens/<str:token_key>/revoke/", views_tokens.api_token_revoke, name="api_token_revoke"),
    path("api/v1/", include((api_v1_patterns, "api"))),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", openapi.SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", openapi.RedocView.as_view(url_name="api-schema"), name="api-redoc"),
    re_path(r"^api/(?P<path>.*)$", problems.api_not_found),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The language switch must work on the login page too.
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # The webhook admin moved with its models from vmrequests to the webhooks app: old links and
    # bookmarks (/admin/vmrequests/webhookendpoint/3/change/) still land on the same page.
    re_path(
        r"^admin/vmrequests/(?P<rest>webhook(?:endpoint|event|delivery|attempt)/.*)$",
        RedirectView.as_view(url="/admin/webhooks/%(rest)s", permanent=True, query_string=True),
    ),
    path("admin/", admin.site.urls),
    path("favicon.ico", views.favicon),
]

handler500 = problems.server_error

admin.site.site_header = admin.site.site_title = "GPU VM Portal"
