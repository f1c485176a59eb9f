"""Inventory pages: dashboard, node list, node page, vGPU configs, permitted devices, "Sync now".

Views read only the stored inventory (CONVENTIONS "Data and calls flow one way"); the one write,
"Sync now", enqueues the Celery task ``gpuinventory.sync`` after the transaction commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpuinventory.choices import MODE_BADGE, SYNC_BADGE, ModeSource, ResourceKind
from gpuinventory.diagnostics import describe_flags
from gpuinventory.filtersets import GpuNodeFilterSet, PermittedDeviceFilterSet, VgpuConfigFilterSet
from gpuinventory.models import GpuNode
from gpuinventory.summary import (
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
from portal.views_mixins import FilteredTableListMixin

#: Label prefixes shown on the node page (DOMAIN.md §1 deploy labels, §3 vGPU, §4 GFD).
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
VGPU_PREFIX = "nvidia.com/vgpu."
MODE_LABEL = "nvidia.com/gpu.workload.config"
GFD_PREFIXES = (
    "nvidia.com/gpu.",
    "nvidia.com/cuda.",
    "nvidia.com/mig.",
    "nvidia.com/gfd.",
    "nvidia.com/mps.",
)


def can_sync(user: Any) -> bool:
    """Admins (staff or superusers) may start a sync."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or user.is_superuser))


# --- chart -------------------------------------------------------------------------------------


CHART_BAR_X = 240
CHART_BAR_WIDTH = 290
CHART_ROW = 26


@dataclass
class ChartBar:
    """One bar of the server-rendered SVG chart (coordinates in the SVG's user units)."""

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
    """The SVG bar chart of one mode: devices used and free per resource."""

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


def build_charts(modes: list[ModeSummary]) -> list[ModeChart]:
    """Lay out one horizontal stacked bar (used | free) per resource, scaled per mode."""
    charts = []
    for summary in modes:
        if not summary.by_resource:
            continue
        scale = max((group.total for group in summary.by_resource), default=0) or 1
        chart = ModeChart(
            mode=summary.mode,
            label=summary.label,
            badge=MODE_BADGE.get(summary.mode, ""),  # type: ignore[call-overload]
            height=CHART_ROW * len(summary.by_resource) + 6,
        )
        for index, group in enumerate(summary.by_resource):
            used_width = round(CHART_BAR_WIDTH * min(group.used, group.total) / scale, 1)
            free_width = round(CHART_BAR_WIDTH * group.free / scale, 1)
            y = index * CHART_ROW + 4
            chart.bars.append(
                ChartBar(
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
            )
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
    """Group a node's stored labels: deploy (DOMAIN.md §1), vGPU (§3), GFD (§4), other."""
    groups: dict[str, list[tuple[str, str]]] = {"deploy": [], "vgpu": [], "gfd": [], "other": []}
    for key, value in sorted(labels.items()):
        if key.startswith(DEPLOY_PREFIX):
            groups["deploy"].append((key.removeprefix(DEPLOY_PREFIX), value))
        elif key.startswith(VGPU_PREFIX):
            groups["vgpu"].append((key, value))
        elif key == MODE_LABEL:
            continue
        elif key.startswith(GFD_PREFIXES):
            groups["gfd"].append((key, value))
        else:
            groups["other"].append((key, value))
    return groups


def gpunode(request: HttpRequest, name: str) -> HttpResponse:
    """One node: mode and labels, resources, consumers and diagnostics (absent nodes marked)."""
    node = get_object_or_404(GpuNode, name=name)
    resources = list(node.resources.order_by("stale", "name"))
    for resource in resources:
        resource.label = resource_label(  # type: ignore[attr-defined]
            resource.kind, resource.name, resource.model, resource.vgpu_type, resource.pci_device_id
        )
    context = {
        "node": node,
        "mode_badge": MODE_BADGE.get(node.workload_mode, ""),  # type: ignore[call-overload]
        "mode_by_label": node.mode_source == ModeSource.LABEL,
        "invalid_label": node.mode_source == ModeSource.INVALID_LABEL,
        "labels": split_labels(node.labels or {}),
        "resources": resources,
        "vgpu_kind": ResourceKind.VGPU,
        "consumers": list(node.consumers.order_by("resource_name", "pod_namespace", "pod_name")),
        "diagnostics": describe_flags(node.flags or [], node.name),
        "sync": sync_state(),
    }
    return render(request, "gpuinventory/gpunode.html", context)


# --- sync now ----------------------------------------------------------------------------------


@require_POST
def sync_now(request: HttpRequest) -> HttpResponse:
    """Enqueue one inventory sync (admins only: staff or superusers; others get 403)."""
    if not can_sync(request.user):
        raise PermissionDenied(gettext_lazy("Only administrators can start a sync."))
    # Imported here: the task module pulls in the sync and the Kubernetes adapter, which pages never need.
    from gpuinventory import tasks

    transaction.on_commit(lambda: tasks.sync.delay(trigger="manual"))
    messages.success(request, _("A sync was queued; the numbers refresh when it finishes."))
    return HttpResponseRedirect(reverse("gpuinventory:dashboard"))
