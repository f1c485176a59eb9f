"""Filters of the request lists, shared by the pages and the REST API (CONVENTIONS: one FilterSet).

Query parameters of ``VMRequestFilterSet`` (all optional, combined with AND):

- ``status``: one or more statuses (``?status=submitted&status=approved``);
- ``team``: the team's slug (only teams the user can see are valid values);
- ``mode``: ``passthrough`` or ``vgpu``;
- ``resource``: text contained in the GPU resource name or the vGPU type (case-insensitive);
- ``requester``: the requester's exact user name;
- ``ticket_id``: the exact external ticket ID;
- ``created_after`` / ``created_before``: dates (``YYYY-MM-DD``, inclusive, in the portal's
  time zone).

Invalid values make the form invalid; the list mixin then shows no rows and the form's errors
(never a 500).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from vmrequests.choices import VMMode, VMRequestStatus
from vmrequests.models import Team, VMRequest


def visible_teams(request: HttpRequest | None) -> QuerySet[Team]:
    """Teams offered by the ``team`` filter: superusers every team; others the teams they are a
    member or an approver of (no team without a request context)."""
    user = getattr(request, "user", None)
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    if user.is_superuser:  # type: ignore[union-attr]
        return Team.objects.all()
    return Team.objects.filter(Q(members=user) | Q(approvers=user)).distinct()


class VMRequestFilterSet(django_filters.FilterSet):
    """Filter VM requests by status, team, mode, GPU, requester, ticket and creation date."""

    status = django_filters.MultipleChoiceFilter(
        field_name="status",
        choices=VMRequestStatus.choices,
        label=_("Status"),
        widget=forms.CheckboxSelectMultiple,
    )
    team = django_filters.ModelChoiceFilter(
        field_name="team",
        queryset=visible_teams,
        to_field_name="slug",
        label=_("Team"),
        empty_label=_("any"),
    )
    mode = django_filters.ChoiceFilter(
        field_name="mode", choices=VMMode.choices, label=_("Mode"), empty_label=_("any")
    )
    resource = django_filters.CharFilter(method="filter_resource", label=_("GPU"))
    requester = django_filters.CharFilter(field_name="requester__username", label=_("Requester"))
    ticket_id = django_filters.CharFilter(field_name="ticket_id", label=_("Ticket ID"))
    created_after = django_filters.DateFilter(
        field_name="created",
        lookup_expr="date__gte",
        label=_("Created from"),
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    created_before = django_filters.DateFilter(
        field_name="created",
        lookup_expr="date__lte",
        label=_("Created until"),
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    class Meta:
        model = VMRequest
        fields = [
            "status",
            "team",
            "mode",
            "resource",
            "requester",
            "ticket_id",
            "created_after",
            "created_before",
        ]

    def filter_resource(self, queryset: QuerySet[VMRequest], name: str, value: Any) -> QuerySet[VMRequest]:
        """Requests whose resource name or vGPU type contains ``value`` (case-insensitive)."""
        value = str(value).strip()
        if not value:
            return queryset
        return queryset.filter(Q(resource_name__icontains=value) | Q(vgpu_type__icontains=value))
