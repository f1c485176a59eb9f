"""Turning portal events into webhook events and deliveries (docs/webhooks.md "Events").

- ``on_request_transitioned`` listens to ``vmrequests.models.request_transitioned`` (sent after a
  status change commits): event ``vm_request.<to_status>`` with the request and the timeline
  entry as the REST API shows them.
- ``on_sync_failed`` listens to ``gpuinventory.signals.sync_failed``: ``inventory.sync_failed``.

``redeliver`` makes a new delivery of an event (the admin's "Redeliver" action).
``publish`` writes one ``WebhookEvent`` and one ``WebhookDelivery`` per active endpoint whose
filter matches (nothing when none matches), then enqueues the deliveries when its transaction
commits. The receivers log and swallow every error: a webhook problem (database, serializer,
broker) never breaks or delays the status change that caused it; the sweep
(``vmrequests.webhook_sweep``) sends deliveries whose message never reached the broker.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction

from webhooks.choices import SYNC_FAILED, SYNC_RECOVERED, request_event_type
from webhooks.models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.tasks import enqueue

log = logging.getLogger("webhooks")

#: Version of the payload shape; bumped only on an incompatible change.
PAYLOAD_VERSION = 1


def iso_utc(value: datetime | None) -> str | None:
    """``value`` in UTC as ISO-8601 with a ``Z`` suffix (as the REST API writes times), e.g.
    ``"2026-12-01T09:00:00.123456Z"``; None stays None."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text.removesuffix("+00:00") + "Z"


def json_ready(data: Any) -> Any:
    """``data`` as plain JSON types (datetimes, decimals, UUIDs and lazy strings converted the
    way ``DjangoJSONEncoder`` does), so the stored payload is exactly the bytes sent."""
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def build_payload(
    event_id: uuid.UUID, event_type: str, occurred_at: datetime, data: Mapping[str, Any]
) -> dict[str, Any]:
    """The versioned body: ``{"version": 1, "id": "<uuid>", "type": event_type,
    "occurred_at": "<ISO-8601 UTC>", "data": data}`` in plain JSON types."""
    return {
        "version": PAYLOAD_VERSION,
        "id": str(event_id),
        "type": event_type,
        "occurred_at": iso_utc(occurred_at),
        "data": json_ready(dict(data)),
    }


def request_data(request: Any, event: Any) -> dict[str, Any]:
    """``{"vm_request": <request>, "event": <timeline entry>}`` as the REST API shows them
    (``vmrequests.api.serializers``). Without an HTTP request the serializer gives the request's
    ``url`` as a path; it is made absolute with ``settings.PORTAL_BASE_URL``, as the API would."""
    from vmrequests.api.serializers import VMRequestEventSerializer, VMRequestSerializer

    vm_request = dict(VMRequestSerializer(request, context={"request": None}).data)
    url = vm_request.get("url")
    if isinstance(url, str) and url.startswith("/"):
        vm_request["url"] = settings.PORTAL_BASE_URL + url
    return {
        "vm_request": vm_request,
        "event": VMRequestEventSerializer(event, context={"request": None}).data,
    }


def sync_run_data(run: Any) -> dict[str, Any]:
    """``{"sync_run": {"id", "started", "finished", "trigger", "error"}}`` of a ``SyncRun``."""
    return {
        "sync_run": {
            "id": run.pk,
            "started": iso_utc(run.started),
            "finished": iso_utc(run.finished),
            "trigger": run.trigger,
            "error": run.error,
        }
    }


def matching_endpoints(event_type: str) -> list[WebhookEndpoint]:
    """Active endpoints whose filter wants ``event_type``, by name (few rows: filtered in Python,
    JSON containment is not portable to SQLite)."""
    return [e for e in WebhookEndpoint.objects.filter(active=True) if e.matches(event_type)]


def publish(
    event_type: str,
    occurred_at: datetime,
    data: Mapping[str, Any] | None = None,
    *,
    build: Callable[[], Mapping[str, Any]] | None = None,
) -> WebhookEvent | None:
    """Record one event and a pending delivery per matching active endpoint; enqueue them on commit.

    Args:
        event_type: e.g. ``"vm_request.approved"``.
        occurred_at: when it happened (aware datetime).
        data: the payload's ``data``; or ``build``, a no-argument callable returning it, called
            only when an endpoint matches (serialising a request costs queries).

    Returns:
        The event, or None when no active endpoint wants this type (nothing is written).
    """
    endpoints = matching_endpoints(event_type)
    if not endpoints:
        return None
    body_data = build() if build is not None else (data or {})
    event_id = uuid.uuid4()
    with transaction.atomic():
        event = WebhookEvent.objects.create(
            id=event_id,
            type=event_type,
            occurred_at=occurred_at,
            payload=build_payload(event_id, event_type, occurred_at, body_data),
        )
        deliveries = [
            WebhookDelivery.objects.create(endpoint=endpoint, event=event) for endpoint in endpoints
        ]
        ids = [d.pk for d in deliveries]

        def enqueue_all() -> None:
            for pk in ids:
                enqueue(pk)

        transaction.on_commit(enqueue_all)
    log.info("webhook event %s %s: %d deliveries", event_type, event_id, len(ids))
    return event


def redeliver(delivery: WebhookDelivery) -> WebhookDelivery:
    """Create a new pending delivery of the same event to the same endpoint (same event ID and
    body, freshly signed) and enqueue it when the transaction commits.

    Returns:
        The new delivery (``redelivery_of`` = ``delivery``).
    """
    new = WebhookDelivery.objects.create(
        endpoint_id=delivery.endpoint_id, event_id=delivery.event_id, redelivery_of=delivery
    )
    pk = new.pk
    transaction.on_commit(lambda: enqueue(pk))
    return new


def on_request_transitioned(sender: Any, request: Any, event: Any, **kwargs: Any) -> None:
    """Receiver of ``request_transitioned``: publish ``vm_request.<event.to_status>``. Never raises."""
    try:
        publish(
            request_event_type(event.to_status),
            event.created,
            build=lambda: request_data(request, event),
        )
    except Exception:
        log.exception(
            "could not record webhook event for request %s (%s)",
            getattr(request, "pk", None),
            getattr(event, "to_status", None),
        )


def on_sync_failed(sender: Any, run: Any, **kwargs: Any) -> None:
    """Receiver of ``sync_failed``: publish ``inventory.sync_failed``. Never raises."""
    try:
        publish(SYNC_FAILED, run.finished or run.started, build=lambda: sync_run_data(run))
    except Exception:
        log.exception("could not record webhook event for sync run %s", getattr(run, "pk", None))


def on_sync_recovered(sender: Any, run: Any, **kwargs: Any) -> None:
    """Receiver of ``sync_recovered``: publish ``inventory.sync_recovered``. Never raises."""
    try:
        publish(SYNC_RECOVERED, run.finished or run.started, build=lambda: sync_run_data(run))
    except Exception:
        log.exception("could not record webhook event for sync run %s", getattr(run, "pk", None))
