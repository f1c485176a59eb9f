"""Request pages: the new-request form (``new.py``), the lists, request page and approval queue
(``lists.py``) and the actions (``actions.py``). Views call ``vmrequests.approval`` / ``vmrequests.placement`` and never talk to
Kubernetes (CONVENTIONS "Data and calls flow one way")."""

from __future__ import annotations

from vmrequests.views.actions import (
    vmrequest_approve,
    vmrequest_cancel,
    vmrequest_extend,
    vmrequest_extension_approve,
    vmrequest_extension_reject,
    vmrequest_reject,
    vmrequest_release,
    vmrequest_retry,
    vmrequest_terminate,
)
from vmrequests.views.lists import (
    MyVMRequestListView,
    VMRequestListView,
    approval_queue,
    vmrequest,
    vmrequest_status,
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
