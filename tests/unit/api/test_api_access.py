"""Who may call what, for every endpoint and action of ``/api/v1/``: anonymous (401 with
``WWW-Authenticate``), a token without the needed scope (403 ``missing-scope``), an expired token
(401, and knox deletes it), a caller of another team (404 for objects it may not see), and the
allowed caller (200/201 with the values the call produced)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.utils import timezone

from portal.models import ApiToken
from tests.unit.api.conftest import ALL_SCOPES, api, create_body, expired_api, problem, send
from tests.vmrequest_factories import A100_PT
from vmrequests.models import VMRequest, VMRequestEvent

pytestmark = pytest.mark.django_db

LEASE_END = timezone.now().replace(microsecond=0) + timedelta(days=5)


def _running(w: Any) -> None:
    """r_ana runs on p1 at 10.0.0.7, lease ending at ``LEASE_END``."""
    VMRequest.objects.filter(pk=w.r_ana.pk).update(
        status="running", node_name="p1", ip_address="10.0.0.7", lease_end=LEASE_END
    )


def _extension_pending(w: Any) -> None:
    _running(w)
    VMRequest.objects.filter(pk=w.r_ana.pk).update(extension_days_requested=3, extension_reason="Rerun.")


def _failed(w: Any) -> None:
    """r_ana failed while provisioning (its devices freed)."""
    VMRequest.objects.filter(pk=w.r_ana.pk).update(status="failed", failure_reason="Image pull failed.")


def _note(w: Any) -> None:
    w.r_ana.record("note", "Asked on the ticket.", actor=w.apa)


def _detail(w: Any, suffix: str = "") -> str:
    return f"/api/v1/vm-requests/{w.r_ana.pk}/{suffix}"


# --- what the allowed caller gets ---------------------------------------------------------------


def _check_list(w: Any, data: Any) -> None:
    assert data["count"] == 2
    assert [r["id"] for r in data["results"]] == [w.r_tim.pk, w.r_ana.pk]  # newest first
    assert [r["requester"] for r in data["results"]] == ["tim", "ana"]


def _check_create(w: Any, data: Any) -> None:
    req = VMRequest.objects.get(ticket_id="INC0001")
    assert data["id"] == req.pk
    assert (data["status"], data["team"], data["requester"], data["submitted_by"]) == (
        "submitted",
        "quant",
        "ana",
        None,
    )
    assert (data["resource_name"], data["device_count"], data["cpu_cores"], data["memory_gib"]) == (
        A100_PT,
        2,
        8,
        64,
    )
    assert (data["vmi_namespace"], data["vmi_name"]) == ("team-quant", f"ana-vm-{req.pk}")
    assert data["url"] == f"http://testserver/requests/{req.pk}/"


def _check_retrieve(w: Any, data: Any) -> None:
    assert (data["id"], data["status"], data["requester"], data["vmi_name"]) == (
        w.r_ana.pk,
        "submitted",
        "ana",
        f"ana-vm-{w.r_ana.pk}",
    )
    assert data["ssh_command"] is None


def _check_events(w: Any, data: Any) -> None:
    assert data["count"] == 1
    (event,) = data["results"]
    assert {k: event[k] for k in ("request", "actor", "action", "from_status", "to_status", "message")} == {
        "request": w.r_ana.pk,
        "actor": "apa",
        "action": "note",
        "from_status": "submitted",
        "to_status": "submitted",
        "message": "Asked on the ticket.",
    }


def _check_approve(w: Any, data: Any) -> None:
    assert (data["status"], data["decided_by"], data["decision_note"]) == ("approved", "apa", "Fits.")
    event = VMRequestEvent.objects.filter(request=w.r_ana, action="approve").get()
    assert (event.actor, event.data["placement"]["node"]) == (w.apa, "p1")


def _check_reject(w: Any, data: Any) -> None:
    assert (data["status"], data["decided_by"], data["decision_note"]) == ("rejected", "apa", "No budget.")


def _check_cancel(w: Any, data: Any) -> None:
    assert data["status"] == "cancelled"
    event = VMRequestEvent.objects.filter(request=w.r_ana, action="cancel").get()
    assert (event.actor, event.message) == (w.ana, "Not needed.")


def _check_release(w: Any, data: Any) -> None:
    assert (data["status"], data["deletion_reason"]) == ("deleting", "released")


def _check_terminate(w: Any, data: Any) -> None:
    assert (data["status"], data["deletion_reason"]) == ("deleting", "terminated")
    event = VMRequestEvent.objects.filter(request=w.r_ana, action="start_deletion").get()
    assert (event.actor, event.message) == (w.apa, "Over budget.")


def _check_retry(w: Any, data: Any) -> None:
    assert (data["status"], data["failure_reason"], data["decided_by"]) == ("approved", "", "apa")


def _check_extend(w: Any, data: Any) -> None:
    assert (data["status"], data["extension_days_requested"], data["extension_reason"]) == (
        "running",
        3,
        "One more week of backtests.",
    )


def _check_extension_decision(w: Any, data: Any) -> None:
    assert data["extension_days_requested"] is None
    assert data["lease_end"] == (LEASE_END + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_teams(w: Any, data: Any) -> None:
    assert data["count"] == 1
    assert data["results"] == [
        {
            "slug": "quant",
            "name": "Quant",
            "namespace": "team-quant",
            "default_lease_days": 7,
            "max_lease_days": 30,
            "quotas": [],
            "role": ["member"],
        }
    ]


def _check_team(w: Any, data: Any) -> None:
    assert (data["slug"], data["namespace"], data["role"]) == ("quant", "team-quant", ["member"])


def _check_images(w: Any, data: Any) -> None:
    assert [i["name"] for i in data["results"]] == ["Ubuntu 22.04"]


def _check_image(w: Any, data: Any) -> None:
    assert data == {
        "name": "Ubuntu 22.04",
        "image": "quay.io/containerdisks/ubuntu:22.04",
        "os": "Ubuntu 22.04",
        "login_user": w.image.login_user,
        "min_memory_gib": 8,
        "default_cpu_cores": 4,
        "default_memory_gib": 16,
    }


def _check_me(w: Any, data: Any) -> None:
    assert (data["username"], data["roles"]) == ("ana", ["analyst"])
    assert data["teams"] == [{"slug": "quant", "name": "Quant", "member": True, "approver": False}]
    assert data["permissions"] == {
        "request_vms": True,
        "approve": False,
        "submit_for_others": False,
        "admin": False,
    }
    assert data["token"]["scopes"] == ["read"]


def _check_inventory_root(w: Any, data: Any) -> None:
    assert data == {
        name: f"http://testserver/api/v1/inventory/{name}/"
        for name in ("nodes", "summary", "vgpu-configs", "permitted-devices")
    }


def _check_nodes(w: Any, data: Any) -> None:
    assert [n["name"] for n in data["results"]] == ["c1", "p1", "p2", "v1", "v2"]


def _check_node(w: Any, data: Any) -> None:
    assert (data["name"], data["workload_mode"]) == ("p1", "vm-passthrough")


def _check_vgpu_configs(w: Any, data: Any) -> None:
    assert sorted(c["name"] for c in data["results"]) == ["T4-16Q", "T4-8Q"]


def _check_permitted(w: Any, data: Any) -> None:
    assert data["results"] == []


def _check_summary(w: Any, data: Any) -> None:
    passthrough = data["modes"]["vm-passthrough"]
    assert (passthrough["nodes"], passthrough["total"], passthrough["used"], passthrough["free"]) == (
        2,
        6,
        1,
        3,
    )


@dataclass(frozen=True)
class Endpoint:
    """One call of the API.

    ``caller``: the ``world`` user allowed to make it (the token has exactly ``scope``).
    ``outsider``: a user of the other team who may not see the object (404), or None when the
    endpoint is not about one team's object. ``setup`` brings r_ana into the state the call needs.
    """

    method: str
    path: Callable[[Any], str]
    scope: str
    caller: str
    status: int
    check: Callable[[Any, Any], None]
    body: dict[str, Any] | None = None
    setup: Callable[[Any], None] | None = None
    outsider: str | None = None
    untouched: dict[str, Any] = field(default_factory=dict)


ENDPOINTS: dict[str, Endpoint] = {
    "list": Endpoint("GET", lambda w: "/api/v1/vm-requests/", "read", "ana", 200, _check_list),
    "create": Endpoint(
        "POST", lambda w: "/api/v1/vm-requests/", "write", "ana", 201, _check_create, body=create_body()
    ),
    "retrieve": Endpoint("GET", _detail, "read", "ana", 200, _check_retrieve, outsider="olga"),
    "events": Endpoint(
        "GET",
        lambda w: _detail(w, "events/"),
        "read",
        "ana",
        200,
        _check_events,
        setup=_note,
        outsider="olga",
    ),
    "approve": Endpoint(
        "POST",
        lambda w: _detail(w, "approve/"),
        "approve",
        "apa",
        200,
        _check_approve,
        body={"note": "Fits."},
        outsider="bob",
    ),
    "reject": Endpoint(
        "POST",
        lambda w: _detail(w, "reject/"),
        "approve",
        "apa",
        200,
        _check_reject,
        body={"reason": "No budget."},
        outsider="bob",
    ),
    "cancel": Endpoint(
        "POST",
        lambda w: _detail(w, "cancel/"),
        "write",
        "ana",
        200,
        _check_cancel,
        body={"note": "Not needed."},
        outsider="olga",
    ),
    "release": Endpoint(
        "POST",
        lambda w: _detail(w, "release/"),
        "write",
        "ana",
        200,
        _check_release,
        body={},
        setup=_running,
        outsider="olga",
    ),
    "terminate": Endpoint(
        "POST",
        lambda w: _detail(w, "terminate/"),
        "approve",
        "apa",
        200,
        _check_terminate,
        body={"reason": "Over budget."},
        setup=_running,
        outsider="bob",
    ),
    "retry": Endpoint(
        "POST",
        lambda w: _detail(w, "retry/"),
        "approve",
        "apa",
        200,
        _check_retry,
        body={"note": "Image fixed."},
        setup=_failed,
        outsider="bob",
    ),
    "extend": Endpoint(
        "POST",
        lambda w: _detail(w, "extend/"),
        "write",
        "ana",
        200,
        _check_extend,
        body={"days": 3, "reason": "One more week of backtests."},
        setup=_running,
        outsider="olga",
    ),
    "extension-decision": Endpoint(
        "POST",
        lambda w: _detail(w, "extension-decision/"),
        "approve",
        "apa",
        200,
        _check_extension_decision,
        body={"approve": True, "note": "Granted."},
        setup=_extension_pending,
        outsider="bob",
    ),
    "teams": Endpoint("GET", lambda w: "/api/v1/teams/", "read", "ana", 200, _check_teams),
    "team": Endpoint(
        "GET", lambda w: "/api/v1/teams/quant/", "read", "ana", 200, _check_team, outsider="olga"
    ),
    "images": Endpoint("GET", lambda w: "/api/v1/images/", "read", "ana", 200, _check_images),
    "image": Endpoint(
        "GET", lambda w: "/api/v1/images/" + quote("Ubuntu 22.04") + "/", "read", "ana", 200, _check_image
    ),
    "me": Endpoint("GET", lambda w: "/api/v1/me/", "read", "ana", 200, _check_me),
    "inventory-root": Endpoint(
        "GET", lambda w: "/api/v1/inventory/", "read", "ana", 200, _check_inventory_root
    ),
    "inventory-nodes": Endpoint(
        "GET", lambda w: "/api/v1/inventory/nodes/", "read", "ana", 200, _check_nodes
    ),
    "inventory-node": Endpoint(
        "GET", lambda w: "/api/v1/inventory/nodes/p1/", "read", "ana", 200, _check_node
    ),
    "inventory-summary": Endpoint(
        "GET", lambda w: "/api/v1/inventory/summary/", "read", "ana", 200, _check_summary
    ),
    "inventory-vgpu-configs": Endpoint(
        "GET", lambda w: "/api/v1/inventory/vgpu-configs/", "read", "ana", 200, _check_vgpu_configs
    ),
    "inventory-permitted-devices": Endpoint(
        "GET", lambda w: "/api/v1/inventory/permitted-devices/", "read", "ana", 200, _check_permitted
    ),
}
NAMES = list(ENDPOINTS)
WITH_OBJECT = [name for name, e in ENDPOINTS.items() if e.outsider]


def _prepare(w: Any, name: str) -> Endpoint:
    endpoint = ENDPOINTS[name]
    if endpoint.setup is not None:
        endpoint.setup(w)
    return endpoint


def _state(w: Any) -> tuple[Any, ...]:
    """What a refused call must leave as it was: requests, r_ana's row and the timeline."""
    r = VMRequest.objects.get(pk=w.r_ana.pk)
    return (
        VMRequest.objects.count(),
        r.status,
        r.decided_by_id,
        r.extension_days_requested,
        r.lease_end,
        VMRequestEvent.objects.count(),
    )


@pytest.mark.parametrize("name", NAMES)
def test_allowed_caller_with_exactly_the_needed_scope(world: Any, name: str) -> None:
    endpoint = _prepare(world, name)
    client = api(getattr(world, endpoint.caller), endpoint.scope)
    response = send(client, endpoint.method, endpoint.path(world), endpoint.body)
    assert response.status_code == endpoint.status, response.content
    assert response["Content-Type"] == "application/json"
    endpoint.check(world, json.loads(response.content))


@pytest.mark.parametrize("name", NAMES)
def test_anonymous_is_401_with_www_authenticate(world: Any, name: str) -> None:
    endpoint = _prepare(world, name)
    before = _state(world)
    response = send(Client(), endpoint.method, endpoint.path(world), endpoint.body)
    body = problem(response, 401)
    assert response["WWW-Authenticate"] == "Token"
    assert body["detail"] == "Authentication credentials were not provided."
    assert _state(world) == before


@pytest.mark.parametrize("name", NAMES)
def test_token_without_the_scope_is_403_missing_scope(world: Any, name: str) -> None:
    endpoint = _prepare(world, name)
    before = _state(world)
    others = [s for s in ALL_SCOPES if s != endpoint.scope]
    client = api(getattr(world, endpoint.caller), *others)
    response = send(client, endpoint.method, endpoint.path(world), endpoint.body)
    body = problem(response, 403, "missing-scope")
    assert body["required_scope"] == endpoint.scope
    assert body["detail"] == (
        f"This token has the scopes {', '.join(others)}; this call needs the {endpoint.scope} scope."
    )
    assert _state(world) == before


@pytest.mark.parametrize("name", NAMES)
def test_expired_token_is_401_and_deleted(world: Any, name: str) -> None:
    endpoint = _prepare(world, name)
    before = _state(world)
    caller = getattr(world, endpoint.caller)
    response = send(expired_api(caller), endpoint.method, endpoint.path(world), endpoint.body)
    problem(response, 401)
    assert response["WWW-Authenticate"] == "Token"
    assert ApiToken.objects.filter(user=caller).count() == 0  # knox removes expired tokens
    assert _state(world) == before


@pytest.mark.parametrize("name", WITH_OBJECT)
def test_caller_of_another_team_gets_404(world: Any, name: str) -> None:
    endpoint = _prepare(world, name)
    before = _state(world)
    client = api(getattr(world, str(endpoint.outsider)))
    response = send(client, endpoint.method, endpoint.path(world), endpoint.body)
    body = problem(response, 404)
    assert body["detail"] == "No such object, or you may not see it."
    assert _state(world) == before


def test_lists_of_another_team_show_only_its_own_rows(world: Any) -> None:
    client = api(world.olga, "read")
    requests = send(client, "GET", "/api/v1/vm-requests/").json()
    assert [r["id"] for r in requests["results"]] == [world.r_olga.pk]
    teams = send(client, "GET", "/api/v1/teams/").json()
    assert [t["slug"] for t in teams["results"]] == ["research"]


def test_create_in_another_team_is_a_400_on_team(world: Any) -> None:
    response = send(api(world.olga, "write"), "POST", "/api/v1/vm-requests/", create_body())
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [
        {"field": "team", "code": "invalid_choice", "detail": "Choose one of your teams."}
    ]
    assert not VMRequest.objects.filter(ticket_id="INC0001").exists()


def test_admin_sees_and_decides_every_team(world: Any) -> None:
    client = api(world.root)
    listed = send(client, "GET", "/api/v1/vm-requests/").json()
    assert [r["id"] for r in listed["results"]] == [world.r_olga.pk, world.r_tim.pk, world.r_ana.pk]
    response = send(
        client, "POST", f"/api/v1/vm-requests/{world.r_olga.pk}/reject/", {"reason": "Duplicate."}
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["decided_by"]) == ("rejected", "root")


def test_browser_session_needs_no_token_scope(world: Any) -> None:
    client = Client()
    client.force_login(world.ana)
    response = send(client, "POST", "/api/v1/vm-requests/", create_body())
    assert response.status_code == 201
    assert response.json()["requester"] == "ana"
    me = send(client, "GET", "/api/v1/me/").json()
    assert (me["username"], me["token"]) == ("ana", None)


def test_unknown_token_is_401(world: Any) -> None:
    client = Client(headers={"Authorization": "Token " + "0" * 64})
    problem(send(client, "GET", "/api/v1/me/"), 401)


def test_token_use_is_recorded_in_last_used(world: Any) -> None:
    client = api(world.ana, "read")
    token = ApiToken.objects.get(user=world.ana)
    assert token.last_used is None
    before = timezone.now()
    assert send(client, "GET", "/api/v1/me/").status_code == 200
    token.refresh_from_db()
    assert token.last_used is not None
    assert before <= token.last_used <= timezone.now()
