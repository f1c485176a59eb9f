"""Django admin for the inventory: reservations, view only.

A ``Reservation`` is written and deleted only through ``gpuinventory/reservations.py`` (by the
approval service under the approval lock, the request's transitions and the worker), so
the admin shows them (with whether the capacity service still counts them) but never edits them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Exists, OuterRef
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from gpuinventory.models import GpuConsumer, Reservation


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    """Devices promised to approved requests; active until the VMI's launcher pod is bound."""

    list_display = (
        "holder",
        "node",
        "what",
        "count",
        "reprofile_config",
        "vmi_namespace",
        "vmi_name",
        "active",
        "created",
    )
    list_filter = ("node__name", "created")
    list_select_related = ("node",)
    search_fields = ("holder", "node__name", "resource_name", "vgpu_type", "vmi_name", "vmi_namespace")
    fields = (
        "holder",
        "node",
        "resource_name",
        "vgpu_type",
        "count",
        "reprofile_config",
        "reprofile_from",
        "vmi_namespace",
        "vmi_name",
        "created",
        "updated",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> Any:
        bound = GpuConsumer.objects.filter(
            pod_namespace=OuterRef("vmi_namespace"), vmi_name=OuterRef("vmi_name")
        )
        return super().get_queryset(request).annotate(pod_bound=Exists(bound))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=_("devices"))
    def what(self, obj: Reservation) -> str:
        return obj.key

    @admin.display(description=_("active (launcher pod not bound yet)"), boolean=True, ordering="pod_bound")
    def active(self, obj: Any) -> bool:
        return not getattr(obj, "pod_bound", False)
