"""Request lists, detail and approval queue (placeholder until they land)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import View


class VMRequestListView(View):
    pass


class MyVMRequestListView(View):
    pass


def _todo(request: HttpRequest, pk: int = 0) -> HttpResponse:
    raise NotImplementedError


approval_queue = vmrequest = vmrequest_status = vmrequest_approve = vmrequest_reject = vmrequest_cancel = _todo
