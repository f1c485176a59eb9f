"""VM request models: the status machine, its audit events, constraints and visibility."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuinventory.models import Reservation
from tests.factories import portal_user, stored_node
from vmrequests.choices import ACTION_VERB, TERMINAL_STATES, TRANSITIONS, EventAction, VMRequestStatus
from vmrequests.models import (
    AutoApprovalRule,
    GpuQuota,
    Team,
    TransitionError,
    VmImage,
    VMRequest,
    VMRequestEvent,
    request_transitioned,
    vmi_name_for,
)

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
S = VMRequestStatus


def make_team(slug: str = "quant", **fields: Any) -> Team:
    fields.setdefault("namespace", f"team-{slug}")
    return Team.objects.create(name=slug.title(), slug=slug, **fields)


def make_image() -> VmImage:
    return VmImage.objects.get_or_create(
        name="Ubuntu 22.04",
        defaults={
            "image": "quay.io/containerdisks/ubuntu:22.04",
            "os": "Ubuntu 22.04",
            "login_user": "ubuntu",
        },
    )[0]


def make_request(team: Team, requester: Any, status: str = S.SUBMITTED, **fields: Any) -> VMRequest:
    """A request row in ``status`` built directly (the approval service is tested elsewhere)."""
    values: dict[str, Any] = {
        "mode": "vgpu",
        "resource_name": "nvidia.com/GRID_T4-8Q",
        "vgpu_type": "T4-8Q",
        "gpu_model": "Tesla T4",
        "device_count": 1,
        "cpu_cores": 4,
        "memory_gib": 16,
        "image": make_image(),
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq test",
        "lease_days": 7,
        "justification": "train a model",
        "vmi_namespace": team.namespace,
        "status": status,
    }
    values.update(fields)
    req = VMRequest.objects.create(requester=requester, team=team, **values)
    if not req.vmi_name:
        req.vmi_name = vmi_name_for(req.pk, requester.get_username())
        req.save(update_fields=["vmi_name"])
    return req


def row(req: VMRequest) -> dict[str, Any]:
    return dict(VMRequest.objects.filter(pk=req.pk).values().get())


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> datetime:
    monkeypatch.setattr(timezone, "now", lambda: NOW)
    return NOW


@pytest.fixture
def people() -> dict[str, Any]:
    team = make_team()
    requester = portal_user("analyst", "alice")
    approver = portal_user("approver", "bob")
    team.members.add(requester, approver)
    team.approvers.add(approver)
    rule = AutoApprovalRule.objects.create(
        team=team, mode="vgpu", max_devices=1, max_vgpu_framebuffer_gb=Decimal("8")
    )
    return {"team": team, "requester": requester, "approver": approver, "rule": rule}


# --- the transition table -------------------------------------------------------------------

LEGAL = [
    ("approve", S.SUBMITTED),
    ("auto_approve", S.SUBMITTED),
    ("reject", S.SUBMITTED),
    ("cancel", S.SUBMITTED),
    ("cancel", S.APPROVED),
    ("start_provisioning", S.APPROVED),
    ("mark_running", S.PROVISIONING),
    ("mark_failed", S.PROVISIONING),
    ("mark_failed", S.RUNNING),
    ("start_deletion", S.PROVISIONING),
    ("start_deletion", S.RUNNING),
    ("mark_deleted", S.DELETING),
    ("mark_deleted", S.RUNNING),
    ("retry", S.FAILED),
]
ILLEGAL = [(a, s) for a in TRANSITIONS for s in S.values if (a, s) not in LEGAL]


def test_the_legal_list_is_the_transition_table() -> None:
    assert sorted(LEGAL) == sorted((str(a), str(s)) for a, (froms, _to) in TRANSITIONS.items() for s in froms)
    assert len(ILLEGAL) == 10 * 9 - 14


def perform(action: str, req: VMRequest, p: dict[str, Any]) -> VMRequestEvent:
    """Run ``action`` on ``req`` the way the services do."""
    calls: dict[str, Callable[[], VMRequestEvent]] = {
        "approve": lambda: req.approve(p["approver"], "ok by me", data={"placement": {"node": "v1"}}),
        "auto_approve": lambda: req.approve_by_policy(p["rule"], data={"quotas": ["any GPU: 0 of 4 used"]}),
        "reject": lambda: req.reject(p["approver"], "no budget this month"),
        "cancel": lambda: req.cancel(p["requester"], "changed my mind"),
        "start_provisioning": lambda: req.start_provisioning("worker took it"),
        "mark_running": lambda: req.mark_running("gpu-node-01", "10.244.1.7", "VMI is running"),
        "mark_failed": lambda: req.mark_failed(
            "the launcher pod never started", data={"phase": "Scheduling"}
        ),
        "start_deletion": lambda: req.start_deletion("terminated", by=p["approver"]),
        "mark_deleted": lambda: req.mark_deleted("deleted_outside", "the VMI is gone"),
        "retry": lambda: req.retry(
            p["approver"], "quota freed, try again", data={"placement": {"node": "v2"}}
        ),
    }
    return calls[action]()


RULE_NOTE = "Auto-approved by rule: vGPU (GPU slice) up to 1 device(s), ≤ 8 GB"

#: action → (actor key or None, actor_label, message, data (rule_id added for auto_approve), fields).
EXPECTED: dict[str, tuple[str | None, str, str, dict[str, Any], dict[str, Any]]] = {
    "approve": (
        "approver",
        "",
        "ok by me",
        {"placement": {"node": "v1"}},
        {
            "decided_by_id": "approver",
            "decided_at": NOW,
            "decision_note": "ok by me",
            "decided_by_policy": False,
        },
    ),
    "auto_approve": (
        None,
        "policy",
        RULE_NOTE,
        {"quotas": ["any GPU: 0 of 4 used"]},
        {"decided_by_id": None, "decided_at": NOW, "decision_note": RULE_NOTE, "decided_by_policy": True},
    ),
    "reject": (
        "approver",
        "",
        "no budget this month",
        {},
        {"decided_by_id": "approver", "decided_at": NOW, "decision_note": "no budget this month"},
    ),
    "cancel": ("requester", "", "changed my mind", {}, {"decided_by_id": None, "decided_at": None}),
    "start_provisioning": (None, "worker", "worker took it", {}, {"node_name": "", "lease_end": None}),
    "mark_running": (
        None,
        "worker",
        "VMI is running",
        {"node": "gpu-node-01", "ip": "10.244.1.7"},
        {"node_name": "gpu-node-01", "ip_address": "10.244.1.7", "lease_end": NOW + timedelta(days=7)},
    ),
    "mark_failed": (
        None,
        "worker",
        "the launcher pod never started",
        {"phase": "Scheduling"},
        {"failure_reason": "the launcher pod never started"},
    ),
    "start_deletion": (
        "approver",
        "",
        "terminated by an approver",
        {},
        {"deletion_reason": "terminated"},
    ),
    "mark_deleted": (None, "worker", "the VMI is gone", {}, {"deletion_reason": "deleted_outside"}),
    "retry": (
        "approver",
        "",
        "quota freed, try again",
        {"placement": {"node": "v2"}},
        {
            "decided_by_id": "approver",
            "decided_at": NOW,
            "decision_note": "quota freed, try again",
            "failure_reason": "",
            "vmi_created_at": None,
        },
    ),
}


@pytest.mark.parametrize(("action", "from_status"), LEGAL)
def test_legal_transition_writes_one_event_and_its_fields(
    frozen: datetime, people: dict[str, Any], action: str, from_status: str
) -> None:
    req = make_request(people["team"], people["requester"], from_status)
    node = stored_node("v1", "vm-vgpu")
    Reservation.objects.create(
        node=node,
        resource_name=req.resource_name,
        vgpu_type="T4-8Q",
        count=1,
        holder=req.holder.key,
        vmi_namespace=req.vmi_namespace,
        vmi_name=req.vmi_name,
    )
    other = make_request(people["team"], people["requester"], S.APPROVED, vmi_name="other-vm")
    Reservation.objects.create(
        node=node,
        resource_name=req.resource_name,
        vgpu_type="T4-8Q",
        count=1,
        holder=other.holder.key,
        vmi_namespace=other.vmi_namespace,
        vmi_name=other.vmi_name,
    )

    event = perform(action, req, people)

    to_status = TRANSITIONS[action][1]
    actor_key, label, message, data, fields = EXPECTED[action]
    if action == "auto_approve":
        data = {**data, "rule_id": people["rule"].pk}
    assert list(
        VMRequestEvent.objects.filter(request=req).values_list(
            "action", "from_status", "to_status", "actor_id", "actor_label", "message", "data"
        )
    ) == [
        (
            action,
            from_status,
            to_status,
            people[actor_key].pk if actor_key else None,
            label,
            message,
            data,
        )
    ]
    assert event.pk == VMRequestEvent.objects.get(request=req).pk
    stored = row(req)
    assert stored["status"] == to_status
    assert stored["updated"] == NOW
    expected_fields = {k: (people[v].pk if k == "decided_by_id" and v else v) for k, v in fields.items()}
    assert {k: stored[k] for k in expected_fields} == expected_fields
    assert req.status == to_status  # the in-memory object follows
    # Reaching a terminal state frees the request's reservation, and only its own.
    assert sorted(Reservation.objects.values_list("holder", flat=True)) == sorted(
        [other.holder.key] if to_status in TERMINAL_STATES else [req.holder.key, other.holder.key]
    )


def test_start_deletion_by_the_worker_and_mark_deleted_keeps_the_reason(
    frozen: datetime, people: dict[str, Any]
) -> None:
    req = make_request(people["team"], people["requester"], S.RUNNING)
    req.start_deletion("expired")
    req.mark_deleted()
    assert list(
        req.events.values_list("action", "from_status", "to_status", "actor_id", "actor_label", "message")
    ) == [
        ("start_deletion", "running", "deleting", None, "worker", "lease expired"),
        ("mark_deleted", "deleting", "deleted", None, "worker", ""),
    ]
    assert (row(req)["status"], row(req)["deletion_reason"]) == ("deleted", "expired")


@pytest.mark.parametrize(("action", "from_status"), ILLEGAL)
def test_illegal_transition_is_refused_and_writes_nothing(
    people: dict[str, Any], action: str, from_status: str
) -> None:
    req = make_request(people["team"], people["requester"], from_status)
    before = row(req)
    with pytest.raises(TransitionError) as exc:
        perform(action, req, people)
    assert str(exc.value) == (
        f"Request #{req.pk} is {S(from_status).label}; it cannot be {ACTION_VERB[EventAction(action)]}."
    )
    assert (exc.value.request_id, exc.value.action, exc.value.current) == (req.pk, action, from_status)
    assert row(req) == before
    assert VMRequestEvent.objects.count() == 0


def test_illegal_transition_message_examples(people: dict[str, Any]) -> None:
    req = make_request(people["team"], people["requester"], S.RUNNING)
    with pytest.raises(TransitionError, match=r"^Request #\d+ is running; it cannot be approved\.$"):
        req.approve(people["approver"])
    req = make_request(people["team"], people["requester"], S.REJECTED, vmi_name="x-vm")
    with pytest.raises(TransitionError, match=r"^Request #\d+ is rejected; it cannot be cancelled\.$"):
        req.cancel(people["requester"])


def test_reject_needs_a_reason(people: dict[str, Any]) -> None:
    req = make_request(people["team"], people["requester"])
    before = row(req)
    with pytest.raises(ValueError, match="a rejection needs a reason"):
        req.reject(people["approver"], "   ")
    assert row(req) == before
    assert VMRequestEvent.objects.count() == 0


#: from status → how another actor moves the row first, and the status it then has.
RIVAL: dict[str, tuple[Callable[[VMRequest, dict[str, Any]], Any], str]] = {
    S.SUBMITTED: (lambda r, p: r.cancel(p["requester"]), S.CANCELLED),
    S.APPROVED: (lambda r, p: r.cancel(p["approver"]), S.CANCELLED),
    S.PROVISIONING: (lambda r, p: r.mark_failed("node lost"), S.FAILED),
    S.RUNNING: (lambda r, p: r.mark_failed("node lost"), S.FAILED),
    S.DELETING: (lambda r, p: r.mark_deleted(), S.DELETED),
    S.FAILED: (lambda r, p: r.retry(p["approver"]), S.APPROVED),
}


@pytest.mark.parametrize(("action", "from_status"), LEGAL)
def test_stale_object_loses_the_race(people: dict[str, Any], action: str, from_status: str) -> None:
    stale = make_request(people["team"], people["requester"], from_status)
    rival, rival_status = RIVAL[from_status]
    rival(VMRequest.objects.get(pk=stale.pk), people)
    before = row(stale)
    assert stale.status == from_status  # still believes it may act
    with pytest.raises(TransitionError) as exc:
        perform(action, stale, people)
    assert exc.value.current == rival_status
    assert row(stale) == before
    assert list(stale.events.values_list("action", flat=True)) == [
        {"submitted": "cancel", "approved": "cancel", "deleting": "mark_deleted", "failed": "retry"}.get(
            from_status, "mark_failed"
        )
    ]


def test_second_approval_of_the_same_request_loses(people: dict[str, Any]) -> None:
    first = make_request(people["team"], people["requester"])
    second = VMRequest.objects.get(pk=first.pk)
    first.approve(people["approver"], "first")
    with pytest.raises(TransitionError, match=r"is approved; it cannot be approved\.$"):
        second.approve(people["approver"], "second")
    assert list(first.events.values_list("message", flat=True)) == ["first"]
    assert row(first)["decision_note"] == "first"


# --- the timeline is append-only -------------------------------------------------------------


def test_events_are_append_only(people: dict[str, Any]) -> None:
    req = make_request(people["team"], people["requester"])
    event = req.cancel(people["requester"], "oops")
    event.message = "rewritten"
    with pytest.raises(ValueError, match="request events are append-only"):
        event.save()
    with pytest.raises(ValueError, match="request events are append-only"):
        event.delete()
    assert list(VMRequestEvent.objects.values_list("message", flat=True)) == ["oops"]


def test_record_appends_a_note_without_changing_the_status(people: dict[str, Any]) -> None:
    req = make_request(people["team"], people["requester"], S.PROVISIONING)
    event = req.record("progress", "VMI created", data={"vmi": req.vmi_name})
    assert (event.action, event.from_status, event.to_status, event.message, event.data) == (
        "progress",
        "provisioning",
        "provisioning",
        "VMI created",
        {"vmi": req.vmi_name},
    )
    assert row(req)["status"] == "provisioning"


# --- the signal ------------------------------------------------------------------------------


def test_request_transitioned_is_sent_only_after_commit(
    people: dict[str, Any], django_capture_on_commit_callbacks: Any
) -> None:
    received: list[tuple[int, str, str]] = []

    def receiver(sender: Any, request: VMRequest, event: VMRequestEvent, **kwargs: Any) -> None:
        received.append((request.pk, request.status, event.action))

    request_transitioned.connect(receiver, sender=VMRequest, dispatch_uid="test-models-receiver")
    try:
        req = make_request(people["team"], people["requester"])
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            req.approve(people["approver"])
        assert received == []
        assert len(callbacks) == 1
        callbacks[0]()
        assert received == [(req.pk, "approved", "approve")]

        # A transition whose transaction rolls back sends nothing.
        received.clear()
        with (
            django_capture_on_commit_callbacks(execute=True) as callbacks,
            pytest.raises(RuntimeError),
            transaction.atomic(),
        ):
            req.cancel(people["requester"])
            raise RuntimeError("rolled back")
        assert (callbacks, received) == ([], [])
        assert row(req)["status"] == "approved"
    finally:
        request_transitioned.disconnect(sender=VMRequest, dispatch_uid="test-models-receiver")


# --- names and constraints -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pk", "username", "name", "expected"),
    [
        (42, "Alice.Smith@corp", "", "alice-smith-corp-vm-42"),
        (7, "alice", "", "alice-vm-7"),
        (7, "!!!", "", "user-vm-7"),
        (7, "___x___", "", "x-vm-7"),
        (123456, "a" * 39 + "-bbbbbbbbbb", "", "a" * 39 + "-vm-123456"),
        (99999999, "u" * 80, "", "u" * 40 + "-vm-99999999"),
        (5, "alice", "my-notebook", "my-notebook"),
    ],
)
def test_vmi_name_for(pk: int, username: str, name: str, expected: str) -> None:
    assert vmi_name_for(pk, username, name) == expected
    assert len(expected) <= 63


def test_ticket_id_is_unique_per_source(people: dict[str, Any]) -> None:
    team, alice = people["team"], people["requester"]
    make_request(team, alice, ticket_source="jira", ticket_id="OPS-1")
    make_request(team, alice, ticket_source="servicenow", ticket_id="OPS-1")
    make_request(team, alice, ticket_source="jira", ticket_id="")
    make_request(team, alice, ticket_source="jira", ticket_id="")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_request(team, alice, ticket_source="jira", ticket_id="OPS-1")
    assert VMRequest.objects.count() == 4


def test_vmi_name_is_unique_among_live_requests_of_a_namespace(people: dict[str, Any]) -> None:
    team, alice = people["team"], people["requester"]
    first = make_request(team, alice, S.RUNNING, vmi_name="alice-gpu")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_request(team, alice, S.SUBMITTED, vmi_name="alice-gpu")
    make_request(team, alice, S.SUBMITTED, vmi_name="alice-gpu", vmi_namespace="team-other")
    first.mark_failed("host lost")
    again = make_request(team, alice, S.SUBMITTED, vmi_name="alice-gpu")
    assert sorted(VMRequest.objects.filter(vmi_name="alice-gpu").values_list("vmi_namespace", "status")) == [
        ("team-other", "submitted"),
        ("team-quant", "failed"),
        ("team-quant", "submitted"),
    ]
    assert again.pk > first.pk


# --- visibility and who decides --------------------------------------------------------------


@pytest.fixture
def two_teams() -> dict[str, Any]:
    quant, research = make_team("quant"), make_team("research")
    users = {
        "requester": portal_user("analyst", "alice"),
        "member": portal_user("analyst", "carol"),
        "approver": portal_user("approver", "bob"),
        "approver_no_perm": portal_user("analyst", "dave"),
        "other_team": portal_user("analyst", "erin"),
        "other_approver": portal_user("approver", "frank"),
        "superuser": portal_user("admin", "root"),
    }
    quant.members.add(users["requester"], users["member"])
    quant.approvers.add(users["approver"], users["approver_no_perm"])
    research.members.add(users["other_team"])
    research.approvers.add(users["other_approver"])
    ra = make_request(quant, users["requester"])
    rb = make_request(research, users["other_team"])
    return {**users, "ra": ra, "rb": rb, "quant": quant}


@pytest.mark.parametrize(
    ("who", "visible", "decidable"),
    [
        ("anonymous", [], []),
        ("requester", ["ra"], []),
        ("member", ["ra"], []),
        ("approver", ["ra"], ["ra"]),
        ("approver_no_perm", ["ra"], []),
        ("other_team", ["rb"], []),
        ("other_approver", ["rb"], ["rb"]),
        ("superuser", ["ra", "rb"], ["ra", "rb"]),
    ],
)
def test_visible_to_and_decidable_requests(
    two_teams: dict[str, Any], who: str, visible: list[str], decidable: list[str]
) -> None:
    from vmrequests.policy import decidable_requests

    user = AnonymousUser() if who == "anonymous" else two_teams[who]
    assert sorted(VMRequest.objects.visible_to(user).values_list("pk", flat=True)) == sorted(
        two_teams[k].pk for k in visible
    )
    scope = decidable_requests(user)
    found = [] if scope is None else VMRequest.objects.filter(scope).values_list("pk", flat=True)
    assert sorted(found) == sorted(two_teams[k].pk for k in decidable)


def test_requester_still_sees_their_request_after_leaving_the_team(two_teams: dict[str, Any]) -> None:
    two_teams["quant"].members.remove(two_teams["requester"])
    user = User.objects.get(pk=two_teams["requester"].pk)
    assert list(VMRequest.objects.visible_to(user).values_list("pk", flat=True)) == [two_teams["ra"].pk]


def test_open_requests(people: dict[str, Any]) -> None:
    made = {s: make_request(people["team"], people["requester"], s, vmi_name=f"vm-{s}").pk for s in S.values}
    assert sorted(VMRequest.objects.open().values_list("pk", flat=True)) == sorted(
        made[s] for s in ("approved", "provisioning", "running")
    )


# --- quotas, rules, teams, images ------------------------------------------------------------

A100 = "nvidia.com/GA100_A100_PCIE_40GB"


@pytest.mark.parametrize(
    ("mode", "gpu", "request_", "expected"),
    [
        ("", "", ("passthrough", A100, ""), True),
        ("", "", ("vgpu", "nvidia.com/NVIDIA_A10-12Q", "A10-12Q"), True),
        ("vgpu", "", ("vgpu", "", "T4-16Q"), True),
        ("vgpu", "", ("passthrough", A100, ""), False),
        ("vgpu", "A10-12Q", ("vgpu", "nvidia.com/NVIDIA_A10-12Q", "A10-12Q"), True),
        ("vgpu", "A10-12Q", ("vgpu", "nvidia.com/GRID_A10-12Q", "A10-12Q"), True),
        ("vgpu", "A10-12Q", ("vgpu", "", "A10-12Q"), True),
        ("vgpu", "A10-12Q", ("vgpu", "nvidia.com/NVIDIA_A10-24Q", "A10-24Q"), False),
        ("passthrough", "", ("passthrough", A100, ""), True),
        ("passthrough", A100, ("passthrough", A100, ""), True),
        ("passthrough", A100, ("passthrough", "nvidia.com/GA102GL_A10", ""), False),
        ("passthrough", A100, ("vgpu", A100, "A100-20C"), False),
    ],
)
def test_gpu_quota_matches(mode: str, gpu: str, request_: tuple[str, str, str], expected: bool) -> None:
    assert GpuQuota(mode=mode, gpu=gpu, max_devices=1).matches(*request_) is expected


@pytest.mark.parametrize(
    ("mode", "gpu", "errors"),
    [
        ("", "", None),
        ("vgpu", "", None),
        ("vgpu", "A10-12Q", None),
        ("vgpu", "A100-1-5C", None),
        ("passthrough", A100, None),
        ("", "A10-12Q", {"mode": ["Choose the mode the GPU belongs to."]}),
        (
            "passthrough",
            "A100",
            {"gpu": ["A passthrough GPU is a resource name such as nvidia.com/GA102GL_A10."]},
        ),
        ("vgpu", "A10", {"gpu": ["A vGPU type looks like A10-12Q or A100-1-5C."]}),
        ("vgpu", "nvidia.com/NVIDIA_A10-12Q", {"gpu": ["A vGPU type looks like A10-12Q or A100-1-5C."]}),
    ],
)
def test_gpu_quota_clean(mode: str, gpu: str, errors: dict[str, list[str]] | None) -> None:
    quota = GpuQuota(team=make_team(), mode=mode, gpu=gpu, max_devices=2)
    if errors is None:
        quota.full_clean()
    else:
        with pytest.raises(ValidationError) as exc:
            quota.full_clean()
        assert exc.value.message_dict == errors


def test_gpu_quota_scope_label() -> None:
    assert [
        GpuQuota(mode=m, gpu=g, max_devices=1).scope_label
        for m, g in [("", ""), ("vgpu", ""), ("passthrough", ""), ("vgpu", "A10-12Q")]
    ] == ["any GPU", "any vGPU (GPU slice)", "any passthrough (whole GPU)", "A10-12Q"]


@pytest.mark.parametrize(
    ("rule_fields", "request_fields", "expected"),
    [
        ({}, {}, True),
        ({}, {"vgpu_type": "T4-16Q"}, False),
        ({}, {"vgpu_type": "A10-8Q"}, True),
        ({}, {"vgpu_type": "garbage"}, False),
        ({}, {"device_count": 2}, False),
        ({"max_devices": 2}, {"device_count": 2}, True),
        ({}, {"mode": "passthrough", "vgpu_type": "", "resource_name": A100}, False),
        ({}, {"lease_days": 15}, False),
        ({}, {"lease_days": 14}, True),
        ({"max_lease_days": None}, {"lease_days": 60}, True),
        ({"max_vgpu_framebuffer_gb": None}, {"vgpu_type": "T4-16Q"}, True),
        ({"enabled": False}, {}, False),
        (
            {"mode": "passthrough", "max_vgpu_framebuffer_gb": None},
            {"mode": "passthrough", "vgpu_type": "", "resource_name": A100},
            True,
        ),
    ],
)
def test_auto_approval_rule_matches(
    rule_fields: dict[str, Any], request_fields: dict[str, Any], expected: bool
) -> None:
    fields: dict[str, Any] = {
        "mode": "vgpu",
        "max_devices": 1,
        "max_vgpu_framebuffer_gb": Decimal("8"),
        "max_lease_days": 14,
        "enabled": True,
    }
    fields.update(rule_fields)
    rule = AutoApprovalRule(**fields)
    req_values: dict[str, Any] = {"mode": "vgpu", "vgpu_type": "T4-8Q", "device_count": 1, "lease_days": 7}
    req_values.update(request_fields)
    assert rule.matches(VMRequest(**req_values)) is expected


def test_auto_approval_rule_describe() -> None:
    rule = AutoApprovalRule(
        mode="vgpu", max_devices=1, max_vgpu_framebuffer_gb=Decimal("8.0"), max_lease_days=14
    )
    assert rule.describe() == "vGPU (GPU slice) up to 1 device(s), ≤ 8 GB, lease ≤ 14 days"
    assert (
        AutoApprovalRule(mode="passthrough", max_devices=2).describe()
        == "passthrough (whole GPU) up to 2 device(s)"
    )


@pytest.mark.parametrize(
    ("default", "maximum", "errors"),
    [
        (7, 30, None),
        (30, 30, None),
        (31, 30, {"default_lease_days": ["The default lease cannot be longer than the maximum lease."]}),
    ],
)
def test_team_clean(default: int, maximum: int, errors: dict[str, list[str]] | None) -> None:
    team = Team(
        name="Quant", slug="quant", namespace="team-quant", default_lease_days=default, max_lease_days=maximum
    )
    if errors is None:
        team.full_clean()
    else:
        with pytest.raises(ValidationError) as exc:
            team.full_clean()
        assert exc.value.message_dict == errors


def test_team_namespace_must_be_a_dns_label() -> None:
    team = Team(name="Quant", slug="quant", namespace="Team_Quant")
    with pytest.raises(ValidationError) as exc:
        team.full_clean()
    assert exc.value.message_dict == {
        "namespace": ["Use lower-case letters, digits and '-', starting and ending with a letter or digit."]
    }


@pytest.mark.parametrize(
    ("minimum", "default", "errors"),
    [
        (2, 16, None),
        (16, 16, None),
        (32, 16, {"default_memory_gib": ["The default memory is below the minimum."]}),
    ],
)
def test_vm_image_clean(minimum: int, default: int, errors: dict[str, list[str]] | None) -> None:
    image = VmImage(
        name="Rocky 9",
        image="quay.io/containerdisks/rockylinux:9",
        os="Rocky Linux 9",
        login_user="rocky",
        min_memory_gib=minimum,
        default_memory_gib=default,
    )
    if errors is None:
        image.full_clean()
    else:
        with pytest.raises(ValidationError) as exc:
            image.full_clean()
        assert exc.value.message_dict == errors


def test_vm_image_login_user_must_be_a_linux_user_name() -> None:
    image = VmImage(name="Bad", image="quay.io/x:1", os="x", login_user="Root User")
    with pytest.raises(ValidationError) as exc:
        image.full_clean()
    assert exc.value.message_dict == {"login_user": ["Use a Linux user name."]}
