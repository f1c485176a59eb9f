"""Lease and lifecycle services (vmrequests/approval.py: release, terminate, request_extension,
decide_extension, retry): who may, from which status, validation messages, and the effects
(fields, timeline, Reservation, the task enqueued on commit)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import translation

from gpuinventory.models import Reservation
from tests.factories import portal_user
from tests.fake_k8s import A100, NOW, Clock, FakeCluster, live_request, provisioning_world
from vmrequests import approval, provisioning, tasks
from vmrequests.approval import ApprovalRefused, NotAllowed
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.provisioning import Outcome

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> Iterator[None]:
    settings.TIME_ZONE = "UTC"
    settings.LANGUAGE_CODE = "en"
    settings.PORTAL_LEASE_WARNING_HOURS = 24
    with translation.override("en"):
        yield


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock.install(monkeypatch, NOW)


@pytest.fixture
def w(clock: Clock) -> Any:
    return provisioning_world()


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Tasks sent by the services (``<task>.delay``), instead of the broker."""
    out: list[tuple[str, int]] = []
    monkeypatch.setattr(tasks.provision, "delay", lambda pk: out.append(("provision", pk)))
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: out.append(("delete_vmi", pk)))
    return out


def up(w: Any, **fields: Any) -> VMRequest:
    """alice's running request on p1, lease ending in 7 days."""
    values: dict[str, Any] = {
        "vmi_created_at": NOW,
        "node_name": "p1",
        "ip_address": "10.0.0.7",
        "lease_end": NOW + timedelta(days=7),
    }
    values.update(fields)
    return live_request(w, "running", **values)


def fresh(req: VMRequest) -> VMRequest:
    return VMRequest.objects.select_related("team", "image", "requester").get(pk=req.pk)


def events(req: VMRequest) -> list[tuple[Any, ...]]:
    return list(
        VMRequestEvent.objects.filter(request=req).values_list(
            "action", "from_status", "to_status", "actor__username", "message", "data"
        )
    )


# --- release --------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "filer"])
def test_requester_or_filer_releases_and_the_vmi_deletion_is_enqueued_on_commit(
    w: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any, who: str
) -> None:
    w.filer = portal_user("analyst", "filer")
    req = up(w, submitted_by=w.filer)
    with django_capture_on_commit_callbacks(execute=True):
        approval.release(req, getattr(w, who), "done with it")
        assert enqueued == []
    assert enqueued == [("delete_vmi", req.pk)]
    req = fresh(req)
    assert (req.status, req.deletion_reason) == ("deleting", "released")
    assert events(req) == [("start_deletion", "running", "deleting", who, "done with it", {})]
    assert Reservation.objects.filter(holder=req.holder.key).count() == 1  # freed once the VMI is gone


def test_release_without_a_note_records_the_reason(
    w: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    req = live_request(w, "provisioning")
    with django_capture_on_commit_callbacks(execute=True):
        approval.release(req, w.alice)
    assert events(req) == [
        ("start_deletion", "provisioning", "deleting", "alice", "released by the requester", {})
    ]
    assert enqueued == [("delete_vmi", req.pk)]


@pytest.mark.parametrize("who", ["tim", "frank", "bob"])
def test_others_may_not_release(w: Any, enqueued: list[Any], who: str) -> None:
    req = up(w)  # bob approves for the team: he terminates (with a reason), he does not release
    with pytest.raises(
        NotAllowed, match=r"^Only the requester can release this VM; an approver terminates it instead\.$"
    ):
        approval.release(req, getattr(w, who))
    assert (fresh(req).status, events(req), enqueued) == ("running", [], [])


@pytest.mark.parametrize(
    ("status", "shown"), [("approved", "approved"), ("deleting", "deleting"), ("failed", "failed")]
)
def test_release_from_other_statuses_is_refused(
    w: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any, status: str, shown: str
) -> None:
    req = live_request(w, status)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(NotAllowed) as caught:
        approval.release(req, w.alice)
    assert str(caught.value) == f"Request #{req.pk} is {shown}; it cannot be deleted."
    assert (fresh(req).status, enqueued) == (status, [])


def test_a_broker_outage_at_enqueue_is_logged_not_raised(
    w: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any, caplog: Any
) -> None:
    def down(pk: int) -> None:
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(tasks.delete_vmi, "delay", down)
    req = up(w)
    with django_capture_on_commit_callbacks(execute=True):
        approval.release(req, w.alice)
    assert fresh(req).status == "deleting"
    assert [r.getMessage() for r in caplog.records if r.name == "vmrequests.approval"] == [
        "could not enqueue delete_vmi"
    ]


# --- terminate ------------------------------------------------------------------------------------


def test_approver_terminates_with_a_reason(
    w: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    req = up(w)
    with django_capture_on_commit_callbacks(execute=True):
        approval.terminate(req, w.bob, "GPU needed for the quarterly close")
    req = fresh(req)
    assert (req.status, req.deletion_reason) == ("deleting", "terminated")
    assert events(req) == [
        ("start_deletion", "running", "deleting", "bob", "GPU needed for the quarterly close", {})
    ]
    assert enqueued == [("delete_vmi", req.pk)]


@pytest.mark.parametrize("who", ["alice", "frank"])
def test_only_an_approver_of_the_team_terminates(w: Any, enqueued: list[Any], who: str) -> None:
    req = up(w)
    with pytest.raises(NotAllowed, match=r"^You are not an approver of team Quant\.$"):
        approval.terminate(req, getattr(w, who), "no")
    assert (fresh(req).status, enqueued) == ("running", [])


@pytest.mark.parametrize("note", ["", "   \n"])
def test_terminate_needs_a_reason(w: Any, enqueued: list[Any], note: str) -> None:
    req = up(w)
    with pytest.raises(ValueError, match=r"^Terminating a VM needs a reason.$"):
        approval.terminate(req, w.bob, note)
    assert (fresh(req).status, events(req), enqueued) == ("running", [], [])


def test_terminate_a_failed_request_is_refused(w: Any, enqueued: list[Any]) -> None:
    req = live_request(w, "failed")
    with pytest.raises(NotAllowed, match=rf"^Request #{req.pk} is failed; it cannot be deleted\.$"):
        approval.terminate(req, w.bob, "cleanup")
    assert enqueued == []


# --- lease extensions -----------------------------------------------------------------------------


def test_requester_asks_for_an_extension(w: Any) -> None:
    req = up(w)
    approval.request_extension(req, w.alice, 5, "the training run needs another week")
    req = fresh(req)
    assert (req.extension_days_requested, req.extension_reason, req.lease_end) == (
        5,
        "the training run needs another week",
        NOW + timedelta(days=7),
    )
    assert events(req) == [
        (
            "extension_request",
            "running",
            "running",
            "alice",
            "the training run needs another week",
            {"days": 5},
        )
    ]


@pytest.mark.parametrize("who", ["tim", "bob"])
def test_only_the_requester_asks_for_an_extension(w: Any, who: str) -> None:
    req = up(w)
    with pytest.raises(NotAllowed, match=r"^Only the requester can ask for a longer lease\.$"):
        approval.request_extension(req, getattr(w, who), 5, "please")
    assert fresh(req).extension_days_requested is None


@pytest.mark.parametrize("days", [0, -1, 24, 30])
def test_extension_days_are_bounded_by_the_teams_maximum_in_total(w: Any, days: int) -> None:
    req = up(w)  # 7 days asked, maximum 30: 23 left
    with pytest.raises(
        ValueError,
        match=r"^Ask for 1 to 23 days: the team's maximum lease is 30 days in total and this lease "
        r"already has 7\.$",
    ):
        approval.request_extension(req, w.alice, days, "please")
    assert (fresh(req).extension_days_requested, events(req)) == (None, [])
    approval.request_extension(req, w.alice, 23, "the most")
    assert fresh(req).extension_days_requested == 23


def test_one_extension_at_a_time(w: Any) -> None:
    req = up(w)
    approval.request_extension(req, w.alice, 3, "first")
    with pytest.raises(NotAllowed, match=r"^An extension is already waiting for an approver\.$"):
        approval.request_extension(fresh(req), w.alice, 4, "second")
    with pytest.raises(NotAllowed, match=r"^An extension is already waiting for an approver\.$"):
        approval.request_extension(req, w.alice, 4, "second, from a stale page")
    assert (fresh(req).extension_days_requested, fresh(req).extension_reason) == (3, "first")
    assert len(events(req)) == 1


@pytest.mark.parametrize("status", ["provisioning", "deleting", "deleted"])
def test_an_extension_needs_a_running_vm(w: Any, status: str) -> None:
    req = live_request(w, status)
    with pytest.raises(NotAllowed) as caught:
        approval.request_extension(req, w.alice, 3, "please")
    assert str(caught.value) == (
        f"Request #{req.pk} is {status}; only the lease of a running VM can be extended."
    )
    assert fresh(req).extension_days_requested is None


def test_approving_an_extension_moves_the_lease_end_and_rearms_the_warning(
    w: Any, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = up(w, lease_end=NOW + timedelta(hours=20), lease_warning_sent_at=NOW)
    approval.request_extension(req, w.alice, 5, "one more week")
    approval.decide_extension(req, w.bob, approve=True, note="ok")
    end = NOW + timedelta(days=5, hours=20)
    req = fresh(req)
    assert (req.lease_end, req.lease_warning_sent_at, req.extension_days_requested, req.extension_reason) == (
        end,
        None,
        None,
        "",
    )
    assert events(req)[-1] == (
        "extension_approve",
        "running",
        "running",
        "bob",
        "ok",
        {"days": 5, "lease_end": "2026-12-07T05:00:00+00:00"},
    )
    # The worker warns again a day before the new end.
    cluster = FakeCluster.install(monkeypatch)
    cluster.vmis[("team-quant", req.vmi_name)] = provisioning.vmi_manifest(req, A100)
    cluster.set_vmi_status("team-quant", req.vmi_name, "Running", node="p1", ip="10.0.0.7")
    clock.now = end - timedelta(hours=24)
    vmi = cluster.get_vmi("team-quant", req.vmi_name)
    assert provisioning.reconcile_request(fresh(req), vmi) == Outcome(req.pk, "lease_warning")
    assert len(mail.outbox) == 1


def test_refusing_an_extension_keeps_the_lease(w: Any) -> None:
    req = up(w, lease_warning_sent_at=NOW)
    approval.request_extension(req, w.alice, 5, "one more week")
    approval.decide_extension(req, w.bob, approve=False, note="the GPUs are booked")
    req = fresh(req)
    assert (req.lease_end, req.lease_warning_sent_at, req.extension_days_requested, req.extension_reason) == (
        NOW + timedelta(days=7),
        NOW,
        None,
        "",
    )
    assert events(req)[-1] == (
        "extension_reject",
        "running",
        "running",
        "bob",
        "the GPUs are booked",
        {"days": 5, "lease_end": "2026-12-08T09:00:00+00:00"},
    )


@pytest.mark.parametrize("who", ["alice", "frank"])
def test_only_an_approver_of_the_team_decides_an_extension(w: Any, who: str) -> None:
    req = up(w)
    approval.request_extension(req, w.alice, 5, "please")
    with pytest.raises(NotAllowed, match=r"^You are not an approver of team Quant\.$"):
        approval.decide_extension(req, getattr(w, who), approve=True)
    assert (fresh(req).extension_days_requested, fresh(req).lease_end) == (5, NOW + timedelta(days=7))


def test_deciding_without_a_pending_extension(w: Any) -> None:
    req = up(w)
    with pytest.raises(NotAllowed, match=r"^There is no lease extension waiting for a decision\.$"):
        approval.decide_extension(req, w.bob, approve=True)
    approval.request_extension(req, w.alice, 5, "please")
    VMRequest.objects.filter(pk=req.pk).update(status="deleting")  # released meanwhile
    with pytest.raises(
        NotAllowed,
        match=rf"^Request #{req.pk} is deleting; only the lease extension of a running VM can be decided\.$",
    ):
        approval.decide_extension(req, w.bob, approve=True)
    assert fresh(req).lease_end == NOW + timedelta(days=7)
    assert [e[0] for e in events(req)] == ["extension_request"]


# --- retry ------------------------------------------------------------------------------------------


def failed(w: Any) -> VMRequest:
    """alice's request that failed after its VMI was created (the reservation is freed)."""
    return live_request(
        w,
        "failed",
        reserve=False,
        failure_reason="The VM stopped (Failed): Failed",
        vmi_created_at=NOW,
        node_name="p1",
        ip_address="10.0.0.7",
    )


def test_approver_retries_a_failed_request(
    w: Any,
    clock: Clock,
    enqueued: list[Any],
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    req = failed(w)
    clock.advance(minutes=10)
    with django_capture_on_commit_callbacks(execute=True):
        placement = approval.retry(req, w.bob, "node p1 repaired")
        assert enqueued == []
    assert enqueued == [("provision", req.pk)]
    assert (placement.node, placement.resource_name) == ("p1", A100)
    req = fresh(req)
    assert (
        req.status,
        req.failure_reason,
        req.vmi_created_at,
        req.node_name,
        req.ip_address,
        req.decided_by,
        req.decided_at,
        req.decision_note,
    ) == ("approved", "", None, "", None, w.bob, clock.now, "node p1 repaired")
    assert list(
        Reservation.objects.filter(holder=req.holder.key).values_list(
            "node__name", "resource_name", "count", "vmi_namespace", "vmi_name"
        )
    ) == [("p1", A100, 1, "team-quant", req.vmi_name)]
    (event,) = events(req)
    assert event[:5] == ("retry", "failed", "approved", "bob", "node p1 repaired")
    assert event[5]["placement"] == {"fits": True, "node": "p1", "resource_name": A100}
    # The worker then provisions it again.
    cluster = FakeCluster.install(monkeypatch)
    assert provisioning.provision(req.pk) == Outcome(req.pk, "created")
    assert list(cluster.vmis) == [("team-quant", req.vmi_name)]


@pytest.mark.parametrize("who", ["alice", "frank"])
def test_only_an_approver_of_the_team_retries(w: Any, enqueued: list[Any], who: str) -> None:
    req = failed(w)
    with pytest.raises(NotAllowed, match=r"^You are not an approver of team Quant\.$"):
        approval.retry(req, getattr(w, who))
    assert (fresh(req).status, enqueued, Reservation.objects.count()) == ("failed", [], 0)


def test_retry_of_a_request_that_did_not_fail_is_refused(w: Any, enqueued: list[Any]) -> None:
    req = up(w)
    with pytest.raises(NotAllowed, match=rf"^Request #{req.pk} is running; it cannot be retried\.$"):
        approval.retry(req, w.bob)
    assert (fresh(req).status, enqueued) == ("running", [])


def test_retry_rechecks_capacity(
    w: Any, enqueued: list[Any], django_capture_on_commit_callbacks: Any
) -> None:
    req = failed(w)
    live_request(w, "approved")
    live_request(w, "provisioning")  # both A100s of p1 reserved now
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApprovalRefused) as caught:
        approval.retry(req, w.bob)
    assert str(caught.value) == "All A100 PCIe 40GB GPUs are in use or reserved right now."
    assert (fresh(req).status, enqueued) == ("failed", [])
    assert Reservation.objects.filter(holder=req.holder.key).exists() is False
