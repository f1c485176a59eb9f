"""#14 finding 5: deeply nested JSON on every POST endpoint of the API.

Python's ``json`` decoder recurses once per ``[``/``{``: 10,000 of them raise ``RecursionError``,
which DRF's parser (it catches ``ValueError`` only) let escape as a 500. Every POST operation of
the committed schema (``docs/openapi.yaml``, so a new endpoint cannot be forgotten) must answer
400 problem+json ``validation-error`` with the code ``parse_error``; so must 5,000 balanced
brackets (they parse, then reach recursive code) and anything past the 32-level limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.test import Client

from tests.unit.api.conftest import api, problem

SCHEMA = yaml.safe_load((Path(settings.BASE_DIR) / "docs" / "openapi.yaml").read_text())
POST_PATHS = sorted(path for path, operations in SCHEMA["paths"].items() if "post" in operations)

MESSAGE = "JSON parse error - the body is nested more than 32 levels deep."
BODIES = {
    "open brackets": "[" * 10_000,
    "open objects": '{"a":' * 10_000,
    "balanced brackets": "[" * 5_000 + "]" * 5_000,
    "deep field value": '{"note": ' + "[" * 10_000 + "]" * 10_000 + "}",
    "33 levels": '{"note": ' + "[" * 32 + "]" * 32 + "}",
}


def test_every_post_operation_is_listed() -> None:
    """The schema has the nine POST operations this test was written against."""
    assert POST_PATHS == [
        "/api/v1/vm-requests/",
        "/api/v1/vm-requests/{id}/approve/",
        "/api/v1/vm-requests/{id}/cancel/",
        "/api/v1/vm-requests/{id}/extend/",
        "/api/v1/vm-requests/{id}/extension-decision/",
        "/api/v1/vm-requests/{id}/reject/",
        "/api/v1/vm-requests/{id}/release/",
        "/api/v1/vm-requests/{id}/retry/",
        "/api/v1/vm-requests/{id}/terminate/",
    ]


@pytest.mark.parametrize("path", POST_PATHS)
@pytest.mark.parametrize("kind", sorted(BODIES))
def test_deep_nesting_is_a_400_problem(world: Any, path: str, kind: str) -> None:
    client: Client = api(world.root)
    url = path.replace("{id}", str(world.r_ana.pk))
    response = client.post(url, BODIES[kind], content_type="application/json")
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [{"field": None, "code": "parse_error", "detail": MESSAGE}]
    assert body["detail"] == MESSAGE


@pytest.mark.django_db
def test_32_levels_reach_validation() -> None:
    """At the limit the body parses: the serializer then answers its own 400 (a reason is text)."""
    from tests.vmrequest_factories import request_world

    world = request_world()
    response = api(world.apa).post(
        f"/api/v1/vm-requests/{world.r_ana.pk}/reject/",
        '{"reason": ' + "[" * 31 + "]" * 31 + "}",
        content_type="application/json",
    )
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [{"field": "reason", "code": "invalid", "detail": "Not a valid string."}]


def test_too_deep_counts_levels() -> None:
    from portal.api.parsers import too_deep

    assert too_deep({"a": [[1]]}, limit=3) is False
    assert too_deep({"a": [[[1]]]}, limit=3) is True
    assert too_deep([{}, [], "x" * 100], limit=2) is False
    assert too_deep(7, limit=1) is False
