"""OpenAPI pieces shared by the API views (drf-spectacular): the problem-details schema.

Importing this module also registers the schema extensions of ``portal.api.openapi``.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers

from portal.api import openapi  # noqa: F401  (registers the token security scheme)

_DESCRIPTIONS = {
    400: "Validation failed: `errors` lists the fields (problem type validation-error).",
    401: "No credentials, or an unknown or expired token.",
    403: "Not allowed: missing permission, token scope (missing-scope) or team role (not-allowed).",
    404: "No such object, or one you may not see.",
    409: "Conflict: invalid-transition, approval-refused, duplicate-ticket or idempotency-key-reused.",
    429: "Throttled: wait the `Retry-After` seconds.",
}


class FieldErrorSerializer(serializers.Serializer[Any]):
    """One validation error: ``field`` (``null`` for the whole request), ``code``, ``detail``."""

    field = serializers.CharField(allow_null=True)
    code = serializers.CharField()
    detail = serializers.CharField()


class ProblemSerializer(serializers.Serializer[Any]):
    """RFC 9457 problem details (``application/problem+json``); see ``portal.api.problems``."""

    type = serializers.CharField(help_text="about:blank, or tag:gpu-vm-portal,2026:<problem> (docs/api.md)")
    title = serializers.CharField()
    status = serializers.IntegerField()
    detail = serializers.CharField()
    instance = serializers.CharField(required=False)
    errors = FieldErrorSerializer(many=True, required=False)  # type: ignore[assignment]
    differing_fields = serializers.ListField(child=serializers.CharField(), required=False)
    existing_request = serializers.IntegerField(required=False)
    alternatives = serializers.ListField(child=serializers.CharField(), required=False)
    current_status = serializers.CharField(required=False)
    required_scope = serializers.CharField(required=False)


def problem_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """``{status: OpenApiResponse(ProblemSerializer)}`` for ``extend_schema(responses=...)``."""
    return {code: OpenApiResponse(ProblemSerializer, description=_DESCRIPTIONS[code]) for code in codes}


def list_problem_responses(*codes: int) -> dict[int, OpenApiResponse]:
    """``problem_responses(*codes)`` of a paginated list, plus its 404: a ``?page=`` that is not
    a page of the list (DRF's ``PageNumberPagination`` answers 404 "Invalid page")."""
    responses = problem_responses(*codes)
    responses[404] = OpenApiResponse(
        ProblemSerializer, description="No such page: `page` is not a page number of this list."
    )
    return dict(sorted(responses.items()))
