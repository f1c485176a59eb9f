"""#14 finding 4: hostile ``?per_page=`` / ``?page=`` on every list page.

Before the fix ``?per_page=-1`` raised inside Django's paginator (500) and a huge ``per_page``
returned every row, because django-tables2's ``RequestConfig`` re-reads ``per_page`` from the
query string after the mixin clamped it. The cap is lowered to 2 here so three rows prove it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal.views_mixins import FilteredTableListMixin
from tests.factories import stored_permitted_device, stored_vgpu_config
from tests.vmrequest_factories import request_form_inventory, request_world

#: Every page built on FilteredTableListMixin (asserted complete below).
LIST_PAGES = (
    "/inventory/",
    "/requests/",
    "/requests/mine/",
    "/inventory/nodes/",
    "/inventory/vgpu-configs/",
    "/inventory/permitted-devices/",
)


@pytest.fixture
def admin_client(db: None, monkeypatch: pytest.MonkeyPatch) -> Client:
    """root (admin) with at least 3 rows on every list, the cap lowered to 2: the 3 requests of
    ``request_world`` made root's own (for /mine/), 5 nodes, 3 vGPU configs, 3 permitted devices."""
    from vmrequests.models import VMRequest

    request_form_inventory()
    world = request_world()
    VMRequest.objects.update(requester=world.root)
    for index in range(3):
        stored_permitted_device(f"nvidia.com/DEV{index}", f"10DE:000{index}")
    stored_vgpu_config("A10-4Q", [{"device_filter": None, "devices": "all", "vgpu_devices": {"A10-4Q": 6}}])
    monkeypatch.setattr(FilteredTableListMixin, "max_per_page", 2)
    client = Client()
    client.force_login(world.root)
    return client


def rows(response: Any) -> int:
    return len(response.context["table"].page.object_list)


def test_the_table_lists_every_list_page() -> None:
    """A new list page must be added to LIST_PAGES (the views are the mixin's subclasses)."""
    from django.urls import get_resolver

    found = set()

    def walk(patterns: Any, prefix: str) -> None:
        for entry in patterns:
            if hasattr(entry, "url_patterns"):
                walk(entry.url_patterns, prefix + str(entry.pattern))
                continue
            view_class = getattr(entry.callback, "view_class", None)
            if view_class is not None and issubclass(view_class, FilteredTableListMixin):
                found.add("/" + prefix + str(entry.pattern))

    walk(get_resolver().url_patterns, "")
    assert found == set(LIST_PAGES)


@pytest.mark.parametrize("path", LIST_PAGES)
@pytest.mark.parametrize("value", ["-1", "0", "-100000000"])
def test_negative_or_zero_per_page_is_one_row(admin_client: Client, path: str, value: str) -> None:
    response = admin_client.get(path, {"per_page": value})
    assert response.status_code == 200
    assert rows(response) == 1


@pytest.mark.parametrize("path", LIST_PAGES)
@pytest.mark.parametrize("value", ["3", "100000000", "9" * 5000])
def test_huge_per_page_is_capped(admin_client: Client, path: str, value: str) -> None:
    response = admin_client.get(path, {"per_page": value})
    assert response.status_code == 200
    # "9" * 5000 is not an int Python parses (4,300-digit limit): the default, 25, capped to 2.
    assert rows(response) == 2


@pytest.mark.parametrize("path", LIST_PAGES)
@pytest.mark.parametrize(
    ("page", "expected"),
    [("-1", 1), ("0", 1), ("2", 2), ("99999999999999999999", "last"), ("x", 1), ("1.5", 1)],
)
def test_hostile_page_numbers(admin_client: Client, path: str, page: str, expected: int | str) -> None:
    """Out-of-range pages show the nearest page (the last: page 2, or 3 for the 5 nodes of the dashboard and node list);
    junk shows the first."""
    response = admin_client.get(path, {"per_page": "2", "page": page})
    assert response.status_code == 200
    table = response.context["table"]
    last = 3 if path in {"/inventory/", "/inventory/nodes/"} else 2
    assert table.page.number == (last if expected == "last" else expected)


@pytest.mark.parametrize("path", LIST_PAGES)
def test_htmx_partial_also_capped(admin_client: Client, path: str) -> None:
    response = admin_client.get(path, {"per_page": "100000000"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert rows(response) == 2
