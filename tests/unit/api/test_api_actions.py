"""The request actions of the API: approve, reject, cancel, release, extend and
extension-decision as POSTs on the detail URL; who may do each (403 ``not-allowed``), the
refused transitions (409 ``invalid-transition`` with ``current_status``), approvals that no longer
fit (409 ``approval-refused``) and the tasks enqueued when the change commits."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from gpuinventory.models import Reservation
from tests.unit.api.conftest import api, post, problem
from tests.vmrequest_factories import A100_PT, stored_request
from vmrequests import approval
from vmrequests.models import GpuQuota, VMRequest, VMRequestEvent

pytestmark = pytest.mark.django_db

LEASE_END = timezone.now().replace(microsecond=0) + timedelta(days=5)


def url(req: VMRequest, action: str) -> str:
    return f"/api/v1/vm-requests/{req.pk}/{action}/"


def running(req: VMRequest, **fields: Any) -> VMRequest:
    """``req`` running on p1 at 10.0.0.7 with the lease ending at ``LEASE_END``."""
    VMRequest.objects.filter(pk=req.pk).update(
        status="running", node_name="p1", ip_address="10.0.0.7", lease_end=LEASE_END, **fields
    )
    req.refresh_from_db()
    return req


def status_of(req: VMRequest) -> str:
    return VMRequest.objects.get(pk=req.pk).status


# --- approve -------------------------------------------------------------------------------------


def test_approve_reserves_and_enqueues_provisioning_on_commit(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.apa, "approve"), url(world.r_ana, "approve"), {"note": "Fits the budget."})
    assert response.status_code == 200
    data = response.json()
    assert (data["status"], data["decided_by"], data["decision_note"]) == (
        "approved",
        "apa",
        "Fits the budget.",
    )
    assert data["decided_at"] is not None
    reservation = Reservation.objects.get()
    assert (reservation.node.name, reservation.resource_name, reservation.count, reservation.holder) == (
        "p1",
        A100_PT,
        1,
        f"vmrequest:{world.r_ana.pk}",
    )
    event = VMRequestEvent.objects.get(request=world.r_ana, action="approve")
    assert (event.actor, event.from_status, event.to_status, event.message) == (
        world.apa,
        "submitted",
        "approved",
        "Fits the budget.",
    )
    assert enqueued == {"provision": [world.r_ana.pk], "delete_vmi": []}


def test_approve_without_a_note(world: Any) -> None:
    response = post(api(world.apa, "approve"), url(world.r_ana, "approve"))
    assert (response.status_code, response.json()["decision_note"]) == (200, "")


def test_team_member_without_the_approve_permission_is_403(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.tim, "approve"), url(world.r_ana, "approve"), {})
    body = problem(response, 403, "not-allowed")
    assert body["detail"] == "You are not an approver of team Quant."
    assert body["title"] == "You may not do this to this request."
    assert (status_of(world.r_ana), Reservation.objects.count(), enqueued["provision"]) == (
        "submitted",
        0,
        [],
    )


def test_listed_approver_without_the_permission_is_403(world: Any) -> None:
    dave = User.objects.create_user("dave")
    dave.groups.set(Group.objects.filter(name="analysts"))
    world.quant.approvers.add(dave)
    body = problem(post(api(dave, "approve"), url(world.r_ana, "approve"), {}), 403, "not-allowed")
    assert body["detail"] == "You are not an approver of team Quant."
    assert status_of(world.r_ana) == "submitted"


def test_approving_ones_own_request_is_403(world: Any) -> None:
    own = stored_request(world.quant, world.apa, world.image)
    body = problem(post(api(world.apa, "approve"), url(own, "approve"), {}), 403, "not-allowed")
    assert body["detail"] == "Needs another approver: you are the team's only approver."
    assert (status_of(own), Reservation.objects.count()) == ("submitted", 0)


def test_approving_an_already_rejected_request_is_409(world: Any) -> None:
    client = api(world.apa, "approve")
    assert post(client, url(world.r_ana, "reject"), {"reason": "No budget."}).status_code == 200
    body = problem(post(client, url(world.r_ana, "approve"), {}), 409, "invalid-transition")
    assert body["current_status"] == "rejected"
    assert body["detail"] == f"Request #{world.r_ana.pk} is rejected; it cannot be approved."
    assert body["errors"] == []
    assert body["title"] == "The request is not in a state that allows this action."
    req = VMRequest.objects.get(pk=world.r_ana.pk)
    assert (req.status, req.decision_note, Reservation.objects.count()) == ("rejected", "No budget.", 0)


def test_second_approval_loses_with_409(world: Any) -> None:
    client = api(world.apa, "approve")
    assert post(client, url(world.r_ana, "approve"), {}).status_code == 200
    body = problem(post(client, url(world.r_ana, "approve"), {}), 409, "invalid-transition")
    assert body["current_status"] == "approved"
    assert Reservation.objects.count() == 1


def test_approval_when_the_last_devices_went_to_another_request_is_409(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    VMRequest.objects.filter(pk=world.r_tim.pk).update(device_count=3)
    world.r_tim.refresh_from_db()
    approval.approve(world.r_tim, world.apa)  # takes the 3 free A100s of p1
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.apa, "approve"), url(world.r_ana, "approve"), {"note": "ok"})
    body = problem(response, 409, "approval-refused")
    message = "All A100 PCIe 40GB GPUs are in use or reserved right now."
    assert body["detail"] == message
    assert body["errors"] == [{"field": None, "code": "capacity", "detail": message}]
    assert body["alternatives"] == []
    assert body["title"] == "The request no longer fits the free capacity or the team's quota."
    assert (status_of(world.r_ana), Reservation.objects.count()) == ("submitted", 1)
    assert not VMRequestEvent.objects.filter(request=world.r_ana).exists()
    assert enqueued["provision"] == []


def test_approval_over_the_team_quota_is_409(world: Any) -> None:
    GpuQuota.objects.create(team=world.quant, mode="passthrough", gpu=A100_PT, max_devices=1)
    approval.approve(world.r_tim, world.apa)
    body = problem(post(api(world.apa, "approve"), url(world.r_ana, "approve"), {}), 409, "approval-refused")
    assert body["detail"] == (
        f"Your team's quota for {A100_PT} is 1 devices and 1 are held; this request needs 1 more."
    )
    assert status_of(world.r_ana) == "submitted"


# --- reject --------------------------------------------------------------------------------------


def test_reject_records_the_reason(world: Any) -> None:
    response = post(api(world.apa, "approve"), url(world.r_ana, "reject"), {"reason": "Use the shared pool."})
    data = response.json()
    assert (response.status_code, data["status"], data["decided_by"], data["decision_note"]) == (
        200,
        "rejected",
        "apa",
        "Use the shared pool.",
    )
    event = VMRequestEvent.objects.get(request=world.r_ana)
    assert (event.action, event.actor, event.message) == ("reject", world.apa, "Use the shared pool.")


def test_reject_by_a_non_approver_is_403(world: Any) -> None:
    body = problem(
        post(api(world.ana, "approve"), url(world.r_tim, "reject"), {"reason": "x"}), 403, "not-allowed"
    )
    assert body["detail"] == "You are not an approver of team Quant."
    assert status_of(world.r_tim) == "submitted"


def test_reject_of_a_cancelled_request_is_409(world: Any) -> None:
    world.r_ana.cancel(world.ana)
    body = problem(
        post(api(world.apa), url(world.r_ana, "reject"), {"reason": "x"}), 409, "invalid-transition"
    )
    assert body["current_status"] == "cancelled"
    assert body["detail"] == f"Request #{world.r_ana.pk} is cancelled; it cannot be rejected."


def test_whitespace_reason_is_400(world: Any) -> None:
    body = problem(
        post(api(world.apa), url(world.r_ana, "reject"), {"reason": "   "}), 400, "validation-error"
    )
    assert [(e["field"], e["code"]) for e in body["errors"]] == [("reason", "blank")]
    assert status_of(world.r_ana) == "submitted"


# --- cancel --------------------------------------------------------------------------------------


def test_requester_cancels(world: Any) -> None:
    response = post(api(world.ana, "write"), url(world.r_ana, "cancel"), {"note": "Not needed."})
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")


def test_approver_cancels_an_approved_request_and_frees_the_reservation(world: Any) -> None:
    approval.approve(world.r_ana, world.apa)
    assert Reservation.objects.count() == 1
    response = post(api(world.apa, "write"), url(world.r_ana, "cancel"), {})
    assert (response.status_code, response.json()["status"]) == (200, "cancelled")
    assert Reservation.objects.count() == 0


def test_team_mate_may_not_cancel(world: Any) -> None:
    body = problem(post(api(world.tim, "write"), url(world.r_ana, "cancel"), {}), 403, "not-allowed")
    assert body["detail"] == "Only the requester or an approver of the team can cancel this request."
    assert status_of(world.r_ana) == "submitted"


def test_cancel_of_a_running_request_is_409(world: Any) -> None:
    running(world.r_ana)
    body = problem(post(api(world.ana), url(world.r_ana, "cancel"), {}), 409, "invalid-transition")
    assert body["current_status"] == "running"


# --- release -------------------------------------------------------------------------------------


def test_release_starts_deletion_and_enqueues_it_on_commit(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    running(world.r_ana)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.ana, "write"), url(world.r_ana, "release"), {"note": "Done early."})
    data = response.json()
    assert (response.status_code, data["status"], data["deletion_reason"]) == (200, "deleting", "released")
    event = VMRequestEvent.objects.get(request=world.r_ana)
    assert (event.action, event.actor, event.message) == ("start_deletion", world.ana, "Done early.")
    assert enqueued == {"provision": [], "delete_vmi": [world.r_ana.pk]}


def test_team_mate_may_not_release(world: Any, enqueued: dict[str, list[int]]) -> None:
    running(world.r_ana)
    body = problem(post(api(world.tim), url(world.r_ana, "release"), {}), 403, "not-allowed")
    assert body["detail"] == "Only the requester can release this VM; an approver terminates it instead."
    assert status_of(world.r_ana) == "running"


def test_release_of_a_submitted_request_is_409(world: Any) -> None:
    body = problem(post(api(world.ana), url(world.r_ana, "release"), {}), 409, "invalid-transition")
    assert body["current_status"] == "submitted"
    assert body["detail"] == f"Request #{world.r_ana.pk} is submitted; it cannot be deleted."


# --- extend and extension-decision --------------------------------------------------------------


def test_extend_records_the_pending_extension(world: Any) -> None:
    running(world.r_ana)
    response = post(
        api(world.ana, "write"), url(world.r_ana, "extend"), {"days": 23, "reason": "Longer run."}
    )
    data = response.json()
    assert (response.status_code, data["extension_days_requested"], data["extension_reason"]) == (
        200,
        23,
        "Longer run.",
    )
    event = VMRequestEvent.objects.get(request=world.r_ana)
    assert (event.action, event.actor, event.data) == ("extension_request", world.ana, {"days": 23})


def test_extend_beyond_the_team_maximum_in_total_is_400(world: Any) -> None:
    running(world.r_ana)  # 7 days asked, maximum 30: 23 left
    body = problem(
        post(api(world.ana), url(world.r_ana, "extend"), {"days": 24, "reason": "x"}), 400, "validation-error"
    )
    detail = (
        "Ask for 1 to 23 days: the team's maximum lease is 30 days in total and this lease already has 7."
    )
    assert body["errors"] == [{"field": None, "code": "invalid", "detail": detail}]


def test_extend_of_a_lease_at_the_team_maximum_is_403(world: Any) -> None:
    running(world.r_ana, lease_extended_days=23)
    body = problem(
        post(api(world.ana), url(world.r_ana, "extend"), {"days": 1, "reason": "x"}), 403, "not-allowed"
    )
    assert body["detail"] == "The lease is already at the team's maximum of 30 days in total."


def test_second_extension_while_one_is_pending_is_409(world: Any) -> None:
    running(world.r_ana, extension_days_requested=3, extension_reason="first")
    body = problem(
        post(api(world.ana), url(world.r_ana, "extend"), {"days": 2, "reason": "x"}),
        409,
        "invalid-transition",
    )
    assert body["current_status"] == "running"
    assert body["detail"] == "An extension is already waiting for an approver."
    assert VMRequest.objects.get(pk=world.r_ana.pk).extension_days_requested == 3


def test_only_the_requester_extends(world: Any) -> None:
    running(world.r_ana)
    body = problem(
        post(api(world.apa), url(world.r_ana, "extend"), {"days": 2, "reason": "x"}), 403, "not-allowed"
    )
    assert body["detail"] == "Only the requester can ask for a longer lease."


def test_extend_of_a_request_that_does_not_run_is_409(world: Any) -> None:
    body = problem(
        post(api(world.ana), url(world.r_ana, "extend"), {"days": 2, "reason": "x"}),
        409,
        "invalid-transition",
    )
    assert body["current_status"] == "submitted"


@pytest.mark.parametrize(
    ("grant", "lease_end", "action"),
    [(True, LEASE_END + timedelta(days=3), "extension_approve"), (False, LEASE_END, "extension_reject")],
)
def test_extension_decision(world: Any, grant: bool, lease_end: Any, action: str) -> None:
    running(world.r_ana, extension_days_requested=3, extension_reason="Rerun.")
    response = post(
        api(world.apa, "approve"), url(world.r_ana, "extension-decision"), {"approve": grant, "note": "ok"}
    )
    data = response.json()
    assert (response.status_code, data["extension_days_requested"], data["extension_reason"]) == (
        200,
        None,
        "",
    )
    req = VMRequest.objects.get(pk=world.r_ana.pk)
    assert (req.lease_end, req.status) == (lease_end, "running")
    event = VMRequestEvent.objects.get(request=world.r_ana)
    assert (event.action, event.actor, event.message, event.data["days"]) == (action, world.apa, "ok", 3)


def test_extension_decision_by_a_non_approver_is_403(world: Any) -> None:
    running(world.r_ana, extension_days_requested=3)
    body = problem(
        post(api(world.ana, "approve"), url(world.r_ana, "extension-decision"), {"approve": True}),
        403,
        "not-allowed",
    )
    assert body["detail"] == "You are not an approver of team Quant."
    assert VMRequest.objects.get(pk=world.r_ana.pk).extension_days_requested == 3


def test_extension_decision_without_a_pending_extension_is_409(world: Any) -> None:
    running(world.r_ana)
    body = problem(
        post(api(world.apa), url(world.r_ana, "extension-decision"), {"approve": True}),
        409,
        "invalid-transition",
    )
    assert body["detail"] == "There is no lease extension waiting for a decision."
    assert VMRequest.objects.get(pk=world.r_ana.pk).lease_end == LEASE_END


# --- terminate and retry (the pages' actions, now in the API too) ---------------------------------


def test_terminate_needs_a_string_reason(world: Any) -> None:
    running(world.r_ana)
    body = problem(
        post(api(world.apa), url(world.r_ana, "terminate"), {"reason": 77}), 400, "validation-error"
    )
    assert body["errors"] == [{"field": "reason", "code": "invalid", "detail": "Not a valid string."}]
    body = problem(
        post(api(world.apa), url(world.r_ana, "terminate"), {"reason": "  "}), 400, "validation-error"
    )
    assert status_of(world.r_ana) == "running"


def test_terminate_records_the_reason_and_enqueues_the_deletion(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    running(world.r_ana)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.apa), url(world.r_ana, "terminate"), {"reason": "Over budget."})
    data = response.json()
    assert (response.status_code, data["status"], data["deletion_reason"]) == (200, "deleting", "terminated")
    assert data["allowed_actions"]["terminate"] == {
        "allowed": False,
        "kind": "status",
        "reason": f"Request #{world.r_ana.pk} is deleting; it cannot be deleted.",
    }
    event = VMRequestEvent.objects.get(request=world.r_ana)
    assert (event.action, event.actor, event.message) == ("start_deletion", world.apa, "Over budget.")
    assert enqueued == {"provision": [], "delete_vmi": [world.r_ana.pk]}


def test_the_requester_releases_and_may_not_terminate(world: Any) -> None:
    running(world.r_ana)
    body = problem(post(api(world.ana), url(world.r_ana, "terminate"), {"reason": "x"}), 403, "not-allowed")
    assert body["detail"] == "You are not an approver of team Quant."


def test_retry_of_a_failed_request_reserves_again(world: Any, enqueued: dict[str, list[int]]) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status="failed", failure_reason="Pull failed.")
    body = problem(post(api(world.ana), url(world.r_ana, "retry"), {}), 403, "not-allowed")
    assert body["detail"] == "You are not an approver of team Quant."
    response = post(api(world.apa), url(world.r_ana, "retry"), {"note": "Image fixed."})
    assert (response.status_code, response.json()["status"]) == (200, "approved")
    assert Reservation.objects.get().holder == f"vmrequest:{world.r_ana.pk}"
    body = problem(post(api(world.apa), url(world.r_ana, "retry"), {}), 409, "invalid-transition")
    assert body["current_status"] == "approved"
