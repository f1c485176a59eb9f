"""Builders of webhook test data: endpoints, events, deliveries (CONVENTIONS "Tests")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

SECRET = "whsec-test-secret-0123456789"


def stored_endpoint(
    name: str = "ticketing",
    url: str = "https://tickets.example.com/hooks/portal",
    *,
    event_types: list[str] | None = None,
    active: bool = True,
    secret: str = SECRET,
) -> Any:
    """A ``WebhookEndpoint`` with a known ``secret``, every event unless ``event_types``."""
    from webhooks.models import WebhookEndpoint

    return WebhookEndpoint.objects.create(
        name=name, url=url, event_types=event_types or [], active=active, secret=secret
    )


def stored_event(
    event_type: str = "vm_request.approved",
    data: dict[str, Any] | None = None,
    occurred_at: datetime | None = None,
) -> Any:
    """A ``WebhookEvent`` whose payload is built by ``webhooks.events.build_payload``
    (``data`` defaults to ``{"vm_request": {"id": 42, "status": "approved"}}``)."""
    import uuid

    from webhooks.events import build_payload
    from webhooks.models import WebhookEvent

    when = occurred_at or timezone.now()
    event_id = uuid.uuid4()
    body = data if data is not None else {"vm_request": {"id": 42, "status": "approved"}}
    return WebhookEvent.objects.create(
        id=event_id,
        type=event_type,
        occurred_at=when,
        payload=build_payload(event_id, event_type, when, body),
    )


def stored_delivery(endpoint: Any, event: Any = None, **fields: Any) -> Any:
    """A pending ``WebhookDelivery`` of ``event`` (a new ``stored_event()`` if None), due now."""
    from webhooks.models import WebhookDelivery

    return WebhookDelivery.objects.create(endpoint=endpoint, event=event or stored_event(), **fields)
