"""The delivery service (webhooks/delivery.py) without a network: backoff bounds, Retry-After,
the outcome of each kind of answer, the claim, the sweep, redelivery and the tasks."""

from __future__ import annotations

import json
import logging
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.webhook_factories import SECRET, stored_delivery, stored_endpoint
from webhooks import delivery, events, signing, tasks
from webhooks.delivery import HttpResult, Outcome, backoff_seconds, retry_after_seconds
from webhooks.models import WebhookAttempt, WebhookDelivery

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class LowRandom(random.Random):
    """Always draws the low end of a range."""

    def uniform(self, a: float, b: float) -> float:
        return a


class HighRandom(random.Random):
    """Always draws the high end of a range."""

    def uniform(self, a: float, b: float) -> float:
        return b


# --- backoff --------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_and_is_capped_at_an_hour() -> None:
    high = [backoff_seconds(n, 30, rng=HighRandom()) for n in range(1, 11)]
    assert high == [30, 60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    low = [backoff_seconds(n, 30, rng=LowRandom()) for n in range(1, 9)]
    assert low == [24, 48, 96, 192, 384, 768, 1536, 2880]


def test_backoff_jitter_stays_within_bounds() -> None:
    rng = random.Random(7)  # noqa: S311 - seeded jitter source, not a secret
    for n in range(1, 40):
        raw = min(3600, 30 * 2 ** (n - 1))
        for _ in range(20):
            delay = backoff_seconds(n, 30, rng=rng)
            assert round(raw * 0.8) <= delay <= raw
    assert backoff_seconds(1000, 30) <= 3600  # no overflow, still capped
    assert backoff_seconds(1, 1, rng=LowRandom()) == 1  # never below one second


def test_backoff_base_comes_from_settings(settings: Any) -> None:
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS = 5
    assert backoff_seconds(3, rng=HighRandom()) == 20


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("120", 120),
        (" 7 ", 7),
        ("0", 1),
        ("86400", 3600),
        ("Tue, 01 Dec 2026 09:02:00 GMT", 120),
        ("Tue, 01 Dec 2026 08:00:00 GMT", 1),
    ],
)
def test_retry_after(value: str | None, expected: int | None) -> None:
    assert retry_after_seconds(value, NOW) == expected


# --- deliver ------------------------------------------------------------------------------------


class FakePost:
    """Stands in for ``delivery.post``: answers from ``script`` in order, records each call's
    ``(url, body, headers, timeout)`` in ``calls``."""

    def __init__(self) -> None:
        self.script: list[HttpResult] = []
        self.calls: list[tuple[str, bytes, dict[str, str], float]] = []

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> HttpResult:
        self.calls.append((url, body, headers, timeout))
        return self.script.pop(0)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakePost:
    fake_post = FakePost()
    monkeypatch.setattr(delivery, "post", fake_post)
    return fake_post


def http(code: int, excerpt: str = "", retry_after: str | None = None) -> HttpResult:
    return HttpResult(code, excerpt, "", retry_after, 12)


@pytest.fixture(autouse=True)
def _deterministic_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery, "_rng", HighRandom())


def test_a_2xx_succeeds_with_one_signed_post(fake: FakePost, settings: Any) -> None:
    settings.PORTAL_WEBHOOK_TIMEOUT = 7
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.append(http(204))
    outcome = delivery.deliver(d.pk, now=NOW)
    assert outcome == Outcome(d.pk, "sent", "succeeded", 1, 204, None)
    url, body, headers, timeout = fake.calls[0]
    assert (url, timeout) == ("https://tickets.example.com/hooks/portal", 7)
    assert json.loads(body) == d.event.payload
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Portal-Webhook-Id"] == str(d.event.id)
    assert headers["X-Portal-Webhook-Event"] == "vm_request.approved"
    assert headers["X-Portal-Webhook-Timestamp"] == str(int(NOW.timestamp()))
    signing.verify(SECRET, headers, body, now=NOW.timestamp())
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.last_error, d.next_attempt_at) == (
        "succeeded",
        1,
        204,
        "",
        None,
    )
    attempt = WebhookAttempt.objects.get()
    assert (attempt.number, attempt.status_code, attempt.duration_ms, attempt.started_at) == (1, 204, 12, NOW)


def test_a_5xx_is_retried_with_backoff_then_fails_after_the_last_attempt(
    fake: FakePost, settings: Any
) -> None:
    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 3
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS = 30
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.extend([http(500, "boom"), http(502), http(503)])
    first = delivery.deliver(d.pk, now=NOW)
    assert first == Outcome(d.pk, "sent", "retrying", 1, 500, 30)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error) == ("retrying", 1, "HTTP 500")
    assert d.next_attempt_at == NOW + timedelta(milliseconds=12, seconds=30)

    second = delivery.deliver(d.pk, now=d.next_attempt_at)
    assert (second.status, second.retry_in) == ("retrying", 60)
    d.refresh_from_db()
    third = delivery.deliver(d.pk, now=d.next_attempt_at)
    assert (third.status, third.attempt, third.retry_in) == ("failed", 3, None)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.next_attempt_at) == ("failed", 3, 503, None)
    assert d.last_error == "HTTP 503 (gave up after 3 attempts)"
    log = list(d.attempt_log.values_list("number", "status_code", "response_excerpt"))
    assert log == [(1, 500, "boom"), (2, 502, ""), (3, 503, "")]


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 422, 301, 302])
def test_other_4xx_and_3xx_fail_at_once(fake: FakePost, code: int) -> None:
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.append(http(code, "no such hook"))
    outcome = delivery.deliver(d.pk, now=NOW)
    assert outcome == Outcome(d.pk, "sent", "failed", 1, code, None)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error, d.next_attempt_at) == ("failed", 1, f"HTTP {code}", None)


@pytest.mark.parametrize(("code", "header", "retry_in"), [(429, "120", 120), (503, "5", 5), (429, None, 30)])
def test_retry_after_is_honoured_on_429_and_503(
    fake: FakePost, code: int, header: str | None, retry_in: int
) -> None:
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.append(http(code, retry_after=header))
    assert delivery.deliver(d.pk, now=NOW).retry_in == retry_in


def test_retry_after_is_ignored_on_500(fake: FakePost) -> None:
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.append(http(500, retry_after="5"))
    assert delivery.deliver(d.pk, now=NOW).retry_in == 30


def test_network_errors_are_retried_invalid_urls_are_not(fake: FakePost) -> None:
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    fake.script.append(HttpResult(None, "", "ConnectionError: connection refused", None, 3))
    outcome = delivery.deliver(d.pk, now=NOW)
    assert (outcome.status, outcome.status_code, outcome.retry_in) == ("retrying", None, 30)
    d.refresh_from_db()
    assert d.last_error == "ConnectionError: connection refused"
    assert WebhookAttempt.objects.get().error == "ConnectionError: connection refused"

    other = stored_delivery(stored_endpoint("other"), next_attempt_at=NOW)
    fake.script.append(HttpResult(None, "", "InvalidURL: bad", None, 0, permanent=True))
    assert delivery.deliver(other.pk, now=NOW).status == "failed"


def test_finished_deliveries_are_never_sent_again(fake: FakePost) -> None:
    endpoint = stored_endpoint()
    for status in ("succeeded", "failed"):
        d = stored_delivery(endpoint, status=status, attempts=2, next_attempt_at=None)
        assert delivery.deliver(d.pk, now=NOW) == Outcome(d.pk, "skipped", status, 2)
    assert fake.calls == []
    assert delivery.deliver(999_999, now=NOW).action == "missing"


def test_a_delivery_not_yet_due_is_left_alone(fake: FakePost) -> None:
    d = stored_delivery(
        stored_endpoint(), status="retrying", attempts=1, next_attempt_at=NOW + timedelta(seconds=30)
    )
    assert delivery.deliver(d.pk, now=NOW).action == "not_due"
    assert fake.calls == []
    # an ETA message may arrive a hair early: within a second it counts as due
    fake.script.append(http(200))
    assert delivery.deliver(d.pk, now=NOW + timedelta(seconds=29.5)).action == "sent"


def test_the_loser_of_a_claim_sends_nothing(fake: FakePost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another worker claims the delivery between our read and our claim."""
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)

    def other_worker_claims_first() -> int:
        WebhookDelivery.objects.filter(pk=d.pk).update(next_attempt_at=NOW + timedelta(seconds=70))
        return 10

    monkeypatch.setattr(delivery, "timeout_seconds", other_worker_claims_first)
    assert delivery.deliver(d.pk, now=NOW) == Outcome(d.pk, "lost", "pending")
    assert fake.calls == [] and WebhookAttempt.objects.count() == 0


def test_the_claim_pushes_the_next_attempt_past_the_try(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """While the POST is in flight, the delivery is not due (the sweep leaves it alone)."""
    settings.PORTAL_WEBHOOK_TIMEOUT = 10
    d = stored_delivery(stored_endpoint(), next_attempt_at=NOW)
    seen: list[Any] = []

    def slow_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> HttpResult:
        seen.append(WebhookDelivery.objects.values_list("next_attempt_at", flat=True).get(pk=d.pk))
        return http(200)

    monkeypatch.setattr(delivery, "post", slow_post)
    delivery.deliver(d.pk, now=NOW)
    assert seen == [NOW + timedelta(seconds=70)]


def test_an_inactive_endpoint_fails_its_open_deliveries_without_a_try(fake: FakePost) -> None:
    d = stored_delivery(stored_endpoint(active=False), status="retrying", attempts=1, next_attempt_at=NOW)
    assert delivery.deliver(d.pk, now=NOW) == Outcome(d.pk, "inactive", "failed")
    d.refresh_from_db()
    assert (d.status, d.last_error, d.attempts) == ("failed", "endpoint is inactive", 1)
    assert fake.calls == []


# --- enqueue, sweep, redeliver, tasks -----------------------------------------------------------


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Messages ``vmrequests.webhook_deliver`` would send to the broker."""
    sent: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(tasks.webhook_deliver, "apply_async", lambda *a, **kw: sent.append((a, kw)))
    return sent


def test_enqueue_sends_the_delivery_id_and_countdown(enqueued: list[Any]) -> None:
    assert tasks.enqueue(5) is True
    assert tasks.enqueue(6, countdown=30) is True
    assert enqueued == [(((5,),), {"retry": False}), (((6,),), {"countdown": 30, "retry": False})]


def test_enqueue_never_raises_when_the_broker_is_down(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(tasks.webhook_deliver, "apply_async", broker_down)
    with caplog.at_level(logging.WARNING, logger="webhooks"):
        assert tasks.enqueue(5) is False
    assert "could not enqueue webhook delivery 5; the sweep will" in caplog.text


def test_sweep_enqueues_overdue_open_deliveries_only(enqueued: list[Any]) -> None:
    endpoint = stored_endpoint()
    now = timezone.now()
    old = stored_delivery(endpoint, next_attempt_at=now - timedelta(minutes=10))
    retrying = stored_delivery(
        endpoint, status="retrying", attempts=2, next_attempt_at=now - timedelta(seconds=61)
    )
    stored_delivery(endpoint, next_attempt_at=now - timedelta(seconds=30))  # its message is on its way
    stored_delivery(endpoint, status="retrying", next_attempt_at=now + timedelta(minutes=5))
    stored_delivery(endpoint, status="succeeded", next_attempt_at=None)
    stored_delivery(endpoint, status="failed", next_attempt_at=now - timedelta(hours=1))
    assert delivery.due_deliveries(now) == [old.pk, retrying.pk]
    assert tasks.webhook_sweep() == 2
    assert [args for args, _kw in enqueued] == [((old.pk,),), ((retrying.pk,),)]


def test_deliver_task_enqueues_the_retry_with_the_countdown_asked_for(
    fake: FakePost, enqueued: list[Any]
) -> None:
    d = stored_delivery(stored_endpoint())
    fake.script.append(http(500))
    assert tasks.webhook_deliver(d.pk) == "sent"
    assert enqueued == [(((d.pk,),), {"countdown": 30, "retry": False})]
    fake.script.append(http(200))
    WebhookDelivery.objects.filter(pk=d.pk).update(next_attempt_at=timezone.now())
    assert tasks.webhook_deliver(d.pk) == "sent"
    assert tasks.webhook_deliver(d.pk) == "skipped"
    assert len(enqueued) == 1


def test_redeliver_makes_a_new_delivery_enqueued_on_commit(
    enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    original = stored_delivery(stored_endpoint(), status="failed", attempts=8, next_attempt_at=None)
    with django_capture_on_commit_callbacks(execute=True):
        new = events.redeliver(original)
    assert new.pk != original.pk
    new.refresh_from_db()
    assert (new.event_id, new.endpoint_id, new.redelivery_of_id) == (
        original.event_id,
        original.endpoint_id,
        original.pk,
    )
    assert (new.status, new.attempts) == ("pending", 0)
    assert enqueued == [(((new.pk,),), {"retry": False})]


def test_task_names_are_stable() -> None:
    assert tasks.webhook_deliver.name == "vmrequests.webhook_deliver"
    assert tasks.webhook_sweep.name == "vmrequests.webhook_sweep"


def test_sweep_is_on_the_beat_schedule(settings: Any) -> None:
    assert settings.CELERY_BEAT_SCHEDULE["vmrequests-webhook-sweep"] == {
        "task": "vmrequests.webhook_sweep",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    }


@pytest.mark.django_db
def test_the_worker_registers_the_webhook_tasks_under_their_old_names() -> None:
    """Celery's autodiscovery finds ``webhooks.tasks`` (an installed app) and registers the names
    of the release before the app existed, so messages it queued are still consumed."""
    from portal.celery import app

    app.loader.import_default_modules()
    assert app.tasks["vmrequests.webhook_deliver"].run.__module__ == "webhooks.tasks"
    assert app.tasks["vmrequests.webhook_sweep"].run.__module__ == "webhooks.tasks"
    assert {name for name in app.tasks if "webhook" in name} == {
        "vmrequests.webhook_deliver",
        "vmrequests.webhook_sweep",
    }
