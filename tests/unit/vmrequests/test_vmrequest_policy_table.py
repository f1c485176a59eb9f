"""THE policy table (issue #13): every action × every viewer × every status gives the same
answer in the service, the request page's buttons, the approval queue's buttons, the API action
(HTTP code) and ``allowed_actions`` (the API field and ``vmrequests.policy`` itself).

The expected answer is written down here, independently of ``vmrequests/policy.py``: ``ALLOWED``
says, per action, in which states which viewers may run it (``PORTAL_ALLOW_SELF_APPROVAL`` off).

Viewers of the request (team quant; the request is ana's, filed by the service account ``svc``):
``requester`` ana, ``filer`` svc, ``teammate`` tim, ``team_approver`` apa, ``own_approver`` amy
(an approver of quant, on her own request), ``other_team`` olga (analyst of research),
``other_approver`` bob (approver of research), ``admin`` root (superuser).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.utils import timezone

from tests.factories import portal_user
from tests.unit.api.conftest import api, post
from tests.vmrequest_factories import request_form_inventory, request_world, stored_request
from vmrequests import approval, policy
from vmrequests.models import VMRequest

pytestmark = pytest.mark.django_db

VIEWERS = [
    "requester",
    "filer",
    "teammate",
    "team_approver",
    "own_approver",
    "other_team",
    "other_approver",
    "admin",
]
#: Viewers who cannot see the request at all (404 on the page and in the API).
OUTSIDERS = {"other_team", "other_approver"}
#: The states a request can be in: every status, and running with an extension waiting.
STATES = [
    "submitted",
    "approved",
    "provisioning",
    "running",
    "running_extension",
    "deleting",
    "deleted",
    "rejected",
    "cancelled",
    "failed",
]
OWNERS = {"requester", "filer", "own_approver"}
DECIDERS = {"team_approver", "admin"}
RUNNING_STATES = {"provisioning", "running", "running_extension"}

#: action → state → viewers allowed. Self-approval (approve, reject, retry, extension decisions)
#: is refused to ``own_approver``; release is the owner's, terminate the approvers' (never on
#: their own VM); one extension at a time.
ALLOWED: dict[str, dict[str, set[str]]] = {
    "approve": {"submitted": DECIDERS},
    "reject": {"submitted": DECIDERS},
    "cancel": {"submitted": OWNERS | DECIDERS, "approved": OWNERS | DECIDERS},
    "release": dict.fromkeys(RUNNING_STATES, OWNERS),
    "terminate": dict.fromkeys(RUNNING_STATES, DECIDERS),
    "retry": {"failed": DECIDERS},
    "extend": {"running": OWNERS},
    "extension_approve": {"running_extension": DECIDERS},
    "extension_deny": {"running_extension": DECIDERS},
}
ACTIONS = list(ALLOWED)

#: action → (path segment of the page's form, API path segment, API body).
ROUTES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "approve": ("approve", "approve", {"note": "ok"}),
    "reject": ("reject", "reject", {"reason": "no budget"}),
    "cancel": ("cancel", "cancel", {}),
    "release": ("release", "release", {}),
    "terminate": ("terminate", "terminate", {"reason": "over budget"}),
    "retry": ("retry", "retry", {}),
    "extend": ("extend", "extend", {"days": 1, "reason": "more"}),
    "extension_approve": ("extension/approve", "extension-decision", {"approve": True}),
    "extension_deny": ("extension/reject", "extension-decision", {"approve": False}),
}

SERVICES: dict[str, Any] = {
    "approve": lambda req, user: approval.approve(req, user, "ok"),
    "reject": lambda req, user: approval.reject(req, user, "no budget"),
    "cancel": lambda req, user: approval.cancel(req, user),
    "release": lambda req, user: approval.release(req, user),
    "terminate": lambda req, user: approval.terminate(req, user, "over budget"),
    "retry": lambda req, user: approval.retry(req, user),
    "extend": lambda req, user: approval.request_extension(req, user, 1, "more"),
    "extension_approve": lambda req, user: approval.decide_extension(req, user, approve=True),
    "extension_deny": lambda req, user: approval.decide_extension(req, user, approve=False),
}


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Tasks the services send on commit, recorded instead of reaching a broker."""
    from vmrequests import tasks

    calls: dict[str, list[int]] = {"provision": [], "delete_vmi": []}
    monkeypatch.setattr(tasks.provision, "delay", lambda pk: calls["provision"].append(pk))
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: calls["delete_vmi"].append(pk))
    return calls


class _Rollback(Exception):
    """Raised to undo what a service call wrote."""


def build(state: str, viewer: str) -> tuple[Any, VMRequest]:
    """The world (``request_world`` on ``request_form_inventory``: 3 free A100s on p1) plus amy
    and svc, and the request in ``state``: ana's, or amy's for ``own_approver``; filed by svc."""
    request_form_inventory()
    w = request_world()
    w.amy = portal_user("approver", "amy")
    w.quant.members.add(w.amy)
    w.quant.approvers.add(w.amy)
    w.svc = portal_user("analyst", "svc")
    w.users = {
        "requester": w.ana,
        "filer": w.svc,
        "teammate": w.tim,
        "team_approver": w.apa,
        "own_approver": w.amy,
        "other_team": w.olga,
        "other_approver": w.bob,
        "admin": w.root,
    }
    requester = w.amy if viewer == "own_approver" else w.ana
    req = stored_request(w.quant, requester, w.image, submitted_by=w.svc)
    status = "running" if state == "running_extension" else state
    fields: dict[str, Any] = {"status": status}
    if status in {"running", "deleting", "deleted"}:
        fields.update(node_name="p1", lease_end=timezone.now() + timedelta(days=5))
    if state == "running_extension":
        fields.update(extension_days_requested=3, extension_reason="rerun")
    if status == "failed":
        fields["failure_reason"] = "The image could not be pulled."
    VMRequest.objects.filter(pk=req.pk).update(**fields)
    return w, VMRequest.objects.select_related("team", "requester").get(pk=req.pk)


def service_allows(action: str, req: VMRequest, user: Any) -> bool:
    """Run the service and undo it; True when it was accepted, False on ``NotAllowed``."""
    try:
        with transaction.atomic():
            SERVICES[action](req, user)
            raise _Rollback
    except _Rollback:
        return True
    except policy.NotAllowed:
        return False


def page_forms(client: Client, req: VMRequest) -> set[str] | None:
    """The action forms the request page draws (None when the page is a 404)."""
    response = client.get(f"/requests/{req.pk}/")
    if response.status_code == 404:
        return None
    assert response.status_code == 200
    main = response.content.decode().split("<main>", 1)[1]
    return set(re.findall(rf'method="post" action="/requests/{req.pk}/([a-z/]+)/"', main))


def queue_forms(client: Client, req: VMRequest) -> set[str] | None:
    """The action forms of ``req``'s queue entry (None when the queue is a 403, empty set when
    the request is not in the queue)."""
    response = client.get("/requests/queue/")
    if response.status_code == 403:
        return None
    html = response.content.decode()
    item = re.search(rf'<article class="card queue-item" id="request-{req.pk}">(.*?)</article>', html, re.S)
    if item is None:
        return set()
    return set(re.findall(rf'action="/requests/{req.pk}/([a-z/]+)/"', item.group(1)))


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("viewer", VIEWERS)
def test_policy_table(viewer: str, state: str, action: str, enqueued: dict[str, list[int]]) -> None:
    cache.clear()  # the API throttle counts per token; primary keys repeat between tests
    w, req = build(state, viewer)
    user = w.users[viewer]
    expected = viewer in ALLOWED[action].get(state, set())
    form, api_path, body = ROUTES[action]

    # policy itself
    decision = policy.allowed_actions(user, req)[action]
    assert decision.allowed is expected, decision
    assert policy.decision_for(user, req, action) == decision
    assert (decision.reason == "") is expected
    # the service
    assert service_allows(action, req, user) is expected
    # the request page and the queue
    browser = Client()
    browser.force_login(user)
    forms = page_forms(browser, req)
    queue = queue_forms(browser, req)
    if viewer in OUTSIDERS:
        assert forms is None
    else:
        assert forms is not None and (form in forms) is expected
    if viewer in DECIDERS | {"own_approver", "other_approver"}:
        in_queue = queue is not None and form in queue
        assert in_queue is (expected and action in ("approve", "reject")), queue
    else:
        assert queue is None
    # the API: allowed_actions on the request, then the action itself
    client = api(user)
    detail = client.get(f"/api/v1/vm-requests/{req.pk}/")
    response = post(client, f"/api/v1/vm-requests/{req.pk}/{api_path}/", body)
    if viewer in OUTSIDERS:
        assert (detail.status_code, response.status_code) == (404, 404)
        return
    field = detail.json()["allowed_actions"][action]
    assert field == {"allowed": expected, "reason": decision.reason, "kind": decision.kind}
    if expected:
        assert response.status_code == 200, response.content
    else:
        code = 409 if decision.kind in ("status", "state") else 403
        assert response.status_code == code, response.content
        assert response.json()["detail"] == decision.reason
