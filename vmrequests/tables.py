"""django-tables2 table of the request lists (sortable; rendered with htmx sort and page links).

``VMRequestTable`` expects a queryset with ``requester`` and ``team`` selected
(``select_related``) so any page size renders in a fixed number of queries. Every sort adds the
primary key as a tie-breaker (newest first by default) so equal values come out in the same order
on SQLite and PostgreSQL.
"""

from __future__ import annotations

import django_tables2 as tables
from django.db.models import F, QuerySet
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from vmrequests.models import VMRequest

NUM = {"td": {"class": "num"}, "th": {"class": "num"}}


def status_badge(req: VMRequest) -> SafeString:
    """The status as a coloured badge (``badge tone-<tone>``, ``choices.STATUS_BADGE``)."""
    return format_html('<span class="badge tone-{}">{}</span>', req.badge, req.get_status_display())


class VMRequestTable(tables.Table):
    """Requests: number (link), VM, requester, team, GPU, mode, status, created, lease end."""

    htmx_target = "request-table"

    id = tables.Column(verbose_name="#", linkify=True, order_by=("pk",), attrs=NUM)
    vmi_name = tables.Column(verbose_name=_("VM"), order_by=("vmi_name", "pk"))
    requester = tables.Column(
        verbose_name=_("Requester"), accessor="requester__username", order_by=("requester__username", "pk")
    )
    team = tables.Column(verbose_name=_("Team"), accessor="team__name", order_by=("team__name", "pk"))
    gpu = tables.Column(
        verbose_name=_("GPU"),
        accessor="gpu_label",
        order_by=("vgpu_type", "resource_name", "device_count", "pk"),
        empty_values=(),
    )
    mode = tables.Column(verbose_name=_("Mode"), order_by=("mode", "pk"))
    status = tables.Column(verbose_name=_("Status"), order_by=("status", "pk"))
    created = tables.DateTimeColumn(verbose_name=_("Created"), short=True, order_by=("created", "pk"))
    lease_end = tables.DateTimeColumn(verbose_name=_("Lease end"), short=True)

    class Meta:
        model = VMRequest
        template_name = "gpuinventory/inc/table.html"
        attrs = {"class": "table"}
        fields = ("id", "vmi_name", "requester", "team", "gpu", "mode", "status", "created", "lease_end")
        order_by = ("-created",)
        empty_text = _("No requests match these filters.")

    def render_vmi_name(self, record: VMRequest) -> SafeString:
        """The VM name in code type."""
        return format_html("<code>{}</code>", record.vmi_name)

    def render_gpu(self, record: VMRequest) -> str:
        """``VMRequest.gpu_label`` ("—" when empty)."""
        return record.gpu_label or "—"

    def render_mode(self, record: VMRequest) -> str:
        """The translated mode."""
        return str(record.get_mode_display())

    def render_status(self, record: VMRequest) -> SafeString:
        """The status badge."""
        return status_badge(record)

    def order_lease_end(
        self, queryset: QuerySet[VMRequest], is_descending: bool
    ) -> tuple[QuerySet[VMRequest], bool]:
        """Lease end with requests without one (not running yet) last in both directions."""
        key = F("lease_end").desc(nulls_last=True) if is_descending else F("lease_end").asc(nulls_last=True)
        return queryset.order_by(key, "-pk" if is_descending else "pk"), True
