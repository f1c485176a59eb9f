"""Fleet numbers of the dashboard and of ``/api/v1/inventory/summary/``, from one ``CapacitySnapshot``.

No arithmetic of its own: every device number is a ``capacity.Tally`` of the snapshot
(docs/inventory.md §4): per mode, per GPU model of the nodes (``by_model``), per resource name
(``by_resource``) and per vGPU type (``by_vgpu_type``). Only present nodes count; stale entries
never count. ``free`` = requestable free devices with active reservations subtracted;
``reserved`` = devices held by active reservations; ``free_unusable`` and
``free_unusable_reasons`` (``{reason: devices}``, reasons ``capacity.UNUSABLE_REASONS``) = the
free devices that cannot be requested now, so ``free + free_unusable`` =
Σ max(0, allocatable − used − reserved).

Device counts of different vGPU types (or MIG profiles) are different sizes, so each entry also
carries ``gpu_equivalents`` (``{"total", "used", "reserved", "free", "unsized_devices"}`` in
whole GPUs: frame buffer ÷ board memory, ``capacity.gpu_equivalent``); the dashboard shows a mode
whose devices are not all whole GPUs per type plus its GPU-equivalents, never one "devices" sum.
A fixed number of queries whatever the fleet size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from django.db.models import Count, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.capacity import CapacitySnapshot, ResourceRow, Tally
from gpuinventory.choices import MODE_BADGE, ResourceKind, SyncStatus, WorkloadMode
from gpuinventory.models import GpuNode, SyncRun


@dataclass(kw_only=True)
class DeviceCounts:
    """The device numbers of a summary entry, copied from a snapshot ``Tally`` by ``_fill``
    (devices; ``gpu_equivalents`` in GPUs): ``total`` (allocatable), ``used``, ``reserved``,
    ``free``, ``free_unusable`` with ``free_unusable_reasons`` (``{reason: devices}``)."""

    total: int = 0
    used: int = 0
    free: int = 0
    free_unusable: int = 0
    free_unusable_reasons: dict[str, int] = field(default_factory=dict)
    reserved: int = 0
    gpu_equivalents: dict[str, float | int] = field(default_factory=dict)


def _fill(target: DeviceCounts, tally: Tally) -> None:
    """Copy a snapshot ``Tally`` into a summary entry (the only source of its device numbers)."""
    target.total, target.used, target.reserved, target.free = (
        tally.allocatable,
        tally.used,
        tally.reserved,
        tally.free,
    )
    target.free_unusable, target.free_unusable_reasons = tally.unusable, tally.ordered_reasons
    target.gpu_equivalents = tally.gpu_equivalents()


@dataclass
class DeviceGroup(DeviceCounts):
    """Devices of one mode grouped by GPU model (``by_model``), resource (``by_resource``) or vGPU
    type (``by_vgpu_type``).

    ``label`` is what people call it: the GPU model, the vGPU type (``T4-8Q``), the passthrough
    model, or the short container resource name (``gpu``, ``mig-1g.5gb``). Device numbers as in
    the module docstring; ``nodes_with_free``/``max_free_on_one_node`` say where the free ones are.
    """

    label: str
    nodes: int = 0
    gpus: int | None = None
    resource: str = ""
    kind: str = ""
    model: str = ""
    vgpu_type: str = ""
    nodes_with_free: int = 0
    max_free_on_one_node: int = 0


@dataclass
class ModeSummary(DeviceCounts):
    """Nodes and devices of one workload mode (DOMAIN.md §1).

    ``uniform`` is True when every device of the mode is a whole GPU (passthrough, full container
    GPUs): only then is one "devices" number meaningful; otherwise the page shows ``by_vgpu_type``
    / ``by_resource`` per type and ``gpu_equivalents``.
    """

    mode: str
    label: str
    nodes: int = 0
    nodes_ready: int = 0
    nodes_in_use: int = 0
    nodes_flagged: int = 0
    nodes_transitioning: int = 0
    by_model: list[DeviceGroup] = field(default_factory=list)
    by_resource: list[DeviceGroup] = field(default_factory=list)
    uniform: bool = True
    by_vgpu_type: list[DeviceGroup] = field(default_factory=list)

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


def _node_counts(modes: dict[str, ModeSummary]) -> dict[tuple[str, str], DeviceGroup]:
    """Per-mode node counts into ``modes``; the ``by_model`` groups with their nodes and GPUs
    (two queries)."""
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
    return by_model


def _resource_groups(snap: CapacitySnapshot, modes: dict[str, ModeSummary]) -> None:
    """``by_resource`` and ``by_vgpu_type`` of every mode from the snapshot."""
    firsts: dict[tuple[str, str], ResourceRow] = {}
    models: dict[tuple[str, str], set[str]] = {}
    for row in snap.rows:
        firsts.setdefault((row.mode, row.resource_name), row)
        models.setdefault((row.mode, row.resource_name), set()).add(row.model)
    for key, tally in sorted(snap.by_resource().items()):
        mode, name = key
        if mode not in modes:
            continue
        first, names = firsts[key], models[key]
        # one resource name has one vGPU type / PCI ID; the model may differ (nvidia.com/gpu)
        model = names.pop() if len(names) == 1 else ""
        group = DeviceGroup(
            label=resource_label(first.kind, name, model, first.vgpu_type, first.pci_device_id),
            resource=name,
            kind=first.kind,
            model=model,
            vgpu_type=first.vgpu_type,
        )
        _fill_group(group, tally)
        modes[mode].by_resource.append(group)
    for (mode, vgpu_type), tally in sorted(snap.by_vgpu_type().items()):
        if mode in modes:
            group = DeviceGroup(label=vgpu_type, kind=ResourceKind.VGPU, vgpu_type=vgpu_type)
            _fill_group(group, tally)
            modes[mode].by_vgpu_type.append(group)


def _fill_group(group: DeviceGroup, tally: Tally) -> None:
    _fill(group, tally)
    group.nodes = len(tally.node_ids)
    group.nodes_with_free = len(tally.nodes_with_free)
    group.max_free_on_one_node = tally.max_free_on_one_node


def inventory_summary(
    now: datetime | None = None, snapshot: CapacitySnapshot | None = None
) -> InventorySummary:
    """The per-mode numbers, by GPU model, resource and vGPU type, in a fixed number of queries.

    Args:
        now: the time ages are measured at. snapshot: reuse a loaded fleet snapshot.
    """
    snap = snapshot or CapacitySnapshot()
    modes = {mode.value: ModeSummary(mode=mode.value, label=str(mode.label)) for mode in WorkloadMode}
    by_model = _node_counts(modes)
    in_use: dict[str, set[int]] = {}
    sizes: dict[str, set[Fraction | None]] = {}
    for row in snap.rows:
        if row.used > 0:
            in_use.setdefault(row.mode, set()).add(row.node_id)
        sizes.setdefault(row.mode, set()).add(row.gpu_equivalent)
    for mode, summary in modes.items():
        _fill(summary, snap.by_mode().get(mode) or Tally())
        summary.nodes_in_use = len(in_use.get(mode, ()))
        summary.uniform = sizes.get(mode, {Fraction(1)}) <= {Fraction(1)}
    for (mode, model), tally in snap.by_model().items():
        group = by_model.get((mode, model))
        if group is not None:
            _fill(group, tally)
    _resource_groups(snap, modes)
    for (mode, _model), group in sorted(by_model.items(), key=lambda item: (item[0][0], item[0][1])):
        if mode in modes:
            modes[mode].by_model.append(group)
    return InventorySummary(
        modes=list(modes.values()),
        absent_nodes=GpuNode.objects.filter(present=False).count(),
        sync=sync_state(now),
    )
