"""Submitting, approving, rejecting and cancelling requests (the service the views and API call).

Approval is where devices are promised, so it runs under one lock: on PostgreSQL a
transaction-scoped advisory lock (``pg_advisory_xact_lock``), on SQLite the database write lock
the ``IMMEDIATE`` transaction mode takes at ``BEGIN`` (portal/settings.py). Inside the lock it
re-reads capacity and quotas (``placement.check_request``), writes the ``Reservation`` and moves
the request to approved, all in one transaction. Two approvals of the last device therefore run
one after the other and the second sees the first's reservation: it is refused, never both won.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.models import GpuNode
from gpuinventory.reservations import reserve
from vmrequests import policy
from vmrequests.choices import DeletionReason, EventAction, VMRequestStatus
from vmrequests.models import (
    AutoApprovalRule,
    TransitionError,
    VMRequest,
    VMRequestEvent,
    request_transitioned,
    vmi_name_for,
)
from vmrequests.placement import Placement, QuotaBook, Verdict, check_request
from vmrequests.policy import NotAllowed
from vmrequests.validation import RequestSpec  # re-exported; owned by validation

__all__ = [
    "ApprovalRefused",
    "NotAllowed",
    "RequestSpec",
    "approve",
    "cancel",
    "decide_extension",
    "reject",
    "release",
    "request_extension",
    "retry",
    "submit",
    "terminate",
]

log = logging.getLogger(__name__)

#: Key of the approval advisory lock (any constant; "GPUV" in ASCII).
APPROVAL_LOCK_KEY = 0x47505556


class ApprovalRefused(Exception):
    """Approval re-checked capacity or quota and the request no longer fits.

    Attributes:
        verdict: the check that failed (``verdict.problems()`` says why in plain words).
    """

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        super().__init__(" ".join(verdict.problems()))


def _approval_lock() -> None:
    """Serialise approvals (call inside ``transaction.atomic``)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [APPROVAL_LOCK_KEY])


def submit(spec: RequestSpec, requester: Any, *, submitted_by: Any = None) -> VMRequest:
    """Create a submitted request and its first timeline entry, then try the team's
    auto-approval rules. Validation (capacity, quota, SSH key, bounds) is the caller's job
    (``vmrequests.validation.validate``, which returns the spec); this only writes.

    Args:
        spec: the validated request. requester: the user it is for.
        submitted_by: the account filing it on the requester's behalf, if different.

    Returns:
        The request (status submitted, or approved when a rule approved it).
    """
    with transaction.atomic():
        req = VMRequest.objects.create(
            requester=requester,
            submitted_by=submitted_by if submitted_by is not None and submitted_by != requester else None,
            team=spec.team,
            mode=spec.mode,
            resource_name=spec.resource_name,
            vgpu_type=spec.vgpu_type,
            gpu_model=spec.gpu_model,
            device_count=spec.device_count,
            cpu_cores=spec.cpu_cores,
            memory_gib=spec.memory_gib,
            image=spec.image,
            ssh_public_key=spec.ssh_public_key,
            lease_days=spec.lease_days,
            justification=spec.justification,
            ticket_source=spec.ticket_source,
            ticket_id=spec.ticket_id,
            vmi_namespace=spec.team.namespace,
        )
        req.vmi_name = vmi_name_for(req.pk, requester.get_username(), spec.name)
        req.save(update_fields=["vmi_name"])
        data = {"submitted_by": submitted_by.get_username()} if req.submitted_by_id else {}
        event = VMRequestEvent.objects.create(
            request=req,
            actor=submitted_by or requester,
            action="submit",
            from_status="",
            to_status=VMRequestStatus.SUBMITTED,
            message=spec.justification,
            data=data,
        )
        # The "submitted" signal is registered before auto-approval's, so receivers (webhooks)
        # see submitted, then approved. Both run after ONE commit (auto-approval inside this
        # transaction): the mail of a new request re-reads the status then, so approvers are never
        # asked to decide a request a rule has already approved (outside a transaction, on_commit
        # would run at once, before the rule).
        transaction.on_commit(lambda: request_transitioned.send(sender=VMRequest, request=req, event=event))
        _try_auto_approval(req)
    return req


def _try_auto_approval(req: VMRequest) -> None:
    """Approve ``req`` by the first matching enabled rule of its team, when it fits."""
    for rule in AutoApprovalRule.objects.filter(team_id=req.team_id, enabled=True).order_by("pk"):
        if not rule.matches(req):
            continue
        try:
            _approve_locked(req, by=None, note="", rule=rule)
        except ApprovalRefused as exc:
            req.record(
                "note",
                _(
                    "Auto-approval rule matched (%(rule)s) but the request does not fit now: %(why)s Left for an approver."
                )
                % {"rule": rule.describe(), "why": str(exc)},
                actor_label="policy",
            )
        except TransitionError:
            pass
        return


def approve(req: VMRequest, by: Any, note: str = "") -> Placement:
    """Approve ``req``: re-check capacity and quota under the approval lock, reserve, approve.

    Raises:
        NotAllowed: the policy refuses it (``policy.check(by, req, "approve")``: not an approver
            of the team, not submitted, or ``by`` is the requester).
        TransitionError: someone else decided it meanwhile.
        ApprovalRefused: it no longer fits (capacity or quota); nothing is written.
    """
    policy.check(by, req, "approve")
    return _approve_locked(req, by=by, note=note, rule=None)


def retry(req: VMRequest, by: Any, note: str = "") -> Placement:
    """Approve a failed request again: re-check capacity and quota, reserve, provision anew.

    Raises:
        NotAllowed (``policy.check(by, req, "retry")``; the requester may not retry their own),
        TransitionError (no longer failed), ApprovalRefused (no longer fits).
    """
    policy.check(by, req, "retry")
    return _approve_locked(req, by=by, note=note, rule=None, retry=True)


def approval_verdict(req: VMRequest, snapshot: CapacitySnapshot, book: QuotaBook) -> Verdict:
    """The capacity and quota check approving ``req`` runs (its own devices excluded, no
    alternatives): what ``_approve_locked`` refuses on and what the queue shows before the click.
    ``snapshot``: the capacity now; ``book``: the quotas of (at least) ``req``'s team."""
    return check_request(
        req.team,
        req.mode,
        req.resource_name,
        req.vgpu_type,
        req.device_count,
        exclude_pk=req.pk,
        snapshot=snapshot,
        book=book,
        with_alternatives=False,
    )


def _approve_locked(
    req: VMRequest, *, by: Any, note: str, rule: AutoApprovalRule | None, retry: bool = False
) -> Placement:
    expected = VMRequestStatus.FAILED if retry else VMRequestStatus.SUBMITTED
    with transaction.atomic():
        _approval_lock()
        current = VMRequest.objects.select_for_update().get(pk=req.pk)
        if current.status != expected:
            raise TransitionError(req.pk, "retry" if retry else "approve", current.status)
        snap = CapacitySnapshot()
        verdict = approval_verdict(current, snap, QuotaBook([current.team_id]))
        if not verdict.ok:
            raise ApprovalRefused(verdict)
        placement = verdict.placement
        node = GpuNode.objects.get(name=placement.node)
        plan = placement.reprofile
        reserve(
            current.holder,
            node,
            resource_name=placement.resource_name,
            vgpu_type=current.vgpu_type,
            count=current.device_count,
            reprofile_config=plan.config if plan else "",
            reprofile_from=plan.current_config if plan else "",
            vmi_namespace=current.vmi_namespace,
            vmi_name=current.vmi_name,
        )
        data = {"placement": placement.as_json(), "quotas": [q.describe() for q in verdict.quotas]}
        if rule is not None:
            current.approve_by_policy(rule, data=data)
        elif retry:
            current.retry(by, note, data=data)
        else:
            current.approve(by, note, data=data)
        if placement.resource_name and not current.resource_name:
            VMRequest.objects.filter(pk=current.pk).update(resource_name=placement.resource_name)
        pk = current.pk
        transaction.on_commit(lambda: _enqueue("provision", pk))
    req.refresh_from_db()
    log.info(
        "request approved",
        extra={"request_id": req.pk, "node": placement.node, "reprofile": bool(placement.reprofile)},
    )
    return placement


def reject(req: VMRequest, by: Any, reason: str) -> None:
    """Reject ``req`` with a required ``reason``.

    Raises:
        NotAllowed (``policy.check(by, req, "reject")``), TransitionError, ValueError (blank reason).
    """
    policy.check(by, req, "reject")
    req.reject(by, reason)


def cancel(req: VMRequest, by: Any, note: str = "") -> None:
    """Cancel ``req`` (requester, its filer, or an approver of its team) while submitted or approved.

    Raises:
        NotAllowed (``policy.check(by, req, "cancel")``), TransitionError.
    """
    policy.check(by, req, "cancel")
    req.cancel(by, note)


def _enqueue(task: str, request_id: int) -> None:
    """Send a provisioning task (called on commit). A broker outage is logged, not raised: the
    request is already committed and ``reconcile`` enqueues it again once the broker is back."""
    from vmrequests import tasks

    try:
        getattr(tasks, task).delay(request_id)
    except Exception:
        log.exception("could not enqueue %s", task, extra={"request_id": request_id})


def release(req: VMRequest, by: Any, note: str = "") -> None:
    """The requester (or its filer) ends their VM early: provisioning or running → deleting
    (released); the worker deletes the VMI, then the request is deleted.

    Raises:
        NotAllowed (``policy.check(by, req, "release")``; approvers terminate instead),
        TransitionError.
    """
    policy.check(by, req, "release")
    req.start_deletion(DeletionReason.RELEASED, by=by, note=note)
    pk = req.pk
    transaction.on_commit(lambda: _enqueue("delete_vmi", pk))


def terminate(req: VMRequest, by: Any, note: str) -> None:
    """An approver stops someone's VM: provisioning or running → deleting (terminated), with a
    reason the requester is mailed.

    Raises:
        NotAllowed (``policy.check(by, req, "terminate")``), TransitionError, ValueError (blank
        reason).
    """
    policy.check(by, req, "terminate")
    if not note.strip():
        raise ValueError(_("Terminating a VM needs a reason."))
    req.start_deletion(DeletionReason.TERMINATED, by=by, note=note)
    pk = req.pk
    transaction.on_commit(lambda: _enqueue("delete_vmi", pk))


def request_extension(req: VMRequest, by: Any, days: int, reason: str) -> None:
    """The requester asks for ``days`` more lease on a running VM (an approver decides).

    The team's maximum lease caps the lease in total: ``days`` may be at most
    ``req.extension_days_left()`` (maximum − days asked at submission − days already granted).

    Raises:
        NotAllowed (``policy.check(by, req, "extend")``: not the requester, not running, an
        extension already pending, the lease already at the maximum), TransitionError (it
        stopped running meanwhile), ValueError (``days`` outside 1 … the days left).
    """
    policy.check(by, req, "extend")
    left = req.extension_days_left()
    if days < 1 or days > left:
        raise ValueError(
            ngettext(
                "Ask for 1 to %(left)s day: the team's maximum lease is %(max)s days in total and "
                "this lease already has %(total)s.",
                "Ask for 1 to %(left)s days: the team's maximum lease is %(max)s days in total and "
                "this lease already has %(total)s.",
                left,
            )
            % {"left": left, "max": req.team.max_lease_days, "total": req.lease_total_days}
        )
    with transaction.atomic():
        updated = VMRequest.objects.filter(
            pk=req.pk,
            status=VMRequestStatus.RUNNING,
            extension_days_requested__isnull=True,
            lease_extended_days=req.lease_extended_days,
        ).update(extension_days_requested=days, extension_reason=reason)
        if not updated:
            current = VMRequest.objects.select_related("team").get(pk=req.pk)
            if current.status != VMRequestStatus.RUNNING:
                raise TransitionError(req.pk, "extension_request", current.status)
            policy.check(by, current, "extend")
            raise ValueError(_("The lease changed meanwhile; reload the page and ask again."))
        req.extension_days_requested, req.extension_reason = days, reason
        req.record(EventAction.EXTENSION_REQUEST, reason, actor=by, data={"days": days})


def decide_extension(req: VMRequest, by: Any, *, approve: bool, note: str = "") -> None:
    """An approver grants the pending extension (the lease end moves by the requested days,
    ``lease_extended_days`` grows by them, the expiry warning re-arms) or refuses it.

    Raises:
        NotAllowed: ``policy.check`` of ``extension_approve`` / ``extension_deny`` on the row as
            locked: not an approver, the requester themself, no extension pending, not
            running, or granting it would pass the team's maximum lease in total.
    """
    action = "extension_approve" if approve else "extension_deny"
    policy.check(by, req, action)
    with transaction.atomic():
        current = VMRequest.objects.select_for_update().select_related("team").get(pk=req.pk)
        policy.check(by, current, action)
        days = current.extension_days_requested or 0
        fields: dict[str, Any] = {"extension_days_requested": None, "extension_reason": ""}
        if approve and current.lease_end is not None:
            fields.update(
                lease_end=current.lease_end + timedelta(days=days),
                lease_extended_days=current.lease_extended_days + days,
                lease_warning_sent_at=None,
            )
        VMRequest.objects.filter(pk=req.pk).update(**fields)
        for name, value in fields.items():
            setattr(req, name, value)
        req.record(
            EventAction.EXTENSION_APPROVE if approve else EventAction.EXTENSION_REJECT,
            note,
            actor=by,
            data={"days": days, "lease_end": req.lease_end.isoformat() if req.lease_end else None},
        )
