"""The inventory pages stay usable at 420 px: no sideways page scroll, command boxes wrap."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Browser

from tests.factories import stored_fleet, stored_sync_run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("path", ["/inventory/", "/inventory/nodes/gpu-p-000/", "/inventory/vgpu-configs/"])
def test_no_sideways_scroll_at_420px(live_server: object, browser: Browser, path: str) -> None:
    stored_fleet(1)
    stored_sync_run(age_seconds=5)
    user = User.objects.create_user("alice", password="Alice-Password-42")
    user.groups.add(Group.objects.get(name="analysts"))
    base = str(live_server.url)  # type: ignore[attr-defined]
    context = browser.new_context(locale="en-US", viewport={"width": 420, "height": 900})
    page = context.new_page()
    try:
        page.goto(base + "/login/")
        page.fill("#id_username", "alice")
        page.fill("#id_password", "Alice-Password-42")
        page.click("button.primary")
        page.goto(base + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 420
        for box in page.locator("pre.commands").all():
            assert box.evaluate("el => el.scrollWidth <= el.clientWidth")
        page.screenshot(
            path=str(
                Path(__file__).resolve().parents[2]
                / "test-artifacts"
                / "screenshots"
                / f"narrow-{path.strip('/').replace('/', '-')}.png"
            ),
            full_page=True,
        )
    finally:
        context.close()
