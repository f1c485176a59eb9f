"""The new-request form (placeholder until the form lands)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse


def vmrequest_add(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError


def vmrequest_gpu_options(request: HttpRequest) -> HttpResponse:
    raise NotImplementedError
