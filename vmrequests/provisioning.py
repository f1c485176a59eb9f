"""Provisioning: turn an approved request into a running VMI, re-profile vGPU nodes safely,
follow the VMI, end leases. Celery tasks (``vmrequests/tasks.py``) are thin wrappers over these.

Every step is idempotent, so a redelivered message (``acks_late``; a worker killed mid-task) or a
retry repeats nothing harmful:

- the VMI name is fixed at submission; "already exists" carrying our request-ID label is adopted;
  without it, it is a conflict reported on the request;
- the re-profile remembers in the ``Reservation`` when the label was patched and what it was, so a
  retry waits instead of patching again;
- status changes are compare-and-swap model methods; a step that loses just stops.

Waiting (for the vGPU Device Manager) never sleeps in a worker: the step raises ``Wait`` and the
task retries itself with a countdown. Transient Kubernetes errors (``K8sTransientError``)
propagate for the task's bounded retry with backoff; permanent ones (403, 404 namespace, 422) fail
the request at once with the API server's message.

Sources: DOMAIN.md §3 (what a vGPU config change does, states pending/success/failed), §5.3
(VMI GPU fields, display off for vGPU), §5.4 (phases, ``PodScheduled=False/Unschedulable``,
``Synchronized=False/FailedCreate``), pitfalls 2, 11, 12, 13.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.choices import ResourceKind
from gpuinventory.models import GpuNode, Reservation
from gpuinventory.naming import classify_resource, parse_vgpu_type
from portal import k8s
from portal.labels import HOSTNAME as HOSTNAME_LABEL
from portal.labels import MANAGED_BY as MANAGED_BY_LABEL
from portal.labels import MANAGED_BY_VALUE as MANAGED_BY
from portal.labels import REQUEST_ID as REQUEST_LABEL
from portal.labels import REQUESTER as REQUESTER_ANNOTATION
from portal.labels import TEAM as TEAM_LABEL
from portal.labels import TICKET as TICKET_ANNOTATION
from portal.labels import VGPU_CONFIG as VGPU_CONFIG_LABEL
from portal.labels import VGPU_CONFIG_STATE as VGPU_CONFIG_STATE_LABEL
from vmrequests.choices import TERMINAL_STATES, DeletionReason, EventAction, VMMode, VMRequestStatus
from vmrequests.models import TransitionError, VMRequest

log = logging.getLogger(__name__)


#: Countdown (s) between checks while the vGPU Device Manager works.
REPROFILE_POLL_SECONDS = 2.0


class Wait(Exception):
    """Not done yet: run the step again in ``countdown`` seconds (the task retries itself)."""

    def __init__(self, countdown: float, why: str) -> None:
        self.countdown = countdown
        self.why = why
        super().__init__(why)


@dataclass(frozen=True)
class Outcome:
    """What a provisioning or reconcile step did: ``action`` (e.g. ``"created"``, ``"failed"``)."""

    request_id: int
    action: str
    detail: str = ""


def _minutes(seconds: float) -> str:
    """Seconds as minutes for messages: ``600`` → ``"10"``, ``90`` → ``"1.5"``, ``10`` → ``"0.2"``."""
    minutes = round(seconds / 60, 1)
    return str(int(minutes)) if minutes == int(minutes) else str(minutes)


def _requeue_after() -> timedelta:
    """``PORTAL_REQUEUE_AFTER``: no progress for this long → enqueue the provisioning task again."""
    return timedelta(seconds=settings.PORTAL_REQUEUE_AFTER)


# --- the VMI manifest ---------------------------------------------------------------------------


def cloud_init_user_data(login_user: str, ssh_public_key: str) -> str:
    """``#cloud-config`` creating ``login_user`` with sudo and the SSH key (DOMAIN.md §5.3 example).

    Dumped with a YAML library, so a key comment can never inject YAML.
    """
    doc = {
        "users": [
            {
                "name": login_user,
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/bash",
                "ssh_authorized_keys": [ssh_public_key.strip()],
            }
        ]
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, default_flow_style=False, sort_keys=False)


def vmi_manifest(req: VMRequest, resource_name: str, pin_node: str | None = None) -> dict[str, Any]:
    """The VirtualMachineInstance for ``req`` (kubevirt.io/v1, DOMAIN.md §5.3).

    ``spec.domain.devices.gpus[]`` holds ``device_count`` entries of the exact ``resource_name``
    (read from allocatable, never computed: pitfall 4); vGPUs get ``display.enabled: false``
    (only one ramfb display per VMI, pitfall 12; the portal's VMs are headless compute VMs).
    ``pin_node`` adds ``nodeSelector: {kubernetes.io/hostname: <node>}``: provisioning pins every
    VMI to the node its devices were reserved on at approval.

    Returns:
        The manifest as a dict (sent with ``fieldValidation=Strict``).
    """
    gpus: list[dict[str, Any]] = []
    for i in range(req.device_count):
        gpu: dict[str, Any] = {
            "name": f"{'vgpu' if req.mode == VMMode.VGPU else 'gpu'}{i + 1}",
            "deviceName": resource_name,
        }
        if req.mode == VMMode.VGPU:
            gpu["virtualGPUOptions"] = {"display": {"enabled": False}}
        gpus.append(gpu)
    annotations = {REQUESTER_ANNOTATION: req.requester.get_username()}
    if req.ticket_id:
        annotations[TICKET_ANNOTATION] = (
            f"{req.ticket_source}:{req.ticket_id}" if req.ticket_source else req.ticket_id
        )
    spec: dict[str, Any] = {
        "domain": {
            "cpu": {"cores": req.cpu_cores},
            "resources": {"requests": {"memory": f"{req.memory_gib}Gi"}},
            "devices": {
                "disks": [
                    {"name": "containerdisk", "disk": {"bus": "virtio"}},
                    {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                ],
                "gpus": gpus,
                "interfaces": [{"name": "default", "masquerade": {}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "containerdisk", "containerDisk": {"image": req.image.image}},
            {
                "name": "cloudinitdisk",
                "cloudInitNoCloud": {
                    "userData": cloud_init_user_data(req.image.login_user, req.ssh_public_key)
                },
            },
        ],
    }
    if pin_node:
        spec = {"nodeSelector": {HOSTNAME_LABEL: pin_node}, **spec}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": req.vmi_name,
            "namespace": req.vmi_namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                REQUEST_LABEL: str(req.pk),
                TEAM_LABEL: req.team.slug,
            },
            "annotations": annotations,
        },
        "spec": spec,
    }


def connect_instructions(req: VMRequest) -> str:
    """How to reach the VM: ``VMRequest.virtctl_commands``, one per line."""
    return "\n".join(req.virtctl_commands)


# --- provision ----------------------------------------------------------------------------------


def _load(request_id: int) -> VMRequest:
    return VMRequest.objects.select_related("image", "team", "requester").get(pk=request_id)


def _fail(req: VMRequest, reason: str, *, data: dict[str, Any] | None = None) -> Outcome:
    """Fail the request (provisioning|running → failed) unless someone else already moved it."""
    try:
        req.mark_failed(reason, data=data)
    except TransitionError as exc:
        return Outcome(req.pk, "lost", str(exc))
    log.warning("request failed", extra={"request_id": req.pk, "reason": reason})
    return Outcome(req.pk, "failed", reason)


def provision(request_id: int) -> Outcome:
    """Make an approved request real: (re-profile,) create the VMI. Idempotent.

    Returns:
        ``Outcome`` with action ``created``, ``adopted``, ``failed``, ``lost`` (another worker or
        person moved the request) or ``skipped`` (not approved/provisioning).

    Raises:
        Wait: the vGPU Device Manager is still working; run again after ``countdown``.
        k8s.K8sTransientError: the API server is unreachable or overloaded; retry with backoff.
    """
    req = _load(request_id)
    if req.status == VMRequestStatus.APPROVED:
        try:
            req.start_provisioning()
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
    elif req.status != VMRequestStatus.PROVISIONING:
        return Outcome(req.pk, "skipped", req.status)
    if req.vmi_created_at is not None:
        return Outcome(req.pk, "skipped", "VMI already created")
    reservation = Reservation.objects.select_related("node").filter(holder=req.holder).first()
    if reservation is None:
        return _fail(
            req, _("The devices reserved at approval are gone; an approver must approve the request again.")
        )
    if reservation.reprofile_config and not reservation.reprofile_done:
        try:
            outcome = _reprofile(req, reservation)
        except Wait:
            # Show activity, so reconcile does not enqueue a second worker for a long re-profile.
            VMRequest.objects.filter(pk=req.pk).update(updated=timezone.now())
            raise
        except k8s.K8sTransientError:
            raise
        except k8s.K8sError as exc:
            return _reprofile_refused(req, reservation, exc)
        if outcome is not None:
            return outcome
    return _create_vmi(req, reservation)


def _vgpu_users(pods: list[k8s.PodInfo]) -> list[str]:
    """``namespace/name`` of pods requesting any vGPU resource."""
    out = []
    for pod in pods:
        for name in pod.requests:
            info = classify_resource(name)
            if info is not None and info.kind == ResourceKind.VGPU:
                out.append(f"{pod.namespace}/{pod.name}")
                break
    return sorted(out)


def _type_resource(allocatable: dict[str, str] | Any, vgpu_type: str) -> tuple[str, int]:
    """The advertised resource of bare ``vgpu_type`` on a node and its allocatable count."""
    for name, value in sorted(dict(allocatable).items()):
        info = classify_resource(name)
        if info is None or info.kind != ResourceKind.VGPU:
            continue
        parsed = parse_vgpu_type(name.rsplit("_", 1)[-1])
        if parsed is not None and parsed.name == vgpu_type:
            try:
                count = k8s.parse_int_quantity(value)
            except ValueError:
                count = 0
            if count > 0:
                return name, count
    return "", 0


def _reprofile(req: VMRequest, res: Reservation) -> Outcome | None:
    """Re-profile the reserved node for ``req``; None when done (then create the VMI).

    First pass, under a row lock on the node: verify LIVE that no non-terminal pod on the node
    requests any vGPU resource (the vGPU Device Manager deletes every vGPU of a matched GPU,
    DOMAIN.md §3, pitfall 2), refuse while the state is ``pending``, then patch only the
    ``nvidia.com/vgpu.config`` label (pitfall 13). Later passes wait for state ``success`` and
    the type in allocatable; on ``failed`` or after ``PORTAL_REPROFILE_TIMEOUT`` the previous
    config label is put back and the request fails.
    """
    node_name = res.node.name
    now = timezone.now()
    if res.reprofile_started is None:
        with transaction.atomic():
            GpuNode.objects.select_for_update().filter(pk=res.node_id).first()
            res.refresh_from_db()
            if res.reprofile_started is None:
                node = k8s.get_node(node_name)
                users = _vgpu_users(k8s.list_pods_on_node(node_name))
                if users:
                    return _fail(
                        req,
                        _(
                            "Node %(node)s was not re-profiled: its vGPUs are in use (%(pods)s), and changing the vGPU "
                            "config would destroy them. Ask an approver to approve the request again once "
                            "another node is idle."
                        )
                        % {"node": node_name, "pods": ", ".join(users)},
                        data={"node": node_name, "pods": users},
                    )
                state = node.labels.get(VGPU_CONFIG_STATE_LABEL, "")
                if state == "pending":
                    raise Wait(REPROFILE_POLL_SECONDS * 5, f"node {node_name} is already being reconfigured")
                if state == "failed":
                    # DOMAIN.md §3: a failed config needs an admin; relabelling on top hides it.
                    return _fail(
                        req,
                        _(
                            "Node %(node)s was not re-profiled: its vGPU Device Manager reports state failed "
                            "for the current config. An admin must look at the node first."
                        )
                        % {"node": node_name},
                        data={"node": node_name, "state": state},
                    )
                previous = node.labels.get(VGPU_CONFIG_LABEL, "")
                if previous == res.reprofile_config:
                    # Already the target: an earlier delivery patched it and died before recording
                    # the patch. The config to put back is the one the approval planned from.
                    previous = res.reprofile_from
                k8s.patch_node_labels(node_name, {VGPU_CONFIG_LABEL: res.reprofile_config})
                Reservation.objects.filter(pk=res.pk).update(reprofile_from=previous, reprofile_started=now)
                req.record(
                    EventAction.PROGRESS,
                    _(
                        "Set nvidia.com/vgpu.config on node %(node)s from %(old)s to %(new)s; waiting for the "
                        "vGPU Device Manager."
                    )
                    % {"node": node_name, "old": previous or _("(default)"), "new": res.reprofile_config},
                    actor_label="worker",
                    data={"node": node_name, "from": previous, "to": res.reprofile_config},
                )
        raise Wait(REPROFILE_POLL_SECONDS, "label patched")
    node = k8s.get_node(node_name)
    state = node.labels.get(VGPU_CONFIG_STATE_LABEL, "")
    current = node.labels.get(VGPU_CONFIG_LABEL, "")
    resource, count = _type_resource(node.allocatable, req.vgpu_type)
    if state == "success" and current == res.reprofile_config and count >= req.device_count:
        Reservation.objects.filter(pk=res.pk).update(resource_name=resource, reprofile_done=True)
        VMRequest.objects.filter(pk=req.pk).update(resource_name=resource)
        res.refresh_from_db()
        req.resource_name = resource
        req.record(
            EventAction.PROGRESS,
            _("Node %(node)s now offers %(count)s × %(resource)s.")
            % {"node": node_name, "count": count, "resource": resource},
            actor_label="worker",
            data={"node": node_name, "resource": resource, "allocatable": count},
        )
        return None
    elapsed = now - res.reprofile_started
    timeout = timedelta(seconds=settings.PORTAL_REPROFILE_TIMEOUT)
    if state == "failed" or elapsed > timeout:
        restore, restored, back = _restore_label(node_name, res)
        why = (
            _("the vGPU Device Manager reported state failed")
            if state == "failed"
            else _("it did not finish within %(min)s minutes") % {"min": _minutes(timeout.total_seconds())}
        )
        return _fail(
            req,
            _(
                "Re-profiling node %(node)s to vGPU config %(new)s failed: %(why)s. %(back)s An admin should check the vGPU Device Manager on that node."
            )
            % {"node": node_name, "new": res.reprofile_config, "why": why, "back": back},
            data={"node": node_name, "state": state, "restored": restored, "restore": restore},
        )
    raise Wait(REPROFILE_POLL_SECONDS, f"waiting for {node_name}: state {state or '(none)'}")


def _restore_label(node_name: str, res: Reservation) -> tuple[str, bool, str]:
    """Put the node's previous ``nvidia.com/vgpu.config`` back (the ClusterPolicy default when
    it had none).

    Returns:
        ``(config, restored, sentence for the request's message)``.

    Raises:
        k8s.K8sTransientError: reading the ClusterPolicy failed for now (retry).
    """
    restore = res.reprofile_from or _default_vgpu_config()
    try:
        k8s.patch_node_labels(node_name, {VGPU_CONFIG_LABEL: restore})
        restored = True
    except k8s.K8sError as exc:
        log.error("could not restore vGPU config", extra={"node": node_name, "error": str(exc)})
        restored = False
    back = (
        _("The previous config %(old)s was put back.") % {"old": restore}
        if restored
        else _("Putting back the previous config %(old)s failed too; an admin must set it.")
        % {"old": restore}
    )
    return restore, restored, back


def _reprofile_refused(req: VMRequest, res: Reservation, exc: k8s.K8sError) -> Outcome:
    """A permanent Kubernetes error during the re-profile (403, 404 node gone, 422): fail now
    rather than leave the request for ``reconcile`` to requeue forever; put the label back when
    it was already changed."""
    node_name = res.node.name
    res.refresh_from_db()
    message = _(
        "Re-profiling node %(node)s to vGPU config %(new)s failed: Kubernetes refused a call (%(error)s)."
    ) % {"node": node_name, "new": res.reprofile_config, "error": exc}
    data: dict[str, Any] = {"node": node_name, "error": str(exc), "kind": type(exc).__name__}
    if res.reprofile_started is not None:
        restore, restored, back = _restore_label(node_name, res)
        message = f"{message} {back}"
        data.update(restored=restored, restore=restore)
    return _fail(req, message, data=data)


def _default_vgpu_config() -> str:
    """The ClusterPolicy's ``vgpuDeviceManager.config.default`` (``"default"`` when unknown).

    Removing the label would not revert the node (DOMAIN.md §3), so an unlabelled node is
    restored to the config the device manager applies when the label is absent.

    Raises:
        k8s.K8sTransientError: the ClusterPolicy could not be read for now.
    """
    try:
        policy = k8s.get_cluster_policy()
    except k8s.K8sTransientError:
        raise  # guessing "default" could write a config the node's ConfigMap does not have
    except k8s.K8sError:
        policy = None
    return policy.vgpu_default_config if policy else "default"


def _create_vmi(req: VMRequest, res: Reservation) -> Outcome:
    resource = res.resource_name or req.resource_name
    # Always pinned to the reserved node: the reservation promised devices THERE, and an unpinned
    # VMI could land on a node the capacity service still counts as free (or one promised to a
    # re-profile for another request).
    pin = res.node.name
    body = vmi_manifest(req, resource, pin)
    try:
        k8s.create_vmi(req.vmi_namespace, body)
        action, message = "created", _("Created VirtualMachineInstance %(ns)s/%(name)s.")
    except k8s.K8sConflict:
        existing = k8s.get_vmi(req.vmi_namespace, req.vmi_name)
        if existing is None:
            raise k8s.K8sTransientError("the conflicting VMI disappeared; retrying") from None
        if existing.labels.get(REQUEST_LABEL) == str(req.pk) and existing.deleting:
            # Ours, but from before a retry and still being finalised: adopting it would follow a
            # VMI about to vanish. Create ours once it is gone.
            raise k8s.K8sTransientError(
                "the previous VMI of this request is still being deleted; retrying"
            ) from None
        if existing.labels.get(REQUEST_LABEL) != str(req.pk):
            return _fail(
                req,
                _(
                    "A VirtualMachineInstance named %(name)s already exists in namespace %(ns)s and was not "
                    "created by the portal for this request. An approver must remove or rename it."
                )
                % {"name": req.vmi_name, "ns": req.vmi_namespace},
            )
        action, message = (
            "adopted",
            _("VirtualMachineInstance %(ns)s/%(name)s already existed for this request; adopted."),
        )
    except k8s.K8sNotFound as exc:
        return _fail(
            req,
            _(
                "Namespace %(ns)s does not exist in the cluster (or KubeVirt is not installed). An admin must "
                "create it or correct the team's namespace; then an approver can retry."
            )
            % {"ns": req.vmi_namespace},
            data={"error": str(exc), "kind": type(exc).__name__},
        )
    except (k8s.K8sInvalid, k8s.K8sForbidden) as exc:
        return _fail(
            req,
            _("Kubernetes refused the VirtualMachineInstance: %(error)s") % {"error": exc},
            data={"error": str(exc), "kind": type(exc).__name__},
        )
    now = timezone.now()
    won = VMRequest.objects.filter(pk=req.pk, status=VMRequestStatus.PROVISIONING).update(vmi_created_at=now)
    if not won:
        # Released, terminated or failed while the VMI was being created: do not leave it behind.
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
        return Outcome(req.pk, "lost", "the request moved on while its VMI was created; VMI deleted")
    req.vmi_created_at = now
    req.record(
        EventAction.PROGRESS,
        message % {"ns": req.vmi_namespace, "name": req.vmi_name},
        actor_label="worker",
        data={"vmi": f"{req.vmi_namespace}/{req.vmi_name}", "resource": resource, "pinned_to": pin},
    )
    return Outcome(req.pk, action)


# --- reconcile ----------------------------------------------------------------------------------

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
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
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
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
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
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
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
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
        return _fail(req, _("The VM stopped (%(phase)s).") % {"phase": vmi.phase})
    if req.lease_end is not None and now >= req.lease_end:
        try:
            req.start_deletion(DeletionReason.EXPIRED)
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
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
        k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
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


_FOLLOWED = (
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
            k8s.delete_vmi(namespace, name)
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
        VMRequest.objects.filter(status__in=_FOLLOWED).select_related("image", "team", "requester")
    )
    vmis: dict[tuple[str, str], k8s.VmiInfo] = {
        (v.namespace, v.name): v for v in k8s.list_vmis_labelled(f"{MANAGED_BY_LABEL}={MANAGED_BY}")
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


def reconcile_vmi_event(event: k8s.VmiEvent) -> Outcome | None:
    """Reconcile the request a watched VMI belongs to (its request-ID label), at once.

    A ``DELETED`` event reconciles with "no VMI". Events of VMIs whose request is not live (or
    whose name does not match the request's) are ignored (None).
    """
    raw = event.vmi.labels.get(REQUEST_LABEL, "")
    if not raw.isdigit():
        return None
    req = (
        VMRequest.objects.filter(
            pk=int(raw), vmi_namespace=event.vmi.namespace, vmi_name=event.vmi.name, status__in=_FOLLOWED
        )
        .select_related("image", "team", "requester")
        .first()
    )
    if req is None:
        return None
    return reconcile_request(req, None if event.type == "DELETED" else event.vmi)


def follow_vmis(stop: threading.Event, watch_seconds: int = 60) -> None:
    """Watch the portal's VMIs and reconcile each change as it happens (``manage.py watch_vmis``).

    The beat-driven ``reconcile`` stays for what time alone changes (timeouts, leases, requeue);
    this loop removes its polling delay from "VMI Running → request running". Each round: LIST
    (and one full ``reconcile``), then WATCH from the list's ``resourceVersion`` until the
    server-side timeout, continuing from the last event's version; a broken or expired watch
    starts a new round after a short backoff. Ends when ``stop`` is set (checked between events
    and at least every ``watch_seconds``).
    """
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    backoff = 1.0
    while not stop.is_set():
        try:
            _vmis, version = k8s.list_vmis_labelled_with_version(selector)
            reconcile()
            backoff = 1.0
            while not stop.is_set():
                for event in k8s.watch_vmis(selector, version, watch_seconds):
                    version = event.vmi.resource_version or version
                    try:
                        reconcile_vmi_event(event)
                    except k8s.K8sTransientError:
                        raise
                    except k8s.K8sError as exc:
                        log.error(
                            "reconcile of a VMI event failed",
                            extra={"vmi": event.vmi.name, "error": str(exc)},
                        )
                    if stop.is_set():
                        return
        except k8s.K8sError as exc:
            log.warning("VMI watch restarting in %.0f s: %s", backoff, exc)
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)


# --- ending and extending leases ------------------------------------------------------------------


def delete_vmi_of(request_id: int) -> Outcome:
    """Delete the VMI of a request in ``deleting``; mark it deleted when already gone."""
    req = _load(request_id)
    if req.status != VMRequestStatus.DELETING:
        return Outcome(req.pk, "skipped", req.status)
    existed = k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
    if not existed:
        return _reconcile_deleting(req, None)
    return Outcome(req.pk, "deleting")
