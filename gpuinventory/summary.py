"""Fleet numbers of the dashboard and of ``/api/v1/inventory/summary/``, read from the stored inventory.

Counting rules (DOMAIN.md §2, "Allocatable is not free"): only present nodes count; per resource
``total`` = Σ allocatable, ``used`` = Σ requests of non-terminal pods bound to the node (as stored
by the sync); stale (zero-valued) entries are never counted.

``free`` counts only *requestable* devices: Σ max(0, allocatable − used) over resources that
``capacity.requestable()`` accepts (the same rule as the request form and ``free_by_resource``).
Free devices that cannot be requested now are reported beside it: ``free_unusable`` (their sum)
and ``free_unusable_reasons`` (``{reason: devices}``, reasons = ``capacity.UNUSABLE_REASONS``:
node not ready / cordoned, vGPU reconfiguring, transitioning, resource of another mode, not
permitted by KubeVirt), so ``free + free_unusable`` = the raw Σ max(0, allocatable − used).
A fixed number of queries whatever the fleet size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.capacity import UNUSABLE_REASONS, unusable_reason
from gpuinventory.choices import MODE_BADGE, ResourceKind, SyncStatus, WorkloadMode
from gpuinventory.models import GpuNode, GpuResource, SyncRun


def _add_free(target: DeviceGroup | ModeSummary, free: int, reason: str) -> None:
    """Add ``free`` devices to ``target.free`` (requestable) or to the unusable ones of ``reason``."""
    if not free:
        return
    if not reason:
        target.free += free
        return
    target.free_unusable += free
    target.free_unusable_reasons[reason] = target.free_unusable_reasons.get(reason, 0) + free


@dataclass
class DeviceGroup:
    """Devices of one mode grouped by GPU model (``by_model``) or by resource (``by_resource``).

    ``label`` is what people call it: the GPU model, the vGPU type (``T4-8Q``), the passthrough
    model, or the short container resource name (``gpu``, ``mig-1g.5gb``). ``free`` = requestable
    free devices; ``free_unusable``/``free_unusable_reasons`` = the other free devices and why
    (module docstring).
    """

    label: str
    nodes: int = 0
    gpus: int | None = None
    total: int = 0
    used: int = 0
    free: int = 0
    resource: str = ""
    kind: str = ""
    model: str = ""
    free_unusable: int = 0
    free_unusable_reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class ModeSummary:
    """Nodes and devices of one workload mode (DOMAIN.md §1)."""

    mode: str
    label: str
    nodes: int = 0
    nodes_ready: int = 0
    nodes_in_use: int = 0
    nodes_flagged: int = 0
    nodes_transitioning: int = 0
    total: int = 0
    used: int = 0
    free: int = 0
    free_unusable: int = 0
    free_unusable_reasons: dict[str, int] = field(default_factory=dict)
    by_model: list[DeviceGroup] = field(default_factory=list)
    by_resource: list[DeviceGroup] = field(default_factory=list)

    @property
    def badge(self) -> str:
        """CSS class of the mode's badge."""
        return MODE_BADGE.get(self.mode, "")  # type: ignore[call-overload]

    @property
    def nodes_idle(self) -> int:
        """Present nodes of the mode where no device is in use."""
        return self.nodes - self.nodes_in_use


@dataclass
class SyncState:
    """The last sync run and the age of the data shown (seconds, None before the first success)."""

    last_run: SyncRun | None
    last_success: SyncRun | None
    data_age_seconds: int | None
    last_run_age_seconds: int | None

    @property
    def failed(self) -> bool:
        """True when the most recent run failed (the data shown is from an older run)."""
        return self.last_run is not None and self.last_run.status == SyncStatus.FAILED


@dataclass
class InventorySummary:
    """What the dashboard shows above the node table."""

    modes: list[ModeSummary]
    absent_nodes: int
    sync: SyncState

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready numbers for the API (``modes`` keyed by mode value)."""
        modes = {}
        for summary in self.modes:
            data = asdict(summary)
            data.pop("label")
            data["nodes_idle"] = summary.nodes_idle
            modes[summary.mode] = data
        return {
            "modes": modes,
            "absent_nodes": self.absent_nodes,
            "last_sync": self.sync.last_run.as_summary() if self.sync.last_run else None,
            "last_success": self.sync.last_success.as_summary() if self.sync.last_success else None,
            "data_age_seconds": self.sync.data_age_seconds,
        }


def _order_reasons(target: DeviceGroup | ModeSummary) -> None:
    """Put ``free_unusable_reasons`` in ``capacity.UNUSABLE_REASONS`` order (stable JSON)."""
    target.free_unusable_reasons = {
        k: target.free_unusable_reasons[k] for k in UNUSABLE_REASONS if k in target.free_unusable_reasons
    }


def resource_label(kind: str, name: str, model: str, vgpu_type: str, pci_device_id: str) -> str:
    """Return the short, human name of a resource (see :class:`DeviceGroup`)."""
    if kind == ResourceKind.VGPU and vgpu_type:
        return vgpu_type
    if kind == ResourceKind.PASSTHROUGH:
        if model:
            return model
        if pci_device_id:
            return _("unknown model, PCI 10de:%(id)s") % {"id": pci_device_id}
    return name.removeprefix("nvidia.com/")


def age_text(seconds: int | None) -> str:
    """Return a short, translated age such as "12 s ago" or "3 min ago" ("never" for None)."""
    if seconds is None:
        return _("never")
    if seconds < 120:
        return _("%(n)d s ago") % {"n": seconds}
    if seconds < 7200:
        return _("%(n)d min ago") % {"n": seconds // 60}
    if seconds < 172800:
        return _("%(n)d h ago") % {"n": seconds // 3600}
    return _("%(n)d days ago") % {"n": seconds // 86400}


def _age(now: datetime, when: datetime | None) -> int | None:
    return None if when is None else max(0, int((now - when).total_seconds()))


def sync_state(now: datetime | None = None) -> SyncState:
    """Return the latest sync run, the latest successful one and the data's age (two queries)."""
    now = now or timezone.now()
    last_run = SyncRun.objects.order_by("-started").first()
    if last_run is not None and last_run.status == SyncStatus.SUCCESS:
        last_success: SyncRun | None = last_run
    else:
        last_success = SyncRun.objects.filter(status=SyncStatus.SUCCESS).order_by("-started").first()
    return SyncState(
        last_run=last_run,
        last_success=last_success,
        data_age_seconds=_age(now, last_success.finished or last_success.started) if last_success else None,
        last_run_age_seconds=_age(now, last_run.finished or last_run.started) if last_run else None,
    )


def inventory_summary(now: datetime | None = None) -> InventorySummary:
    """Compute the per-mode numbers, by GPU model and by resource, in a fixed number of queries."""
    modes = {mode.value: ModeSummary(mode=mode.value, label=str(mode.label)) for mode in WorkloadMode}
    present = GpuNode.objects.filter(present=True)
    for mode_row in present.values("workload_mode").annotate(
        n=Count("id"),
        ready=Count("id", filter=Q(ready=True)),
        flagged=Count("id", filter=~Q(flags=[])),
        transitioning=Count("id", filter=Q(transitioning=True)),
    ):
        summary = modes.get(mode_row["workload_mode"])
        if summary is not None:
            summary.nodes, summary.nodes_ready = mode_row["n"], mode_row["ready"]
            summary.nodes_flagged, summary.nodes_transitioning = (
                mode_row["flagged"],
                mode_row["transitioning"],
            )

    by_model: dict[tuple[str, str], DeviceGroup] = {}
    for model_row in present.values("workload_mode", "gpu_model").annotate(
        n=Count("id"), gpus=Sum("gpu_count")
    ):
        by_model[(model_row["workload_mode"], model_row["gpu_model"])] = DeviceGroup(
            label=model_row["gpu_model"],
            model=model_row["gpu_model"],
            nodes=model_row["n"],
            gpus=model_row["gpus"],
        )

    # One query; the per-row rule (capacity.unusable_reason) is applied in Python.
    counted = (
        GpuResource.objects.filter(node__present=True, stale=False)
        .select_related("node")
        .order_by("node__workload_mode", "name")
    )
    in_use: dict[str, set[int]] = {}
    by_resource: dict[tuple[str, str], tuple[DeviceGroup, set[int], set[str], str, str]] = {}
    for r in counted:
        node = r.node
        mode = node.workload_mode
        summary = modes.get(mode)
        if summary is None:
            continue
        if r.used > 0:
            in_use.setdefault(mode, set()).add(node.pk)
        free = max(0, r.allocatable - r.used)
        reason = unusable_reason(r, node) if free else ""
        entry = by_resource.get((mode, r.name))
        if entry is None:
            entry = (DeviceGroup(label="", resource=r.name, kind=r.kind), set(), set(), "", "")
        group, node_ids, models, vgpu_type, pci_id = entry
        node_ids.add(node.pk)
        models.add(r.model)
        by_resource[(mode, r.name)] = (
            group,
            node_ids,
            models,
            max(vgpu_type, r.vgpu_type),
            max(pci_id, r.pci_device_id),
        )
        for target in (group, summary, by_model.get((mode, node.gpu_model))):
            if target is None:
                continue
            target.total += r.allocatable
            target.used += r.used
            _add_free(target, free, reason)
    for mode, ids in in_use.items():
        modes[mode].nodes_in_use = len(ids)
    for (mode, _name), (group, node_ids, models, vgpu_type, pci_id) in by_resource.items():
        # one resource name has one vGPU type / PCI ID; the model may differ (nvidia.com/gpu)
        group.model = models.pop() if len(models) == 1 else ""
        group.label = resource_label(group.kind, group.resource, group.model, vgpu_type, pci_id)
        group.nodes = len(node_ids)
        modes[mode].by_resource.append(group)
    targets: list[DeviceGroup | ModeSummary] = [*modes.values(), *by_model.values()]
    targets += [g for m in modes.values() for g in m.by_resource]
    for target in targets:
        _order_reasons(target)

    for (mode, _model), group in sorted(by_model.items(), key=lambda item: (item[0][0], item[0][1])):
        if mode in modes:
            modes[mode].by_model.append(group)
    return InventorySummary(
        modes=list(modes.values()),
        absent_nodes=GpuNode.objects.filter(present=False).count(),
        sync=sync_state(now),
    )
