"""The approval queue: who may see it (approvers only, 403 for the others), which requests it lists
(submitted, of the teams the user approves, oldest first), the verdict per request (placement now,
re-profile plan, quota after approval, problems, lease end if started now), deciding from the
queue, and a query budget that does not grow with the number of pending requests."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gpuinventory.models import Reservation
from tests.factories import portal_user, stored_node, stored_resource, stored_vgpu_config
from tests.vmrequest_factories import a100_node, request_world, stored_request
from vmrequests.models import GpuQuota, VMRequest

pytestmark = pytest.mark.django_db

QUEUE = "/requests/queue/"
T4_FILTER = ["0x1EB810DE"]


@pytest.fixture
def world() -> Any:
    """``request_world``; two A100s on p1 (one in use), an idle T4 node v1 that a "T4-16Q" config
    could re-profile, quotas: quant any GPU ≤ 4 and vGPU ≤ 3, research any GPU ≤ 0."""
    w = request_world()
    a100_node("p1", allocatable=2, used=1)
    v1 = stored_node("v1", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config_state="success")
    stored_resource(
        v1, "nvidia.com/GRID_T4-8Q", 4, vgpu_type="T4-8Q", model="Tesla T4", series="Q", permitted=True
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )
    GpuQuota.objects.create(team=w.quant, max_devices=4)
    GpuQuota.objects.create(team=w.quant, mode="vgpu", max_devices=3)
    GpuQuota.objects.create(team=w.research, max_devices=0)
    return w


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def queued(response: Any) -> list[int]:
    """Primary keys of the requests listed, in order."""
    return [row.req.pk for row in response.context["rows"]]


def item(page: str, pk: int) -> str:
    """The text of one queue entry, tags stripped, entities decoded, whitespace collapsed."""
    match = re.search(rf'<article class="card queue-item" id="request-{pk}">(.*?)</article>', page, re.S)
    assert match, pk
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split())


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)]


# --- access -------------------------------------------------------------------------------------


def test_anonymous_is_sent_to_login(world: Any) -> None:
    response = Client().get(QUEUE)
    assert (response.status_code, response["Location"]) == (302, f"/login/?next={QUEUE}")


@pytest.mark.parametrize("user", ["ana", "tim", "olga"])
def test_analysts_get_403(world: Any, user: str) -> None:
    response = client_for(getattr(world, user)).get(QUEUE)
    assert response.status_code == 403
    assert '<p class="reason">Only approvers can see the approval queue.</p>' in response.content.decode()


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("apa", ["r_ana", "r_tim"]),  # quant only, oldest first
        ("bob", ["r_olga"]),  # research only
        ("root", ["r_ana", "r_tim", "r_olga"]),  # admin: every team
    ],
)
def test_approvers_see_the_submitted_requests_of_their_teams(
    world: Any, user: str, expected: list[str]
) -> None:
    response = client_for(getattr(world, user)).get(QUEUE)
    assert response.status_code == 200
    assert queued(response) == [getattr(world, name).pk for name in expected]


def test_only_submitted_requests_are_listed(world: Any) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(status="approved")
    VMRequest.objects.filter(pk=world.r_olga.pk).update(status="rejected")
    assert queued(client_for(world.root).get(QUEUE)) == [world.r_tim.pk]


def test_oldest_first_with_a_pk_tie_breaker(world: Any) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(created=datetime(2026, 1, 2, tzinfo=UTC))
    VMRequest.objects.filter(pk__in=[world.r_tim.pk, world.r_olga.pk]).update(
        created=datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert queued(client_for(world.root).get(QUEUE)) == [world.r_tim.pk, world.r_olga.pk, world.r_ana.pk]


def test_an_approver_of_no_team_sees_an_empty_queue(world: Any) -> None:
    response = client_for(portal_user("approver", "carl")).get(QUEUE)
    assert response.status_code == 200
    assert queued(response) == []
    assert "No request is waiting for your decision." in response.content.decode()


# --- verdicts -----------------------------------------------------------------------------------


def test_verdict_of_a_request_that_fits_now(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(
        lease_days=3, device_count=1, cpu_cores=8, memory_gib=32
    )
    monkeypatch.setattr("django.utils.timezone.now", lambda: datetime(2026, 1, 10, 9, 30, tzinfo=UTC))
    html = client_for(world.apa).get(QUEUE).content.decode()
    monkeypatch.undo()
    text = item(html, world.r_ana.pk)
    assert text.startswith(f"Request #{world.r_ana.pk} ana-vm-{world.r_ana.pk} fits ana (Quant), submitted ")
    assert (
        "passthrough (whole GPU) nvidia.com/GA100_A100_PCIE_40GB (A100 PCIe 40GB) , 8 CPU cores, "
        "32 GiB memory, Ubuntu 22.04, 3-day lease a test request"
    ) in text
    assert (
        "Where it would run Runs now on p1 (1 free there). Nodes with enough free devices now: p1 (1 free) "
        "Free in the cluster now 1 device free (reservations of approved requests subtracted) "
        "Team quota after approval any GPU: 0 of 4 used, 1 after approval "
        "Lease end if started now Jan. 13, 2026, 9:30 a.m."
    ) in text
    assert "would be refused" not in text
    forms = re.findall(
        r'action="([^"]+)"', html.split(f'id="request-{world.r_ana.pk}"')[1].split("</article>")[0]
    )
    assert forms == [f"/requests/{world.r_ana.pk}/approve/", f"/requests/{world.r_ana.pk}/reject/"]
    assert html.count('<input type="hidden" name="next" value="/requests/queue/">') == 4


def test_verdict_of_a_vgpu_request_that_needs_a_re_profile(world: Any) -> None:
    VMRequest.objects.filter(pk=world.r_tim.pk).update(
        mode="vgpu", resource_name="", vgpu_type="T4-16Q", gpu_model="Tesla T4"
    )
    text = item(client_for(world.apa).get(QUEUE).content.decode(), world.r_tim.pk)
    assert (
        "Where it would run Re-profile idle node v1 from vGPU config (default) to T4-16Q (2 instances), "
        "then run there. Free in the cluster now 0 devices free (reservations of approved requests subtracted) "
        "Team quota after approval any GPU: 0 of 4 used, 1 after approval "
        "any vGPU (GPU slice): 0 of 3 used, 1 after approval"
    ) in text
    assert " fits " in text


def test_verdict_counts_the_teams_open_requests_in_the_quota(world: Any) -> None:
    stored_request(world.quant, world.tim, world.image, status="running", device_count=3)
    text = item(client_for(world.apa).get(QUEUE).content.decode(), world.r_ana.pk)
    assert "Team quota after approval any GPU: 3 of 4 used, 4 after approval" in text


def test_verdict_of_a_request_that_does_not_fit(world: Any) -> None:
    VMRequest.objects.filter(pk=world.r_olga.pk).update(device_count=2)
    html = client_for(world.bob).get(QUEUE).content.decode()
    text = item(html, world.r_olga.pk)
    assert " does not fit " in text
    assert (
        "Where it would run No single node has 2 free A100 PCIe 40GB; the most free on one node is 1. "
        "Free in the cluster now 1 device free (reservations of approved requests subtracted) "
        "Team quota after approval any GPU: 0 of 0 used, 2 after approval "
        "Approving it now would be refused: "
        "No single node has 2 free A100 PCIe 40GB; the most free on one node is 1. "
        "Your team's quota for any GPU is 0 devices and 0 are held; this request needs 2 more."
    ) in text
    assert '<div class="quota-over warning">any GPU: 0 of 0 used, 2 after approval</div>' in html


def test_all_requests_of_one_page_see_the_same_capacity(world: Any) -> None:
    """Both quant requests ask for the last free A100: each is shown as fitting now (approving
    the first makes the second refused, see the approve tests)."""
    html = client_for(world.apa).get(QUEUE).content.decode()
    for req in (world.r_ana, world.r_tim):
        assert "Runs now on p1 (1 free there)." in item(html, req.pk)


def test_queue_has_no_inline_scripts_or_styles(world: Any) -> None:
    html = client_for(world.root).get(QUEUE).content.decode()
    assert html.count("<script") == html.count("<script src=")
    assert "<style" not in html and " style=" not in html


# --- deciding from the queue --------------------------------------------------------------------


def test_approve_from_the_queue_goes_back_to_the_queue(world: Any) -> None:
    response = client_for(world.apa).post(
        f"/requests/{world.r_ana.pk}/approve/", {"note": "", "next": QUEUE}, follow=True
    )
    assert response.redirect_chain == [(QUEUE, 302)]
    html = response.content.decode()
    assert (
        f'<li class="message success">Request #{world.r_ana.pk} approved. Runs now on p1 (1 free there).</li>'
        in html
    )
    assert queued(response) == [world.r_tim.pk]
    assert list(Reservation.objects.values_list("holder", flat=True)) == [f"vmrequest:{world.r_ana.pk}"]
    # The last A100 is now reserved: the other request is shown as not fitting.
    assert "All A100 PCIe 40GB GPUs are in use or reserved right now." in item(html, world.r_tim.pk)


def test_second_approval_of_the_last_device_from_the_queue_is_refused(world: Any) -> None:
    client_for(world.apa).post(f"/requests/{world.r_ana.pk}/approve/", {"next": QUEUE})
    response = client_for(world.root).post(f"/requests/{world.r_tim.pk}/approve/", {"next": QUEUE})
    assert (response.status_code, response["Location"]) == (302, QUEUE)
    assert messages_of(response) == [
        (
            "error",
            f"Request #{world.r_tim.pk} was not approved: All A100 PCIe 40GB GPUs are in use or reserved right now.",
        )
    ]
    assert VMRequest.objects.get(pk=world.r_tim.pk).status == "submitted"
    assert Reservation.objects.count() == 1


def test_reject_from_the_queue_needs_a_reason(world: Any) -> None:
    client = client_for(world.apa)
    response = client.post(f"/requests/{world.r_tim.pk}/reject/", {"reason": " ", "next": QUEUE})
    assert (response.status_code, response["Location"]) == (302, QUEUE)
    assert messages_of(response) == [("error", f"Request #{world.r_tim.pk} was not rejected: give a reason.")]
    assert queued(client.get(QUEUE)) == [world.r_ana.pk, world.r_tim.pk]
    response = client.post(f"/requests/{world.r_tim.pk}/reject/", {"reason": "use a T4", "next": QUEUE})
    assert (response.status_code, response["Location"]) == (302, QUEUE)
    assert queued(client.get(QUEUE)) == [world.r_ana.pk]
    assert VMRequest.objects.get(pk=world.r_tim.pk).status == "rejected"


# --- query budget -------------------------------------------------------------------------------


def count_queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as context:
        assert client.get(path).status_code == 200
    return len(context.captured_queries)


# apa: one query more than a join would take, for the teams he approves for (policy.Viewer,
# read once for the queue's filter and every row's buttons).
@pytest.mark.parametrize(("user", "budget"), [("apa", 15), ("root", 12)])
def test_query_budget_does_not_grow_with_pending_requests(
    world: Any, user: str, budget: int, django_assert_max_num_queries: Any
) -> None:
    client = client_for(getattr(world, user))
    VMRequest.objects.filter(pk=world.r_tim.pk).update(mode="vgpu", resource_name="", vgpu_type="T4-16Q")
    VMRequest.objects.exclude(pk__in=[world.r_tim.pk]).delete()  # one pending request (a vGPU one)
    one = count_queries(client, QUEUE)
    for index in range(14):
        team = world.quant if index % 2 or user == "apa" else world.research
        fields: dict[str, Any] = {"device_count": 1 + index % 2}
        if index % 3 == 0:
            fields.update(mode="vgpu", resource_name="", vgpu_type="T4-16Q")
        stored_request(team, world.ana if team == world.quant else world.olga, world.image, **fields)
    response = client.get(QUEUE)
    assert len(queued(response)) == 15
    assert count_queries(client, QUEUE) == one
    with django_assert_max_num_queries(budget):
        client.get(QUEUE)
