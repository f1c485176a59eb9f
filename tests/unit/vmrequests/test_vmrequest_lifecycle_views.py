"""The request page's lifecycle actions (release, terminate, ask for / decide a lease extension,
retry a failed request) per role and status, the lease card and forms on the page, provisioning
progress in the timeline, the on-commit task enqueue, and the page's query budget."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import formats, timezone

from gpuinventory.models import Reservation
from tests.vmrequest_factories import A100_PT, a100_node, request_world, ssh_public_key, stored_request
from vmrequests import approval, tasks
from vmrequests.models import GpuQuota, VMRequest

pytestmark = pytest.mark.django_db

LEASE_END = datetime(2026, 1, 17, 9, 30, tzinfo=UTC)


@pytest.fixture
def world() -> Any:
    """``request_world`` (ana, tim, apa of quant; olga, bob of research; root admin) plus one
    A100 node with one free GPU and a quota of 4 GPUs for quant."""
    w = request_world()
    a100_node("p1", allocatable=1)
    GpuQuota.objects.create(team=w.quant, max_devices=4)
    return w


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Records ``tasks.provision.delay`` / ``tasks.delete_vmi.delay`` calls instead of sending them."""
    calls: dict[str, list[int]] = {"provision": [], "delete_vmi": []}
    monkeypatch.setattr(tasks.provision, "delay", lambda pk: calls["provision"].append(pk))
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: calls["delete_vmi"].append(pk))
    return calls


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(w: Any, requester: Any = None) -> VMRequest:
    """Submit one A100 request for quant through the service (writes the submit event)."""
    spec = approval.RequestSpec(
        team=w.quant,
        mode="passthrough",
        resource_name=A100_PT,
        vgpu_type="",
        gpu_model="A100 PCIe 40GB",
        device_count=1,
        cpu_cores=4,
        memory_gib=16,
        image=w.image,
        ssh_public_key=ssh_public_key(),
        lease_days=7,
        justification="train a model",
    )
    return approval.submit(spec, requester or w.ana)


def provisioning(w: Any) -> VMRequest:
    """ana's request, approved by apa (holds p1's GPU) and taken by the worker."""
    req = submit(w)
    approval.approve(req, w.apa, "ok")
    req.start_provisioning("creating the VMI")
    return req


def running(w: Any) -> VMRequest:
    """ana's request running on p1 with lease end ``LEASE_END``."""
    req = provisioning(w)
    req.mark_running("p1", "10.0.0.5")
    VMRequest.objects.filter(pk=req.pk).update(lease_end=LEASE_END)
    req.refresh_from_db()
    return req


def extension_pending(w: Any) -> VMRequest:
    """``running`` with 3 more days asked for by ana and the expiry warning already sent."""
    req = running(w)
    VMRequest.objects.filter(pk=req.pk).update(lease_warning_sent_at=LEASE_END - timedelta(hours=24))
    approval.request_extension(req, w.ana, 3, "more training")
    req.refresh_from_db()
    return req


def failed(w: Any) -> VMRequest:
    """``provisioning`` failed by the worker (its reservation freed)."""
    req = provisioning(w)
    req.mark_failed("The image could not be pulled.")
    req.refresh_from_db()
    return req


def snapshot(req: VMRequest) -> tuple[Any, ...]:
    """The fields an action may change plus the number of events: equal before/after = untouched."""
    row = VMRequest.objects.get(pk=req.pk)
    return (
        row.status,
        row.deletion_reason,
        row.extension_days_requested,
        row.extension_reason,
        row.lease_end,
        row.lease_warning_sent_at,
        row.failure_reason,
        row.events.count(),
    )


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


def page(client: Client, req: VMRequest) -> str:
    response = client.get(f"/requests/{req.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def action_forms(html: str) -> list[str]:
    """The last path segment(s) of every POST form's action in the page's main part, in order."""
    main = html.split("<main>", 1)[1]
    actions = re.findall(r'<form class="[a-z -]+" method="post" action="/requests/\d+/([a-z/]+)/"', main)
    return actions


def facts(html: str, section: str) -> dict[str, str]:
    """``<dt>``/``<dd>`` pairs of one card, tags stripped and whitespace collapsed."""
    match = re.search(rf'<section class="card {section}">(.*?)</section>', html, re.S)
    assert match, section
    pairs = re.findall(r"<dt>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", match.group(1), re.S)
    return {dt: " ".join(re.sub(r"<[^>]+>", " ", dd).split()) for dt, dd in pairs}


def timeline(html: str) -> list[tuple[str, str]]:
    """(action, text without the time) of each timeline entry."""
    items = re.findall(
        r'<li id="event-\d+" class="event action-([a-z_]+)">(.*?)</li>\s*(?=<li id="event-|</ol>)',
        html,
        re.S,
    )
    out = []
    for action, body in items:
        body = re.sub(r"<time[^>]*>.*?</time>", "", body, flags=re.S)
        out.append((action, " ".join(re.sub(r"<[^>]+>", " ", body).split())))
    return out


def local(value: datetime) -> str:
    return formats.date_format(timezone.localtime(value), "DATETIME_FORMAT")


# --- access per role ----------------------------------------------------------------------------

#: action → (builder of the request in a status the action starts from, POST data).
SETUPS: dict[str, tuple[Any, dict[str, str]]] = {
    "release": (running, {"note": "done"}),
    "terminate": (running, {"reason": "over budget"}),
    "extend": (running, {"days": "3", "reason": "more training"}),
    "extension/approve": (extension_pending, {"note": "fine"}),
    "extension/reject": (extension_pending, {"note": "no"}),
    "retry": (failed, {"note": "again"}),
}
NOT_APPROVER = "You are not an approver of team Quant."
OWNER_RELEASES = "Only the requester can release this VM; an approver terminates it instead."

#: (action, user) → expected: "ok" (302 and changed), "404", or the policy's reason (302 back to
#: the page with it as an error message; nothing changes).
ACCESS = {
    "release": {"ana": "ok", "tim": OWNER_RELEASES, "apa": OWNER_RELEASES, "root": OWNER_RELEASES},
    "terminate": {"ana": NOT_APPROVER, "tim": NOT_APPROVER, "apa": "ok", "root": "ok"},
    "extend": {
        "ana": "ok",
        "tim": "Only the requester can ask for a longer lease.",
        "apa": "Only the requester can ask for a longer lease.",
        "root": "Only the requester can ask for a longer lease.",
    },
    "extension/approve": {"ana": NOT_APPROVER, "tim": NOT_APPROVER, "apa": "ok", "root": "ok"},
    "extension/reject": {"ana": NOT_APPROVER, "tim": NOT_APPROVER, "apa": "ok", "root": "ok"},
    "retry": {"ana": NOT_APPROVER, "tim": NOT_APPROVER, "apa": "ok", "root": "ok"},
}
for _allowed in ACCESS.values():
    _allowed.update(olga="404", bob="404")  # the other team's analyst and approver
CASES = [(action, user, outcome) for action, users in ACCESS.items() for user, outcome in users.items()]


@pytest.mark.parametrize("action", list(SETUPS))
def test_anonymous_post_is_sent_to_login(world: Any, action: str) -> None:
    build, data = SETUPS[action]
    req = build(world)
    before = snapshot(req)
    path = f"/requests/{req.pk}/{action}/"
    response = Client().post(path, data)
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={path}")
    assert snapshot(req) == before


@pytest.mark.parametrize("action", list(SETUPS))
@pytest.mark.parametrize("user", ["ana", "apa", "root"])
def test_get_on_an_action_is_405(world: Any, action: str, user: str) -> None:
    build, _ = SETUPS[action]
    req = build(world)
    response = client_for(getattr(world, user)).get(f"/requests/{req.pk}/{action}/")
    assert (response.status_code, response["Allow"]) == (405, "POST")


@pytest.mark.parametrize("action", list(SETUPS))
def test_post_without_the_csrf_token_is_403(world: Any, action: str) -> None:
    build, data = SETUPS[action]
    req = build(world)
    before = snapshot(req)
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.root)
    assert client.post(f"/requests/{req.pk}/{action}/", data).status_code == 403
    assert snapshot(req) == before


@pytest.mark.parametrize(("action", "user", "outcome"), CASES)
def test_who_may_do_what(world: Any, action: str, user: str, outcome: str) -> None:
    build, data = SETUPS[action]
    req = build(world)
    before = snapshot(req)
    response = client_for(getattr(world, user)).post(f"/requests/{req.pk}/{action}/", data)
    if outcome == "ok":
        assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
        assert [level for level, _ in messages_of(response)] == ["success"]
        assert snapshot(req) != before
        last = req.events.order_by("-created", "-pk").first()
        assert last is not None and str(last.actor) == user
    elif outcome == "404":
        assert response.status_code == 404
        assert snapshot(req) == before
    else:
        assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
        assert messages_of(response) == [("error", outcome)]
        assert snapshot(req) == before


def test_unknown_request_is_404(world: Any) -> None:
    for action, (_, data) in SETUPS.items():
        assert client_for(world.root).post(f"/requests/999999/{action}/", data).status_code == 404


# --- release -------------------------------------------------------------------------------------


def test_requester_releases_a_running_vm_and_the_vmi_deletion_is_enqueued(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    req = running(world)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.ana).post(f"/requests/{req.pk}/release/", {"note": "  finished early "})
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [("success", f"Request #{req.pk} released; the VM is being deleted.")]
    req.refresh_from_db()
    assert (req.status, req.deletion_reason) == ("deleting", "released")
    event = req.events.get(action="start_deletion")
    assert (str(event.actor), event.actor_label, event.from_status, event.to_status, event.message) == (
        "ana",
        "",
        "running",
        "deleting",
        "finished early",
    )
    assert enqueued == {"provision": [], "delete_vmi": [req.pk]}


def test_requester_releases_a_provisioning_vm_without_a_note(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    req = provisioning(world)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.ana).post(f"/requests/{req.pk}/release/")
    assert messages_of(response) == [("success", f"Request #{req.pk} released; the VM is being deleted.")]
    event = req.events.get(action="start_deletion")
    assert (str(event.actor), event.from_status, event.message) == (
        "ana",
        "provisioning",
        "released by the requester",
    )
    assert enqueued == {"provision": [], "delete_vmi": [req.pk]}


@pytest.mark.parametrize(
    ("build", "status"),
    [(submit, "submitted"), (failed, "failed")],
)
def test_release_in_a_wrong_status_is_a_warning_and_changes_nothing(
    world: Any,
    build: Any,
    status: str,
    enqueued: dict[str, list[int]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    req = build(world)
    before = snapshot(req)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.ana).post(f"/requests/{req.pk}/release/")
    assert response.status_code == 302
    assert messages_of(response) == [("warning", f"Request #{req.pk} is {status}; it cannot be deleted.")]
    assert snapshot(req) == before
    assert enqueued == {"provision": [], "delete_vmi": []}


def test_second_release_is_a_warning(world: Any) -> None:
    req = running(world)
    client_for(world.ana).post(f"/requests/{req.pk}/release/")
    before = snapshot(req)
    response = client_for(world.ana).post(f"/requests/{req.pk}/release/")
    assert messages_of(response) == [("warning", f"Request #{req.pk} is deleting; it cannot be deleted.")]
    assert snapshot(req) == before
    assert req.events.filter(action="start_deletion").count() == 1


def test_release_redirects_to_a_safe_next_only(world: Any) -> None:
    req = running(world)
    client = client_for(world.ana)
    response = client.post(f"/requests/{req.pk}/release/", {"next": "https://evil.example/x"})
    assert response["Location"] == f"/requests/{req.pk}/"
    response = client.post(f"/requests/{req.pk}/release/", {"next": "/requests/mine/"})  # a warning now
    assert response["Location"] == "/requests/mine/"


# --- terminate -----------------------------------------------------------------------------------


def test_approver_terminates_with_a_reason(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    req = running(world)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.apa).post(f"/requests/{req.pk}/terminate/", {"reason": " over budget "})
    assert messages_of(response) == [("success", f"Request #{req.pk} terminated; the VM is being deleted.")]
    req.refresh_from_db()
    assert (req.status, req.deletion_reason) == ("deleting", "terminated")
    event = req.events.get(action="start_deletion")
    assert (str(event.actor), event.from_status, event.to_status, event.message) == (
        "apa",
        "running",
        "deleting",
        "over budget",
    )
    assert enqueued == {"provision": [], "delete_vmi": [req.pk]}


@pytest.mark.parametrize("data", [{}, {"reason": ""}, {"reason": "   "}])
def test_terminate_without_a_reason_is_an_error_and_changes_nothing(
    world: Any,
    data: dict[str, str],
    enqueued: dict[str, list[int]],
    django_capture_on_commit_callbacks: Any,
) -> None:
    req = running(world)
    before = snapshot(req)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.apa).post(f"/requests/{req.pk}/terminate/", data)
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [("error", f"Request #{req.pk} was not terminated: give a reason.")]
    assert snapshot(req) == before
    assert enqueued == {"provision": [], "delete_vmi": []}


def test_terminate_of_a_submitted_request_is_a_warning(world: Any) -> None:
    req = submit(world)
    before = snapshot(req)
    response = client_for(world.apa).post(f"/requests/{req.pk}/terminate/", {"reason": "no"})
    assert messages_of(response) == [("warning", f"Request #{req.pk} is submitted; it cannot be deleted.")]
    assert snapshot(req) == before


# --- lease extension ----------------------------------------------------------------------------


def test_requester_asks_for_an_extension(world: Any) -> None:
    req = running(world)
    response = client_for(world.ana).post(
        f"/requests/{req.pk}/extend/", {"days": " 3 ", "reason": " more training "}
    )
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [
        ("success", f"Request #{req.pk}: 3 more days asked for; an approver decides.")
    ]
    req.refresh_from_db()
    assert (req.status, req.extension_days_requested, req.extension_reason, req.lease_end) == (
        "running",
        3,
        "more training",
        LEASE_END,
    )
    event = req.events.get(action="extension_request")
    assert (str(event.actor), event.from_status, event.to_status, event.message, event.data) == (
        "ana",
        "running",
        "running",
        "more training",
        {"days": 3},
    )


@pytest.mark.parametrize("days", ["0", "-2", "31", "abc", "", "2.5"])
def test_extension_with_a_bad_number_of_days_is_an_error_and_changes_nothing(world: Any, days: str) -> None:
    req = running(world)
    before = snapshot(req)
    response = client_for(world.ana).post(f"/requests/{req.pk}/extend/", {"days": days, "reason": "x"})
    assert response.status_code == 302
    assert messages_of(response) == [
        (
            "error",
            f"Request #{req.pk}: no extension requested. Ask for 1 to 23 days: the team's maximum "
            "lease is 30 days in total and this lease already has 7.",
        )
    ]
    assert snapshot(req) == before


def test_extension_up_to_the_team_maximum_in_total_is_accepted(world: Any) -> None:
    world.quant.max_lease_days = 10
    world.quant.save()
    req = running(world)  # 7 days asked: 3 left
    response = client_for(world.ana).post(f"/requests/{req.pk}/extend/", {"days": "4"})
    assert messages_of(response) == [
        (
            "error",
            f"Request #{req.pk}: no extension requested. Ask for 1 to 3 days: the team's maximum "
            "lease is 10 days in total and this lease already has 7.",
        )
    ]
    response = client_for(world.ana).post(f"/requests/{req.pk}/extend/", {"days": "3"})
    assert messages_of(response) == [
        ("success", f"Request #{req.pk}: 3 more days asked for; an approver decides.")
    ]
    assert VMRequest.objects.get(pk=req.pk).extension_days_requested == 3


def test_second_extension_while_one_is_pending_is_an_error(world: Any) -> None:
    req = extension_pending(world)
    before = snapshot(req)
    response = client_for(world.ana).post(f"/requests/{req.pk}/extend/", {"days": "5", "reason": "more"})
    assert messages_of(response) == [
        (
            "warning",
            f"Request #{req.pk}: no extension requested. An extension is already waiting for an approver.",
        )
    ]
    assert snapshot(req) == before
    assert VMRequest.objects.get(pk=req.pk).extension_days_requested == 3


@pytest.mark.parametrize(("build", "status"), [(submit, "submitted"), (provisioning, "provisioning")])
def test_extension_of_a_vm_that_is_not_running_is_a_warning(world: Any, build: Any, status: str) -> None:
    req = build(world)
    before = snapshot(req)
    response = client_for(world.ana).post(f"/requests/{req.pk}/extend/", {"days": "3", "reason": "x"})
    assert messages_of(response) == [
        ("warning", f"Request #{req.pk} is {status}; only the lease of a running VM can be extended.")
    ]
    assert snapshot(req) == before


def test_approver_grants_the_extension(world: Any) -> None:
    req = extension_pending(world)
    response = client_for(world.apa).post(f"/requests/{req.pk}/extension/approve/", {"note": " fine "})
    new_end = LEASE_END + timedelta(days=3)
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [
        ("success", f"Request #{req.pk}: lease extended by 3 days, to {local(new_end)} UTC.")
    ]
    req.refresh_from_db()
    assert (
        req.status,
        req.lease_end,
        req.lease_warning_sent_at,
        req.extension_days_requested,
        req.extension_reason,
    ) == ("running", new_end, None, None, "")
    event = req.events.get(action="extension_approve")
    assert (str(event.actor), event.from_status, event.to_status, event.message, event.data) == (
        "apa",
        "running",
        "running",
        "fine",
        {"days": 3, "lease_end": "2026-01-20T09:30:00+00:00"},
    )


def test_approver_refuses_the_extension(world: Any) -> None:
    req = extension_pending(world)
    response = client_for(world.root).post(f"/requests/{req.pk}/extension/reject/", {"note": "not now"})
    assert messages_of(response) == [("success", f"Request #{req.pk}: lease extension refused.")]
    req.refresh_from_db()
    assert (
        req.lease_end,
        req.lease_warning_sent_at,
        req.extension_days_requested,
        req.extension_reason,
    ) == (LEASE_END, LEASE_END - timedelta(hours=24), None, "")
    event = req.events.get(action="extension_reject")
    assert (str(event.actor), event.message, event.data) == (
        "root",
        "not now",
        {"days": 3, "lease_end": "2026-01-17T09:30:00+00:00"},
    )


@pytest.mark.parametrize("action", ["extension/approve", "extension/reject"])
def test_deciding_when_no_extension_is_pending_is_an_error(world: Any, action: str) -> None:
    req = running(world)
    before = snapshot(req)
    response = client_for(world.apa).post(f"/requests/{req.pk}/{action}/")
    assert messages_of(response) == [
        ("warning", f"Request #{req.pk}: There is no lease extension waiting for a decision.")
    ]
    assert snapshot(req) == before


def test_second_decision_on_the_same_extension_is_an_error(world: Any) -> None:
    req = extension_pending(world)
    client_for(world.apa).post(f"/requests/{req.pk}/extension/approve/")
    before = snapshot(req)
    response = client_for(world.root).post(f"/requests/{req.pk}/extension/approve/")
    assert messages_of(response) == [
        ("warning", f"Request #{req.pk}: There is no lease extension waiting for a decision.")
    ]
    assert snapshot(req) == before
    assert VMRequest.objects.get(pk=req.pk).lease_end == LEASE_END + timedelta(days=3)


# --- retry ---------------------------------------------------------------------------------------


def test_retry_of_a_failed_request_reserves_again_and_enqueues_provisioning(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    req = failed(world)
    assert Reservation.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.apa).post(f"/requests/{req.pk}/retry/", {"note": " image fixed "})
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [
        ("success", f"Request #{req.pk} approved again. Runs now on p1 (1 free there).")
    ]
    req.refresh_from_db()
    assert (req.status, req.failure_reason, str(req.decided_by), req.decision_note) == (
        "approved",
        "",
        "apa",
        "image fixed",
    )
    event = req.events.get(action="retry")
    assert (str(event.actor), event.from_status, event.to_status, event.message, event.data) == (
        "apa",
        "failed",
        "approved",
        "image fixed",
        {
            "placement": {"fits": True, "node": "p1", "resource_name": A100_PT},
            "quotas": ["any GPU: 0 of 4 used, 1 after approval"],
        },
    )
    assert list(Reservation.objects.values_list("holder", "node__name", "resource_name", "count")) == [
        (f"vmrequest:{req.pk}", "p1", A100_PT, 1)
    ]
    assert enqueued == {"provision": [req.pk], "delete_vmi": []}


def test_retry_is_refused_with_the_plain_reason_when_the_gpu_is_taken(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    req = failed(world)
    other = submit(world, world.tim)
    approval.approve(other, world.apa)  # holds p1's only GPU now
    before = snapshot(req)
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(world.apa).post(f"/requests/{req.pk}/retry/")
    assert messages_of(response) == [
        (
            "error",
            f"Request #{req.pk} was not retried: All A100 PCIe 40GB GPUs are in use or reserved right now.",
        )
    ]
    assert snapshot(req) == before
    assert list(Reservation.objects.values_list("holder", flat=True)) == [f"vmrequest:{other.pk}"]
    assert enqueued == {"provision": [], "delete_vmi": []}


@pytest.mark.parametrize(("build", "status"), [(running, "running"), (submit, "submitted")])
def test_retry_of_a_request_that_has_not_failed_is_a_warning(world: Any, build: Any, status: str) -> None:
    req = build(world)
    before = snapshot(req)
    reservations = Reservation.objects.count()
    response = client_for(world.apa).post(f"/requests/{req.pk}/retry/")
    assert messages_of(response) == [("warning", f"Request #{req.pk} is {status}; it cannot be retried.")]
    assert snapshot(req) == before
    assert Reservation.objects.count() == reservations


# --- what the page offers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "user", "expected"),
    [
        (provisioning, "ana", ["release"]),
        (provisioning, "tim", []),
        (provisioning, "apa", ["terminate"]),
        (running, "ana", ["extend", "release"]),
        (running, "tim", []),
        (running, "apa", ["terminate"]),
        (running, "root", ["terminate"]),
        (extension_pending, "ana", ["release"]),
        (extension_pending, "apa", ["extension/approve", "extension/reject", "terminate"]),
        (failed, "ana", []),
        (failed, "tim", []),
        (failed, "apa", ["retry"]),
        (failed, "root", ["retry"]),
        (submit, "ana", ["cancel"]),
        (submit, "apa", ["approve", "reject", "cancel"]),
    ],
)
def test_forms_offered_by_status_and_role(world: Any, build: Any, user: str, expected: list[str]) -> None:
    req = build(world)
    assert action_forms(page(client_for(getattr(world, user)), req)) == expected


def test_nothing_is_offered_once_deleting(world: Any) -> None:
    req = running(world)
    approval.release(req, world.ana)
    html = page(client_for(world.apa), req)
    assert action_forms(html) == []
    assert (
        '<p class="progress-now" role="status">The VM is being deleted (released by the requester); '
        "the request is closed once the VMI is gone.</p>"
    ) in html
    assert '<section class="card lease">' not in html


def test_release_and_terminate_buttons_say_what_happens(world: Any) -> None:
    req = running(world)
    mine = page(client_for(world.ana), req)
    assert (
        '<button type="submit" class="release">Release: I am done, delete my VM (its disk is lost)</button>'
        in mine
    )
    assert "Terminate" not in mine
    html = page(client_for(world.apa), req)
    assert "Release:" not in html
    assert (
        '<button type="submit" class="danger forced">Terminate: force-stop and delete this VM</button>'
        in html
    )
    assert (
        '<p class="warning">Forced stop: the VM of ana is deleted now, before its lease ends. '
        "They are mailed your reason.</p>"
    ) in html
    assert (
        f'<textarea id="terminate-reason-{req.pk}" name="reason" rows="2" maxlength="2000" required></textarea>'
        in html
    )
    assert f'<input type="hidden" name="next" value="/requests/{req.pk}/">' in html
    assert "<script>" not in html.split("<main>", 1)[1] and " style=" not in html


def test_lease_card_of_a_running_vm(world: Any) -> None:
    req = running(world)
    end = timezone.now() + timedelta(days=3, minutes=90)
    VMRequest.objects.filter(pk=req.pk).update(lease_end=end)
    html = page(client_for(world.ana), req)
    assert facts(html, "lease") == {
        "Ends": f"{local(end)} UTC (in 3 days, 1 hour)",
        "Length": "7 days in total: 7 days asked for, 0 days granted by extensions. "
        "The team's maximum is 30 days in total; 23 days left to extend.",
        "Expiry warning": "not sent yet; it goes out 24 hours before the end",
    }
    assert (
        f'<input type="number" id="extend-days-{req.pk}" name="days" min="1" max="23" step="1" value="1" required>'
        in html
    )
    assert "More days (1 to 23)" in html
    past = timezone.now() - timedelta(hours=1)  # the worker has not expired it yet
    VMRequest.objects.filter(pk=req.pk).update(lease_end=past)
    assert facts(page(client_for(world.ana), req), "lease")["Ends"] == (
        f"{local(past)} UTC (over; the VM is deleted shortly)"
    )


@pytest.mark.parametrize(
    ("hours", "text"),
    [(1, "not sent yet; it goes out 1 hour before the end"), (0, "none is sent (turned off)")],
)
def test_lease_card_follows_the_warning_setting(world: Any, settings: Any, hours: int, text: str) -> None:
    settings.PORTAL_LEASE_WARNING_HOURS = hours
    req = running(world)
    assert facts(page(client_for(world.ana), req), "lease")["Expiry warning"] == text


def test_lease_card_with_the_warning_sent_and_an_extension_pending(world: Any) -> None:
    req = extension_pending(world)
    html = page(client_for(world.apa), req)
    lease = facts(html, "lease")
    assert lease["Expiry warning"] == f"sent {local(LEASE_END - timedelta(hours=24))} UTC"
    assert lease["Extension asked for"] == (
        f"3 more days: more training waiting for an approver; granted, the lease ends "
        f"{local(LEASE_END + timedelta(days=3))} UTC"
    )
    assert (
        f'<button type="submit" class="primary">Extend by 3 days, to {local(LEASE_END + timedelta(days=3))} UTC</button>'
        in html
    )
    assert '<button type="submit" class="danger">Refuse the extension</button>' in html


def test_no_lease_card_before_running(world: Any) -> None:
    assert '<section class="card lease">' not in page(client_for(world.ana), provisioning(world))


def test_failed_request_shows_the_reason_and_what_a_retry_would_do(world: Any) -> None:
    req = failed(world)
    html = page(client_for(world.apa), req)
    assert '<p class="error failure">Provisioning failed: The image could not be pulled.</p>' in html
    assert "Runs now on p1 (1 free there)." in html
    assert "any GPU: 0 of 4 used, 1 after approval" in html
    html = page(client_for(world.ana), req)
    assert '<p class="error failure">Provisioning failed: The image could not be pulled.</p>' in html
    assert "Where it would run" not in html


def test_running_vm_still_shows_how_to_connect(world: Any) -> None:
    req = running(world)
    html = page(client_for(world.ana), req)
    commands = re.search(
        r'<pre class="commands connect"><code id="connect-commands">(.*?)</code></pre>', html, re.S
    )
    assert commands is not None
    assert commands.group(1).splitlines() == [
        f"virtctl ssh analyst@vmi/ana-vm-{req.pk} -n team-quant",
        f"virtctl console ana-vm-{req.pk} -n team-quant",
    ]


# --- provisioning progress in the timeline -------------------------------------------------------


def progress_events(req: VMRequest) -> None:
    """The steps ``vmrequests.provisioning`` records for a re-profiled vGPU VM, then its failure."""
    req.record(
        "progress",
        "Set nvidia.com/vgpu.config on node v2 from (default) to T4-16Q; waiting for the vGPU Device Manager.",
        actor_label="worker",
        data={"node": "v2", "from": "", "to": "T4-16Q"},
    )
    req.record(
        "progress",
        "Node v2 now offers 2 × nvidia.com/GRID_T4-16Q.",
        actor_label="worker",
        data={"node": "v2", "resource": "nvidia.com/GRID_T4-16Q", "allocatable": 2},
    )
    req.record(
        "progress",
        "Created VirtualMachineInstance team-quant/vm-1.",
        actor_label="worker",
        data={"vmi": "team-quant/vm-1", "resource": "nvidia.com/GRID_T4-16Q", "pinned_to": "v2"},
    )


def test_progress_events_read_well(world: Any) -> None:
    req = provisioning(world)
    progress_events(req)
    req.mark_failed(
        "Timed out waiting for a node (15.0 min); the VMI was deleted so it does not hold a place.",
        data={"phase": "Scheduling", "scheduler": "0/3 nodes are available: 3 Insufficient nvidia.com/x."},
    )
    html = page(client_for(world.ana), req)
    assert timeline(html)[-4:] == [
        (
            "progress",
            "provisioning step by worker Set nvidia.com/vgpu.config on node v2 from (default) to T4-16Q; waiting for "
            "the vGPU Device Manager. Node: v2 vGPU config: (default) → T4-16Q",
        ),
        (
            "progress",
            "provisioning step by worker Node v2 now offers 2 × nvidia.com/GRID_T4-16Q. Node: v2 "
            "Now offers: 2 × nvidia.com/GRID_T4-16Q",
        ),
        (
            "progress",
            "provisioning step by worker Created VirtualMachineInstance team-quant/vm-1. VMI: team-quant/vm-1 "
            "GPU resource: nvidia.com/GRID_T4-16Q Pinned to node v2 (where its devices were reserved).",
        ),
        (
            "mark_failed",
            "failed by worker provisioning → failed Timed out waiting for a node (15.0 min); the VMI was "
            "deleted so it does not hold a place. VMI phase: Scheduling "
            "Scheduler: 0/3 nodes are available: 3 Insufficient nvidia.com/x.",
        ),
    ]


def test_re_profile_failure_details(world: Any) -> None:
    req = provisioning(world)
    req.mark_failed(
        "Re-profiling node v2 failed.",
        data={"node": "v2", "state": "failed", "restored": True, "restore": "default"},
    )
    html = page(client_for(world.ana), req)
    assert timeline(html)[-1] == (
        "mark_failed",
        "failed by worker provisioning → failed Re-profiling node v2 failed. Node: v2 "
        "vGPU Device Manager state: failed Config default put back.",
    )


def test_the_latest_step_is_shown_while_provisioning(world: Any) -> None:
    req = provisioning(world)
    progress_events(req)
    last = req.events.filter(action="progress").order_by("-created", "-pk").first()
    assert last is not None
    html = page(client_for(world.tim), req)
    when = formats.time_format(timezone.localtime(last.created), "TIME_FORMAT")
    assert (
        f'<p class="progress-now" role="status">Latest step ({when} UTC): '
        "Created VirtualMachineInstance team-quant/vm-1.</p>"
    ) in html


def test_extension_events_in_the_timeline(world: Any) -> None:
    req = extension_pending(world)
    approval.decide_extension(req, world.apa, approve=True, note="fine")
    html = page(client_for(world.ana), req)
    assert timeline(html)[-2:] == [
        ("extension_request", "lease extension requested by ana more training 3 more days asked for."),
        (
            "extension_approve",
            "lease extension approved by apa fine Extended by 3 days; the lease now ends "
            f"{local(LEASE_END + timedelta(days=3))} UTC.",
        ),
    ]


# --- query budget -------------------------------------------------------------------------------


def count_queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as context:
        assert client.get(path).status_code == 200
    return len(context.captured_queries)


def one_event_request(w: Any, kind: str) -> VMRequest:
    """A request of ana written directly with ONE event: ``running`` (extension of 3 days pending,
    warning sent) or ``failed``."""
    by_kind: dict[str, dict[str, Any]] = {
        "running": {
            "status": "running",
            "node_name": "p1",
            "ip_address": "10.0.0.5",
            "lease_end": LEASE_END,
            "lease_warning_sent_at": LEASE_END - timedelta(hours=24),
            "extension_days_requested": 3,
            "extension_reason": "more training",
        },
        "failed": {"status": "failed", "failure_reason": "The image could not be pulled."},
    }
    req = stored_request(w.quant, w.ana, w.image, **by_kind[kind])
    req.record("progress", "Created VirtualMachineInstance.", actor_label="worker", data={"vmi": "x/y"})
    return req


@pytest.mark.parametrize(
    ("kind", "user", "budget"),
    [
        ("running", "ana", 6),
        ("running", "tim", 6),
        ("running", "apa", 7),
        ("running", "root", 5),
        ("failed", "apa", 11),
    ],
)
def test_page_query_budget_does_not_grow_with_events(
    world: Any, kind: str, user: str, budget: int, django_assert_max_num_queries: Any
) -> None:
    req = one_event_request(world, kind)
    client = client_for(getattr(world, user))
    path = f"/requests/{req.pk}/"
    one = count_queries(client, path)
    for index in range(29):
        if index % 3 == 0:
            req.record("progress", f"step {index}", actor_label="worker", data={"node": "p1", "to": "T4-8Q"})
        elif index % 3 == 1:
            req.record("extension_request", f"ask {index}", actor=world.ana, data={"days": 2})
        else:
            req.record("note", f"note {index}", actor=world.tim if index % 2 else world.apa)
    assert req.events.count() == 30
    assert count_queries(client, path) == one
    with django_assert_max_num_queries(budget):
        client.get(path)
