"""URLs of the request pages, mounted at ``/requests/`` (names ``vmrequests:<name>``)."""

from __future__ import annotations

from django.urls import path

from vmrequests import views

app_name = "vmrequests"

urlpatterns = [
    path("", views.VMRequestListView.as_view(), name="vmrequest_list"),
    path("mine/", views.MyVMRequestListView.as_view(), name="vmrequest_mine"),
    path("queue/", views.approval_queue, name="approval_queue"),
    path("new/", views.vmrequest_add, name="vmrequest_add"),
    path("new/gpu-options/", views.vmrequest_gpu_options, name="vmrequest_gpu_options"),
    path("<int:pk>/", views.vmrequest, name="vmrequest"),
    path("<int:pk>/status/", views.vmrequest_status, name="vmrequest_status"),
    path("<int:pk>/approve/", views.vmrequest_approve, name="vmrequest_approve"),
    path("<int:pk>/reject/", views.vmrequest_reject, name="vmrequest_reject"),
    path("<int:pk>/cancel/", views.vmrequest_cancel, name="vmrequest_cancel"),
    path("<int:pk>/release/", views.vmrequest_release, name="vmrequest_release"),
    path("<int:pk>/terminate/", views.vmrequest_terminate, name="vmrequest_terminate"),
    path("<int:pk>/extend/", views.vmrequest_extend, name="vmrequest_extend"),
    path(
        "<int:pk>/extension/approve/",
        views.vmrequest_extension_approve,
        name="vmrequest_extension_approve",
    ),
    path(
        "<int:pk>/extension/reject/",
        views.vmrequest_extension_reject,
        name="vmrequest_extension_reject",
    ),
    path("<int:pk>/retry/", views.vmrequest_retry, name="vmrequest_retry"),
]
