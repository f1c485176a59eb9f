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
]
