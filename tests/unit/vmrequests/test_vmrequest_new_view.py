"""The new-request page and its htmx partial (vmrequests/views/new.py): access, submit, errors that
keep what was typed, the "Refresh options" button, the partial, and query budgets."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.db import IntegrityError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gpuinventory.models import GpuNode
from tests.factories import portal_user, stored_fleet
from tests.vmrequest_factories import (
    A100_PT,
    T4_8Q,
    request_form_inventory,
    ssh_public_key,
    stored_image,
    stored_request,
    stored_team,
)
from vmrequests.models import AutoApprovalRule, VMRequest, VMRequestEvent

pytestmark = pytest.mark.django_db

URL = "/requests/new/"
PARTIAL_URL = "/requests/new/gpu-options/"
KEY = ssh_public_key("ed25519")


@pytest.fixture
def world() -> dict[str, Any]:
    request_form_inventory()
    analyst = portal_user("analyst")
    approver = portal_user("approver")
    approver.email = "approver@example.com"
    approver.save()
    team = stored_team("quant", members=(analyst,), approvers=(approver,))
    image = stored_image("Ubuntu 22.04")
    client = Client()
    client.force_login(analyst)
    return {"user": analyst, "team": team, "image": image, "client": client}


def post_data(world: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "team": world["team"].pk,
        "mode": "passthrough",
        "image": world["image"].pk,
        "gpu": A100_PT,
        "device_count": "2",
        "cpu_cores": "8",
        "memory_gib": "64",
        "lease_days": "10",
        "defaults_from": world["image"].pk,
        "name": "risk-box",
        "ssh_public_key": KEY,
        "justification": "Fine-tune a model for the Q3 risk report.",
        "ticket_id": "JIRA-7",
    }
    values.update(overrides)
    return values


# --- access -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [URL, PARTIAL_URL])
def test_anonymous_is_sent_to_login(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_anonymous_post_creates_nothing(world: dict[str, Any]) -> None:
    response = Client().post(URL, post_data(world))
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={URL}"
    assert VMRequest.objects.count() == 0


def test_analyst_sees_the_form_with_options(world: dict[str, Any]) -> None:
    response = world["client"].get(URL)
    html = response.content.decode()
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    assert (
        '<option value="nvidia.com/GA100_A100_PCIE_40GB" selected>A100 PCIe 40GB · nvidia.com/GA100_A100_PCIE_40GB: 3 free</option>'
        in html
    )
    assert 'data-free="3"' in html
    assert "3 free now" in html
    assert 'name="refresh"' in html
    assert f'hx-post="{PARTIAL_URL}"' in html
    assert 'hx-target="#request-dependent"' in html
    assert f'<option value="{world["team"].pk}" selected>Quant</option>' in html
    assert 'name="lease_days" value="7"' in html
    assert 'name="cpu_cores" value="4"' in html
    assert 'name="memory_gib" value="16"' in html


def test_user_without_team_sees_whom_to_ask(world: dict[str, Any]) -> None:
    admin = portal_user("admin", "root")
    admin.email = "root@example.org"
    admin.save()
    client = Client()
    client.force_login(portal_user("analyst", "loner"))
    for response in (client.get(URL), client.post(URL, post_data(world))):
        html = response.content.decode()
        assert response.status_code == 200
        assert "You are not in any team yet" in html
        assert '<a href="mailto:root@example.org">root@example.org</a>' in html
        assert "request-form" not in html
    assert VMRequest.objects.count() == 0


# --- submit -------------------------------------------------------------------------------------


def test_post_creates_one_request_and_redirects(world: dict[str, Any]) -> None:
    response = world["client"].post(URL, post_data(world, ssh_public_key=f"\n{KEY}  \n"))
    req = VMRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/requests/{req.pk}/"
    assert (
        req.requester,
        req.team,
        req.mode,
        req.resource_name,
        req.vgpu_type,
        req.gpu_model,
        req.device_count,
        req.cpu_cores,
        req.memory_gib,
        req.image,
        req.ssh_public_key,
        req.lease_days,
        req.justification,
        req.ticket_source,
        req.ticket_id,
        req.status,
        req.vmi_name,
        req.vmi_namespace,
    ) == (
        world["user"],
        world["team"],
        "passthrough",
        A100_PT,
        "",
        "A100 PCIe 40GB",
        2,
        8,
        64,
        world["image"],
        KEY,
        10,
        "Fine-tune a model for the Q3 risk report.",
        "",
        "JIRA-7",
        "submitted",
        "risk-box",
        "team-quant",
    )
    event = VMRequestEvent.objects.get()
    assert (event.request, event.action, event.from_status, event.to_status, event.actor) == (
        req,
        "submit",
        "",
        "submitted",
        world["user"],
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Request #{req.pk} submitted. The approvers of Quant have been notified."
    ]


def test_post_reprofile_option(world: dict[str, Any]) -> None:
    response = world["client"].post(
        URL, post_data(world, mode="vgpu", gpu="vgpu-type:T4-16Q", device_count="1", name="")
    )
    req = VMRequest.objects.get()
    assert response.status_code == 302
    assert (req.mode, req.resource_name, req.vgpu_type, req.vmi_name) == (
        "vgpu",
        "",
        "T4-16Q",
        f"analyst-vm-{req.pk}",
    )


def test_auto_approved_request_says_so(world: dict[str, Any]) -> None:
    AutoApprovalRule.objects.create(team=world["team"], mode="passthrough", max_devices=2)
    response = world["client"].post(URL, post_data(world))
    req = VMRequest.objects.get()
    assert response.status_code == 302
    assert req.status == "approved"
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Request #{req.pk} was approved by your team's policy; the VM is being prepared."
    ]


def test_bad_post_keeps_typed_values(world: dict[str, Any]) -> None:
    typed = post_data(world, memory_gib="2", ssh_public_key="ssh-rsa AAAAnot-a-key me@laptop")
    response = world["client"].post(URL, typed)
    html = response.content.decode()
    assert response.status_code == 200
    assert VMRequest.objects.count() == 0
    assert "The image Ubuntu 22.04 needs at least 8 GiB of memory." in html
    assert "This is not a valid ssh-rsa public key" in html
    assert "ssh-rsa AAAAnot-a-key me@laptop</textarea>" in html
    assert "Fine-tune a model for the Q3 risk report.</textarea>" in html
    assert 'name="name" value="risk-box"' in html
    assert 'name="ticket_id" value="JIRA-7"' in html
    assert 'name="memory_gib" value="2"' in html
    assert 'name="cpu_cores" value="8"' in html
    assert "Please correct the fields marked below; everything you typed is kept." in html


def test_valid_key_is_described_when_other_fields_fail(world: dict[str, Any]) -> None:
    html = world["client"].post(URL, post_data(world, memory_gib="2")).content.decode()
    assert "Key recognised: ED25519 (256 bits) analyst@laptop, SHA256:" in html


def test_no_inline_scripts_or_styles(world: dict[str, Any]) -> None:
    page = world["client"].get(URL).content.decode()
    assert page.count("<script") == page.count("<script src=")
    assert "<style" not in page
    assert " style=" not in page


def test_no_capacity_shows_problems_and_alternatives(world: dict[str, Any]) -> None:
    response = world["client"].post(URL, post_data(world, device_count="4"))
    html = response.content.decode()
    assert response.status_code == 200
    assert "No single node has 4 free A100 PCIe 40GB; the most free on one node is 3." in html
    assert "These would fit now:" in html
    assert "<li>3 × A100 PCIe 40GB — Runs now on p1 (3 free there).</li>" in html
    assert VMRequest.objects.count() == 0


def test_lost_race_on_the_name_is_a_form_error(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def clash(*args: Any, **kwargs: Any) -> Any:
        raise IntegrityError("UNIQUE constraint failed")

    monkeypatch.setattr("vmrequests.approval.submit", clash)
    response = world["client"].post(URL, post_data(world))
    assert response.status_code == 200
    assert (
        "Another request took this VM name or ticket ID a moment ago. Change it and submit again."
        in response.content.decode()
    )


def test_refresh_button_re_renders_without_saving_or_errors(world: dict[str, Any]) -> None:
    typed = post_data(world, mode="vgpu", justification="short", refresh="1", ssh_public_key="garbage")
    response = world["client"].post(URL, typed)
    html = response.content.decode()
    assert response.status_code == 200
    assert VMRequest.objects.count() == 0
    assert "field-error" not in html
    assert 'role="alert"' not in html
    assert f'<option value="{T4_8Q}" selected>' in html  # the A100 is no vGPU: first vGPU with free devices
    assert "short</textarea>" in html
    assert "garbage</textarea>" in html
    assert 'name="name" value="risk-box"' in html


# --- htmx partial -------------------------------------------------------------------------------


def test_htmx_partial_returns_only_the_dependent_part(world: dict[str, Any]) -> None:
    response = world["client"].post(
        PARTIAL_URL, post_data(world, mode="vgpu", gpu="vgpu-type:T4-16Q"), headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    assert html.strip().startswith('<section class="form-section dependent" id="request-dependent">')
    assert "<html" not in html and "ssh_public_key" not in html
    assert '<option value="vgpu-type:T4-16Q" selected>' in html
    assert "available after re-profiling node v2 (idle)" in html
    assert 'name="cpu_cores" value="8"' in html  # typed values kept
    assert 'name="device_count" value="2"' in html


def test_partial_works_for_a_plain_get(world: dict[str, Any]) -> None:
    response = world["client"].get(PARTIAL_URL, {"mode": "vgpu", "gpu": T4_8Q})
    html = response.content.decode()
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    assert html.strip().startswith('<section class="form-section dependent"')
    assert "NVIDIA allows only one vGPU of type T4-8Q per VM." in html
    assert "3 free now" in html
    assert 'max="1"' in html


def test_page_prefilled_from_the_query_string(world: dict[str, Any]) -> None:
    html = world["client"].get(URL, {"mode": "vgpu", "gpu": "vgpu-type:T4-16Q"}).content.decode()
    assert "available after re-profiling node v2 (idle)" in html
    assert '<option value="vgpu-type:T4-16Q" selected>' in html
    assert re.search(r'<input type="radio" name="mode" value="vgpu"[^>]* checked>', html)


# --- query budget -------------------------------------------------------------------------------


def count_queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("path", [URL, f"{URL}?mode=vgpu", f"{PARTIAL_URL}?mode=vgpu"])
def test_query_budget_does_not_grow_with_nodes_or_requests(
    world: dict[str, Any], path: str, django_assert_max_num_queries: Any
) -> None:
    client = world["client"]
    GpuNode.objects.all().delete()
    stored_fleet(1)  # 3 nodes
    stored_request(world["team"], world["user"], world["image"])
    small = count_queries(client, path)
    GpuNode.objects.all().delete()
    stored_fleet(20)  # 60 nodes
    for _index in range(20):
        stored_request(world["team"], world["user"], world["image"], status="running")
    large = count_queries(client, path)
    assert small == large
    # 12 for the form (session, user, teams, images, capacity snapshot and re-profile offers,
    # permitted types, team and image selects) plus what base.html needs.
    with django_assert_max_num_queries(18):
        client.get(path)


@pytest.mark.parametrize(
    ("approver_mail", "admin_mail", "expected"),
    [
        (True, True, "Request #{pk} submitted. The approvers of Quant have been notified."),
        (
            False,
            True,
            "Request #{pk} submitted. No approver of Quant can decide it, so the portal's admins have "
            "been notified.",
        ),
        (
            False,
            False,
            "Request #{pk} submitted. Nobody can decide it yet: Quant has no other approver and no admin "
            "has an e-mail address. Ask an admin to add an approver.",
        ),
    ],
)
def test_submitted_message_names_who_was_told(
    world: dict[str, Any], approver_mail: bool, admin_mail: bool, expected: str
) -> None:
    """The message after submitting follows the mail routing (notifications.decider_recipients)."""
    approver = world["team"].approvers.get()
    approver.email = "approver@example.com" if approver_mail else ""
    approver.save()
    admin = portal_user("admin")
    admin.email = "admin@example.com" if admin_mail else ""
    admin.save()
    response = world["client"].post(URL, post_data(world))
    req = VMRequest.objects.get()
    assert [str(m) for m in get_messages(response.wsgi_request)] == [expected.format(pk=req.pk)]


def test_the_justification_says_its_bounds(world: dict[str, Any]) -> None:
    """The browser cuts a longer paste at ``maxlength`` without a word, so the hint names the cap."""
    html = world["client"].get(URL).content.decode()
    assert (
        "What the VM is for; approvers read this. 5 to 2,000 characters: a longer paste is cut at 2,000."
        in html
    )
    zh = world["client"].get(URL, headers={"accept-language": "zh-hans"}).content.decode()
    assert "5 到 2,000 个字符" in zh
