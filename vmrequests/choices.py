"""Choices and state groups of VM requests (CONVENTIONS "Models, state and audit").

The status machine (issue "VM requests and approvals")::

    submitted → approved → provisioning → running → deleting → deleted
    submitted → rejected
    submitted | approved → cancelled
    provisioning | running → failed
    provisioning → deleting              (terminated before it ran)
    failed → approved                    (an approver retries it; capacity re-checked, re-reserved)
    running → deleted                    (the VMI disappeared outside the portal)

``TRANSITIONS`` is the table every status change is checked against.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class VMRequestStatus(models.TextChoices):
    """Where a request is in its life."""

    SUBMITTED = "submitted", _("submitted")
    APPROVED = "approved", _("approved")
    PROVISIONING = "provisioning", _("provisioning")
    RUNNING = "running", _("running")
    DELETING = "deleting", _("deleting")
    DELETED = "deleted", _("deleted")
    REJECTED = "rejected", _("rejected")
    CANCELLED = "cancelled", _("cancelled")
    FAILED = "failed", _("failed")


class VMMode(models.TextChoices):
    """How the VM gets its GPU: a whole GPU (VFIO passthrough) or a vGPU (mdev)."""

    PASSTHROUGH = "passthrough", _("passthrough (whole GPU)")
    VGPU = "vgpu", _("vGPU (GPU slice)")


class DeletionReason(models.TextChoices):
    """Why a request's VMI is (being) deleted."""

    RELEASED = "released", _("released by the requester")
    EXPIRED = "expired", _("lease expired")
    TERMINATED = "terminated", _("terminated by an approver")
    DELETED_OUTSIDE = "deleted_outside", _("deleted outside the portal")


class EventAction(models.TextChoices):
    """What a timeline entry records (``VMRequestEvent.action``)."""

    SUBMIT = "submit", _("submitted")
    APPROVE = "approve", _("approved")
    AUTO_APPROVE = "auto_approve", _("approved automatically")
    REJECT = "reject", _("rejected")
    CANCEL = "cancel", _("cancelled")
    START_PROVISIONING = "start_provisioning", _("provisioning started")
    PROGRESS = "progress", _("provisioning step")
    MARK_RUNNING = "mark_running", _("running")
    MARK_FAILED = "mark_failed", _("failed")
    START_DELETION = "start_deletion", _("deletion started")
    MARK_DELETED = "mark_deleted", _("deleted")
    LEASE_WARNING = "lease_warning", _("lease warning sent")
    EXTENSION_REQUEST = "extension_request", _("lease extension requested")
    EXTENSION_APPROVE = "extension_approve", _("lease extension approved")
    EXTENSION_REJECT = "extension_reject", _("lease extension rejected")
    RETRY = "retry", _("approved again after a failure")
    NOTE = "note", _("note")


S = VMRequestStatus

#: The verb of each status-changing action, for "Request #7 is rejected; it cannot be approved."
ACTION_VERB = {
    EventAction.APPROVE: _("approved"),
    EventAction.AUTO_APPROVE: _("approved"),
    EventAction.REJECT: _("rejected"),
    EventAction.CANCEL: _("cancelled"),
    EventAction.START_PROVISIONING: _("provisioned"),
    EventAction.MARK_RUNNING: _("marked running"),
    EventAction.MARK_FAILED: _("marked failed"),
    EventAction.START_DELETION: _("deleted"),
    EventAction.MARK_DELETED: _("marked deleted"),
    EventAction.RETRY: _("retried"),
    EventAction.EXTENSION_REQUEST: _("extended"),
}

#: Requests that hold (or are about to hold) GPU devices: counted against quotas.
OPEN_STATES = frozenset({S.APPROVED, S.PROVISIONING, S.RUNNING})
#: Requests that may still have (or get) a VMI: their VMI name is taken in the namespace.
LIVE_STATES = frozenset({S.SUBMITTED, S.APPROVED, S.PROVISIONING, S.RUNNING, S.DELETING})
#: Nothing more will happen to these requests.
TERMINAL_STATES = frozenset({S.DELETED, S.REJECTED, S.CANCELLED, S.FAILED})

#: action → (statuses it may start from, status it leads to).
TRANSITIONS: dict[str, tuple[frozenset[str], str]] = {
    EventAction.APPROVE: (frozenset({S.SUBMITTED}), S.APPROVED),
    EventAction.AUTO_APPROVE: (frozenset({S.SUBMITTED}), S.APPROVED),
    EventAction.REJECT: (frozenset({S.SUBMITTED}), S.REJECTED),
    EventAction.CANCEL: (frozenset({S.SUBMITTED, S.APPROVED}), S.CANCELLED),
    EventAction.START_PROVISIONING: (frozenset({S.APPROVED}), S.PROVISIONING),
    EventAction.MARK_RUNNING: (frozenset({S.PROVISIONING}), S.RUNNING),
    EventAction.MARK_FAILED: (frozenset({S.PROVISIONING, S.RUNNING}), S.FAILED),
    EventAction.START_DELETION: (frozenset({S.PROVISIONING, S.RUNNING}), S.DELETING),
    EventAction.MARK_DELETED: (frozenset({S.DELETING, S.RUNNING}), S.DELETED),
    EventAction.RETRY: (frozenset({S.FAILED}), S.APPROVED),
}

#: Badge tone per status: CSS class ``badge tone-<tone>`` (static/css/portal.css).
STATUS_BADGE = {
    S.SUBMITTED: "waiting",
    S.APPROVED: "info",
    S.PROVISIONING: "info",
    S.RUNNING: "ok",
    S.DELETING: "warn",
    S.DELETED: "muted",
    S.REJECTED: "bad",
    S.CANCELLED: "muted",
    S.FAILED: "bad",
}
