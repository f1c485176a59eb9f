"""Webhook deliveries to a real HTTP receiver on 127.0.0.1 (http.server in a thread).

The delivery service is called synchronously, as the ``vmrequests.webhook_deliver`` task would call it;
time is moved on by passing ``now`` (the next try's ``next_attempt_at``), never by sleeping.
Signatures are checked both with ``webhooks.signing.verify`` and with the snippet that
docs/webhooks.md gives receivers (executed from the document itself).
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from portal.celery import app
from tests.factories import portal_user
from tests.vmrequest_factories import stored_image, stored_request, stored_team
from tests.webhook_factories import SECRET, stored_delivery, stored_endpoint
from webhooks import delivery
from webhooks.models import WebhookDelivery
from webhooks.signing import BadSignature, StaleTimestamp, verify

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.integration, pytest.mark.django_db]


@dataclass
class Received:
    """One request the receiver got."""

    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    """What the receiver answers: ``hang`` waits (up to 10 s) until the test ends instead."""

    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


class Receiver:
    """A scripted HTTP receiver: answers ``script`` in order (then 200), records every request."""

    def __init__(self) -> None:
        self.script: list[Answer] = []
        self.received: list[Received] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver._lock:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body))
                    answer = receiver.script.pop(0) if receiver.script else Answer()
                if answer.hang:
                    receiver.release.wait(10)
                    return
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/portal"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> None:
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS = 30
    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 8
    settings.PORTAL_WEBHOOK_TIMEOUT = 5


def documented_verifier() -> tuple[Any, type[Exception]]:
    """``verify_portal_webhook`` and ``WebhookRejected`` from docs/webhooks.md's snippet."""
    text = (ROOT / "docs" / "webhooks.md").read_text()
    section = text[text.index("### Verifying a delivery") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), "docs/webhooks.md", "exec"), namespace)  # noqa: S102 - our own document
    return namespace["verify_portal_webhook"], namespace["WebhookRejected"]


def timestamp_of(request: Received) -> int:
    return int(request.headers["X-Portal-Webhook-Timestamp"])


def test_signature_verifies_with_the_documented_check(receiver: Receiver) -> None:
    d = stored_delivery(stored_endpoint(url=receiver.url))
    outcome = delivery.deliver(d.pk)
    assert (outcome.action, outcome.status, outcome.status_code) == ("sent", "succeeded", 200)
    [got] = receiver.received
    assert got.path == "/hooks/portal"
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["User-Agent"] == "gpu-vm-portal-webhooks/1"
    assert got.headers["X-Portal-Webhook-Id"] == str(d.event.id)
    assert got.headers["X-Portal-Webhook-Event"] == "vm_request.approved"
    assert json.loads(got.body) == d.event.payload

    verify(SECRET, got.headers, got.body)  # the receiver's clock: real time
    verify_portal_webhook, rejected = documented_verifier()
    verify_portal_webhook(SECRET, got.headers, got.body)
    with pytest.raises(rejected, match="signature mismatch"):
        verify_portal_webhook("not-the-secret", got.headers, got.body)
    with pytest.raises(rejected, match="signature mismatch"):
        verify_portal_webhook(SECRET, got.headers, got.body.replace(b'"approved"', b'"rejected"'))

    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code) == ("succeeded", 1, 200)
    attempt = d.attempt_log.get()
    assert (attempt.number, attempt.status_code, attempt.response_excerpt, attempt.error) == (
        1,
        200,
        "ok",
        "",
    )


def test_500_then_200_is_two_attempts_and_succeeds(receiver: Receiver) -> None:
    receiver.script = [Answer(500, b"database is down"), Answer(200, b"thanks")]
    d = stored_delivery(stored_endpoint(url=receiver.url))

    first = delivery.deliver(d.pk)
    assert (first.status, first.status_code) == ("retrying", 500)
    assert first.retry_in is not None and 24 <= first.retry_in <= 30
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error) == ("retrying", 1, "HTTP 500")
    assert delivery.deliver(d.pk).action == "not_due"  # a duplicate message sends nothing

    assert d.next_attempt_at is not None
    second = delivery.deliver(d.pk, now=d.next_attempt_at)
    assert (second.status, second.attempt, second.retry_in) == ("succeeded", 2, None)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.next_attempt_at) == ("succeeded", 2, 200, None)
    log = list(d.attempt_log.values_list("number", "status_code", "response_excerpt"))
    assert log == [(1, 500, "database is down"), (2, 200, "thanks")]

    assert len(receiver.received) == 2
    first_try, second_try = receiver.received
    assert first_try.body == second_try.body
    assert first_try.headers["X-Portal-Webhook-Id"] == second_try.headers["X-Portal-Webhook-Id"]
    assert timestamp_of(second_try) - timestamp_of(first_try) in range(24, 32)  # signed anew
    for got in receiver.received:
        verify(SECRET, got.headers, got.body, now=timestamp_of(got))
    assert delivery.deliver(d.pk).action == "skipped"
    assert len(receiver.received) == 2


def test_400_is_one_attempt_failed_and_never_retried(receiver: Receiver) -> None:
    receiver.script = [Answer(400, b'{"error": "unknown hook"}')]
    d = stored_delivery(stored_endpoint(url=receiver.url))
    outcome = delivery.deliver(d.pk)
    assert (outcome.status, outcome.status_code, outcome.retry_in) == ("failed", 400, None)
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_error, d.next_attempt_at) == ("failed", 1, "HTTP 400", None)
    assert d.attempt_log.get().response_excerpt == '{"error": "unknown hook"}'
    later = d.created + timedelta(days=1)
    assert delivery.due_deliveries(later) == []
    assert delivery.deliver(d.pk, now=later).action == "skipped"
    assert len(receiver.received) == 1


def test_429_with_retry_after_is_retried_after_that_delay(receiver: Receiver) -> None:
    receiver.script = [Answer(429, b"slow down", {"Retry-After": "7"}), Answer(202)]
    d = stored_delivery(stored_endpoint(url=receiver.url))
    first = delivery.deliver(d.pk)
    assert (first.status, first.status_code, first.retry_in) == ("retrying", 429, 7)
    d.refresh_from_db()
    attempt = d.attempt_log.get()
    assert d.next_attempt_at == attempt.started_at + timedelta(milliseconds=attempt.duration_ms, seconds=7)
    second = delivery.deliver(d.pk, now=d.next_attempt_at)
    assert (second.status, second.status_code) == ("succeeded", 202)
    assert [a.status_code for a in d.attempt_log.all()] == [429, 202]


def test_a_replayed_delivery_is_rejected_by_the_documented_check(receiver: Receiver) -> None:
    d = stored_delivery(stored_endpoint(url=receiver.url))
    delivery.deliver(d.pk)
    [got] = receiver.received
    sent_at = timestamp_of(got)
    verify_portal_webhook, rejected = documented_verifier()

    # the same captured request, replayed ten minutes later
    with pytest.raises(StaleTimestamp):
        verify(SECRET, got.headers, got.body, now=sent_at + 600)
    with pytest.raises(rejected, match="replay"):
        verify_portal_webhook(SECRET, got.headers, got.body, now=sent_at + 600)
    # ... with a fresh timestamp pasted in: the signature no longer matches
    forged = {**got.headers, "X-Portal-Webhook-Timestamp": str(sent_at + 600)}
    with pytest.raises(BadSignature):
        verify(SECRET, forged, got.body, now=sent_at + 600)
    with pytest.raises(rejected, match="signature mismatch"):
        verify_portal_webhook(SECRET, forged, got.body, now=sent_at + 600)
    # within the window it is accepted (receivers de-duplicate on X-Portal-Webhook-Id)
    verify_portal_webhook(SECRET, got.headers, got.body, now=sent_at + 299)


def test_connection_refused_is_retried() -> None:
    with socket.socket() as sock:  # a port nobody listens on any more
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    d = stored_delivery(stored_endpoint(url=f"http://127.0.0.1:{port}/hook"))
    outcome = delivery.deliver(d.pk)
    assert (outcome.status, outcome.status_code) == ("retrying", None)
    d.refresh_from_db()
    assert d.last_error.startswith("ConnectionError: ")
    assert d.attempt_log.get().error == d.last_error


def test_a_receiver_slower_than_the_timeout_is_retried(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "timeout_seconds", lambda: 0.3)
    receiver.script = [Answer(hang=True)]
    d = stored_delivery(stored_endpoint(url=receiver.url))
    outcome = delivery.deliver(d.pk)
    assert (outcome.status, outcome.status_code) == ("retrying", None)
    d.refresh_from_db()
    assert d.last_error.startswith("timeout after 0.3 s: ")


def test_redirects_are_not_followed(receiver: Receiver) -> None:
    receiver.script = [Answer(307, b"", {"Location": "/elsewhere"})]
    d = stored_delivery(stored_endpoint(url=receiver.url))
    assert delivery.deliver(d.pk).status == "failed"
    assert [r.path for r in receiver.received] == ["/hooks/portal"]


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Run tasks in the calling process at ``apply_async`` (no broker, no worker)."""
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = previous


@pytest.mark.usefixtures("eager_celery")
def test_a_status_change_reaches_the_receiver_through_the_task(
    receiver: Receiver, django_capture_on_commit_callbacks: Any
) -> None:
    """approve → request_transitioned → event + delivery → ``vmrequests.webhook_deliver`` (run eagerly,
    as a worker would) → POST."""
    analyst, approver = portal_user("analyst", "ana"), portal_user("approver", "apa")
    team = stored_team("quant", members=(analyst, approver), approvers=(approver,))
    req = stored_request(team, analyst, stored_image())
    stored_endpoint(url=receiver.url, event_types=["vm_request.approved"])
    with django_capture_on_commit_callbacks(execute=True):
        req.approve(approver, "go")
    [got] = receiver.received
    verify(SECRET, got.headers, got.body)
    body = json.loads(got.body)
    assert (body["type"], body["data"]["vm_request"]["id"], body["data"]["vm_request"]["status"]) == (
        "vm_request.approved",
        req.pk,
        "approved",
    )
    assert WebhookDelivery.objects.get().status == "succeeded"
