"""Fixtures and helpers of the REST API tests (``tests/unit/api/test_api_*.py``).

- Every test starts with an empty cache, so the per-token throttle counts only its own calls
  (user and token primary keys are reused between tests).
- ``tasks.provision.delay`` / ``tasks.delete_vmi.delay`` are recorded in ``enqueued`` instead of
  reaching a broker (as in ``tests/unit/vmrequests/test_vmrequest_lifecycle_views.py``).
- ``world``: ``request_world()`` (users ana, tim, apa, olga, bob, root; teams quant, research;
  one submitted A100 request each for ana, tim, olga) on the ``request_form_inventory()``
  (3 free A100s on p1, T4-8Q on v1, re-profilable v2).

The helper functions below are imported by the test modules
(``from tests.unit.api.conftest import ...``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from portal.models import ApiToken
from tests.vmrequest_factories import A100_PT, request_form_inventory, request_world, ssh_public_key

PROBLEM_TYPE = "application/problem+json"
TYPE_PREFIX = "tag:gpu-vm-portal,2026:"
ALL_SCOPES = ("read", "write", "approve")
#: One SSH public key for every create body (generated once per test session).
SSH_KEY = ssh_public_key("ed25519", "analyst@laptop")


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def enqueued(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """``{"provision": [pk, ...], "delete_vmi": [pk, ...]}``: tasks sent by the services."""
    from vmrequests import tasks

    calls: dict[str, list[int]] = {"provision": [], "delete_vmi": []}
    monkeypatch.setattr(tasks.provision, "delay", lambda pk: calls["provision"].append(pk))
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: calls["delete_vmi"].append(pk))
    return calls


@pytest.fixture
def world(db: None) -> Any:
    """``request_world()`` on ``request_form_inventory()`` (see the module docstring)."""
    request_form_inventory()
    return request_world()


def token_for(user: Any, *scopes: str, days: int = 30, name: str = "ticketing") -> str:
    """A new API token of ``user`` with ``scopes`` (default: all three), valid ``days`` days."""
    _, token = ApiToken.issue(user, name, list(scopes or ALL_SCOPES), days)
    return token


def api(user: Any = None, *scopes: str, days: int = 30) -> Client:
    """A test client sending ``Authorization: Token <token>`` of a fresh token of ``user``
    (anonymous when ``user`` is None)."""
    if user is None:
        return Client()
    return Client(headers={"Authorization": f"Token {token_for(user, *scopes, days=days)}"})


def expired_api(user: Any, *scopes: str) -> Client:
    """A client with a token of ``user`` whose expiry passed a second ago."""
    instance, token = ApiToken.issue(user, "old", list(scopes or ALL_SCOPES), 1)
    ApiToken.objects.filter(pk=instance.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    return Client(headers={"Authorization": f"Token {token}"})


def send(client: Client, method: str, path: str, body: Any = None, **headers: str) -> Any:
    """``method`` ``path`` with ``body`` as JSON (POST) and extra ``headers``."""
    if method == "GET":
        return client.get(path, headers=headers)
    return client.generic(
        method,
        path,
        json.dumps(body if body is not None else {}),
        content_type="application/json",
        headers=headers,
    )


def post(client: Client, path: str, body: Any = None, **headers: str) -> Any:
    """``POST`` ``body`` as JSON."""
    return send(client, "POST", path, body, **headers)


def problem(response: Any, status: int, problem_type: str = "") -> dict[str, Any]:
    """Assert ``response`` is RFC 9457 problem details with ``status`` and type
    ``tag:...:<problem_type>`` (``about:blank`` when empty); return the body."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == PROBLEM_TYPE
    body = json.loads(response.content)
    expected_type = TYPE_PREFIX + problem_type if problem_type else "about:blank"
    assert body["type"] == expected_type
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    assert body["instance"] == response.request["PATH_INFO"]
    if "errors" in body:
        for error in body["errors"]:
            assert set(error) == {"field", "code", "detail"}
            assert error["field"] is None or isinstance(error["field"], str)
            assert isinstance(error["code"], str) and error["code"]
            assert isinstance(error["detail"], str) and error["detail"]
    return body


def create_body(**overrides: Any) -> dict[str, Any]:
    """A valid ``POST /api/v1/vm-requests/`` body for ana in team quant: 2 A100s, 8 cores,
    64 GiB, 10 days, ticket ``SNOW`` ``INC0001``; ``overrides`` replace or (value None) drop keys."""
    body: dict[str, Any] = {
        "team": "quant",
        "mode": "passthrough",
        "resource_name": A100_PT,
        "device_count": 2,
        "cpu_cores": 8,
        "memory_gib": 64,
        "image": "Ubuntu 22.04",
        "ssh_public_key": SSH_KEY,
        "lease_days": 10,
        "justification": "Fine-tune the Q3 risk model.",
        "ticket_source": "SNOW",
        "ticket_id": "INC0001",
    }
    body.update(overrides)
    return {k: v for k, v in body.items() if v is not None}
