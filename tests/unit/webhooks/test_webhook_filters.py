"""Event types, endpoint filters and secrets (webhooks/choices.py, webhooks/models.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tests.webhook_factories import stored_endpoint
from webhooks.choices import EVENT_TYPES, event_type_choices
from webhooks.events import matching_endpoints
from webhooks.models import WebhookEndpoint, generate_secret


def test_event_types_are_one_per_request_status_plus_sync_failed() -> None:
    assert EVENT_TYPES == (
        "vm_request.submitted",
        "vm_request.approved",
        "vm_request.provisioning",
        "vm_request.running",
        "vm_request.deleting",
        "vm_request.deleted",
        "vm_request.rejected",
        "vm_request.cancelled",
        "vm_request.failed",
        "inventory.sync_failed",
        "inventory.sync_recovered",
    )
    values = [value for value, _label in event_type_choices()]
    assert values == ["vm_request.*", *EVENT_TYPES]


@pytest.mark.parametrize(
    ("event_types", "event_type", "expected"),
    [
        ([], "vm_request.approved", True),
        ([], "inventory.sync_failed", True),
        (["vm_request.approved"], "vm_request.approved", True),
        (["vm_request.approved"], "vm_request.rejected", False),
        (["vm_request.approved"], "inventory.sync_failed", False),
        (["vm_request.*"], "vm_request.deleted", True),
        (["vm_request.*"], "inventory.sync_failed", False),
        (["inventory.sync_failed"], "inventory.sync_failed", True),
        (["inventory.sync_failed", "vm_request.failed"], "vm_request.failed", True),
    ],
)
def test_filter_matching(event_types: list[str], event_type: str, expected: bool) -> None:
    endpoint = WebhookEndpoint(name="x", url="https://x.example.com/", event_types=event_types)
    assert endpoint.matches(event_type) is expected


@pytest.mark.django_db
def test_matching_endpoints_are_active_and_wanting() -> None:
    every = stored_endpoint("every")
    stored_endpoint("approvals", event_types=["vm_request.approved"])
    requests_only = stored_endpoint("requests", event_types=["vm_request.*"])
    stored_endpoint("off", active=False)
    assert [e.name for e in matching_endpoints("vm_request.rejected")] == [every.name, requests_only.name]
    assert [e.name for e in matching_endpoints("vm_request.approved")] == ["approvals", "every", "requests"]
    assert [e.name for e in matching_endpoints("inventory.sync_failed")] == ["every"]


@pytest.mark.parametrize(
    ("event_types", "message"),
    [
        (["vm_request.approved", "vm_request.exploded"], "Unknown event types: vm_request.exploded."),
        ("vm_request.approved", "Give a list of event types."),
        ([1], "Give a list of event types."),
    ],
)
def test_clean_refuses_unknown_event_types(event_types: object, message: str) -> None:
    endpoint = WebhookEndpoint(name="x", url="https://x.example.com/", event_types=event_types)
    with pytest.raises(ValidationError) as err:
        endpoint.clean()
    assert err.value.message_dict == {"event_types": [message]}


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["ftp://x.example.com/hook", "file:///etc/passwd", "tickets.example.com"])
def test_url_must_be_http_or_https(url: str) -> None:
    endpoint = WebhookEndpoint(name="x", url=url)
    with pytest.raises(ValidationError) as err:
        endpoint.full_clean(exclude=["secret"])
    assert list(err.value.message_dict) == ["url"]


@pytest.mark.django_db
def test_secret_is_generated_masked_and_rotated() -> None:
    endpoint = WebhookEndpoint.objects.create(name="x", url="https://x.example.com/")
    first = endpoint.secret
    assert len(first) == 43  # 32 bytes, URL-safe base64 without padding
    assert endpoint.masked_secret == "••••••••" + first[-4:]
    assert endpoint.rotate_secret() != first
    endpoint.refresh_from_db()
    assert endpoint.secret != first and len(endpoint.secret) == 43
    assert len({generate_secret() for _ in range(50)}) == 50
