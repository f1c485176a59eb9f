"""Admin pieces shared by the apps."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyAdminMixin:
    """View-only admin: no add, change or delete (the rows change only through services)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyTabularInline(ReadOnlyAdminMixin, admin.TabularInline):  # type: ignore[type-arg]
    """A view-only inline of a parent's rows: no empty extra forms, no delete box, and every
    listed field read-only (``readonly_fields`` is ``fields``)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields or ()
