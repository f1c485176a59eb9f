"""From a request's status change or a failed sync to webhook events and deliveries
(webhooks/events.py): the payload as the API shows the request, one event per status change,
endpoint filters, and that no webhook problem ever breaks the change itself."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from gpuinventory import sync
from portal import k8s
from tests.factories import portal_user
from tests.vmrequest_factories import stored_image, stored_request, stored_team
from tests.webhook_factories import stored_endpoint
from vmrequests.api.serializers import VMRequestEventSerializer, VMRequestSerializer
from vmrequests.models import VMRequest, VMRequestEvent
from webhooks import delivery, events, tasks
from webhooks.models import WebhookDelivery, WebhookEvent

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _base_url(settings: Any) -> None:
    settings.PORTAL_BASE_URL = "https://gpu.example.com"


@pytest.fixture
def world() -> Any:
    from types import SimpleNamespace

    w = SimpleNamespace()
    w.ana = portal_user("analyst", "ana")
    w.apa = portal_user("approver", "apa")
    w.team = stored_team("quant", members=(w.ana, w.apa), approvers=(w.apa,))
    w.image = stored_image()
    w.req = stored_request(w.team, w.ana, w.image, ticket_source="servicenow", ticket_id="RITM0012345")
    return w


def as_json(data: Any) -> Any:
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def test_payload_of_a_status_change(
    world: Any, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    endpoint = stored_endpoint()
    with django_capture_on_commit_callbacks(execute=True):
        world.req.approve(world.apa, "ok for one week")

    event = WebhookEvent.objects.get()
    timeline = VMRequestEvent.objects.get(request=world.req, action="approve")
    req = VMRequest.objects.get(pk=world.req.pk)
    payload = event.payload
    assert sorted(payload) == ["data", "id", "occurred_at", "type", "version"]  # jsonb reorders keys
    assert payload["version"] == 1
    assert payload["id"] == str(event.id)
    assert payload["type"] == event.type == "vm_request.approved"
    assert payload["occurred_at"].endswith("Z")
    assert datetime.fromisoformat(payload["occurred_at"]) == timeline.created
    assert event.occurred_at == timeline.created
    assert sorted(payload["data"]) == ["event", "vm_request"]

    shown = payload["data"]["vm_request"]
    expected = as_json(VMRequestSerializer(req, context={"request": None}).data)
    expected["url"] = f"https://gpu.example.com/requests/{req.pk}/"
    assert shown == expected
    assert (shown["id"], shown["status"], shown["team"], shown["requester"]) == (
        req.pk,
        "approved",
        "quant",
        "ana",
    )
    assert (shown["decided_by"], shown["decision_note"], shown["ticket_id"]) == (
        "apa",
        "ok for one week",
        "RITM0012345",
    )

    entry = payload["data"]["event"]
    assert payload["occurred_at"] == entry["created"]  # the API's own spelling of the time
    assert entry == as_json(VMRequestEventSerializer(timeline, context={"request": None}).data)
    assert (entry["actor"], entry["action"], entry["from_status"], entry["to_status"], entry["message"]) == (
        "apa",
        "approve",
        "submitted",
        "approved",
        "ok for one week",
    )

    d = WebhookDelivery.objects.get()
    assert (d.endpoint_id, d.event_id, d.status, d.attempts) == (endpoint.pk, event.id, "pending", 0)
    assert webhook_enqueued == [d.pk]
    # the stored payload is exactly the body that is sent
    assert json.loads(delivery.encode_body(event.payload)) == payload


def test_one_event_per_status_change_named_after_the_status(
    world: Any, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    stored_endpoint()
    rejected = stored_request(world.team, world.ana, world.image)
    cancelled = stored_request(world.team, world.ana, world.image)
    req = world.req
    with django_capture_on_commit_callbacks(execute=True):
        req.approve(world.apa)
        req.start_provisioning()
        req.mark_running("gpu-node-01", "10.0.0.7")
        req.start_deletion("released", by=world.ana)
        req.mark_deleted()
        req.record("note", "a note changes no status")
        rejected.reject(world.apa, "no budget")
        cancelled.cancel(world.ana)
    types = [
        (e.payload["data"]["vm_request"]["id"], e.type)
        for e in WebhookEvent.objects.order_by("occurred_at", "created")
    ]
    assert types == [
        (req.pk, "vm_request.approved"),
        (req.pk, "vm_request.provisioning"),
        (req.pk, "vm_request.running"),
        (req.pk, "vm_request.deleting"),
        (req.pk, "vm_request.deleted"),
        (rejected.pk, "vm_request.rejected"),
        (cancelled.pk, "vm_request.cancelled"),
    ]
    running = WebhookEvent.objects.get(type="vm_request.running").payload["data"]
    assert (running["vm_request"]["node_name"], running["vm_request"]["ip_address"]) == (
        "gpu-node-01",
        "10.0.0.7",
    )
    assert len(webhook_enqueued) == 7


def test_deliveries_go_to_active_endpoints_whose_filter_matches(
    world: Any, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    every = stored_endpoint("every", "https://a.example.com/")
    approvals = stored_endpoint("approvals", "https://b.example.com/", event_types=["vm_request.approved"])
    stored_endpoint("rejections", "https://c.example.com/", event_types=["vm_request.rejected"])
    stored_endpoint("inventory", "https://d.example.com/", event_types=["inventory.sync_failed"])
    requests_all = stored_endpoint("requests", "https://e.example.com/", event_types=["vm_request.*"])
    stored_endpoint("off", "https://f.example.com/", active=False)
    with django_capture_on_commit_callbacks(execute=True):
        world.req.approve(world.apa)
    event = WebhookEvent.objects.get()
    got = sorted(event.deliveries.values_list("endpoint__name", flat=True))
    assert got == ["approvals", "every", "requests"]
    assert sorted(webhook_enqueued) == sorted(event.deliveries.values_list("pk", flat=True))
    assert {every.pk, approvals.pk, requests_all.pk} == set(
        event.deliveries.values_list("endpoint_id", flat=True)
    )


def test_no_matching_endpoint_records_nothing(
    world: Any, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    stored_endpoint("rejections", event_types=["vm_request.rejected"])
    with django_capture_on_commit_callbacks(execute=True):
        world.req.approve(world.apa)
    assert WebhookEvent.objects.count() == 0
    assert WebhookDelivery.objects.count() == 0
    assert webhook_enqueued == []


def test_a_failing_webhook_never_breaks_the_status_change(
    world: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    stored_endpoint()

    def broken(request: Any, event: Any) -> dict[str, Any]:
        raise RuntimeError("serializer exploded")

    monkeypatch.setattr(events, "request_data", broken)
    with (
        caplog.at_level(logging.ERROR, logger="webhooks"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        world.req.approve(world.apa)
    assert VMRequest.objects.get(pk=world.req.pk).status == "approved"
    assert f"could not record webhook event for request {world.req.pk} (approved)" in caplog.text
    assert WebhookEvent.objects.count() == 0


def test_a_dead_broker_never_breaks_the_status_change_and_the_sweep_catches_up(
    world: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    stored_endpoint()

    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise OSError("Error 111 connecting to redis:6379. Connection refused.")

    monkeypatch.setattr(tasks.webhook_deliver, "apply_async", broker_down)
    with (
        caplog.at_level(logging.WARNING, logger="webhooks"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        world.req.approve(world.apa)
    assert VMRequest.objects.get(pk=world.req.pk).status == "approved"
    d = WebhookDelivery.objects.get()
    assert (d.status, d.attempts) == ("pending", 0)
    assert f"could not enqueue webhook delivery {d.pk}" in caplog.text
    assert delivery.due_deliveries(timezone.now() + timedelta(seconds=61)) == [d.pk]


# --- inventory sync failures --------------------------------------------------------------------


def _cluster_down() -> Any:
    raise k8s.K8sTransientError("connection refused: https://10.0.0.1:6443")


def test_a_failed_sync_is_an_event(
    monkeypatch: pytest.MonkeyPatch, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    endpoint = stored_endpoint("inventory", event_types=["inventory.sync_failed"])
    stored_endpoint("requests", event_types=["vm_request.*"])
    monkeypatch.setattr(sync.run, "take_snapshot", _cluster_down)
    with django_capture_on_commit_callbacks(execute=True):
        run = sync.run_sync("manual")
    assert run.status == "failed"
    event = WebhookEvent.objects.get()
    assert event.type == "inventory.sync_failed"
    assert event.occurred_at == run.finished
    shown = event.payload["data"]["sync_run"]
    assert list(event.payload["data"]) == ["sync_run"]
    assert shown == {
        "id": run.pk,
        "started": shown["started"],
        "finished": shown["finished"],
        "trigger": "manual",
        "error": "cannot read the cluster: connection refused: https://10.0.0.1:6443",
    }
    assert shown["started"].endswith("Z") and shown["finished"].endswith("Z")
    assert datetime.fromisoformat(shown["started"]) == run.started
    assert datetime.fromisoformat(shown["finished"]) == run.finished
    assert list(event.deliveries.values_list("endpoint_id", flat=True)) == [endpoint.pk]
    assert len(webhook_enqueued) == 1


def test_a_failing_webhook_never_breaks_the_sync(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stored_endpoint()
    monkeypatch.setattr(sync.run, "take_snapshot", _cluster_down)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(events, "publish", broken)
    with caplog.at_level(logging.ERROR, logger="webhooks"):
        run = sync.run_sync("manual")
    assert run.status == "failed" and run.error.startswith("cannot read the cluster")
    assert f"could not record webhook event for sync run {run.pk}" in caplog.text


def test_iso_utc() -> None:
    from zoneinfo import ZoneInfo

    shanghai = datetime(2026, 12, 1, 17, 0, 0, 123456, tzinfo=ZoneInfo("Asia/Shanghai"))
    assert events.iso_utc(shanghai) == "2026-12-01T09:00:00.123456Z"
    assert events.iso_utc(datetime(2026, 12, 1, 9, 0, tzinfo=UTC)) == "2026-12-01T09:00:00Z"
    assert events.iso_utc(None) is None


def test_sync_events_mark_the_start_and_end_of_a_failure_streak(
    monkeypatch: pytest.MonkeyPatch, webhook_enqueued: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    stored_endpoint("inventory", event_types=["inventory.sync_failed", "inventory.sync_recovered"])
    outcomes = iter(["down", "down", "down", "up", "up", "down"])

    def snapshot() -> Any:
        if next(outcomes) == "down":
            return _cluster_down()
        return sync.Snapshot("v1.37.2", [], [], [], None, [], "", None)

    monkeypatch.setattr(sync.run, "take_snapshot", snapshot)
    statuses = []
    for _ in range(6):
        with django_capture_on_commit_callbacks(execute=True):
            statuses.append(sync.run_sync("manual").status)
    assert statuses == ["failed", "failed", "failed", "success", "success", "failed"]
    assert list(WebhookEvent.objects.order_by("occurred_at").values_list("type", flat=True)) == [
        "inventory.sync_failed",
        "inventory.sync_recovered",
        "inventory.sync_failed",
    ]
