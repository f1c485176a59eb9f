"""``POST /api/v1/vm-requests/``: creation with defaults and vGPU types, idempotency on the
external ticket ID and on ``Idempotency-Key`` (one request, 200 with the same body; 409 naming
the differing fields), and filing on behalf of a user (``requested_for``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User

from tests.unit.api.conftest import SSH_KEY, api, create_body, post, problem, send
from tests.vmrequest_factories import A100_PT, T4_8Q
from vmrequests import validation
from vmrequests.api import creation
from vmrequests.models import AutoApprovalRule, IdempotencyKey, VMRequest, VMRequestEvent

pytestmark = pytest.mark.django_db

URL = "/api/v1/vm-requests/"
NO_TICKET = {"ticket_source": None, "ticket_id": None}


@pytest.fixture
def svc(world: Any) -> User:
    """``servicenow``: a service account in no team, allowed to file for others."""
    user = User.objects.create_user("servicenow")
    user.user_permissions.add(Permission.objects.get(codename="submit_for_others"))
    return user


def _created(response: Any) -> VMRequest:
    assert response.status_code == 201, response.content
    return VMRequest.objects.get(pk=response.json()["id"])


# --- creating ------------------------------------------------------------------------------------


def test_create_stores_what_was_sent_and_records_the_submission(world: Any) -> None:
    response = post(api(world.ana), URL, create_body(name="risk-box"))
    req = _created(response)
    assert (req.requester, req.submitted_by, req.team, req.status) == (
        world.ana,
        None,
        world.quant,
        "submitted",
    )
    assert (req.mode, req.resource_name, req.gpu_model, req.device_count) == (
        "passthrough",
        A100_PT,
        "A100 PCIe 40GB",
        2,
    )
    assert (req.cpu_cores, req.memory_gib, req.lease_days, req.image) == (8, 64, 10, world.image)
    assert (req.vmi_namespace, req.vmi_name, req.ticket_source, req.ticket_id) == (
        "team-quant",
        "risk-box",
        "SNOW",
        "INC0001",
    )
    assert req.ssh_public_key == SSH_KEY
    assert response.json()["vmi_name"] == "risk-box"
    (event,) = VMRequestEvent.objects.filter(request=req)
    assert (event.actor, event.action, event.to_status, event.data) == (world.ana, "submit", "submitted", {})


def test_defaults_come_from_the_image_the_team_and_the_only_team(world: Any) -> None:
    body = create_body(team=None, cpu_cores=None, memory_gib=None, lease_days=None, device_count=None)
    data = _created(post(api(world.ana), URL, body))
    assert (data.team, data.cpu_cores, data.memory_gib, data.lease_days, data.device_count) == (
        world.quant,
        4,
        16,
        7,
        1,
    )


def test_team_must_be_given_by_a_member_of_two_teams(world: Any) -> None:
    world.research.members.add(world.ana)
    body = problem(post(api(world.ana), URL, create_body(team=None)), 400, "validation-error")
    assert body["errors"] == [
        {"field": "team", "code": "required", "detail": "Give the team (slug); ana is in 2 teams."}
    ]


def test_vgpu_type_offered_by_a_node(world: Any) -> None:
    body = create_body(mode="vgpu", resource_name=None, vgpu_type="T4-8Q", device_count=1)
    req = _created(post(api(world.ana), URL, body))
    assert (req.mode, req.vgpu_type, req.resource_name) == ("vgpu", "T4-8Q", T4_8Q)


def test_vgpu_type_no_node_offers_yet_is_placed_by_reprofiling(world: Any) -> None:
    body = create_body(mode="vgpu", resource_name=None, vgpu_type="T4-16Q", device_count=1)
    req = _created(post(api(world.ana), URL, body))
    assert (req.mode, req.vgpu_type, req.resource_name) == ("vgpu", "T4-16Q", "")


def test_auto_approved_create_enqueues_provisioning_on_commit(
    world: Any, enqueued: dict[str, list[int]], django_capture_on_commit_callbacks: Any
) -> None:
    AutoApprovalRule.objects.create(team=world.quant, mode="passthrough", max_devices=2)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(api(world.ana), URL, create_body())
    req = _created(response)
    assert (response.json()["status"], response.json()["decided_by_policy"]) == ("approved", True)
    assert enqueued["provision"] == [req.pk]


# --- idempotency on the ticket -------------------------------------------------------------------


def test_same_ticket_twice_is_one_request_and_the_same_body(world: Any) -> None:
    client = api(world.ana)
    first = post(client, URL, create_body())
    second = post(client, URL, create_body())
    assert (first.status_code, second.status_code) == (201, 200)
    assert json.loads(second.content) == json.loads(first.content)
    assert VMRequest.objects.filter(ticket_id="INC0001").count() == 1
    assert VMRequestEvent.objects.filter(request_id=first.json()["id"]).count() == 1


def test_same_ticket_from_a_team_mate_is_their_own_request(world: Any) -> None:
    """Tickets are per filing account (#14 finding 3): apa's INC0001 is not ana's."""
    req = _created(post(api(world.ana), URL, create_body()))
    other = _created(post(api(world.apa), URL, create_body()))
    assert other.pk != req.pk
    assert (other.requester, other.ticket_id) == (world.apa, "INC0001")


def test_equivalent_content_is_the_same_request(world: Any) -> None:
    client = api(world.ana)
    first = post(client, URL, create_body())
    again = create_body(
        ssh_public_key=f"\n  {SSH_KEY}  \n",  # normalised
        justification="  Fine-tune the Q3 risk model.  ",  # stripped
        cpu_cores=None,  # left out: not compared
        memory_gib=None,
    )
    second = post(client, URL, again)
    assert second.status_code == 200
    assert second.json() == first.json()


def test_same_ticket_with_other_content_is_409_naming_the_fields(world: Any) -> None:
    client = api(world.ana)
    req = _created(post(client, URL, create_body()))
    other = create_body(device_count=1, cpu_cores=16, justification="Something else.", image="Ubuntu 22.04")
    body = problem(post(client, URL, other), 409, "duplicate-ticket")
    assert body["differing_fields"] == ["cpu_cores", "device_count", "justification"]
    assert body["existing_request"] == req.pk
    assert body["errors"] == [
        {"field": name, "code": "differs", "detail": "Differs from the existing request."}
        for name in ("cpu_cores", "device_count", "justification")
    ]
    assert body["detail"] == (
        f"Ticket INC0001 already has request #{req.pk}, with other values of: cpu_cores, device_count, justification."
    )
    assert body["title"] == "This ticket already has a VM request with different content."
    assert VMRequest.objects.count() == 4


def test_same_ticket_for_another_user_differs_in_requested_for(world: Any, svc: User) -> None:
    client = api(svc)
    _created(post(client, URL, create_body(requested_for="ana")))
    body = problem(post(client, URL, create_body(requested_for="tim")), 409, "duplicate-ticket")
    assert body["differing_fields"] == ["requested_for"]


def test_same_ticket_id_of_another_ticketing_system_is_a_new_request(world: Any) -> None:
    client = api(world.ana)
    first = _created(post(client, URL, create_body()))
    second = _created(post(client, URL, create_body(ticket_source="JIRA", device_count=1)))
    assert first.pk != second.pk
    assert (second.ticket_source, second.ticket_id) == ("JIRA", "INC0001")


def test_ticket_of_another_account_is_not_looked_at(world: Any) -> None:
    """No 409 and no hint about a ticket another team's account filed (#14 finding 3)."""
    _created(post(api(world.ana), URL, create_body()))
    mine = _created(post(api(world.olga), URL, create_body(team="research")))
    assert (mine.requester, mine.ticket_id) == (world.olga, "INC0001")
    assert VMRequest.objects.count() == 5


def _late_duplicate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first duplicate check finds nothing, as when a concurrent create commits right after it."""
    real = creation._existing
    calls: list[int] = []

    def late(*args: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(creation, "_existing", late)


@pytest.mark.parametrize(("cores", "status"), [(8, 200), (16, 409)])
def test_duplicate_committed_after_the_check_is_answered_as_a_duplicate(
    world: Any, monkeypatch: pytest.MonkeyPatch, cores: int, status: int
) -> None:
    """The validator then refuses the ticket ID; the answer is still the duplicate's (200 or 409)."""
    client = api(world.ana)
    first = post(client, URL, create_body())
    _late_duplicate(monkeypatch)
    second = post(client, URL, create_body(cpu_cores=cores))
    assert second.status_code == status
    if status == 200:
        assert second.json() == first.json()
    else:
        assert problem(second, 409, "duplicate-ticket")["differing_fields"] == ["cpu_cores"]
    assert VMRequest.objects.filter(ticket_id="INC0001").count() == 1


def test_duplicate_committed_after_validation_is_caught_by_the_unique_constraint(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both checks passed, the insert hits ``vmrequest_unique_ticket_per_account``: the answer is the duplicate's."""
    client = api(world.ana)
    first = post(client, URL, create_body())
    _late_duplicate(monkeypatch)
    monkeypatch.setattr(validation, "ticket_taken", lambda account, source, ticket: False)
    second = post(client, URL, create_body())
    assert second.status_code == 200
    assert second.json() == first.json()
    assert VMRequest.objects.filter(ticket_id="INC0001").count() == 1
    assert VMRequestEvent.objects.filter(action="submit").count() == 1


# --- Idempotency-Key -----------------------------------------------------------------------------


def test_same_idempotency_key_and_body_is_the_same_request(world: Any) -> None:
    client = api(world.ana)
    first = post(client, URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"})
    second = post(client, URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert VMRequest.objects.count() == 4
    key = IdempotencyKey.objects.get()
    assert (key.user, key.key, key.vm_request_id) == (world.ana, "ord-42", first.json()["id"])


def test_same_idempotency_key_with_another_body_is_409(world: Any) -> None:
    client = api(world.ana)
    req = _created(post(client, URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"}))
    other = create_body(**NO_TICKET, lease_days=20, name="other-box")
    body = problem(post(client, URL, other, **{"Idempotency-Key": "ord-42"}), 409, "idempotency-key-reused")
    assert body["differing_fields"] == ["lease_days", "name"]
    assert body["existing_request"] == req.pk
    assert body["detail"] == (
        f"Idempotency-Key ord-42 was used for request #{req.pk} with other values of: lease_days, name."
    )
    assert [e["field"] for e in body["errors"]] == ["lease_days", "name"]
    assert VMRequest.objects.count() == 4


def test_idempotency_keys_are_per_user(world: Any) -> None:
    mine = _created(post(api(world.ana), URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"}))
    theirs = _created(post(api(world.tim), URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"}))
    assert mine.pk != theirs.pk
    assert (mine.requester, theirs.requester) == (world.ana, world.tim)
    assert sorted(IdempotencyKey.objects.values_list("user__username", "vm_request_id")) == [
        ("ana", mine.pk),
        ("tim", theirs.pk),
    ]


def test_idempotency_key_is_per_user_not_per_token(world: Any) -> None:
    first = post(api(world.ana), URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"})
    second = post(api(world.ana), URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"]


def test_refused_create_does_not_use_up_the_key(world: Any) -> None:
    client = api(world.ana)
    refused = post(client, URL, create_body(**NO_TICKET, device_count=4), **{"Idempotency-Key": "ord-42"})
    problem(refused, 400, "validation-error")
    assert IdempotencyKey.objects.count() == 0
    _created(post(client, URL, create_body(**NO_TICKET), **{"Idempotency-Key": "ord-42"}))


def test_without_ticket_or_key_every_call_creates(world: Any) -> None:
    client = api(world.ana)
    first = _created(post(client, URL, create_body(**NO_TICKET, device_count=1)))
    second = _created(post(client, URL, create_body(**NO_TICKET, device_count=1)))
    assert second.pk == first.pk + 1


# --- requested_for -------------------------------------------------------------------------------


def test_requested_for_without_the_permission_is_403(world: Any) -> None:
    body = problem(post(api(world.apa), URL, create_body(requested_for="ana")), 403, "not-allowed")
    assert body["detail"] == (
        "Filing a request for another user (requested_for) needs the vmrequests.submit_for_others permission."
    )
    assert VMRequest.objects.count() == 3


def test_requested_for_oneself_needs_no_permission(world: Any) -> None:
    req = _created(post(api(world.ana), URL, create_body(requested_for="ana")))
    assert (req.requester, req.submitted_by) == (world.ana, None)


def test_service_account_files_for_a_user_and_the_timeline_records_both(world: Any, svc: User) -> None:
    client = api(svc)
    response = post(client, URL, create_body(requested_for="ana"))
    req = _created(response)
    assert (response.json()["requester"], response.json()["submitted_by"]) == ("ana", "servicenow")
    assert (req.requester, req.submitted_by, req.vmi_name) == (world.ana, svc, f"ana-vm-{req.pk}")
    for reader in (client, api(world.ana)):
        events = send(reader, "GET", f"{URL}{req.pk}/events/").json()["results"]
        assert [(e["actor"], e["action"], e["to_status"], e["data"]) for e in events] == [
            ("servicenow", "submit", "submitted", {"submitted_by": "servicenow"})
        ]
    # The filer sees it (it is in no team) and may cancel it for the requester.
    assert [r["id"] for r in send(client, "GET", URL).json()["results"]] == [req.pk]
    cancelled = post(client, f"{URL}{req.pk}/cancel/", {"note": "Ticket closed."})
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
    event = VMRequestEvent.objects.get(request=req, action="cancel")
    assert (event.actor, event.message) == (svc, "Ticket closed.")


def test_service_account_repeating_its_ticket_gets_the_same_request(world: Any, svc: User) -> None:
    client = api(svc)
    first = post(client, URL, create_body(requested_for="ana"))
    second = post(client, URL, create_body(requested_for="ana"))
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()


def test_filer_may_not_approve_what_it_filed(world: Any, svc: User) -> None:
    req = _created(post(api(svc), URL, create_body(requested_for="ana")))
    body = problem(post(api(svc), f"{URL}{req.pk}/approve/", {}), 403, "not-allowed")
    assert body["detail"] == "You are not an approver of team Quant."


@pytest.mark.parametrize("username", ["ghost", "retired"])
def test_requested_for_an_unknown_or_inactive_user_is_400(world: Any, svc: User, username: str) -> None:
    User.objects.create_user("retired", is_active=False)
    body = problem(post(api(svc), URL, create_body(requested_for=username)), 400, "validation-error")
    assert body["errors"] == [
        {"field": "requested_for", "code": "unknown_user", "detail": f"There is no active user {username}."}
    ]
    assert VMRequest.objects.count() == 3


def test_requested_for_a_user_outside_the_team_is_400(world: Any, svc: User) -> None:
    body = problem(post(api(svc), URL, create_body(requested_for="olga")), 400, "validation-error")
    assert [(e["field"], e["code"]) for e in body["errors"]] == [("team", "invalid_choice")]


def test_me_shows_the_submit_for_others_permission(world: Any, svc: User) -> None:
    me = send(api(svc, "read"), "GET", "/api/v1/me/").json()
    assert (me["username"], me["teams"], me["roles"]) == ("servicenow", [], [])
    assert me["permissions"]["submit_for_others"] is True
    assert me["permissions"]["request_vms"] is False


def test_unknown_gpu_lists_the_names_on_offer(world: Any) -> None:
    response = post(api(world.ana), URL, create_body(resource_name="nvidia.com/GA107GL_A2000_12GB"))
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [
        {
            "field": "resource_name",
            "code": "unknown_gpu",
            "detail": "nvidia.com/GA107GL_A2000_12GB is not in the GPU inventory (or no longer offered). "
            f"Choose one of the listed GPUs. Offered for passthrough: {A100_PT}.",
        }
    ]


def test_unknown_team_or_image_does_not_blame_the_defaulted_fields(world: Any) -> None:
    body = create_body(team="nope", image="Windows 95", cpu_cores=None, memory_gib=None, lease_days=None)
    errors = problem(post(api(world.ana), URL, body), 400, "validation-error")["errors"]
    assert sorted(e["field"] for e in errors) == ["image", "team"]


def test_auto_approved_submission_signals_submitted_then_approved(
    world: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from vmrequests.models import request_transitioned

    AutoApprovalRule.objects.create(team=world.quant, mode="passthrough", max_devices=2, max_lease_days=30)
    seen: list[str] = []

    def receiver(sender: Any, request: Any, event: Any, **kwargs: Any) -> None:
        seen.append(event.to_status)

    request_transitioned.connect(receiver, dispatch_uid="test-order")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            response = post(api(world.ana), URL, create_body())
    finally:
        request_transitioned.disconnect(dispatch_uid="test-order")
    assert response.status_code == 201
    assert response.json()["status"] == "approved"
    assert seen == ["submitted", "approved"]
