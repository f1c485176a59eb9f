"""Request pages: the new-request form (``new.py``) and the lists, detail, approval queue and
the lifecycle actions (``lists.py``). Views call ``vmrequests.approval`` / ``vmrequests.placement`` and never talk to
Kubernetes (CONVENTIONS "Data and calls flow one way")."""

from __future__ import annotations

from vmrequests.views.lists import (
    MyVMRequestListView,
    VMRequestListView,
    approval_queue,
    vmrequest,
    vmrequest_approve,
    vmrequest_cancel,
    vmrequest_extend,
    vmrequest_extension_approve,
    vmrequest_extension_reject,
    vmrequest_reject,
    vmrequest_release,
    vmrequest_retry,
    vmrequest_status,
    vmrequest_terminate,
)
from vmrequests.views.new import vmrequest_add, vmrequest_gpu_options

__all__ = [
    "MyVMRequestListView",
    "VMRequestListView",
    "approval_queue",
    "vmrequest",
    "vmrequest_add",
    "vmrequest_approve",
    "vmrequest_cancel",
    "vmrequest_extend",
    "vmrequest_extension_approve",
    "vmrequest_extension_reject",
    "vmrequest_gpu_options",
    "vmrequest_reject",
    "vmrequest_release",
    "vmrequest_retry",
    "vmrequest_status",
    "vmrequest_terminate",
]
