"""The one list-view mixin every list page uses (CONVENTIONS "Views, HTMX, tables, filters").

A list view names a ``filterset_class`` (shared with the API viewset), a django-tables2
``table_class`` and a template holding ``{% partialdef table %}``. A plain request renders the
page; an htmx request renders only a partial (the table, or another partial the view allows by
the ``HX-Target`` element id), so filters, sorting, pagination and live refresh swap the table in
place. Every response carries ``Vary: HX-Request`` so caches never mix the two.
"""

from __future__ import annotations

from typing import Any, ClassVar

import django_filters
import django_tables2 as tables
from django.core.paginator import EmptyPage
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views import View
from django_tables2 import RequestConfig


class FilteredTableListMixin(View):
    """Filter a queryset with a FilterSet, show it as a sortable, paginated table.

    Attributes:
        filterset_class: the ``<Model>FilterSet`` applied to ``request.GET``.
        table_class: the ``<Model>Table``.
        template_name: the full page; it must define ``{% partialdef table %}``.
        partial_name: the partial rendered for htmx requests by default.
        htmx_partials: ``{HX-Target element id: partial name}`` for other partials of the page
            that refresh themselves (e.g. a summary polled beside the table).
        per_page: default page size (``?per_page=`` may ask for 1 to ``max_per_page``).
    """

    filterset_class: ClassVar[type[django_filters.FilterSet]]
    table_class: ClassVar[type[tables.Table]]
    template_name: ClassVar[str]
    partial_name: ClassVar[str] = "table"
    htmx_partials: ClassVar[dict[str, str]] = {}
    per_page: ClassVar[int] = 25
    max_per_page: ClassVar[int] = 200

    def get_queryset(self) -> QuerySet[Any]:
        """Return the rows before filtering; override to annotate or prefetch."""
        model = self.filterset_class._meta.model
        return model._default_manager.all()

    def get_extra_context(self, partial: str | None) -> dict[str, Any]:
        """Return more context for the page or the partial ``partial`` (None = the whole page).

        Override to add what the page shows around the table; compute only what ``partial``
        needs so the polled table stays cheap.
        """
        return {}

    def get_per_page(self) -> int:
        """Return the page size asked for in ``?per_page=``, clamped to 1..``max_per_page``
        (the default ``per_page``, also clamped, when the value is not an integer)."""
        return min(max(_int_param(self.request, "per_page", self.per_page), 1), self.max_per_page)

    def paginate(self, table: tables.Table) -> None:
        """Sort ``table`` from ``?sort=`` and show page ``?page=`` of ``get_per_page()`` rows.

        django-tables2's ``RequestConfig`` would re-read ``?per_page=`` after our clamp (any
        size, and a 500 for a negative one), so it only sorts here and the page is ours: a page
        below 1 or junk shows page 1, a page past the end shows the last one.
        """
        RequestConfig(self.request, paginate=False).configure(table)
        per_page = self.get_per_page()
        page = max(_int_param(self.request, "page", 1), 1)
        try:
            table.paginate(per_page=per_page, page=page)
        except EmptyPage:
            table.paginate(per_page=per_page, page=table.paginator.num_pages)

    def get_partial_name(self) -> str | None:
        """Return the partial to render for this request, or None for the whole page."""
        htmx = getattr(self.request, "htmx", None)
        if not htmx:
            return None
        # A boosted navigation wants the whole page.
        if getattr(htmx, "boosted", False):
            return None
        return self.htmx_partials.get(htmx.target or "", self.partial_name)

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Render the page, or only the partial when htmx asks; always ``Vary: HX-Request``."""
        filterset = self.filterset_class(request.GET or None, queryset=self.get_queryset(), request=request)
        queryset = filterset.qs if filterset.is_bound else filterset.queryset
        if filterset.is_bound and not filterset.is_valid():
            queryset = queryset.none()
        table = self.table_class(queryset)
        self.paginate(table)
        context: dict[str, Any] = {"filter": filterset, "table": table}
        partial = self.get_partial_name()
        context.update(self.get_extra_context(partial))
        template = self.template_name if partial is None else f"{self.template_name}#{partial}"
        response = render(request, template, context)
        patch_vary_headers(response, ["HX-Request"])
        return response


def _int_param(request: HttpRequest, name: str, default: int) -> int:
    """``request.GET[name]`` as an int, or ``default`` when absent or not an integer."""
    try:
        return int(request.GET.get(name, default))
    except ValueError:
        return default
