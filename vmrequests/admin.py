"""Django admin for teams (with quotas and auto-approval rules), images, requests and events;
the webhook admin (endpoints, deliveries, events) is the webhooks app's (``webhooks/admin.py``).

Teams, quotas, rules and images are administered here. Requests and their timeline are only
*viewed* here: every status change goes through ``vmrequests.approval`` / the ``VMRequest``
transition methods, which write the audit event and the reservation in the same transaction
(CONVENTIONS "Models, state and audit"), so the admin can neither add, change nor delete them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from portal.admin_mixins import ReadOnlyAdminMixin, ReadOnlyTabularInline
from vmrequests.models import (
    AutoApprovalRule,
    GpuQuota,
    Team,
    VmImage,
    VMRequest,
    VMRequestEvent,
)


class GpuQuotaInline(admin.TabularInline):
    model = GpuQuota
    extra = 0
    fields = ("mode", "gpu", "max_devices")


class AutoApprovalRuleInline(admin.TabularInline):
    model = AutoApprovalRule
    extra = 0
    fields = ("mode", "max_devices", "max_vgpu_framebuffer_gb", "max_lease_days", "enabled")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "namespace", "default_lease_days", "max_lease_days")
    search_fields = ("name", "slug", "namespace")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("members", "approvers")
    inlines = (GpuQuotaInline, AutoApprovalRuleInline)


@admin.register(VmImage)
class VmImageAdmin(admin.ModelAdmin):
    list_display = ("name", "os", "image", "login_user", "min_memory_gib", "enabled")
    list_filter = ("enabled", "os")
    search_fields = ("name", "image", "os")


class VMRequestEventInline(ReadOnlyTabularInline):
    model = VMRequestEvent
    fields = ("created", "actor_display", "action", "from_status", "to_status", "message")
    ordering = ("created", "pk")

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).select_related("actor")

    @admin.display(description=_("actor"))
    def actor_display(self, obj: VMRequestEvent) -> str:
        return obj.actor_display


REQUEST_WHO = ("requester", "submitted_by", "team", "status", "created", "updated")
REQUEST_WHAT = (
    *VMRequest.SPEC_FIELDS,
    "lease_days",
    "ssh_public_key",
    "justification",
    "ticket_source",
    "ticket_id",
)
REQUEST_DECISION = ("decided_by", "decided_by_policy", "decided_at", "decision_note")
REQUEST_VM = (
    "vmi_namespace",
    "vmi_name",
    "node_name",
    "ip_address",
    "lease_end",
    "failure_reason",
    "deletion_reason",
)


@admin.register(VMRequest)
class VMRequestAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Requests, view only: status and decisions change only through the approval service."""

    list_display = ("id", "vmi_name", "requester", "team", "mode", "gpu", "status", "created")
    list_display_links = ("id", "vmi_name")
    list_filter = ("status", "mode", "team", "created")
    list_select_related = ("requester", "team")
    search_fields = (
        "=id",
        "vmi_name",
        "requester__username",
        "resource_name",
        "vgpu_type",
        "ticket_id",
        "justification",
    )
    date_hierarchy = "created"
    inlines = (VMRequestEventInline,)
    fieldsets = (
        (None, {"fields": REQUEST_WHO}),
        (_("What is asked"), {"fields": REQUEST_WHAT}),
        (_("Decision"), {"fields": REQUEST_DECISION}),
        (_("VM"), {"fields": REQUEST_VM}),
    )
    #: Every field is read-only (belt and braces with ``has_change_permission``): status and
    #: decisions must never be edited here.
    readonly_fields = REQUEST_WHO + REQUEST_WHAT + REQUEST_DECISION + REQUEST_VM

    @admin.display(description=_("GPU"), ordering="resource_name")
    def gpu(self, obj: VMRequest) -> str:
        return obj.gpu_label


@admin.register(VMRequestEvent)
class VMRequestEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The append-only timeline, view only."""

    list_display = ("created", "request", "actor_display", "action", "from_status", "to_status")
    list_filter = ("action", "to_status")
    list_select_related = ("request", "actor")
    search_fields = ("=request__id", "message", "actor__username", "actor_label")
    date_hierarchy = "created"
    fields = (
        "request",
        "created",
        "actor",
        "actor_label",
        "action",
        "from_status",
        "to_status",
        "message",
        "data",
    )
    readonly_fields = fields

    @admin.display(description=_("actor"))
    def actor_display(self, obj: VMRequestEvent) -> str:
        return obj.actor_display
