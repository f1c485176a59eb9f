"""RFC 9457 problem details for every API error.

Every error body of ``/api/`` has the media type ``application/problem+json`` and the members
``type`` (URI; ``about:blank`` when the HTTP status says it all, else a ``tag:`` URI naming the
problem, listed in docs/api.md), ``title`` (short, same for every occurrence of the type),
``status`` (the HTTP status code), ``detail`` (this occurrence, in plain words) and ``instance``
(the request path). Validation errors (400) and refused changes (409) add ``errors``: a list of
``{"field": <name or null>, "code": <machine code>, "detail": <message>}``; a duplicate ticket
adds ``differing_fields``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response

PROBLEM_CONTENT_TYPE = "application/problem+json"
TYPE_PREFIX = "tag:gpu-vm-portal,2026:"

#: Problem types beyond ``about:blank``: code -> title.
PROBLEM_TYPES: dict[str, Any] = {
    "validation-error": _("Your request parameters did not validate."),
    "invalid-transition": _("The request is not in a state that allows this action."),
    "approval-refused": _("The request no longer fits the free capacity or the team's quota."),
    "duplicate-ticket": _("This ticket already has a VM request with different content."),
    "idempotency-key-reused": _("This Idempotency-Key was already used with a different body."),
    "missing-scope": _("The API token lacks the scope this action needs."),
    "not-allowed": _("You may not do this to this request."),
}

_PLAIN_TITLES = {
    400: _("Bad request."),
    401: _("Authentication required."),
    403: _("Permission denied."),
    404: _("Not found."),
    405: _("Method not allowed."),
    406: _("Not acceptable."),
    409: _("Conflict."),
    415: _("Unsupported media type."),
    429: _("Too many requests."),
    500: _("Internal server error."),
}


class ProblemError(exceptions.APIException):
    """An API error with a specific problem type.

    Args:
        status_code: HTTP status (400, 403, 409, ...). problem: a key of ``PROBLEM_TYPES``.
        detail: this occurrence in plain words. errors: ``[{"field", "code", "detail"}]``.
        extra: more members for the body (e.g. ``differing_fields``).
    """

    def __init__(
        self,
        status_code: int,
        problem: str,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if problem not in PROBLEM_TYPES:
            raise ValueError(f"unknown problem type {problem!r}")
        super().__init__(detail=detail)
        self.status_code = status_code
        self.problem = problem
        self.errors = errors or []
        self.extra = dict(extra or {})


def problem_body(
    status_code: int,
    detail: str,
    *,
    instance: str = "",
    problem: str = "",
    errors: list[dict[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one problem details object (see the module docstring for the members)."""
    if problem:
        type_uri, title = TYPE_PREFIX + problem, PROBLEM_TYPES[problem]
    else:
        type_uri, title = "about:blank", _PLAIN_TITLES.get(status_code, _("Error."))
    body: dict[str, Any] = {"type": type_uri, "title": str(title), "status": status_code, "detail": detail}
    if instance:
        body["instance"] = instance
    if errors is not None:
        body["errors"] = errors
    body.update(extra or {})
    return body


def field_errors(detail: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Flatten DRF's nested ``ValidationError.detail`` into ``[{"field", "code", "detail"}]``.

    Non-field errors get ``"field": None``; nested fields are dotted (``"scopes.0"``).
    """
    out: list[dict[str, Any]] = []
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            name = "" if key in ("non_field_errors", "__all__") else str(key)
            out += field_errors(value, f"{prefix}.{name}" if prefix and name else (name or prefix))
    elif isinstance(detail, list | tuple):
        if all(isinstance(item, str) for item in detail):
            for item in detail:
                out.append(_one(prefix, item))
        else:
            for index, item in enumerate(detail):
                out += field_errors(item, f"{prefix}.{index}" if prefix else str(index))
    else:
        out.append(_one(prefix, detail))
    return out


def _one(field: str, message: Any) -> dict[str, Any]:
    return {
        "field": field or None,
        "code": getattr(message, "code", None) or "invalid",
        "detail": str(message),
    }


def _summary(errors: Iterable[Mapping[str, Any]]) -> str:
    parts = [f"{e['field']}: {e['detail']}" if e["field"] else str(e["detail"]) for e in errors]
    return " ".join(parts[:5]) + (" …" if len(parts) > 5 else "")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF ``EXCEPTION_HANDLER``: DRF's own handling (headers such as ``WWW-Authenticate`` and
    ``Retry-After`` kept) with the body rewritten as problem details. Unhandled exceptions
    return None (Django's 500 handler, also problem details under ``/api/``, takes over)."""
    from rest_framework.views import exception_handler as drf_exception_handler  # DRF settings import us

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    request = context.get("request")
    instance = request.path if request is not None else ""
    if isinstance(exc, ProblemError):
        body = problem_body(
            exc.status_code,
            str(exc.detail),
            instance=instance,
            problem=exc.problem,
            errors=exc.errors if exc.errors or exc.status_code in (400, 409) else None,
            extra=exc.extra,
        )
    elif isinstance(exc, exceptions.ParseError):
        errors = [{"field": None, "code": "parse_error", "detail": str(exc.detail)}]
        body = problem_body(
            400, str(exc.detail), instance=instance, problem="validation-error", errors=errors
        )
    elif isinstance(exc, exceptions.ValidationError):
        errors = field_errors(exc.detail)
        body = problem_body(
            400, _summary(errors), instance=instance, problem="validation-error", errors=errors
        )
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else ""
        if isinstance(exc, Http404 | exceptions.NotFound):
            detail = str(_("No such object, or you may not see it."))
        elif isinstance(exc, PermissionDenied) and not detail:
            detail = str(_PLAIN_TITLES[403])
        body = problem_body(response.status_code, str(detail), instance=instance)
    response.data = body
    renderer = getattr(request, "accepted_renderer", None)
    if renderer is None or getattr(renderer, "format", "json") == "json":
        # Only a JSON rendering is problem+json (the browsable API or the YAML schema keep theirs).
        response.content_type = PROBLEM_CONTENT_TYPE
    return response


def problem_response(request: HttpRequest, status_code: int, detail: str) -> HttpResponse:
    """A plain Django problem-details response (for paths DRF does not route)."""
    return JsonResponse(
        problem_body(status_code, detail, instance=request.path),
        status=status_code,
        content_type=PROBLEM_CONTENT_TYPE,
        json_dumps_params={"ensure_ascii": False},
    )


@csrf_exempt
@login_not_required
def api_not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """Catch-all for unknown ``/api/`` paths: a problem-details 404, not the HTML page."""
    return problem_response(
        request, status.HTTP_404_NOT_FOUND, str(_("There is no API endpoint at this path."))
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: problem details under ``/api/``, the HTML error page elsewhere."""
    if request.path.startswith("/api/"):
        return problem_response(
            request, status.HTTP_500_INTERNAL_SERVER_ERROR, str(_("The portal failed; the error was logged."))
        )
    from django.views.defaults import server_error as html_server_error

    return html_server_error(request)
