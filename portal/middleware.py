"""Request-ID middleware and the logging filter that stamps every log record with it.

A request ID is taken from the incoming ``X-Request-ID`` header when it is a sane token
(1-64 characters of ``[A-Za-z0-9._-]``, as set by ingress controllers and load balancers),
otherwise a new UUID4 hex is generated. It is returned as ``X-Request-ID`` and added to
every log record made while the request is handled (``%(request_id)s``).
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
_VALID_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def get_request_id() -> str:
    """Return the ID of the request being handled, or ``"-"`` outside a request."""
    return _current_request_id.get()


class RequestIDMiddleware:
    """Assigns ``request.request_id`` and echoes it in the ``X-Request-ID`` response header."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = incoming if _VALID_ID.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id  # type: ignore[attr-defined]
        token = _current_request_id.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            _current_request_id.reset(token)
        response[REQUEST_ID_HEADER] = request_id
        return response


class RequestIDLogFilter(logging.Filter):
    """Adds ``record.request_id`` (``"-"`` outside a request) so formatters can print it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = get_request_id()
        return True
