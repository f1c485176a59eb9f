"""Django admin for teams, images, requests, events and reservations: pages render for a
superuser, requests/events/reservations are view-only (status never editable)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from gpuinventory.models import Reservation
from tests.factories import portal_user, stored_consumer, stored_node
from tests.vmrequest_factories import stored_image, stored_request, stored_team
from vmrequests.models import GpuQuota, VMRequest, VMRequestEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def world() -> dict[str, Any]:
    admin = portal_user("admin")
    analyst = portal_user("analyst")
    team = stored_team("quant", members=(analyst,), approvers=(admin,))
    GpuQuota.objects.create(team=team, mode="vgpu", gpu="", max_devices=3)
    image = stored_image()
    req = stored_request(team, analyst, image, vmi_name="risk-box")
    req.record("note", "checked the dataset", actor=analyst)
    node = stored_node("p1", "vm-passthrough")
    reservation = Reservation.objects.create(
        node=node,
        resource_name="nvidia.com/GA100_A100_PCIE_40GB",
        count=1,
        holder=req.holder.key,
        vmi_namespace="team-quant",
        vmi_name="risk-box",
    )
    client = Client()
    client.force_login(admin)
    return {
        "client": client,
        "team": team,
        "image": image,
        "req": req,
        "reservation": reservation,
        "node": node,
    }


def test_pages_render_for_a_superuser(world: dict[str, Any]) -> None:
    client = world["client"]
    event = VMRequestEvent.objects.get()
    pages = [
        "/admin/vmrequests/team/",
        f"/admin/vmrequests/team/{world['team'].pk}/change/",
        "/admin/vmrequests/team/add/",
        "/admin/vmrequests/vmimage/",
        f"/admin/vmrequests/vmimage/{world['image'].pk}/change/",
        "/admin/vmrequests/vmrequest/",
        "/admin/vmrequests/vmrequest/?status__exact=submitted&mode__exact=passthrough&q=risk",
        f"/admin/vmrequests/vmrequest/{world['req'].pk}/change/",
        "/admin/vmrequests/vmrequestevent/",
        f"/admin/vmrequests/vmrequestevent/{event.pk}/change/",
        "/admin/gpuinventory/reservation/",
        f"/admin/gpuinventory/reservation/{world['reservation'].pk}/change/",
    ]
    for page in pages:
        assert client.get(page).status_code == 200, page


def test_team_page_has_members_approvers_and_inlines(world: dict[str, Any]) -> None:
    html = world["client"].get(f"/admin/vmrequests/team/{world['team'].pk}/change/").content.decode()
    assert 'name="members"' in html and 'name="approvers"' in html
    assert "selectfilter" in html  # filter_horizontal
    assert 'name="quotas-0-max_devices"' in html
    assert 'name="auto_approval_rules-TOTAL_FORMS"' in html


def test_request_changelist_columns(world: dict[str, Any]) -> None:
    response = world["client"].get("/admin/vmrequests/vmrequest/?q=risk-box")
    html = response.content.decode()
    assert response.context["cl"].result_count == 1
    for column in (
        "column-id",
        "column-vmi_name",
        "column-requester",
        "column-team",
        "column-mode",
        "column-gpu",
        "column-status",
        "column-created",
    ):
        assert column in html
    assert "nvidia.com/GA100_A100_PCIE_40GB" in html


def test_request_status_is_read_only(world: dict[str, Any]) -> None:
    client, req = world["client"], world["req"]
    url = f"/admin/vmrequests/vmrequest/{req.pk}/change/"
    html = client.get(url).content.decode()
    assert 'name="status"' not in html
    assert 'name="decision_note"' not in html
    assert "checked the dataset" in html  # the event inline, read-only
    assert 'name="events-0-message"' not in html
    assert 'name="events-MAX_NUM_FORMS" value="0"' in html  # no event can be added
    assert '<div class="readonly">submitted</div>' in html
    response = client.post(url, {"status": "approved", "decision_note": "sneaky"})
    assert response.status_code == 403
    req.refresh_from_db()
    assert (req.status, req.decision_note) == ("submitted", "")
    assert client.get("/admin/vmrequests/vmrequest/add/").status_code == 403
    assert client.post(f"/admin/vmrequests/vmrequest/{req.pk}/delete/").status_code == 403
    assert VMRequest.objects.count() == 1


def test_events_and_reservations_are_view_only(world: dict[str, Any]) -> None:
    client = world["client"]
    event = VMRequestEvent.objects.get()
    assert (
        client.post(f"/admin/vmrequests/vmrequestevent/{event.pk}/change/", {"message": "x"}).status_code
        == 403
    )
    assert client.post(f"/admin/vmrequests/vmrequestevent/{event.pk}/delete/").status_code == 403
    assert client.get("/admin/vmrequests/vmrequestevent/add/").status_code == 403
    reservation = world["reservation"]
    assert client.post(f"/admin/gpuinventory/reservation/{reservation.pk}/delete/").status_code == 403
    assert client.get("/admin/gpuinventory/reservation/add/").status_code == 403
    assert Reservation.objects.count() == 1


def test_reservation_active_column(world: dict[str, Any]) -> None:
    client = world["client"]
    response = client.get("/admin/gpuinventory/reservation/")
    rows = response.context["cl"].result_list
    assert [(r.holder, r.pod_bound) for r in rows] == [(world["req"].holder.key, False)]
    stored_consumer(
        world["node"],
        "nvidia.com/GA100_A100_PCIE_40GB",
        "virt-launcher-risk-box-x",
        pod_namespace="team-quant",
        vmi_name="risk-box",
    )
    rows = client.get("/admin/gpuinventory/reservation/").context["cl"].result_list
    assert [r.pod_bound for r in rows] == [True]


def test_analyst_cannot_open_the_admin(world: dict[str, Any]) -> None:
    client = Client()
    client.force_login(portal_user("analyst", "bob"))
    response = client.get("/admin/vmrequests/vmrequest/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
