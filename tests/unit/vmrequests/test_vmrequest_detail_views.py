"""The request page (facts, decision, how to connect, timeline, actions per role), its live status
badge (200 while open, 286 once terminal, 404 when not visible) and the approve / reject / cancel
actions with their refusals (404 outsider, 403 not allowed, 405 GET, lost race, blank reason)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gpuinventory.models import Reservation
from tests.vmrequest_factories import A100_PT, a100_node, request_world, ssh_public_key
from vmrequests import approval
from vmrequests.models import AutoApprovalRule, GpuQuota, VMRequest, VMRequestEvent
from vmrequests.sshkeys import describe_ssh_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> Any:
    """``request_world`` plus one A100 node with one free GPU and a quota of 4 GPUs for quant."""
    w = request_world()
    a100_node("p1", allocatable=1)
    GpuQuota.objects.create(team=w.quant, max_devices=4)
    return w


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def submit(w: Any, requester: Any = None, **fields: Any) -> VMRequest:
    """Submit one A100 request for quant through the service (writes the submit event)."""
    values: dict[str, Any] = {
        "team": w.quant,
        "mode": "passthrough",
        "resource_name": A100_PT,
        "vgpu_type": "",
        "gpu_model": "A100 PCIe 40GB",
        "device_count": 1,
        "cpu_cores": 4,
        "memory_gib": 16,
        "image": w.image,
        "ssh_public_key": ssh_public_key(),
        "lease_days": 7,
        "justification": "train a model",
    }
    values.update(fields)
    return approval.submit(approval.RequestSpec(**values), requester or w.ana)


def page(client: Client, req: VMRequest) -> str:
    response = client.get(f"/requests/{req.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def facts(html: str, section: str) -> dict[str, str]:
    """``<dt>``/``<dd>`` pairs of one card, tags stripped and whitespace collapsed."""
    match = re.search(rf'<section class="card {section}">(.*?)</section>', html, re.S)
    assert match, section
    pairs = re.findall(r"<dt>(.*?)</dt>\s*<dd[^>]*>(.*?)</dd>", match.group(1), re.S)
    return {dt: " ".join(re.sub(r"<[^>]+>", " ", dd).split()) for dt, dd in pairs}


def forms(html: str) -> list[str]:
    """Action URLs of the POST forms in the page's main part."""
    main = html.split("<main>", 1)[1]
    return re.findall(r'<form class="decide [a-z]+" method="post" action="([^"]+)"', main)


def timeline(html: str) -> list[tuple[int, str, str]]:
    """(event pk, action, text without the time) of each timeline entry."""
    items = re.findall(
        r'<li id="event-(\d+)" class="event action-([a-z_]+)">(.*?)</li>\s*(?=<li id="event-|</ol>)',
        html,
        re.S,
    )
    out = []
    for pk, action, body in items:
        body = re.sub(r"<time[^>]*>.*?</time>", "", body, flags=re.S)
        out.append((int(pk), action, " ".join(re.sub(r"<[^>]+>", " ", body).split())))
    return out


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


# --- access -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "status/"])
def test_anonymous_is_sent_to_login(world: Any, suffix: str) -> None:
    path = f"/requests/{world.r_ana.pk}/{suffix}"
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


@pytest.mark.parametrize(
    ("user", "status"),
    [("ana", 200), ("tim", 200), ("apa", 200), ("olga", 404), ("bob", 404), ("root", 200)],
)
@pytest.mark.parametrize("suffix", ["", "status/"])
def test_page_and_status_visibility(world: Any, user: str, status: int, suffix: str) -> None:
    response = client_for(getattr(world, user)).get(f"/requests/{world.r_ana.pk}/{suffix}")
    assert response.status_code == status


def test_unknown_request_is_404(world: Any) -> None:
    assert client_for(world.root).get("/requests/999999/").status_code == 404
    assert client_for(world.root).get("/requests/999999/status/").status_code == 404


# --- what the page shows ------------------------------------------------------------------------


def test_submitted_request_facts(world: Any) -> None:
    req = submit(world, ticket_source="jira", ticket_id="OPS-7", justification="line one\nline two")
    html = page(client_for(world.ana), req)
    assert f"<h1>Request #{req.pk} <code>ana-vm-{req.pk}</code>" in html
    asked = facts(html, "asked")
    del asked["Submitted"]  # the local time of the test run
    assert asked == {
        "Requester": "ana",
        "Team": "Quant",
        "Mode": "passthrough (whole GPU)",
        "GPU": f"{A100_PT} (A100 PCIe 40GB)",
        "Devices": "1",
        "CPU cores": "4",
        "Memory": "16 GiB",
        "Image": "Ubuntu 22.04 (Ubuntu 22.04)",
        "Lease": "7 days",
        "Justification": "line one line two",
        "Ticket": "jira OPS-7",
        "SSH key": describe_ssh_key(req.ssh_public_key),
    }
    assert "line one<br>line two" in html
    assert describe_ssh_key(req.ssh_public_key).startswith("ED25519 (256 bits) analyst@laptop, SHA256:")
    outcome = facts(html, "outcome")
    assert outcome["Decision"] == "not decided yet"
    assert outcome["VMI"] == f"team-quant/ana-vm-{req.pk}"
    assert (outcome["Node"], outcome["IP address"]) == ("—", "—")
    assert outcome["Lease end"].startswith("not started; ")
    assert outcome["Lease end"].endswith(" if it started now")
    assert "virtctl" not in html


def test_a_stored_key_that_no_longer_validates_shows_type_and_comment(world: Any) -> None:
    html = page(client_for(world.ana), world.r_ana)  # "ssh-ed25519 AAAA test"
    assert facts(html, "asked")["SSH key"] == "ssh-ed25519 test"


def test_running_request_shows_decision_node_ip_lease_and_how_to_connect(world: Any) -> None:
    req = submit(world)
    approval.approve(req, world.apa, "ok, go")
    req.start_provisioning("creating the VMI")
    req.mark_running("p1", "10.0.0.5")
    VMRequest.objects.filter(pk=req.pk).update(
        decided_at=datetime(2026, 1, 10, 9, 30, tzinfo=UTC),
        lease_end=datetime(2026, 1, 17, 9, 30, tzinfo=UTC),
    )
    html = page(client_for(world.tim), req)
    outcome = facts(html, "outcome")
    assert outcome == {
        "Decision": "apa, Jan. 10, 2026, 9:30 a.m. UTC ok, go",
        "VMI": f"team-quant/ana-vm-{req.pk}",
        "Node": "p1",
        "IP address": "10.0.0.5",
        "Lease end": "Jan. 17, 2026, 9:30 a.m. UTC",
    }
    commands = re.search(
        r'<pre class="commands connect"><code id="connect-commands">(.*?)</code></pre>', html, re.S
    )
    assert commands is not None
    assert commands.group(1).splitlines() == [
        f"virtctl ssh analyst@vmi/ana-vm-{req.pk} -n team-quant",
        f"virtctl console ana-vm-{req.pk} -n team-quant",
    ]


def test_timeline_lists_every_event_with_actor_transition_and_approval_details(world: Any) -> None:
    req = submit(world)
    approval.approve(req, world.apa, "ok, go")
    req.start_provisioning("creating the VMI")
    req.mark_running("p1", "10.0.0.5")
    html = page(client_for(world.ana), req)
    items = timeline(html)
    events = list(req.events.order_by("created", "pk"))
    assert [pk for pk, _, _ in items] == [e.pk for e in events]
    assert [text for _, _, text in items] == [
        "submitted by ana train a model",
        "approved by apa submitted → approved ok, go "
        f"Placement: node p1, {A100_PT}. Quota: any GPU: 0 of 4 used, 1 after approval",
        "provisioning started by worker approved → provisioning creating the VMI",
        "running by worker provisioning → running Node p1, IP 10.0.0.5.",
    ]
    assert [a for _, a, _ in items] == ["submit", "approve", "start_provisioning", "mark_running"]


def test_auto_approval_is_shown_as_decided_by_policy(world: Any) -> None:
    AutoApprovalRule.objects.create(team=world.quant, mode="passthrough", max_devices=1)
    req = submit(world)
    assert req.status == "approved"
    html = page(client_for(world.ana), req)
    assert facts(html, "outcome")["Decision"].startswith("policy, ")
    assert "approved automatically" in html
    assert '<span class="actor">by policy</span>' in html
    assert "Auto-approved by rule: passthrough (whole GPU) up to 1 device(s)" in html


def test_re_profile_placement_in_the_timeline(world: Any) -> None:
    req = world.r_olga
    VMRequestEvent.objects.create(
        request=req,
        actor=world.bob,
        action="approve",
        from_status="submitted",
        to_status="approved",
        data={
            "placement": {
                "fits": True,
                "node": "v1",
                "resource_name": "",
                "reprofile": {"node": "v1", "from": "", "to": "T4-16Q", "instances": 2},
            },
            "quotas": [],
        },
    )
    html = page(client_for(world.olga), req)
    assert (
        "<li>Placement: re-profile node v1 from vGPU config (default) to T4-16Q (2 instances).</li>" in html
    )


def test_failed_request_shows_the_reason(world: Any) -> None:
    req = submit(world)
    approval.approve(req, world.apa)
    req.start_provisioning()
    req.mark_failed("The image could not be pulled.")
    html = page(client_for(world.ana), req)
    assert '<p class="error failure">Provisioning failed: The image could not be pulled.</p>' in html
    assert facts(html, "outcome")["Failure reason"] == "The image could not be pulled."


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("ana", ["cancel"]),  # the requester
        ("tim", []),  # a teammate may see it, not act on it
        ("apa", ["approve", "reject", "cancel"]),  # an approver of the team
        ("root", ["approve", "reject", "cancel"]),  # admin
    ],
)
def test_actions_offered_per_role_while_submitted(world: Any, user: str, expected: list[str]) -> None:
    html = page(client_for(getattr(world, user)), world.r_ana)
    assert forms(html) == [f"/requests/{world.r_ana.pk}/{action}/" for action in expected]
    if "approve" in expected:
        assert "Runs now on p1 (1 free there)." in html
        assert "any GPU: 0 of 4 used, 1 after approval" in html
        assert (
            f'<textarea id="reject-reason-{world.r_ana.pk}" name="reason" rows="2" maxlength="2000" required>'
            in html
        )
    else:
        assert "Where it would run" not in html


@pytest.mark.parametrize(
    ("status", "expected"), [("approved", ["cancel"]), ("running", []), ("rejected", [])]
)
def test_actions_offered_by_status(world: Any, status: str, expected: list[str]) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status=status)
    html = page(client_for(world.apa), world.r_ana)
    assert forms(html) == [f"/requests/{world.r_ana.pk}/{action}/" for action in expected]


def test_page_has_no_inline_scripts_or_styles(world: Any) -> None:
    html = page(client_for(world.root), submit(world))
    assert html.count("<script") == html.count("<script src=")
    assert "<style" not in html and " style=" not in html


# --- live status ---------------------------------------------------------------------------------


def test_page_polls_the_status_while_open_and_not_once_terminal(world: Any) -> None:
    client = client_for(world.ana)
    html = page(client, world.r_ana)
    assert (
        f'<span id="status-{world.r_ana.pk}" class="badge tone-waiting status-badge" role="status"\n'
        f'      hx-get="/requests/{world.r_ana.pk}/status/?shown=submitted" hx-trigger="every 3s" '
        'hx-swap="outerHTML">submitted</span>'
    ) in html
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status="cancelled")
    html = page(client, world.r_ana)
    assert (
        f'<span id="status-{world.r_ana.pk}" class="badge tone-muted status-badge" role="status">cancelled</span>'
        in html
    )
    assert "hx-trigger" not in html.split("<main>", 1)[1]


def test_status_partial_keeps_polling_while_open(world: Any) -> None:
    response = client_for(world.ana).get(
        f"/requests/{world.r_ana.pk}/status/?shown=submitted", headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.startswith(f'<span id="status-{world.r_ana.pk}" class="badge tone-waiting status-badge"')
    assert f'hx-get="/requests/{world.r_ana.pk}/status/?shown=submitted" hx-trigger="every 3s"' in body
    assert "<html" not in body
    assert "HX-Refresh" not in response


@pytest.mark.parametrize(
    ("status", "tone"), [("rejected", "bad"), ("cancelled", "muted"), ("failed", "bad"), ("deleted", "muted")]
)
def test_status_partial_answers_286_with_the_final_badge_once_terminal(
    world: Any, status: str, tone: str
) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status=status)
    response = client_for(world.ana).get(
        f"/requests/{world.r_ana.pk}/status/?shown={status}", headers={"HX-Request": "true"}
    )
    assert response.status_code == 286
    assert response.content.decode() == (
        f'<span id="status-{world.r_ana.pk}" class="badge tone-{tone} status-badge" role="status">{status}</span>\n'
    )


def swap_headers(response: Any) -> tuple[str, str, str]:
    return (response["HX-Retarget"], response["HX-Reselect"], response["HX-Reswap"])


def test_status_change_makes_htmx_swap_the_page_in_place(world: Any) -> None:
    client = client_for(world.ana)
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status="approved")
    path = f"/requests/{world.r_ana.pk}/status/?shown=submitted"
    response = client.get(path, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert swap_headers(response) == ("#request-page", "#request-page", "outerHTML")
    assert "HX-Refresh" not in response
    body = response.content.decode()
    # The whole request page: the region htmx selects, with the new badge polling on from the
    # new status, and the facts and timeline below it.
    assert body.count('<div id="request-page">') == 1
    assert f'hx-get="/requests/{world.r_ana.pk}/status/?shown=approved" hx-trigger="every 3s"' in body
    assert ">approved</span>" in body and '<ol class="timeline">' in body
    plain = client.get(path)  # a plain GET gets the badge only
    assert "HX-Retarget" not in plain and plain.content.decode().startswith(
        f'<span id="status-{world.r_ana.pk}"'
    )
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status="rejected")
    response = client.get(path, headers={"HX-Request": "true"})
    assert response.status_code == 286
    assert swap_headers(response) == ("#request-page", "#request-page", "outerHTML")
    body = response.content.decode()
    assert (
        f'<span id="status-{world.r_ana.pk}" class="badge tone-bad status-badge" role="status">rejected</span>'
        in body
    )
    assert "hx-trigger" not in body.split('<div id="request-page">', 1)[1]


# --- query budget -------------------------------------------------------------------------------


def count_queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as context:
        assert client.get(path).status_code == 200
    return len(context.captured_queries)


@pytest.mark.parametrize(("user", "budget"), [("ana", 6), ("apa", 11), ("root", 9)])
def test_page_query_budget_does_not_grow_with_events(
    world: Any, user: str, budget: int, django_assert_max_num_queries: Any
) -> None:
    client = client_for(getattr(world, user))
    req = submit(world)  # one event
    path = f"/requests/{req.pk}/"
    one = count_queries(client, path)
    for index in range(29):
        req.record("note", f"note {index}", actor=world.tim if index % 2 else world.apa)
    assert req.events.count() == 30
    assert count_queries(client, path) == one
    with django_assert_max_num_queries(budget):
        client.get(path)


def test_status_partial_query_budget(world: Any, django_assert_max_num_queries: Any) -> None:
    client = client_for(world.ana)
    with django_assert_max_num_queries(3):
        client.get(f"/requests/{world.r_ana.pk}/status/", headers={"HX-Request": "true"})


# --- actions ------------------------------------------------------------------------------------


ACTIONS = ["approve", "reject", "cancel"]


@pytest.mark.parametrize("action", ACTIONS)
def test_anonymous_post_is_sent_to_login(world: Any, action: str) -> None:
    path = f"/requests/{world.r_ana.pk}/{action}/"
    response = Client().post(path, {"reason": "no"})
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("user", ["ana", "apa", "root"])
def test_get_on_an_action_is_405(world: Any, action: str, user: str) -> None:
    response = client_for(getattr(world, user)).get(f"/requests/{world.r_ana.pk}/{action}/")
    assert response.status_code == 405
    assert response["Allow"] == "POST"


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("user", ["olga", "bob"])  # other team's analyst and approver
def test_outsider_post_is_404_and_changes_nothing(world: Any, action: str, user: str) -> None:
    response = client_for(getattr(world, user)).post(
        f"/requests/{world.r_ana.pk}/{action}/", {"reason": "no"}
    )
    assert response.status_code == 404
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"
    assert VMRequestEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("user", "action", "reason"),
    [
        ("ana", "approve", "You are not an approver of team Quant."),
        ("ana", "reject", "You are not an approver of team Quant."),
        ("tim", "approve", "You are not an approver of team Quant."),
        ("tim", "cancel", "Only the requester or an approver of the team can cancel this request."),
    ],
)
def test_not_allowed_is_the_reason_as_a_message_and_changes_nothing(
    world: Any, user: str, action: str, reason: str
) -> None:
    response = client_for(getattr(world, user)).post(
        f"/requests/{world.r_ana.pk}/{action}/", {"reason": "no"}
    )
    assert (response.status_code, response["Location"]) == (302, f"/requests/{world.r_ana.pk}/")
    assert messages_of(response) == [("error", reason)]
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"
    assert (VMRequestEvent.objects.count(), Reservation.objects.count()) == (0, 0)


def test_an_approver_without_the_permission_cannot_approve(world: Any) -> None:
    world.quant.approvers.add(world.tim)  # listed as approver, but not in the approvers group
    response = client_for(world.tim).post(f"/requests/{world.r_ana.pk}/approve/")
    assert messages_of(response) == [("error", "You are not an approver of team Quant.")]
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"


@pytest.mark.parametrize("user", ["apa", "root"])
def test_approve_reserves_records_and_redirects_to_the_page(world: Any, user: str) -> None:
    req = submit(world)
    response = client_for(getattr(world, user)).post(f"/requests/{req.pk}/approve/", {"note": " looks fine "})
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [
        ("success", f"Request #{req.pk} approved. Runs now on p1 (1 free there).")
    ]
    req.refresh_from_db()
    assert (req.status, str(req.decided_by), req.decision_note) == ("approved", user, "looks fine")
    event = req.events.get(action="approve")
    assert (str(event.actor), event.from_status, event.to_status, event.message) == (
        user,
        "submitted",
        "approved",
        "looks fine",
    )
    assert event.data == {
        "placement": {"fits": True, "node": "p1", "resource_name": A100_PT},
        "quotas": ["any GPU: 0 of 4 used, 1 after approval"],
    }
    assert list(Reservation.objects.values_list("holder", "node__name", "resource_name", "count")) == [
        (f"vmrequest:{req.pk}", "p1", A100_PT, 1)
    ]


def test_second_approve_is_a_warning_and_changes_nothing(world: Any) -> None:
    req = submit(world)
    client_for(world.apa).post(f"/requests/{req.pk}/approve/")
    response = client_for(world.apa).post(f"/requests/{req.pk}/approve/", {"note": "again"})
    assert response.status_code == 302
    assert messages_of(response) == [("warning", f"Request #{req.pk} is approved; it cannot be approved.")]
    assert req.events.filter(action="approve").count() == 1
    assert Reservation.objects.count() == 1
    assert VMRequest.objects.get(pk=req.pk).decision_note == ""


def test_lost_race_reject_after_approve_is_a_warning(world: Any) -> None:
    req = submit(world)
    approval.approve(req, world.root)  # another approver won while this one was reading the page
    response = client_for(world.apa).post(f"/requests/{req.pk}/reject/", {"reason": "too big"})
    assert messages_of(response) == [("warning", f"Request #{req.pk} is approved; it cannot be rejected.")]
    req.refresh_from_db()
    assert (req.status, str(req.decided_by)) == ("approved", "root")
    assert Reservation.objects.count() == 1


def test_approve_of_the_last_device_twice_refuses_the_second(world: Any) -> None:
    first, second = submit(world), submit(world, world.tim)
    client_for(world.apa).post(f"/requests/{first.pk}/approve/")
    response = client_for(world.apa).post(f"/requests/{second.pk}/approve/")
    assert response.status_code == 302
    assert messages_of(response) == [
        (
            "error",
            f"Request #{second.pk} was not approved: All A100 PCIe 40GB GPUs are in use or reserved right now.",
        )
    ]
    assert VMRequest.objects.get(pk=second.pk).status == "submitted"
    assert list(Reservation.objects.values_list("holder", flat=True)) == [f"vmrequest:{first.pk}"]


def test_approve_over_quota_is_refused_with_the_reason(world: Any) -> None:
    GpuQuota.objects.filter(team=world.quant).update(max_devices=0)
    req = submit(world)
    response = client_for(world.apa).post(f"/requests/{req.pk}/approve/")
    assert messages_of(response) == [
        (
            "error",
            f"Request #{req.pk} was not approved: Your team's quota for any GPU is 0 devices and "
            "0 are held; this request needs 1 more.",
        )
    ]
    assert (VMRequest.objects.get(pk=req.pk).status, Reservation.objects.count()) == ("submitted", 0)


@pytest.mark.parametrize("user", ["apa", "root"])
def test_reject_records_the_reason(world: Any, user: str) -> None:
    req = submit(world)
    response = client_for(getattr(world, user)).post(
        f"/requests/{req.pk}/reject/", {"reason": "  use a T4  "}
    )
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [("success", f"Request #{req.pk} rejected.")]
    req.refresh_from_db()
    assert (req.status, str(req.decided_by), req.decision_note) == ("rejected", user, "use a T4")
    event = req.events.get(action="reject")
    assert (str(event.actor), event.from_status, event.to_status, event.message) == (
        user,
        "submitted",
        "rejected",
        "use a T4",
    )
    assert Reservation.objects.count() == 0


@pytest.mark.parametrize("data", [{}, {"reason": ""}, {"reason": "   "}])
def test_reject_without_a_reason_changes_nothing(world: Any, data: dict[str, str]) -> None:
    req = submit(world)
    response = client_for(world.apa).post(f"/requests/{req.pk}/reject/", data)
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [("error", f"Request #{req.pk} was not rejected: give a reason.")]
    req.refresh_from_db()
    assert (req.status, req.decided_by, req.decision_note) == ("submitted", None, "")
    assert list(req.events.values_list("action", flat=True)) == ["submit"]


def test_requester_cancels_a_submitted_request(world: Any) -> None:
    req = submit(world)
    response = client_for(world.ana).post(f"/requests/{req.pk}/cancel/", {"note": "not needed"})
    assert (response.status_code, response["Location"]) == (302, f"/requests/{req.pk}/")
    assert messages_of(response) == [("success", f"Request #{req.pk} cancelled.")]
    event = req.events.get(action="cancel")
    assert (str(event.actor), event.from_status, event.to_status, event.message) == (
        "ana",
        "submitted",
        "cancelled",
        "not needed",
    )
    assert VMRequest.objects.get(pk=req.pk).status == "cancelled"


@pytest.mark.parametrize("user", ["ana", "apa", "root"])  # requester, approver, admin
def test_cancel_of_an_approved_request_frees_its_reservation(world: Any, user: str) -> None:
    req = submit(world)
    approval.approve(req, world.apa)
    assert Reservation.objects.count() == 1
    response = client_for(getattr(world, user)).post(f"/requests/{req.pk}/cancel/")
    assert messages_of(response) == [("success", f"Request #{req.pk} cancelled.")]
    assert VMRequest.objects.get(pk=req.pk).status == "cancelled"
    assert Reservation.objects.count() == 0


def test_cancel_of_a_running_request_is_a_warning(world: Any) -> None:
    req = submit(world)
    approval.approve(req, world.apa)
    req.start_provisioning()
    req.mark_running("p1", "10.0.0.5")
    response = client_for(world.ana).post(f"/requests/{req.pk}/cancel/")
    assert messages_of(response) == [("warning", f"Request #{req.pk} is running; it cannot be cancelled.")]
    assert VMRequest.objects.get(pk=req.pk).status == "running"


def test_messages_are_shown_on_the_page_after_the_redirect(world: Any) -> None:
    req = submit(world)
    response = client_for(world.apa).post(f"/requests/{req.pk}/reject/", {"reason": ""}, follow=True)
    assert response.redirect_chain == [(f"/requests/{req.pk}/", 302)]
    assert (
        f'<li class="message error">Request #{req.pk} was not rejected: give a reason.</li>'
        in response.content.decode()
    )


@pytest.mark.parametrize(
    ("next_url", "location"),
    [
        ("/requests/queue/", "/requests/queue/"),
        ("https://evil.example/phish", None),
        ("//evil.example/", None),
        ("", None),
    ],
)
def test_next_is_followed_only_when_it_is_on_this_site(
    world: Any, next_url: str, location: str | None
) -> None:
    req = submit(world)
    response = client_for(world.apa).post(f"/requests/{req.pk}/reject/", {"reason": "no", "next": next_url})
    assert response["Location"] == (location or f"/requests/{req.pk}/")


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_need_the_csrf_token(world: Any, action: str) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.apa)
    response = client.post(f"/requests/{world.r_ana.pk}/{action}/", {"reason": "no"})
    assert response.status_code == 403
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"
