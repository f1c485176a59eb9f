"""Reconcile: bring each live request in line with its VMI (one LIST per beat), explain why a VM
cannot be placed, delete the VMIs of ended requests (DOMAIN.md §5.4)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.choices import ResourceKind
from portal import k8s
from portal.labels import MANAGED_SELECTOR
from portal.labels import REQUEST_ID as REQUEST_LABEL
from vmrequests.choices import TERMINAL_STATES, DeletionReason, EventAction, VMMode, VMRequestStatus
from vmrequests.models import TransitionError, VMRequest
from vmrequests.provisioning.manifest import connect_instructions
from vmrequests.provisioning.outcome import Outcome, _fail, _minutes, _requeue_after, log
from vmrequests.provisioning.ownership import Deletion, delete_own_vmi

_INSUFFICIENT = re.compile(r"(\d+) Insufficient (nvidia\.com/\S+?)[,.]?(?=\s|$)")


def explain_unschedulable(req: VMRequest, message: str, snapshot: CapacitySnapshot | None = None) -> str:
    """The scheduler's message in the analyst's words, with what is free instead.

    ``"0/3 nodes are available: 3 Insufficient nvidia.com/NVIDIA_A10-12Q."`` →
    ``"No node has a free NVIDIA A10-12Q (the scheduler: ...). 2 nodes have free A10-4Q."``.
    """
    snap = snapshot or CapacitySnapshot()
    resource = req.resource_name
    wanted = req.vgpu_type or (resource.removeprefix("nvidia.com/") if resource else "GPU")
    short = _("No node has %(count)s free %(what)s right now.") % {"count": req.device_count, "what": wanted}
    if not _INSUFFICIENT.search(message or ""):
        short = _("The scheduler could not place the VM.")
    others = []
    for r in snap.resources:
        if (
            r.kind == (ResourceKind.VGPU if req.mode == VMMode.VGPU else ResourceKind.PASSTHROUGH)
            and r.name != resource
        ):
            free = snap.free_of(r)
            if free >= req.device_count:
                others.append((r.vgpu_type or r.model or r.name, r.node.name))
    alt = ""
    if others:
        by_what: dict[str, set[str]] = {}
        for what, node in others:
            by_what.setdefault(what, set()).add(node)
        alt = (
            " "
            + "; ".join(
                _("%(n)s node(s) have free %(what)s") % {"n": len(nodes), "what": what}
                for what, nodes in sorted(by_what.items())
            )
            + "."
        )
    if not (message or "").strip():
        return f"{short}{alt}"  # no condition message (e.g. no launcher pod yet): no empty brackets
    return _("%(short)s%(alt)s (scheduler: %(message)s)") % {
        "short": short,
        "alt": alt,
        "message": message.strip(),
    }


def _reconcile_provisioning(
    req: VMRequest, vmi: k8s.VmiInfo | None, now: Any, snap: CapacitySnapshot
) -> Outcome:
    if vmi is None:
        if req.vmi_created_at is not None:
            return _fail(req, _("The VirtualMachineInstance was deleted outside the portal before it ran."))
        if now - req.updated > _requeue_after():
            return Outcome(req.pk, "requeue", "no VMI yet")
        return Outcome(req.pk, "waiting")
    if vmi.phase == "Running" and vmi.node_name:
        if not vmi.ip_address:
            return Outcome(req.pk, "waiting", "no IP yet")
        try:
            req.mark_running(vmi.node_name, vmi.ip_address, message=connect_instructions(req))
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        return Outcome(req.pk, "running")
    if vmi.phase in {"Failed", "Succeeded"}:
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
        cond = vmi.condition("Ready") or vmi.condition("PodScheduled")
        if cond and cond.message:
            reason = _("The VM stopped (%(phase)s): %(detail)s") % {
                "phase": vmi.phase,
                "detail": cond.message,
            }
        else:
            reason = _("The VM stopped (%(phase)s).") % {"phase": vmi.phase}
        return _fail(req, reason)
    sync = vmi.condition("Synchronized")
    if sync is not None and sync.status == "False" and sync.reason == "FailedCreate":
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
        if "not permitted" in sync.message:
            reason = _(
                "KubeVirt refused the GPU: %(resource)s is not permitted in the KubeVirt CR's "
                "permittedHostDevices. An admin must add it. (%(message)s)"
            ) % {"resource": req.resource_name, "message": sync.message}
        else:
            reason = _("KubeVirt could not start the VM: %(message)s") % {"message": sync.message}
        return _fail(req, reason, data={"condition": "Synchronized", "message": sync.message})
    scheduled = vmi.condition("PodScheduled")
    started = req.vmi_created_at or req.updated
    # Only a VMI still waiting for a node times out; one Scheduled (image pull, boot) does not.
    unplaced = vmi.phase in {"", "Pending", "Scheduling"}
    if unplaced and now - started > timedelta(seconds=settings.PORTAL_SCHEDULING_TIMEOUT):
        message = scheduled.message if scheduled is not None else ""
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
        return _fail(
            req,
            _(
                "Timed out waiting for a node (%(min)s min); the VMI was deleted so it does not hold a place. %(why)s"
            )
            % {
                "min": _minutes(settings.PORTAL_SCHEDULING_TIMEOUT),
                "why": explain_unschedulable(req, message, snap),
            },
            data={"phase": vmi.phase, "scheduler": message},
        )
    return Outcome(req.pk, "waiting", vmi.phase)


def _reconcile_running(req: VMRequest, vmi: k8s.VmiInfo | None, now: Any) -> Outcome:
    if vmi is None:
        try:
            req.mark_deleted(
                DeletionReason.DELETED_OUTSIDE,
                _("The VirtualMachineInstance was deleted outside the portal."),
            )
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        return Outcome(req.pk, "deleted_outside")
    if vmi.phase in {"Failed", "Succeeded"}:
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
        return _fail(req, _("The VM stopped (%(phase)s).") % {"phase": vmi.phase})
    if req.lease_end is not None and now >= req.lease_end:
        try:
            req.start_deletion(DeletionReason.EXPIRED)
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
        return Outcome(req.pk, "expired")
    warn_at = timedelta(hours=settings.PORTAL_LEASE_WARNING_HOURS)
    if req.lease_end is not None and req.lease_warning_sent_at is None and now >= req.lease_end - warn_at:
        updated = VMRequest.objects.filter(pk=req.pk, lease_warning_sent_at__isnull=True).update(
            lease_warning_sent_at=now
        )
        if updated:
            req.lease_warning_sent_at = now
            req.record(
                EventAction.LEASE_WARNING,
                _("The lease ends at %(end)s.")
                % {"end": timezone.localtime(req.lease_end).strftime("%Y-%m-%d %H:%M %Z")},
                actor_label="worker",
            )
            from vmrequests import notifications

            notifications.send_lease_warning(req)
            return Outcome(req.pk, "lease_warning")
    if (
        vmi.node_name
        and vmi.ip_address
        and (vmi.node_name != req.node_name or vmi.ip_address != req.ip_address)
    ):
        VMRequest.objects.filter(pk=req.pk).update(node_name=vmi.node_name, ip_address=vmi.ip_address)
    return Outcome(req.pk, "ok")


def _reconcile_deleting(req: VMRequest, vmi: k8s.VmiInfo | None) -> Outcome:
    if vmi is None:
        try:
            req.mark_deleted(message=_("The VirtualMachineInstance is gone; its devices are free."))
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        return Outcome(req.pk, "deleted")
    if not vmi.deleting:
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name, vmi)
    return Outcome(req.pk, "deleting")


def reconcile_request(
    req: VMRequest, vmi: k8s.VmiInfo | None, now: Any = None, snap: CapacitySnapshot | None = None
) -> Outcome:
    """Bring one request in line with its VMI (``None``: the VMI does not exist).

    approved too long without a worker → ``requeue``; provisioning → running (node, IP, how to
    connect) / failed (VMI Failed, ``FailedCreate`` not permitted, scheduling timeout with the
    scheduler's message translated; the VMI is deleted) / failed when the VMI vanished; running →
    deleted (VMI deleted outside), failed (VMI stopped), deleting (lease expired), lease warning;
    deleting → deleted once the VMI is gone.
    """
    now = now or timezone.now()
    if req.status == VMRequestStatus.APPROVED:
        return Outcome(req.pk, "requeue" if now - req.updated > _requeue_after() else "waiting")
    if req.status == VMRequestStatus.PROVISIONING:
        return _reconcile_provisioning(req, vmi, now, snap or CapacitySnapshot())
    if req.status == VMRequestStatus.RUNNING:
        return _reconcile_running(req, vmi, now)
    if req.status == VMRequestStatus.DELETING:
        return _reconcile_deleting(req, vmi)
    return Outcome(req.pk, "skipped", req.status)


FOLLOWED = (
    VMRequestStatus.APPROVED,
    VMRequestStatus.PROVISIONING,
    VMRequestStatus.RUNNING,
    VMRequestStatus.DELETING,
)


def _collect_orphans(
    vmis: dict[tuple[str, str], k8s.VmiInfo], followed: set[tuple[str, str]]
) -> list[Outcome]:
    """Delete portal VMIs whose request has ended (e.g. created by a worker that lost a race with
    a release). Only VMIs carrying our labels whose request exists and is terminal are touched."""
    candidates = {
        int(v.labels[REQUEST_LABEL]): v
        for key, v in vmis.items()
        if key not in followed and not v.deleting and v.labels.get(REQUEST_LABEL, "").isdigit()
    }
    if not candidates:
        return []
    out = []
    ended = VMRequest.objects.filter(pk__in=list(candidates), status__in=sorted(TERMINAL_STATES))
    for pk, namespace, name in ended.values_list("pk", "vmi_namespace", "vmi_name"):
        v = candidates[pk]
        if (v.namespace, v.name) == (namespace, name):
            if delete_own_vmi(pk, namespace, name, v) is not Deletion.DELETED:
                continue
            log.warning(
                "deleted the VMI of an ended request", extra={"request_id": pk, "vmi": f"{namespace}/{name}"}
            )
            out.append(Outcome(pk, "orphan_deleted"))
    return out


def reconcile() -> list[Outcome]:
    """Reconcile every approved / provisioning / running / deleting request (one VMI LIST call).

    Returns:
        One ``Outcome`` per request; ``requeue`` ones are for the task layer to enqueue again.

    Raises:
        k8s.K8sTransientError: the LIST failed (the next beat tries again).
    """
    requests = list(
        VMRequest.objects.filter(status__in=FOLLOWED).select_related("image", "team", "requester")
    )
    vmis: dict[tuple[str, str], k8s.VmiInfo] = {
        (v.namespace, v.name): v for v in k8s.list_vmis_labelled(MANAGED_SELECTOR)
    }
    snap = CapacitySnapshot()
    now = timezone.now()
    out = _collect_orphans(vmis, {(r.vmi_namespace, r.vmi_name) for r in requests})
    for req in requests:
        vmi = vmis.get((req.vmi_namespace, req.vmi_name))
        if vmi is not None and vmi.labels.get(REQUEST_LABEL) != str(req.pk):
            vmi = None
        try:
            outcome = reconcile_request(req, vmi, now, snap)
            if outcome.action == "requeue":
                # The next requeue waits another PORTAL_REQUEUE_AFTER: a dead worker must not
                # find a flood of duplicate messages when it comes back.
                VMRequest.objects.filter(pk=req.pk).update(updated=now)
            out.append(outcome)
        except k8s.K8sTransientError:
            raise
        except k8s.K8sError as exc:
            log.error("reconcile failed", extra={"request_id": req.pk, "error": str(exc)})
            out.append(Outcome(req.pk, "error", str(exc)))
    return out
