"""Pagination of every list endpoint: ``?page=`` and ``?page_size=`` (default 50, at most 500)."""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination


class StandardPagination(PageNumberPagination):
    """``{"count", "next", "previous", "results"}`` pages; ``?page_size=`` up to 500."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500
