"""Filters of the inventory lists, shared by the pages and the read API (CONVENTIONS: one FilterSet).

Query parameters of ``GpuNodeFilterSet`` (all optional, combined with AND):

- ``q``: text contained in the node name, GPU model or one of its resource names;
- ``mode``: workload mode (``container``, ``vm-passthrough``, ``vm-vgpu``; DOMAIN.md §1);
- ``model``: exact GPU model as stored (e.g. ``NVIDIA-B200``);
- ``resource``: exact extended resource name the node advertises (e.g. ``nvidia.com/GRID_T4-8Q``);
  stale (zero-valued) entries do not count (DOMAIN.md §2);
- ``ready``, ``present``, ``has_flags``, ``transitioning``: ``true`` or ``false``.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from gpuinventory.choices import WorkloadMode
from gpuinventory.models import GpuNode, GpuResource, PermittedDevice, VgpuConfig

YES_NO_CHOICES = [("", _("any")), ("true", _("yes")), ("false", _("no"))]


def _yes_no_widget() -> forms.Select:
    return forms.Select(choices=YES_NO_CHOICES)


def gpu_model_choices() -> list[tuple[str, str]]:
    """Return the GPU models of the stored nodes as choices (one query)."""
    models = GpuNode.objects.exclude(gpu_model="").order_by("gpu_model").values_list("gpu_model", flat=True)
    return [(model, model) for model in models.distinct()]


def resource_name_choices() -> list[tuple[str, str]]:
    """Return the non-stale resource names of the stored nodes as choices (one query)."""
    names = GpuResource.objects.filter(stale=False).order_by("name").values_list("name", flat=True)
    return [(name, name) for name in names.distinct()]


class GpuNodeFilterSet(django_filters.FilterSet):
    """Filter GPU nodes by mode, model, resource, readiness, diagnostics, presence and text."""

    q = django_filters.CharFilter(method="search", label=_("Search"))
    mode = django_filters.ChoiceFilter(
        field_name="workload_mode", choices=WorkloadMode.choices, label=_("Mode"), empty_label=_("any")
    )
    model = django_filters.ChoiceFilter(
        field_name="gpu_model", choices=gpu_model_choices, label=_("GPU model"), empty_label=_("any")
    )
    resource = django_filters.ChoiceFilter(
        method="filter_resource", choices=resource_name_choices, label=_("Resource"), empty_label=_("any")
    )
    ready = django_filters.BooleanFilter(field_name="ready", label=_("Ready"), widget=_yes_no_widget())
    present = django_filters.BooleanFilter(field_name="present", label=_("Present"), widget=_yes_no_widget())
    has_flags = django_filters.BooleanFilter(
        method="filter_has_flags", label=_("Has diagnostics"), widget=_yes_no_widget()
    )
    transitioning = django_filters.BooleanFilter(
        field_name="transitioning", label=_("Transitioning"), widget=_yes_no_widget()
    )

    class Meta:
        model = GpuNode
        fields = ["q", "mode", "model", "resource", "ready", "present", "has_flags", "transitioning"]

    def search(self, queryset: QuerySet[GpuNode], name: str, value: str) -> QuerySet[GpuNode]:
        """Nodes whose name, GPU model or a resource name contains ``value`` (case-insensitive)."""
        value = value.strip()
        if not value:
            return queryset
        matching = GpuResource.objects.filter(name__icontains=value).values("node_id")
        return queryset.filter(Q(name__icontains=value) | Q(gpu_model__icontains=value) | Q(pk__in=matching))

    def filter_resource(self, queryset: QuerySet[GpuNode], name: str, value: str) -> QuerySet[GpuNode]:
        """Nodes advertising the resource ``value`` with a non-zero allocatable."""
        if not value:
            return queryset
        return queryset.filter(pk__in=GpuResource.objects.filter(name=value, stale=False).values("node_id"))

    def filter_has_flags(
        self, queryset: QuerySet[GpuNode], name: str, value: bool | None
    ) -> QuerySet[GpuNode]:
        """Nodes with (``True``) or without (``False``) stored diagnostics."""
        if value is None:
            return queryset
        return queryset.exclude(flags=[]) if value else queryset.filter(flags=[])


class VgpuConfigFilterSet(django_filters.FilterSet):
    """Filter vGPU Device Manager configs by name and presence in the current file."""

    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label=_("Search"))
    present = django_filters.BooleanFilter(field_name="present", label=_("Present"), widget=_yes_no_widget())

    class Meta:
        model = VgpuConfig
        fields = ["q", "present"]


class PermittedDeviceFilterSet(django_filters.FilterSet):
    """Filter the KubeVirt CR's permitted host devices by kind, name and presence."""

    q = django_filters.CharFilter(method="search", label=_("Search"))
    kind = django_filters.ChoiceFilter(
        field_name="kind", choices=PermittedDevice.Kind.choices, label=_("Kind"), empty_label=_("any")
    )
    present = django_filters.BooleanFilter(field_name="present", label=_("Present"), widget=_yes_no_widget())

    class Meta:
        model = PermittedDevice
        fields = ["q", "kind", "present"]

    def search(self, queryset: QuerySet[PermittedDevice], name: str, value: Any) -> QuerySet[PermittedDevice]:
        """Entries whose resource name or selector contains ``value`` (case-insensitive)."""
        value = str(value).strip()
        if not value:
            return queryset
        return queryset.filter(Q(resource_name__icontains=value) | Q(selector__icontains=value))
