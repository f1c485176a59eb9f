"""Sending webhook deliveries: one HTTP try at a time, the retry policy, what the sweep finds due.

Policy (docs/webhooks.md "Retries"), settings in portal/settings.py:

- POST the event's JSON body with the signed headers (``webhooks/signing.py``), a timeout of
  ``PORTAL_WEBHOOK_TIMEOUT`` seconds (connect and each read), redirects not followed.
- 2xx: succeeded. 429, 5xx, timeouts and connection errors: retried after
  ``PORTAL_WEBHOOK_RETRY_BASE_SECONDS`` × 2^(tries − 1) seconds, at most an hour, minus up to 20 %
  jitter; a ``Retry-After`` (seconds or HTTP date) on 429/503 replaces that delay (at most an
  hour). ``PORTAL_WEBHOOK_MAX_ATTEMPTS`` tries in all, then failed. Any other status (3xx, 4xx):
  failed at once.
- Every try writes a ``WebhookAttempt`` (status code, first 500 characters of the response,
  duration, error).

Concurrency: before sending, ``deliver`` *claims* the delivery with a compare-and-swap on
``attempts`` that moves ``next_attempt_at`` past the try's longest duration. A duplicate message
(the sweep, a broker redelivery) then finds it not due or loses the swap and sends nothing, and a
succeeded or failed delivery is never sent again. Delivery is at-least-once: a worker killed
after the POST but before recording it leaves the claim to expire and the sweep sends the event
again (same ``X-Portal-Webhook-Id``, so receivers de-duplicate on it).

Messages are sent by ``webhooks/tasks.py`` (``enqueue``, the tasks); new deliveries are made by
``webhooks/events.py`` (``publish``, ``redeliver``). This module imports neither.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import requests
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from webhooks import signing
from webhooks.choices import OPEN_DELIVERY_STATES, DeliveryStatus
from webhooks.models import WebhookAttempt, WebhookDelivery

log = logging.getLogger("webhooks")

#: Longest delay between two tries, and the cap on a receiver's Retry-After (seconds).
MAX_BACKOFF_SECONDS = 3600
#: A delay is drawn uniformly from [raw × (1 − JITTER), raw]: never above the cap.
JITTER = 0.2
#: Characters of the response body kept on the attempt row.
EXCERPT_CHARS = 500
#: Bytes of the response body read at most (a huge or endless body is not downloaded).
READ_LIMIT_BYTES = 4096
#: A claim lasts the request timeout plus this (seconds); then the sweep may retry it.
CLAIM_MARGIN_SECONDS = 60
#: The sweep re-enqueues deliveries overdue by at least this many seconds (a fresh one's message
#: is normally on its way).
SWEEP_GRACE_SECONDS = 60
#: Deliveries re-enqueued by one sweep at most (oldest due first).
SWEEP_BATCH = 500
#: A message that arrives this early (seconds; ETA versus clock rounding) still counts as due.
DUE_SLACK_SECONDS = 1
USER_AGENT = "gpu-vm-portal-webhooks/1"

_rng = random.SystemRandom()


def timeout_seconds() -> int:
    """``PORTAL_WEBHOOK_TIMEOUT`` (seconds, default 10)."""
    return int(getattr(settings, "PORTAL_WEBHOOK_TIMEOUT", 10))


def retry_base_seconds() -> int:
    """``PORTAL_WEBHOOK_RETRY_BASE_SECONDS`` (seconds, default 30)."""
    return int(getattr(settings, "PORTAL_WEBHOOK_RETRY_BASE_SECONDS", 30))


def max_attempts() -> int:
    """``PORTAL_WEBHOOK_MAX_ATTEMPTS`` (tries in all, default 8)."""
    return int(getattr(settings, "PORTAL_WEBHOOK_MAX_ATTEMPTS", 8))


def backoff_seconds(failed_tries: int, base: int | None = None, *, rng: random.Random | None = None) -> int:
    """Delay before the next try after ``failed_tries`` tries failed (≥ 1).

    ``raw = min(MAX_BACKOFF_SECONDS, base × 2^(failed_tries − 1))``; the result is drawn from
    ``[raw × 0.8, raw]`` and rounded, at least 1. With base 30: ~30, 60, 120, ..., 3600 s.

    Args:
        failed_tries: how many tries have failed so far (1 after the first).
        base: first delay in seconds (default ``PORTAL_WEBHOOK_RETRY_BASE_SECONDS``).
        rng: the random source of the jitter (tests pass a seeded one).
    """
    base = retry_base_seconds() if base is None else base
    raw = min(MAX_BACKOFF_SECONDS, base * 2 ** min(max(failed_tries, 1) - 1, 32))
    return max(1, round((rng or _rng).uniform(raw * (1 - JITTER), raw)))


def retry_after_seconds(value: str | None, now: datetime) -> int | None:
    """A ``Retry-After`` header value as a delay in seconds within [1, MAX_BACKOFF_SECONDS].

    Accepts delta-seconds (``"120"``) or an HTTP date (``"Wed, 21 Oct 2026 07:28:00 GMT"``,
    measured from ``now``). Returns None when absent or unparseable.
    """
    if not value or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = math.ceil((when - now).total_seconds())
    return min(MAX_BACKOFF_SECONDS, max(1, seconds))


def is_retryable_status(status_code: int) -> bool:
    """429 and 5xx are retried; every other non-2xx code fails the delivery at once."""
    return status_code == 429 or 500 <= status_code <= 599


def encode_body(payload: Any) -> bytes:
    """The exact request body: compact UTF-8 JSON of the stored payload."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class HttpResult:
    """What one POST gave: ``status_code`` None when no response came (``error`` says why);
    ``permanent`` when the request could not even be made (invalid URL): not retried."""

    status_code: int | None
    excerpt: str
    error: str
    retry_after: str | None
    duration_ms: int
    permanent: bool = False


#: Request errors no retry can fix.
_PERMANENT_ERRORS = (
    requests.exceptions.InvalidURL,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.InvalidHeader,
)


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> HttpResult:
    """POST ``body`` to ``url`` once: no redirects, ``timeout`` seconds for the connection and
    each read, at most ``READ_LIMIT_BYTES`` of the response read. Never raises a request error."""
    started = time.perf_counter()
    status_code: int | None = None
    excerpt = error = ""
    retry_after: str | None = None
    permanent = False
    try:
        response = requests.post(
            url, data=body, headers=headers, timeout=timeout, allow_redirects=False, stream=True
        )
        status_code = response.status_code
        retry_after = response.headers.get("Retry-After")
        try:
            raw = response.raw.read(READ_LIMIT_BYTES, decode_content=True) or b""
            excerpt = raw.decode("utf-8", "replace")[:EXCERPT_CHARS]
        except Exception as exc:  # the status arrived; a broken body does not change the outcome
            excerpt = f"(body unreadable: {exc.__class__.__name__})"
        finally:
            response.close()
    except requests.Timeout as exc:
        error = f"timeout after {timeout} s: {exc}"
    except _PERMANENT_ERRORS as exc:
        error, permanent = f"{exc.__class__.__name__}: {exc}", True
    except requests.RequestException as exc:
        error = f"{exc.__class__.__name__}: {exc}"
    duration_ms = round((time.perf_counter() - started) * 1000)
    return HttpResult(status_code, excerpt, error[:2000], retry_after, duration_ms, permanent)


@dataclass(frozen=True)
class Outcome:
    """What ``deliver`` did.

    ``action``: ``"sent"`` (one try made), ``"skipped"`` (already succeeded or failed),
    ``"not_due"`` (its next try is later; another message is scheduled), ``"lost"`` (another
    worker claimed it first), ``"inactive"`` (endpoint disabled: failed without a try),
    ``"missing"`` (no such delivery). ``status``: the delivery's status afterwards.
    ``retry_in``: seconds after which the caller must enqueue the next try (None: no retry).
    """

    delivery_id: int
    action: str
    status: str
    attempt: int | None = None
    status_code: int | None = None
    retry_in: int | None = None


def deliver(delivery_id: int, *, now: datetime | None = None) -> Outcome:
    """Make the next try of one delivery, record it, and decide what follows.

    Args:
        delivery_id: ``WebhookDelivery`` primary key.
        now: the current time (default ``timezone.now()``); also the signature's timestamp.

    Returns:
        An ``Outcome``; when ``retry_in`` is set, ``next_attempt_at`` was set to that many seconds
        after the try and the caller enqueues the next try with that countdown.
    """
    now = now or timezone.now()
    delivery = WebhookDelivery.objects.select_related("endpoint", "event").filter(pk=delivery_id).first()
    if delivery is None:
        log.warning("webhook delivery %s does not exist", delivery_id)
        return Outcome(delivery_id, "missing", "")
    refused = _claim(delivery, now)
    if refused is not None:
        return refused
    number = delivery.attempts + 1
    result = _post_signed(delivery, now)
    done = now + timedelta(milliseconds=result.duration_ms)
    status, error, retry_in = _judge(result, number, done)
    _record(delivery, number, now, result, status=status, error=error, retry_in=retry_in)
    log.info(
        "webhook delivery %s (%s → %s) try %d: %s%s",
        delivery_id,
        delivery.event.type,
        delivery.endpoint.name,
        number,
        result.status_code if result.status_code is not None else result.error,
        f", retry in {retry_in} s" if retry_in is not None else f", {status}",
    )
    return Outcome(delivery_id, "sent", status, number, result.status_code, retry_in)


def _claim(delivery: WebhookDelivery, now: datetime) -> Outcome | None:
    """Claim ``delivery`` for one try (compare-and-swap on ``attempts``, ``next_attempt_at`` moved
    past the try's longest duration); None when this caller won, else why not (``skipped``:
    succeeded or failed already, ``inactive``: its endpoint is off, now failed, ``not_due``,
    ``lost``: another caller claimed it)."""
    pk = delivery.pk
    if delivery.status not in OPEN_DELIVERY_STATES:
        return Outcome(pk, "skipped", delivery.status, delivery.attempts or None)
    if not delivery.endpoint.active:
        WebhookDelivery.objects.filter(pk=pk, status__in=OPEN_DELIVERY_STATES).update(
            status=DeliveryStatus.FAILED,
            next_attempt_at=None,
            last_error="endpoint is inactive",
            updated=now,
        )
        return Outcome(pk, "inactive", DeliveryStatus.FAILED)
    due_by = now + timedelta(seconds=DUE_SLACK_SECONDS)
    if delivery.next_attempt_at is not None and delivery.next_attempt_at > due_by:
        return Outcome(pk, "not_due", delivery.status)
    won = (
        WebhookDelivery.objects.filter(pk=pk, status=delivery.status, attempts=delivery.attempts)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=due_by))
        .update(
            next_attempt_at=now + timedelta(seconds=timeout_seconds() + CLAIM_MARGIN_SECONDS), updated=now
        )
    )
    return None if won else Outcome(pk, "lost", delivery.status)


def _post_signed(delivery: WebhookDelivery, now: datetime) -> HttpResult:
    """POST the event's body to the endpoint with the signed headers (timestamp ``now``)."""
    event = delivery.event
    body = encode_body(event.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signing.signed_headers(
            delivery.endpoint.secret, str(event.id), event.type, int(now.timestamp()), body
        ),
    }
    return post(delivery.endpoint.url, body, headers, timeout_seconds())


def _judge(result: HttpResult, number: int, done: datetime) -> tuple[str, str, int | None]:
    """The policy (module docstring) applied to try ``number``'s answer, ended at ``done``.

    Returns:
        ``(status, error, retry_in)``: the delivery's new status, its ``last_error`` and the
        seconds until the next try (None: no retry).
    """
    code = result.status_code
    if code is not None and 200 <= code <= 299:
        return DeliveryStatus.SUCCEEDED, "", None
    if code is not None:
        error, retryable = f"HTTP {code}", is_retryable_status(code)
    else:
        error, retryable = result.error, not result.permanent
    if retryable and number < max_attempts():
        hinted = retry_after_seconds(result.retry_after, done) if code in (429, 503) else None
        return DeliveryStatus.RETRYING, error, hinted if hinted is not None else backoff_seconds(number)
    if retryable:
        error = f"{error} (gave up after {number} attempts)"
    return DeliveryStatus.FAILED, error, None


def _record(
    delivery: WebhookDelivery,
    number: int,
    now: datetime,
    result: HttpResult,
    *,
    status: str,
    error: str,
    retry_in: int | None,
) -> None:
    """Write the try's ``WebhookAttempt`` and the delivery's new state in one transaction."""
    done = now + timedelta(milliseconds=result.duration_ms)
    with transaction.atomic():
        WebhookAttempt.objects.create(
            delivery=delivery,
            number=number,
            started_at=now,
            duration_ms=result.duration_ms,
            status_code=result.status_code,
            response_excerpt=result.excerpt,
            error=result.error,
        )
        WebhookDelivery.objects.filter(pk=delivery.pk).update(
            status=status,
            attempts=number,
            next_attempt_at=done + timedelta(seconds=retry_in) if retry_in is not None else None,
            last_status_code=result.status_code,
            last_error=error,
            updated=done,
        )


def due_deliveries(now: datetime | None = None, limit: int = SWEEP_BATCH) -> list[int]:
    """IDs of pending or retrying deliveries overdue by ``SWEEP_GRACE_SECONDS`` or more, oldest
    first, at most ``limit``."""
    cutoff = (now or timezone.now()) - timedelta(seconds=SWEEP_GRACE_SECONDS)
    return list(
        WebhookDelivery.objects.filter(status__in=OPEN_DELIVERY_STATES, next_attempt_at__lte=cutoff)
        .order_by("next_attempt_at", "pk")
        .values_list("pk", flat=True)[:limit]
    )
