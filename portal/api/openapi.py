"""drf-spectacular glue: token security scheme, closed request bodies, problem details, docs pages.

Imported by ``portal.api.schema`` (which every API view module imports), so the extension is
registered before drf-spectacular walks the views; the hook is named in
``SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]``. ``SwaggerView`` and ``RedocView`` serve
``/api/docs/`` and ``/api/redoc/`` from local static files (drf-spectacular-sidecar) under the
portal's Content Security Policy.
"""

from __future__ import annotations

import copy
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponseBase
from django.utils.csp import CSP
from django.utils.decorators import method_decorator
from django.views.decorators.csp import csp_override
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerSplitView
from rest_framework import exceptions
from rest_framework.views import APIView

from portal.api.problems import PROBLEM_CONTENT_TYPE

#: Media types DRF's renderers declare for a response body; an error body is problem details instead.
_RENDERED_JSON = ("application/json",)


class ScopedTokenScheme(OpenApiAuthenticationExtension):
    """``tokenAuth``: ``Authorization: Token <token>`` (``portal.api.auth.ScopedTokenAuthentication``).

    An ``apiKey`` scheme rather than ``http``/``bearer``: the prefix is ``Token``, not ``Bearer``,
    so the client sends the whole header value (Swagger UI's "Authorize" dialog included).
    """

    target_class = "portal.api.auth.ScopedTokenAuthentication"
    name = "tokenAuth"
    match_subclasses = True

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        """The OpenAPI security scheme object (one header, value ``Token <token>``)."""
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": (
                "Token <token>: an API token created under Account → API tokens (or by an admin), "
                "with the scopes read, write and/or approve; expired or revoked tokens get 401."
            ),
        }


class StrictSerializerScheme(OpenApiSerializerExtension):
    """Request bodies of ``portal.api.strict.StrictSerializer`` (and subclasses) refuse unknown
    fields (400 ``unknown_field``): their request components say ``additionalProperties: false``."""

    target_class = "portal.api.strict.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        """drf-spectacular's own mapping, closed for requests."""
        schema: dict[str, Any] = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema


#: Added to every operation that takes a body: DRF's parsers refuse other media types.
UNSUPPORTED_MEDIA_TYPE = {
    "description": "The body's media type is not one of those of the request body.",
    "content": {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
}


def problem_content_type(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: error responses (4xx/5xx) are served as ``application/problem+json``.

    drf-spectacular declares every response with the renderers' media types; the exception
    handler (``portal.api.problems.exception_handler``) sends errors as problem details, so each
    ``application/json`` entry of a 4xx/5xx response is renamed. Operations with a request body
    also get their 415 (``UNSUPPORTED_MEDIA_TYPE``). Returns ``result`` (mutated).
    """
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            if not isinstance(operation, dict):
                continue
            responses = operation.setdefault("responses", {})
            if "requestBody" in operation and "415" not in responses:
                responses["415"] = copy.deepcopy(UNSUPPORTED_MEDIA_TYPE)
                operation["responses"] = dict(sorted(responses.items()))
            for code, response in operation["responses"].items():
                if not str(code).startswith(("4", "5")):
                    continue
                content = response.get("content", {})
                for media_type in _RENDERED_JSON:
                    if media_type in content:
                        content[PROBLEM_CONTENT_TYPE] = content.pop(media_type)
    return result


#: Upper bounds Django derives from the database backend's integer columns (SQLite 64-bit,
#: PostgreSQL 32-bit ``integer``): not part of the API contract, and they would make the
#: committed schema depend on the database it was generated against.
_DATABASE_INTEGER_BOUNDS = frozenset({2**31 - 1, 2**63 - 1})


def database_neutral_integers(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: drop ``maximum`` values that are only a database column's range
    (``_DATABASE_INTEGER_BOUNDS``) and the ``format: int64`` spectacular adds for them.
    Returns ``result`` (mutated)."""

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "integer" and node.get("maximum") in _DATABASE_INTEGER_BOUNDS:
                del node["maximum"]
                node.pop("format", None)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(result)
    return result


class _SignInFirst(APIView):
    """Docs pages are for signed-in people: send anonymous browsers to the login page.

    The schema itself answers 401 to anonymous callers (``SERVE_PERMISSIONS``); DRF exempts its
    views from ``LoginRequiredMiddleware``, so these HTML pages turn that 401 into the redirect.
    """

    def handle_exception(self, exc: Exception) -> HttpResponseBase:  # type: ignore[override]  # dispatch takes any response
        """``NotAuthenticated`` → redirect to the login page; anything else as DRF handles it."""
        if isinstance(exc, exceptions.NotAuthenticated):
            return redirect_to_login(self.request.get_full_path())
        return super().handle_exception(exc)


class SwaggerView(_SignInFirst, SpectacularSwaggerSplitView):
    """Swagger UI at ``/api/docs/``: drf-spectacular's "split" view, which serves its init script
    at ``?script`` (``script-src 'self'``), with templates/api/swagger_ui.html (no inline style)."""

    template_name = "api/swagger_ui.html"


#: Redoc's bundle adds <style> elements as it loads, before its ``nonce`` option can apply (checked
#: in Chromium: styled-components then fails), so this page allows inline styles; scripts stay
#: 'self' only. Its search index runs in a worker loaded from a blob: URL.
REDOC_CSP: dict[str, Any] = {
    **settings.SECURE_CSP,
    "style-src": [CSP.SELF, CSP.UNSAFE_INLINE],
    "worker-src": [CSP.SELF, "blob:"],
}


@method_decorator(csp_override(REDOC_CSP), name="dispatch")
class RedocView(_SignInFirst, SpectacularRedocView):
    """Redoc at ``/api/redoc/`` with templates/api/redoc.html (no web fonts from a CDN)."""

    template_name = "api/redoc.html"
