"""Fleet numbers of the dashboard and of ``/api/v1/inventory/summary/``, read from the stored inventory.

Counting rules (DOMAIN.md §2, "Allocatable is not free"): only present nodes count; per resource
``total`` = Σ allocatable, ``used`` = Σ requests of non-terminal pods bound to the node (as stored
by the sync), ``free`` = Σ max(0, allocatable − used); stale (zero-valued) entries are never
counted. A fixed number of queries whatever the fleet size (grouped in the database).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, F, IntegerField, Max, Min, Q, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.choices import MODE_BADGE, ResourceKind, SyncStatus, WorkloadMode
from gpuinventory.models import GpuNode, GpuResource, SyncRun


def _free_sum() -> Sum:
    """Σ max(0, allocatable − used), a fresh expression per query."""
    return Sum(Greatest(F("allocatable") - F("used"), Value(0), output_field=IntegerField()))


@dataclass
class DeviceGroup:
    """Devices of one mode grouped by GPU model (``by_model``) or by resource (``by_resource``).

    ``label`` is what people call it: the GPU model, the vGPU type (``T4-8Q``), the passthrough
    model, or the short container resource name (``gpu``, ``mig-1g.5gb``).
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

    counted = GpuResource.objects.filter(node__present=True, stale=False)
    for use_row in (
        counted.filter(used__gt=0).values("node__workload_mode").annotate(n=Count("node", distinct=True))
    ):
        if use_row["node__workload_mode"] in modes:
            modes[use_row["node__workload_mode"]].nodes_in_use = use_row["n"]

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
    for dev_row in counted.values("node__workload_mode", "node__gpu_model").annotate(
        n_total=Sum("allocatable"), n_used=Sum("used"), n_free=_free_sum()
    ):
        group = by_model.get((dev_row["node__workload_mode"], dev_row["node__gpu_model"]))
        if group is not None:
            group.total, group.used, group.free = dev_row["n_total"], dev_row["n_used"], dev_row["n_free"]

    for res_row in (
        counted.values("node__workload_mode", "name", "kind")
        .annotate(
            n_total=Sum("allocatable"),
            n_used=Sum("used"),
            n_free=_free_sum(),
            n=Count("node", distinct=True),
            # one resource name has one vGPU type / PCI ID; the model may differ (nvidia.com/gpu)
            model_min=Min("model"),
            model_max=Max("model"),
            vgpu_max=Max("vgpu_type"),
            pci_max=Max("pci_device_id"),
        )
        .order_by("node__workload_mode", "name")
    ):
        summary = modes.get(res_row["node__workload_mode"])
        if summary is None:
            continue
        model = res_row["model_max"] if res_row["model_min"] == res_row["model_max"] else ""
        label = resource_label(
            res_row["kind"], res_row["name"], model, res_row["vgpu_max"], res_row["pci_max"]
        )
        summary.by_resource.append(
            DeviceGroup(
                label=label,
                resource=res_row["name"],
                kind=res_row["kind"],
                model=model,
                nodes=res_row["n"],
                total=res_row["n_total"],
                used=res_row["n_used"],
                free=res_row["n_free"],
            )
        )
        summary.total += res_row["n_total"]
        summary.used += res_row["n_used"]
        summary.free += res_row["n_free"]

    for (mode, _model), group in sorted(by_model.items(), key=lambda item: (item[0][0], item[0][1])):
        if mode in modes:
            modes[mode].by_model.append(group)
    return InventorySummary(
        modes=list(modes.values()),
        absent_nodes=GpuNode.objects.filter(present=False).count(),
        sync=sync_state(now),
    )
