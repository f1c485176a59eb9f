"""Request lists ("Requests", "My requests"): visibility per role, filters, sorting, the htmx table
partial, the navigation links and query budgets that do not grow with the number of requests."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.vmrequest_factories import request_world, stored_request
from vmrequests.models import VMRequest

pytestmark = pytest.mark.django_db

LIST = "/requests/"
MINE = "/requests/mine/"


@pytest.fixture
def world() -> Any:
    return request_world()


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def shown(response: Any) -> list[int]:
    """Primary keys of the table rows on the page, in order."""
    return [row.record.pk for row in response.context["table"].page.object_list]


def pks(*reqs: Any) -> list[int]:
    return [r.pk for r in reqs]


def vary(response: Any) -> set[str]:
    return {value.strip() for value in response["Vary"].split(",")}


# --- access and visibility ----------------------------------------------------------------------


@pytest.mark.parametrize("path", [LIST, MINE])
def test_anonymous_is_sent_to_login(world: Any, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


@pytest.mark.parametrize(
    ("user", "title", "expected"),
    [
        # newest first: r_olga, r_tim, r_ana were created in that order backwards
        ("ana", "Team requests", ["r_tim", "r_ana"]),  # own + team's, not the other team's
        ("tim", "Team requests", ["r_tim", "r_ana"]),
        ("apa", "All requests", ["r_tim", "r_ana"]),  # an approver of quant does not see research
        ("olga", "Team requests", ["r_olga"]),  # other team
        ("bob", "All requests", ["r_olga"]),
        ("root", "All requests", ["r_olga", "r_tim", "r_ana"]),  # admin
    ],
)
def test_list_visibility_per_role(world: Any, user: str, title: str, expected: list[str]) -> None:
    response = client_for(getattr(world, user)).get(LIST)
    assert response.status_code == 200
    assert shown(response) == pks(*(getattr(world, name) for name in expected))
    assert response.context["title"] == title
    assert f"<h1>{title}</h1>" in response.content.decode()
    assert "HX-Request" in vary(response)


@pytest.mark.parametrize(
    ("user", "expected"),
    [("ana", ["r_ana"]), ("tim", ["r_tim"]), ("apa", []), ("olga", ["r_olga"]), ("root", [])],
)
def test_mine_shows_only_own_requests(world: Any, user: str, expected: list[str]) -> None:
    response = client_for(getattr(world, user)).get(MINE)
    assert response.status_code == 200
    assert shown(response) == pks(*(getattr(world, name) for name in expected))
    assert response.context["title"] == "My requests"


def test_own_request_in_a_team_left_stays_visible(world: Any) -> None:
    world.quant.members.remove(world.ana)
    response = client_for(world.ana).get(LIST)
    assert shown(response) == [world.r_ana.pk]


def test_table_row_content(world: Any) -> None:
    VMRequest.objects.filter(pk=world.r_ana.pk).update(
        device_count=2,
        status="running",
        created=datetime(2026, 1, 10, 9, 30, tzinfo=UTC),
        lease_end=datetime(2026, 1, 17, 9, 30, tzinfo=UTC),
    )
    html = client_for(world.ana).get(MINE).content.decode()
    cells = re.findall(r"<td [^>]*>(.*?)</td>", html, re.S)
    assert cells == [
        f'<a href="/requests/{world.r_ana.pk}/">{world.r_ana.pk}</a>',
        f"<code>ana-vm-{world.r_ana.pk}</code>",
        "ana",
        "Quant",
        "nvidia.com/GA100_A100_PCIE_40GB × 2",
        "passthrough (whole GPU)",
        '<span class="badge tone-ok">running</span>',
        "01/10/2026 9:30 a.m.",
        "01/17/2026 9:30 a.m.",
    ]


# --- navigation ---------------------------------------------------------------------------------


def test_nav_links_for_an_analyst(world: Any) -> None:
    html = client_for(world.ana).get(MINE).content.decode()
    nav = re.search(r'<nav class="mainnav".*?</nav>', html, re.S)
    assert nav is not None
    links = re.findall(r'<a href="([^"]+)"( aria-current="page")?>([^<]+)</a>', nav.group(0))
    assert links == [
        ("/", "", "Home"),
        ("/inventory/", "", "GPU inventory"),
        ("/requests/new/", "", "New request"),
        ("/requests/mine/", ' aria-current="page"', "My requests"),
        ("/requests/", "", "Requests"),
    ]
    assert "/requests/queue/" not in nav.group(0)


@pytest.mark.parametrize("user", ["apa", "root"])
def test_nav_shows_the_queue_to_approvers(world: Any, user: str) -> None:
    html = client_for(getattr(world, user)).get(LIST).content.decode()
    assert '<a href="/requests/" aria-current="page">Requests</a>' in html
    assert '<a href="/requests/queue/">Approval queue</a>' in html


def test_home_links_to_the_request_pages(world: Any) -> None:
    html = client_for(world.apa).get("/").content.decode()
    section = re.search(r'<section class="card home-requests">.*?</section>', html, re.S)
    assert section is not None
    assert re.findall(r'href="([^"]+)"', section.group(0)) == [
        "/requests/new/",
        "/requests/mine/",
        "/requests/",
        "/requests/queue/",
    ]
    analyst_html = client_for(world.ana).get("/").content.decode()
    assert ">Team requests</a>" in analyst_html
    assert "/requests/queue/" not in analyst_html


# --- filters ------------------------------------------------------------------------------------


@pytest.fixture
def varied(world: Any) -> Any:
    """Spread the three requests over statuses, modes, GPUs, tickets and creation dates."""
    VMRequest.objects.filter(pk=world.r_ana.pk).update(
        status="running", created=datetime(2026, 1, 10, 12, tzinfo=UTC), ticket_id="INC-1"
    )
    VMRequest.objects.filter(pk=world.r_tim.pk).update(
        status="rejected",
        mode="vgpu",
        resource_name="nvidia.com/GRID_T4-8Q",
        vgpu_type="T4-8Q",
        created=datetime(2026, 2, 10, 12, tzinfo=UTC),
    )
    VMRequest.objects.filter(pk=world.r_olga.pk).update(
        mode="vgpu", resource_name="", vgpu_type="A10-12Q", created=datetime(2026, 3, 10, 12, tzinfo=UTC)
    )
    return world


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["r_olga", "r_tim", "r_ana"]),
        ("status=submitted", ["r_olga"]),
        ("status=running&status=rejected", ["r_tim", "r_ana"]),
        ("team=quant", ["r_tim", "r_ana"]),
        ("team=research", ["r_olga"]),
        ("mode=vgpu", ["r_olga", "r_tim"]),
        ("mode=passthrough", ["r_ana"]),
        ("resource=t4", ["r_tim"]),  # vGPU type and resource name, case-insensitive
        ("resource=a10", ["r_olga", "r_ana"]),  # A10-12Q and GA100_A100...
        ("resource=GRID_", ["r_tim"]),
        ("requester=olga", ["r_olga"]),
        ("requester=OLGA", []),  # exact
        ("ticket_id=INC-1", ["r_ana"]),
        ("ticket_id=INC", []),  # exact
        ("created_after=2026-02-10", ["r_olga", "r_tim"]),
        ("created_before=2026-02-10", ["r_tim", "r_ana"]),
        ("created_after=2026-01-11&created_before=2026-03-09", ["r_tim"]),
        ("team=quant&status=running", ["r_ana"]),
    ],
)
def test_filters(varied: Any, query: str, expected: list[str]) -> None:
    response = client_for(varied.root).get(f"{LIST}?{query}")
    assert response.status_code == 200
    assert shown(response) == pks(*(getattr(varied, name) for name in expected))


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("created_after=2026-13-45", "Created from: Enter a valid date."),
        ("created_before=yesterday", "Created until: Enter a valid date."),
        ("status=nonsense", "Status: Select a valid choice. nonsense is not one of the available choices."),
        ("mode=gpu", "Mode: Select a valid choice. gpu is not one of the available choices."),
        (
            "team=nosuchteam",
            "Team: Select a valid choice. That choice is not one of the available choices.",
        ),
    ],
)
def test_invalid_filter_values_show_an_error_not_a_500(varied: Any, query: str, error: str) -> None:
    response = client_for(varied.root).get(f"{LIST}?{query}")
    assert response.status_code == 200
    assert shown(response) == []
    html = response.content.decode()
    assert "Some filters are not valid:" in html
    assert error in html


def test_team_filter_offers_only_visible_teams(world: Any) -> None:
    response = client_for(world.ana).get(LIST)
    choices = [str(label) for value, label in response.context["filter"].form.fields["team"].choices if value]
    assert choices == ["Quant"]
    # Another team's slug is not a valid value for an analyst of quant.
    response = client_for(world.ana).get(f"{LIST}?team=research")
    assert shown(response) == []
    assert "Team: Select a valid choice." in response.content.decode()


def test_status_filter_is_a_checkbox_group(world: Any) -> None:
    html = client_for(world.ana).get(f"{LIST}?status=submitted").content.decode()
    assert '<fieldset class="filter-field status-choices"><legend>Status</legend>' in html
    assert re.search(r'<input type="checkbox" name="status" value="submitted"[^>]* checked>', html)


def test_sorting_has_a_pk_tie_breaker(world: Any) -> None:
    same = datetime(2026, 1, 1, tzinfo=UTC)
    VMRequest.objects.update(created=same)
    client = client_for(world.root)
    assert shown(client.get(LIST)) == pks(world.r_olga, world.r_tim, world.r_ana)
    assert shown(client.get(f"{LIST}?sort=created")) == pks(world.r_ana, world.r_tim, world.r_olga)
    assert shown(client.get(f"{LIST}?sort=team")) == pks(world.r_ana, world.r_tim, world.r_olga)
    assert shown(client.get(f"{LIST}?sort=-team")) == pks(world.r_olga, world.r_tim, world.r_ana)
    assert shown(client.get(f"{LIST}?sort=status")) == pks(world.r_ana, world.r_tim, world.r_olga)
    VMRequest.objects.filter(pk=world.r_tim.pk).update(lease_end=same)
    assert shown(client.get(f"{LIST}?sort=lease_end")) == pks(world.r_tim, world.r_ana, world.r_olga)
    assert shown(client.get(f"{LIST}?sort=-lease_end")) == pks(world.r_tim, world.r_olga, world.r_ana)


# --- htmx ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [LIST, MINE])
def test_htmx_request_gets_only_the_table_partial(world: Any, path: str) -> None:
    client = client_for(world.ana)
    full = client.get(path)
    partial = client.get(path, headers={"HX-Request": "true", "HX-Target": "request-table"})
    assert partial.status_code == 200
    assert "HX-Request" in vary(full)
    assert vary(full) == vary(partial)
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="request-table" class="table-region">')
    assert "<html" not in body and "<form" not in body
    assert f"ana-vm-{world.r_ana.pk}" in body
    assert "<html" in full.content.decode()


def test_every_htmx_control_has_a_real_link(world: Any) -> None:
    html = client_for(world.root).get(f"{LIST}?per_page=1").content.decode()
    anchors = re.findall(r"<a [^>]*hx-get=\"([^\"]+)\"[^>]*>", html)
    assert len(anchors) >= 10  # 9 sortable headers + page links
    for match in re.finditer(r"<a [^>]*hx-get=\"([^\"]+)\"[^>]*>", html):
        tag = match.group(0)
        assert f'href="{match.group(1)}"' in tag
        assert 'hx-push-url="true"' in tag
    form = re.search(r"<form class=\"filters request-filters\"[^>]*>", html, re.S)
    assert form is not None
    assert 'method="get"' in form.group(0) and 'action="/requests/"' in form.group(0)
    assert 'hx-push-url="true"' in form.group(0)


def test_list_has_no_inline_scripts_or_styles(world: Any) -> None:
    html = client_for(world.root).get(LIST).content.decode()
    assert html.count("<script") == html.count("<script src=")
    assert "<style" not in html and " style=" not in html


# --- query budgets ------------------------------------------------------------------------------


def count_queries(client: Client, path: str, **headers: str) -> int:
    with CaptureQueriesContext(connection) as context:
        assert client.get(path, headers=headers).status_code == 200
    return len(context.captured_queries)


@pytest.mark.parametrize("path", [f"{LIST}?per_page=100", f"{MINE}?per_page=100", f"{LIST}?team=quant"])
@pytest.mark.parametrize("user", ["ana", "apa", "root"])
def test_query_budget_does_not_grow_with_requests(
    world: Any, path: str, user: str, django_assert_max_num_queries: Any
) -> None:
    client = client_for(getattr(world, user))
    for requester in (world.apa, world.root):  # every list starts with at least one row
        stored_request(world.quant, requester, world.image)
    one = count_queries(client, path)
    requesters = [world.ana, world.tim, world.apa, world.root]
    for index in range(28):
        stored_request(world.quant, requesters[index % 4], world.image, device_count=1 + index % 3)
    assert len(shown(client.get(path))) >= 7
    assert count_queries(client, path) == one
    with django_assert_max_num_queries(8):
        client.get(path)


def test_htmx_partial_query_budget(world: Any, django_assert_max_num_queries: Any) -> None:
    client = client_for(world.ana)
    for _ in range(30):
        stored_request(world.quant, world.ana, world.image)
    with django_assert_max_num_queries(6):
        client.get(LIST, headers={"HX-Request": "true", "HX-Target": "request-table"})
