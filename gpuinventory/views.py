"""Inventory pages: dashboard, node list, node page, vGPU configs, permitted devices, "Sync now".

Views read only the stored inventory (CONVENTIONS "Data and calls flow one way"); the one write,
"Sync now", enqueues the Celery task ``gpuinventory.sync`` after the transaction commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.choices import MODE_BADGE, SYNC_BADGE, ModeSource, ResourceKind, WorkloadMode
from gpuinventory.diagnostics import describe_flags
from gpuinventory.filtersets import GpuNodeFilterSet, PermittedDeviceFilterSet, VgpuConfigFilterSet
from gpuinventory.models import GpuNode
from gpuinventory.summary import (
    DeviceGroup,
    InventorySummary,
    ModeSummary,
    age_text,
    inventory_summary,
    resource_label,
    sync_state,
)
from gpuinventory.tables import (
    GpuNodeTable,
    PermittedDeviceTable,
    VgpuConfigTable,
    annotate_node_counts,
)
from portal.labels import GPU_DEPLOY_PREFIX as DEPLOY_PREFIX
from portal.labels import GPU_PRESENT
from portal.labels import GPU_WORKLOAD_CONFIG as MODE_LABEL
from portal.labels import VGPU_CONFIG as VGPU_CONFIG_LABEL
from portal.labels import VGPU_CONFIG_STATE as VGPU_CONFIG_STATE_LABEL
from portal.views_mixins import FilteredTableListMixin

#: Labels shown on the node page, grouped by the component that writes them (DOMAIN.md §1, §3, §4).
#: Written by the GPU Operator itself (not GFD): DOMAIN.md §4 "Not GFD".
OPERATOR_LABELS = frozenset({GPU_PRESENT, "nvidia.com/gpu-driver-upgrade-state"})
#: Read and written by the MIG manager (not GFD).
MIG_MANAGER_LABELS = frozenset({"nvidia.com/mig.config", "nvidia.com/mig.config.state"})
#: Read and written by the vGPU Device Manager (DOMAIN.md §3).
VGPU_DM_LABELS = frozenset({VGPU_CONFIG_LABEL, VGPU_CONFIG_STATE_LABEL})
#: GPU Feature Discovery labels (DOMAIN.md §4 table); ``vgpu.present``/``vgpu.host-driver-*``
#: are GFD's guest-side labels (the node itself is a VM on a vGPU), not vGPU host labels.
GFD_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
    "nvidia.com/mig.",
    "nvidia.com/mig-",
    "nvidia.com/gfd.",
    "nvidia.com/mps.",
    "nvidia.com/vgpu.present",
    "nvidia.com/vgpu.host-driver-",
)

#: ``GpuNode.model_source`` values (``gpuinventory.naming.ModelSource``) in plain words.
MODEL_SOURCE_LABELS = {
    "gfd": gettext_lazy("from GPU Feature Discovery labels"),
    "passthrough_name": gettext_lazy("from the passthrough resource name"),
    "pci_id": gettext_lazy("from the PCI device ID"),
    "vgpu_type": gettext_lazy("from the advertised vGPU types"),
    "vgpu_config": gettext_lazy("from the vGPU config"),
    "annotation": gettext_lazy("set by an administrator"),
}


#: Why free devices cannot be requested now (``capacity.UNUSABLE_REASONS``), in plain words.
UNUSABLE_REASON_LABELS = {
    "node_absent": gettext_lazy("node absent"),
    "node_not_ready": gettext_lazy("node not ready"),
    "node_cordoned": gettext_lazy("node cordoned"),
    "vgpu_reconfiguring": gettext_lazy("vGPU config being applied"),
    "reprofile_promised": gettext_lazy("node promised to a vGPU re-profile"),
    "transitioning": gettext_lazy("mode change in progress"),
    "other_mode": gettext_lazy("resource of another mode"),
    "not_permitted": gettext_lazy("not permitted in KubeVirt"),
}


def unusable_notes(reasons: Any) -> str:
    """``{reason: devices}`` as "node cordoned: 2, node not ready: 1" ("" when there are none)."""
    if not isinstance(reasons, dict):
        return ""
    return _(", ").join(
        _("%(reason)s: %(devices)s")
        % {"reason": UNUSABLE_REASON_LABELS.get(reason, reason), "devices": count}
        for reason, count in reasons.items()
        if count
    )


def model_source_label(source: str) -> str:
    """Where the GPU model came from, in the active language ("" when unknown or not recorded)."""
    if not source:
        return ""
    label = MODEL_SOURCE_LABELS.get(source)
    return str(label) if label is not None else _("from %(source)s") % {"source": source}


def can_sync(user: Any) -> bool:
    """Admins (staff or superusers) may start a sync."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


# --- chart -------------------------------------------------------------------------------------


CHART_BAR_X = 240
CHART_BAR_WIDTH = 290
CHART_ROW = 26


@dataclass
class ChartBar:
    """One bar of the server-rendered SVG chart (coordinates in the SVG's user units).

    ``used``/``free``/``total`` are devices of one resource (instances of one vGPU type);
    the bar widths are GPU-equivalents, so bars of different vGPU sizes compare fairly.
    """

    label: str
    title: str
    used: int
    free: int
    total: int
    y: int
    text_y: int
    used_width: float
    free_x: float
    free_width: float
    value_x: float


@dataclass
class ModeChart:
    """The SVG bar chart of one mode: devices used and free per resource, scaled in GPU-equivalents."""

    mode: str
    label: str
    badge: str
    height: int
    bars: list[ChartBar] = field(default_factory=list)
    label_x: int = CHART_BAR_X - 8
    bar_x: int = CHART_BAR_X
    bar_width: int = CHART_BAR_WIDTH
    value_x: int = CHART_BAR_X + CHART_BAR_WIDTH + 6


def _short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _gpus(group: DeviceGroup, key: str, devices: int) -> float:
    """GPU-equivalents of a group's ``key`` numbers; the device count when its size is unknown."""
    if group.gpu_equivalents.get("unsized_devices"):
        return float(devices)
    return float(group.gpu_equivalents.get(key, devices))


def _bar(group: DeviceGroup, index: int, scale: float) -> ChartBar:
    used_width = round(
        CHART_BAR_WIDTH * min(_gpus(group, "used", group.used), _gpus(group, "total", group.total)) / scale, 1
    )
    free_width = round(CHART_BAR_WIDTH * _gpus(group, "free", group.free) / scale, 1)
    y = index * CHART_ROW + 4
    return ChartBar(
        label=_short(group.label),
        title=f"{group.resource}: {group.used} / {group.total}",
        used=group.used,
        free=group.free,
        total=group.total,
        y=y,
        text_y=y + 14,
        used_width=used_width,
        free_x=CHART_BAR_X + used_width,
        free_width=free_width,
        value_x=CHART_BAR_X + used_width + free_width + 6,
    )


def build_charts(modes: list[ModeSummary]) -> list[ModeChart]:
    """One horizontal stacked bar (used | free) per resource, widths in GPU-equivalents scaled per
    mode (a T4-8Q instance is half a T4-16Q one), labels in devices of that resource."""
    charts = []
    for summary in modes:
        if not summary.by_resource:
            continue
        scale = max((_gpus(g, "total", g.total) for g in summary.by_resource), default=0) or 1
        chart = ModeChart(
            mode=summary.mode,
            label=summary.label,
            badge=MODE_BADGE.get(summary.mode, ""),  # type: ignore[call-overload]
            height=CHART_ROW * len(summary.by_resource) + 6,
        )
        chart.bars = [_bar(group, index, scale) for index, group in enumerate(summary.by_resource)]
        charts.append(chart)
    return charts


# --- lists -------------------------------------------------------------------------------------


class GpuNodeListView(FilteredTableListMixin):
    """GPU nodes with filters, sorting, pagination and a live-refreshing table."""

    filterset_class = GpuNodeFilterSet
    table_class = GpuNodeTable
    template_name = "gpuinventory/gpunode_list.html"

    def get_queryset(self) -> QuerySet[GpuNode]:
        """All stored nodes (absent ones too, greyed) with device totals per node."""
        return annotate_node_counts(GpuNode.objects.all()).order_by("name")

    def get_extra_context(self, partial: str | None) -> dict[str, Any]:
        """The sync line above the table (in the table partial too, so it stays current)."""
        state = sync_state()
        return {
            "sync": state,
            "sync_badge": SYNC_BADGE.get(state.last_run.status, "") if state.last_run else "",  # type: ignore[call-overload]
            "data_age": age_text(state.data_age_seconds),
            "last_run_age": age_text(state.last_run_age_seconds),
            "can_sync": can_sync(self.request.user),
        }


class DashboardView(GpuNodeListView):
    """Fleet numbers per workload mode, a chart, and the node table (DOMAIN.md §1–§2)."""

    template_name = "gpuinventory/dashboard.html"
    htmx_partials = {"inventory-summary": "summary"}

    def get_extra_context(self, partial: str | None) -> dict[str, Any]:
        """The summary and chart for the page and the polled summary partial."""
        context = super().get_extra_context(partial)
        if partial != self.partial_name:
            summary: InventorySummary = inventory_summary()
            context["summary"] = summary
            for mode_summary in summary.modes:
                # Free devices that cannot be requested now, when the summary reports them.
                mode_summary.unusable_notes = unusable_notes(  # type: ignore[attr-defined]
                    getattr(mode_summary, "free_unusable_reasons", None)
                )
            context["charts"] = build_charts(summary.modes)
        return context


class VgpuConfigListView(FilteredTableListMixin):
    """The configs of the vGPU Device Manager file (DOMAIN.md §3)."""

    filterset_class = VgpuConfigFilterSet
    table_class = VgpuConfigTable
    template_name = "gpuinventory/vgpuconfig_list.html"
    per_page = 100


class PermittedDeviceListView(FilteredTableListMixin):
    """The KubeVirt CR's ``permittedHostDevices`` (DOMAIN.md §5.1)."""

    filterset_class = PermittedDeviceFilterSet
    table_class = PermittedDeviceTable
    template_name = "gpuinventory/permitteddevice_list.html"
    per_page = 100


dashboard = DashboardView.as_view()
gpunode_list = GpuNodeListView.as_view()
vgpuconfig_list = VgpuConfigListView.as_view()
permitteddevice_list = PermittedDeviceListView.as_view()


# --- node page ---------------------------------------------------------------------------------


def split_labels(labels: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """Group a node's stored labels by the component that writes them.

    ``deploy``: ``nvidia.com/gpu.deploy.*`` without the prefix (DOMAIN.md §1); ``operator``: the
    GPU Operator's own labels; ``gfd``: GPU Feature Discovery (§4); ``mig``: the MIG manager;
    ``vgpu``: the vGPU Device Manager (§3); ``other``: the rest. The mode label is shown elsewhere.
    """
    groups: dict[str, list[tuple[str, str]]] = {
        "deploy": [],
        "operator": [],
        "gfd": [],
        "mig": [],
        "vgpu": [],
        "other": [],
    }
    for key, value in sorted(labels.items()):
        if key == MODE_LABEL:
            continue
        if key.startswith(DEPLOY_PREFIX):
            groups["deploy"].append((key.removeprefix(DEPLOY_PREFIX), value))
        elif key in OPERATOR_LABELS:
            groups["operator"].append((key, value))
        elif key in MIG_MANAGER_LABELS:
            groups["mig"].append((key, value))
        elif key in VGPU_DM_LABELS:
            groups["vgpu"].append((key, value))
        elif key.startswith(GFD_PREFIXES):
            groups["gfd"].append((key, value))
        else:
            groups["other"].append((key, value))
    return groups


def gpunode(request: HttpRequest, name: str) -> HttpResponse:
    """One node: mode and labels, resources, consumers and diagnostics (absent nodes marked)."""
    node = get_object_or_404(GpuNode.objects.prefetch_related("resources"), name=name)
    snap = CapacitySnapshot.of_nodes([node])
    resources = sorted(node.resources.all(), key=lambda r: (r.stale, r.name))
    for resource in resources:
        resource.label = resource_label(  # type: ignore[attr-defined]
            resource.kind, resource.name, resource.model, resource.vgpu_type, resource.pci_device_id
        )
        row = snap.row(node.pk, resource.name)
        resource.free_now = row.free if row else 0  # type: ignore[attr-defined]
        resource.reserved_now = row.reserved if row else 0  # type: ignore[attr-defined]
        resource.unusable_note = (  # type: ignore[attr-defined]
            unusable_notes({row.reason: row.unusable}) if row and row.unusable else ""
        )
    is_vgpu = node.workload_mode == WorkloadMode.VM_VGPU
    context = {
        "node": node,
        "mode_badge": MODE_BADGE.get(node.workload_mode, ""),  # type: ignore[call-overload]
        "mode_by_label": node.mode_source == ModeSource.LABEL,
        "invalid_label": node.mode_source == ModeSource.INVALID_LABEL,
        "model_source_label": model_source_label(node.model_source),
        "is_vgpu": is_vgpu,
        # A vgpu.config(.state) label on a node not in vm-vgpu mode is left over (DOMAIN.md §3).
        "vgpu_labels_left_over": not is_vgpu,
        "labels": split_labels(node.labels or {}),
        "resources": resources,
        "capacity": snap.node(node.pk),
        "vgpu_kind": ResourceKind.VGPU,
        "consumers": list(node.consumers.order_by("resource_name", "pod_namespace", "pod_name")),
        "diagnostics": describe_flags(node.flags or [], node.name),
        "sync": sync_state(),
    }
    return render(request, "gpuinventory/gpunode.html", context)


# --- sync now ----------------------------------------------------------------------------------


def sync_now(request: HttpRequest) -> HttpResponse:
    """Enqueue one inventory sync (POST only; admins only: staff or superusers).

    Others get the 403 page with the reason, rendered here rather than raised so no traceback is
    logged for an ordinary refusal; a GET gets 405 with a short text body.
    """
    if request.method != "POST":
        return HttpResponseNotAllowed(
            ["POST"], content=_("Use the Sync now button.") + "\n", content_type="text/plain; charset=utf-8"
        )
    if not can_sync(request.user):
        return render(
            request, "403.html", {"exception": _("Only administrators can start a sync.")}, status=403
        )
    # Imported here: the task module pulls in the sync and the Kubernetes adapter, which pages never need.
    from gpuinventory import tasks

    transaction.on_commit(lambda: tasks.sync.delay(trigger="manual"))
    messages.success(request, _("A sync was queued; the numbers refresh when it finishes."))
    return HttpResponseRedirect(reverse("gpuinventory:dashboard"))
