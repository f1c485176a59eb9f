"""Read endpoints: the request list with the UI's filters and pagination, the timeline, teams,
images and ``/me/``; query budgets that do not grow with the number of rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.unit.api.conftest import api, create_body, post, send
from tests.vmrequest_factories import stored_image, stored_request, stored_team
from vmrequests import approval
from vmrequests.models import GpuQuota, VMRequest

pytestmark = pytest.mark.django_db

URL = "/api/v1/vm-requests/"


def ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


# --- the request list ----------------------------------------------------------------------------


@pytest.fixture
def varied(world: Any) -> dict[str, VMRequest]:
    """Besides r_ana and r_tim (submitted A100s): ``vgpu`` (tim, T4-8Q, approved, ticket
    JIRA-9) and ``old`` (ana, rejected, created 2026-01-10 at noon UTC)."""
    vgpu = stored_request(
        world.quant,
        world.tim,
        world.image,
        mode="vgpu",
        resource_name="nvidia.com/GRID_T4-8Q",
        vgpu_type="T4-8Q",
        gpu_model="Tesla T4",
        status="approved",
        ticket_source="JIRA",
        ticket_id="JIRA-9",
    )
    old = stored_request(world.quant, world.ana, world.image, status="rejected")
    VMRequest.objects.filter(pk=old.pk).update(created=datetime(2026, 1, 10, 12, tzinfo=UTC))
    return {"vgpu": vgpu, "old": old}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["vgpu", "r_tim", "r_ana", "old"]),
        ("?status=approved", ["vgpu"]),
        ("?status=submitted&status=rejected", ["r_tim", "r_ana", "old"]),
        ("?team=quant", ["vgpu", "r_tim", "r_ana", "old"]),
        ("?mode=vgpu", ["vgpu"]),
        ("?mode=passthrough", ["r_tim", "r_ana", "old"]),
        ("?resource=t4-8q", ["vgpu"]),
        ("?resource=A100", ["r_tim", "r_ana", "old"]),
        ("?requester=ana", ["r_ana", "old"]),
        ("?requester=nobody", []),
        ("?ticket_id=JIRA-9", ["vgpu"]),
        ("?created_before=2026-01-10", ["old"]),
        ("?created_after=2026-01-11", ["vgpu", "r_tim", "r_ana"]),
        ("?created_after=2026-01-10&created_before=2026-01-10", ["old"]),
        ("?requester=tim&mode=passthrough", ["r_tim"]),
    ],
)
def test_filters_are_the_uis(
    world: Any, varied: dict[str, VMRequest], query: str, expected: list[str]
) -> None:
    rows = {"r_ana": world.r_ana, "r_tim": world.r_tim, **varied}
    response = send(api(world.ana, "read"), "GET", URL + query)
    assert ids(response) == [rows[name].pk for name in expected]
    assert response.json()["count"] == len(expected)


def test_team_filter_offers_only_visible_teams(world: Any) -> None:
    response = send(api(world.ana, "read"), "GET", URL + "?team=research")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "team"


def test_pagination(world: Any) -> None:
    client = api(world.root, "read")
    first = send(client, "GET", URL + "?page_size=2").json()
    assert (first["count"], first["previous"]) == (3, None)
    assert [r["id"] for r in first["results"]] == [world.r_olga.pk, world.r_tim.pk]
    assert first["next"] == "http://testserver/api/v1/vm-requests/?page=2&page_size=2"
    second = send(client, "GET", first["next"]).json()
    assert [r["id"] for r in second["results"]] == [world.r_ana.pk]
    assert (second["next"], second["previous"]) == (None, "http://testserver/api/v1/vm-requests/?page_size=2")


def test_request_as_the_api_shows_it(world: Any) -> None:
    approval.approve(world.r_ana, world.apa, "Fits.")
    VMRequest.objects.filter(pk=world.r_ana.pk).update(
        status="running", node_name="p1", ip_address="10.0.0.7"
    )
    data = send(api(world.ana, "read"), "GET", f"{URL}{world.r_ana.pk}/").json()
    assert {
        k: data[k]
        for k in ("status", "node_name", "ip_address", "ssh_command", "decided_by", "decision_note")
    } == {
        "status": "running",
        "node_name": "p1",
        "ip_address": "10.0.0.7",
        "ssh_command": f"virtctl ssh {world.image.login_user}@vmi/{world.r_ana.vmi_name} -n team-quant",
        "decided_by": "apa",
        "decision_note": "Fits.",
    }
    assert data["decided_at"].endswith("Z")


def _budget(client: Any, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = send(client, "GET", path)
    assert response.status_code == 200
    return len(queries)


def test_request_list_query_budget_does_not_grow_with_rows(world: Any) -> None:
    """One request against ten (with filer and decider set, each a different user)."""
    VMRequest.objects.exclude(pk=world.r_ana.pk).delete()
    client = api(world.ana, "read")
    send(client, "GET", "/api/v1/me/")  # records last_used, once a minute
    one = _budget(client, URL)
    for index in range(9):
        stored_request(
            world.quant,
            world.tim if index % 2 else world.ana,
            world.image,
            submitted_by=world.root if index % 3 else None,
            decided_by=world.apa if index % 2 else world.bob,
            status="approved",
        )
    ten = _budget(client, URL)
    assert len(ids(send(client, "GET", URL))) == 10
    # 2 token lookups (knox), count, the page with its related rows, and the caller's permissions
    # (user and group: 2, once per response) for allowed_actions
    assert one == ten == 6


def test_timeline_query_budget_does_not_grow_with_events(world: Any) -> None:
    client = api(world.ana, "read")
    send(client, "GET", "/api/v1/me/")
    world.r_ana.record("note", "one", actor=world.apa)
    one = _budget(client, f"{URL}{world.r_ana.pk}/events/")
    for index in range(9):
        world.r_ana.record("note", f"more {index}", actor=world.tim if index % 2 else world.ana)
    assert _budget(client, f"{URL}{world.r_ana.pk}/events/") == one == 5


def test_team_list_query_budget_does_not_grow_with_teams(world: Any) -> None:
    client = api(world.root, "read")
    send(client, "GET", "/api/v1/me/")
    two = _budget(client, "/api/v1/teams/")
    for index in range(8):
        team = stored_team(f"t{index}", members=(world.ana,), approvers=(world.apa,))
        GpuQuota.objects.create(team=team, mode="passthrough", gpu="", max_devices=index + 1)
    assert _budget(client, "/api/v1/teams/") == two == 7


# --- the timeline --------------------------------------------------------------------------------


def test_timeline_is_oldest_first_and_paginated(world: Any) -> None:
    created = post(api(world.ana), URL, create_body())
    pk = created.json()["id"]
    post(api(world.apa), f"{URL}{pk}/approve/", {"note": "Go."})
    post(api(world.ana), f"{URL}{pk}/cancel/", {"note": "Changed my mind."})
    client = api(world.tim, "read")
    events = send(client, "GET", f"{URL}{pk}/events/").json()
    assert events["count"] == 3
    assert [
        (e["actor"], e["action"], e["from_status"], e["to_status"], e["message"]) for e in events["results"]
    ] == [
        ("ana", "submit", "", "submitted", "Fine-tune the Q3 risk model."),
        ("apa", "approve", "submitted", "approved", "Go."),
        ("ana", "cancel", "approved", "cancelled", "Changed my mind."),
    ]
    assert events["results"][1]["data"]["placement"]["node"] == "p1"
    assert all(e["request"] == pk for e in events["results"])
    page = send(client, "GET", f"{URL}{pk}/events/?page=2&page_size=2").json()
    assert [e["action"] for e in page["results"]] == ["cancel"]


def test_timeline_names_policy_and_worker_actors(world: Any) -> None:
    world.r_ana.record("note", "checked", actor_label="policy")
    (event,) = send(api(world.ana), "GET", f"{URL}{world.r_ana.pk}/events/").json()["results"]
    assert event["actor"] == "policy"


# --- teams, images, me ---------------------------------------------------------------------------


def test_teams_show_quotas_and_the_callers_role(world: Any) -> None:
    GpuQuota.objects.create(
        team=world.quant, mode="passthrough", gpu="nvidia.com/GA100_A100_PCIE_40GB", max_devices=2
    )
    data = send(api(world.apa, "read"), "GET", "/api/v1/teams/quant/").json()
    assert data["role"] == ["member", "approver"]
    assert data["quotas"] == [
        {"mode": "passthrough", "gpu": "nvidia.com/GA100_A100_PCIE_40GB", "max_devices": 2}
    ]


def test_admin_sees_every_team_without_a_role(world: Any) -> None:
    data = send(api(world.root, "read"), "GET", "/api/v1/teams/").json()
    assert [(t["slug"], t["role"]) for t in data["results"]] == [("quant", []), ("research", [])]


def test_disabled_images_are_not_listed(world: Any) -> None:
    stored_image("Old CentOS", enabled=False)
    stored_image("Rocky 9", image="quay.io/containerdisks/rocky:9", os="Rocky Linux 9")
    client = api(world.ana, "read")
    assert [i["name"] for i in send(client, "GET", "/api/v1/images/").json()["results"]] == [
        "Rocky 9",
        "Ubuntu 22.04",
    ]
    assert send(client, "GET", "/api/v1/images/Old%20CentOS/").status_code == 404


@pytest.mark.parametrize(
    ("who", "roles", "teams", "permissions"),
    [
        ("apa", ["approver", "analyst"], [("quant", True, True)], (True, True, False, False)),
        ("bob", ["approver", "analyst"], [("research", True, True)], (True, True, False, False)),
        ("root", ["admin", "approver"], [], (True, True, True, True)),
    ],
)
def test_me(world: Any, who: str, roles: list[str], teams: list[Any], permissions: tuple[bool, ...]) -> None:
    data = send(api(getattr(world, who), "read", "approve", days=7), "GET", "/api/v1/me/").json()
    assert (data["username"], data["roles"]) == (who, roles)
    assert [(t["slug"], t["member"], t["approver"]) for t in data["teams"]] == teams
    perms = data["permissions"]
    assert (perms["request_vms"], perms["approve"], perms["submit_for_others"], perms["admin"]) == permissions
    token = data["token"]
    assert (token["name"], token["scopes"], len(token["prefix"])) == ("ticketing", ["read", "approve"], 15)
    expiry = datetime.fromisoformat(token["expiry"])
    assert timedelta(days=6, hours=23) < expiry - timezone.now() <= timedelta(days=7)
