"""django-tables2 tables of the inventory pages (sortable; rendered by ``inc/table.html`` with htmx links).

``GpuNodeTable`` expects the queryset of :func:`annotate_node_counts` (capacity sort keys,
resources prefetched); the numbers it shows come from one ``CapacitySnapshot`` over the page's
nodes (one more query), so it renders any page size in a fixed number of queries.
"""

from __future__ import annotations

from typing import Any

import django_tables2 as tables
from django.db.models import F, Prefetch, QuerySet
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.capacity.sorting import annotate_node_capacity
from gpuinventory.choices import MODE_BADGE, ModeSource, WorkloadMode
from gpuinventory.diagnostics import worst_severity
from gpuinventory.models import GpuNode, GpuResource, PermittedDevice, VgpuConfig
from gpuinventory.summary import age_text


def stable_order(queryset: QuerySet[GpuNode], fields: list[str]) -> QuerySet[GpuNode]:
    """Order by ``fields`` (``"-x"`` = descending), NULLs last, then by node name ascending.

    The name tie-breaker makes equal values (e.g. many nodes with 0 free devices) come out in the
    same order on SQLite and PostgreSQL, which otherwise differ; so do their NULL positions.
    """
    keys = [
        F(field[1:]).desc(nulls_last=True) if field.startswith("-") else F(field).asc(nulls_last=True)
        for field in fields
        if field.lstrip("-") != "name"
    ]
    name_descending = "-name" in fields
    return queryset.order_by(*keys, F("name").desc() if name_descending else F("name").asc())


def annotate_node_counts(queryset: QuerySet[GpuNode]) -> QuerySet[GpuNode]:
    """Add the capacity sort keys (``capacity.sorting.annotate_node_capacity``) and prefetch the
    resources that :meth:`GpuNodeTable.capacity` (the page's ``CapacitySnapshot``) reads."""
    return annotate_node_capacity(queryset).prefetch_related(
        Prefetch("resources", queryset=GpuResource.objects.order_by("name"))
    )


def mode_badge(mode: str, label: str) -> SafeString:
    """Render a workload mode as a coloured badge."""
    return format_html('<span class="badge {}">{}</span>', MODE_BADGE.get(mode, ""), label)  # type: ignore[call-overload]


class InventoryTable(tables.Table):
    """Base of the inventory tables: the element id htmx swaps and the shared template."""

    htmx_target = "object-table"

    class Meta:
        template_name = "gpuinventory/inc/table.html"
        attrs = {"class": "table"}


class GpuNodeTable(InventoryTable):
    """GPU nodes with mode, model, devices total/used/free, readiness, vGPU config and diagnostics."""

    htmx_target = "node-table"

    name = tables.Column(verbose_name=_("Node"), linkify=True, attrs={"td": {"class": "nowrap"}})
    workload_mode = tables.Column(verbose_name=_("Mode"))
    gpu_model = tables.Column(verbose_name=_("GPU model"), empty_values=())
    gpu_count = tables.Column(verbose_name=_("GPUs"), attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    resources = tables.Column(
        verbose_name=_("Resources (free / allocatable)"), orderable=False, empty_values=()
    )
    devices_total = tables.Column(
        verbose_name=_("Devices"), attrs={"td": {"class": "num"}, "th": {"class": "num"}}
    )
    devices_used = tables.Column(
        verbose_name=_("Used"), attrs={"td": {"class": "num"}, "th": {"class": "num"}}
    )
    devices_free = tables.Column(
        verbose_name=_("Free"), attrs={"td": {"class": "num"}, "th": {"class": "num"}}
    )
    ready = tables.Column(verbose_name=_("Ready"), empty_values=())
    vgpu_config = tables.Column(verbose_name=_("vGPU config"), empty_values=())
    flags = tables.Column(verbose_name=_("Diagnostics"), empty_values=(), order_by=("flags",))
    last_seen = tables.Column(verbose_name=_("Last seen"))

    class Meta(InventoryTable.Meta):
        model = GpuNode
        fields = (
            "name",
            "workload_mode",
            "gpu_model",
            "gpu_count",
            "resources",
            "devices_total",
            "devices_used",
            "devices_free",
            "ready",
            "vgpu_config",
            "flags",
            "last_seen",
        )
        empty_text = _("No GPU nodes match these filters.")
        row_attrs = {"class": lambda record: "absent" if not record.present else ""}

    def order_by_stable(
        self, field: str, queryset: QuerySet[GpuNode], is_descending: bool
    ) -> tuple[QuerySet[GpuNode], bool]:
        """Sort by one column with the node-name tie-breaker of :func:`stable_order`."""
        return stable_order(queryset, [f"-{field}" if is_descending else field]), True

    def render_workload_mode(self, record: GpuNode) -> SafeString:
        """Mode badge, plus "transitioning" and how the mode was decided when not by label."""
        html = mode_badge(record.workload_mode, record.get_workload_mode_display())
        if record.transitioning:
            html += format_html(' <span class="badge flag-warning">{}</span>', _("transitioning"))
        if record.mode_source and record.mode_source != ModeSource.LABEL:
            html += format_html(' <span class="hint">{}</span>', record.get_mode_source_display())
        return html

    def render_gpu_model(self, record: GpuNode) -> str:
        """The model, or "unknown"."""
        return record.gpu_model or str(_("unknown"))

    @property
    def capacity(self) -> CapacitySnapshot:
        """The ``CapacitySnapshot`` of the nodes on this page (built on first use)."""
        snap: CapacitySnapshot | None = getattr(self, "_capacity", None)
        if snap is None:
            page = getattr(self, "page", None)
            rows = page.object_list if page is not None else self.rows
            snap = self._capacity = CapacitySnapshot.of_nodes(row.record for row in rows)
        return snap

    def render_devices_total(self, record: GpuNode) -> int:
        """Σ allocatable of the node's non-stale resources."""
        return self.capacity.node(record.pk).allocatable

    def render_devices_used(self, record: GpuNode) -> int:
        """Σ used of the node's non-stale resources."""
        return self.capacity.node(record.pk).used

    def render_devices_free(self, record: GpuNode) -> SafeString:
        """Requestable free devices (reservations subtracted), with the reserved ones as a hint."""
        tally = self.capacity.node(record.pk)
        if not tally.reserved:
            return format_html('<span data-free="{}">{}</span>', tally.free, tally.free)
        hint = gettext("%(n)s reserved") % {"n": tally.reserved}
        return format_html(
            '<span data-free="{}">{}</span> <span class="hint">{}</span>', tally.free, tally.free, hint
        )

    def render_resources(self, record: GpuNode) -> SafeString:
        """Each resource as ``name free/allocatable`` (free = the snapshot's); stale entries greyed."""
        rows = []
        for res in record.resources.all():
            row = self.capacity.row(record.pk, res.name)
            rows.append(
                (
                    "res stale" if res.stale else "res",
                    res.name,
                    res.name.removeprefix("nvidia.com/"),
                    row.free if row is not None else 0,
                    res.allocatable,
                )
            )
        return format_html_join(" ", '<span class="{}" data-resource="{}">{} <b>{}</b>/{}</span>', rows)

    def render_ready(self, record: GpuNode) -> SafeString:
        """Ready / not ready / unknown, and "cordoned"."""
        if record.ready is None:
            html = format_html('<span class="badge">{}</span>', _("unknown"))
        elif record.ready:
            html = format_html('<span class="badge ok">{}</span>', _("ready"))
        else:
            html = format_html('<span class="badge flag-error">{}</span>', _("not ready"))
        if record.unschedulable:
            html += format_html(' <span class="badge flag-warning">{}</span>', _("cordoned"))
        if not record.present:
            html += format_html(' <span class="badge absent-badge">{}</span>', _("absent"))
        return html

    def render_vgpu_config(self, record: GpuNode) -> SafeString | str:
        """The ``nvidia.com/vgpu.config`` value and its state on vm-vgpu nodes (DOMAIN.md §3).

        Without the label the device manager applies the ClusterPolicy default; on other modes
        left-over vGPU labels are ignored.
        """
        if record.workload_mode != WorkloadMode.VM_VGPU:
            return "—"
        if record.vgpu_config:
            config: SafeString | str = record.vgpu_config
        else:
            config = format_html('<span class="hint">{}</span>', _("ClusterPolicy default"))
        if not record.vgpu_config_state:
            return config
        state_class = {"success": "ok", "failed": "flag-error", "pending": "flag-warning"}.get(
            record.vgpu_config_state, ""
        )
        return format_html(
            '{} <span class="badge {}">{}</span>', config, state_class, record.vgpu_config_state
        )

    def render_flags(self, record: GpuNode) -> SafeString | str:
        """Number of diagnostics, coloured by the worst severity."""
        flags = record.flags or []
        if not flags:
            return "—"
        return format_html('<span class="badge flag-{}">{}</span>', worst_severity(flags), len(flags))

    def render_last_seen(self, record: GpuNode) -> SafeString | str:
        """ "—" for present nodes (seen by the last sync); how long ago for absent ones."""
        if record.present:
            return "—"
        seconds = int((timezone.now() - record.last_seen).total_seconds())
        return format_html(
            '<time datetime="{}" title="{}">{}</time>',
            record.last_seen.isoformat(),
            date_format(timezone.localtime(record.last_seen), "DATETIME_FORMAT"),
            age_text(seconds),
        )


class VgpuConfigTable(InventoryTable):
    """The named configs of the vGPU Device Manager file (DOMAIN.md §3)."""

    name = tables.Column(verbose_name=_("Config"))
    entries = tables.Column(verbose_name=_("vGPU devices per GPU"), orderable=False, empty_values=())
    config_map = tables.Column(verbose_name=_("ConfigMap"))
    present = tables.BooleanColumn(verbose_name=_("In the current file"))

    class Meta(InventoryTable.Meta):
        model = VgpuConfig
        fields = ("name", "entries", "config_map", "present")
        empty_text = _("No vGPU configs stored yet.")
        row_attrs = {
            "id": lambda record: record.name,
            "class": lambda record: "" if record.present else "absent",
        }

    def render_entries(self, record: VgpuConfig) -> SafeString:
        """Each entry as "GPU 0: T4-16C × 1" / "all GPUs: T4-8Q × 2", device filter as a hint."""
        parts = []
        for entry in record.entries or []:
            devices = entry.get("devices", "all")
            if devices == "all":
                devices_text = str(_("all GPUs"))
            else:
                indices = [str(d) for d in devices]
                devices_text = ngettext("GPU %(indices)s", "GPUs %(indices)s", len(indices)) % {
                    "indices": ", ".join(indices)
                }
            device_filter = entry.get("device_filter") or []
            if isinstance(device_filter, str):
                device_filter = [device_filter]
            vgpus = ", ".join(
                f"{vtype} × {count}" for vtype, count in sorted((entry.get("vgpu_devices") or {}).items())
            )
            text = gettext("%(gpus)s: %(vgpus)s") % {"gpus": devices_text, "vgpus": vgpus or "—"}
            filter_text = (
                gettext("only PCI devices %(ids)s") % {"ids": ", ".join(device_filter)}
                if device_filter
                else ""
            )
            parts.append((text, filter_text))
        return format_html_join("", '<div class="entry">{} <span class="hint">{}</span></div>', parts)


class PermittedDeviceTable(InventoryTable):
    """``permittedHostDevices`` entries of the KubeVirt CR (DOMAIN.md §5.1)."""

    resource_name = tables.Column(verbose_name=_("Resource"))
    kind = tables.Column(verbose_name=_("Kind"))
    selector = tables.Column(verbose_name=_("Selector"))
    external_resource_provider = tables.BooleanColumn(verbose_name=_("External resource provider"))
    source = tables.Column(verbose_name=_("KubeVirt CR"))
    present = tables.BooleanColumn(verbose_name=_("In the current CR"))

    class Meta(InventoryTable.Meta):
        model = PermittedDevice
        fields = ("resource_name", "kind", "selector", "external_resource_provider", "source", "present")
        empty_text = _(
            "No permitted host devices stored. Without permittedHostDevices in the KubeVirt CR, "
            "KubeVirt does not check GPU resources."
        )
        row_attrs = {"class": lambda record: "" if record.present else "absent"}


def _column_order(field: str) -> Any:
    def order(
        self: GpuNodeTable, queryset: QuerySet[GpuNode], is_descending: bool
    ) -> tuple[QuerySet[GpuNode], bool]:
        return self.order_by_stable(field, queryset, is_descending)

    return order


# django-tables2 calls ``order_<column>`` when a table defines it: every sortable column of the
# node table gets the stable tie-breaker.
for _field in (
    "name", "workload_mode", "gpu_model", "gpu_count", "devices_total", "devices_used",
    "devices_free", "ready", "vgpu_config", "flags", "last_seen",
):  # fmt: skip
    setattr(GpuNodeTable, f"order_{_field}", _column_order(_field))
