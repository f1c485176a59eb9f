"""Re-profiling a vm-vgpu node to the vGPU config a request needs (DOMAIN.md §3, pitfalls 2, 13):
check live that no vGPU is in use, patch only ``nvidia.com/vgpu.config``, wait for the vGPU
Device Manager, put the previous config back on failure."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.choices import ResourceKind
from gpuinventory.models import GpuNode, Reservation
from gpuinventory.naming import classify_resource, parse_vgpu_type
from gpuinventory.reservations import mark_reprofile_done, mark_reprofile_started
from portal import k8s
from portal.labels import VGPU_CONFIG as VGPU_CONFIG_LABEL
from portal.labels import VGPU_CONFIG_STATE as VGPU_CONFIG_STATE_LABEL
from vmrequests.choices import EventAction
from vmrequests.models import VMRequest
from vmrequests.provisioning.outcome import Outcome, Wait, _fail, _minutes, log

#: Countdown (s) between checks while the vGPU Device Manager works.
REPROFILE_POLL_SECONDS = 2.0


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
                count = k8s.parse_count(value)
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
    now = timezone.now()
    if res.reprofile_started is None:
        with transaction.atomic():
            GpuNode.objects.select_for_update().filter(pk=res.node_id).first()
            res.refresh_from_db()
            if res.reprofile_started is None:
                refused = _start_reprofile(req, res, now)
                if refused is not None:
                    return refused
        raise Wait(REPROFILE_POLL_SECONDS, "label patched")
    return _follow_reprofile(req, res, now)


def _start_reprofile(req: VMRequest, res: Reservation, now: datetime) -> Outcome | None:
    """The first pass of :func:`_reprofile`, under the node's row lock: check live, then patch.

    Returns:
        The failed outcome when the node cannot be re-profiled, else None (the label is patched
        and the patch recorded on the reservation).

    Raises:
        Wait: the node is already being reconfigured.
    """
    node_name = res.node.name
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
    mark_reprofile_started(res, previous, now)
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
    return None


def _follow_reprofile(req: VMRequest, res: Reservation, now: datetime) -> Outcome | None:
    """A later pass of :func:`_reprofile`: None once the node offers the type (the reservation
    then names the advertised resource), the failed outcome on ``failed`` or time-out (the
    previous label put back).

    Raises:
        Wait: the vGPU Device Manager is still working.
    """
    node_name = res.node.name
    node = k8s.get_node(node_name)
    state = node.labels.get(VGPU_CONFIG_STATE_LABEL, "")
    current = node.labels.get(VGPU_CONFIG_LABEL, "")
    resource, count = _type_resource(node.allocatable, req.vgpu_type)
    if state == "success" and current == res.reprofile_config and count >= req.device_count:
        mark_reprofile_done(res, resource)
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
    elapsed = now - (res.reprofile_started or now)  # set: _reprofile calls this only after the patch
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
