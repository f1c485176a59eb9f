"""Copy buttons (static/js/copy.js): a new API token is copied to the clipboard in one click."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from portal.models import ApiToken

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_new_token_is_copied_in_one_click(
    live_server: object, browser: Browser, screenshot: Callable[..., Path]
) -> None:
    User.objects.create_user("carol", password="Carol-Password-42")
    base = str(live_server.url)  # type: ignore[attr-defined]
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page = context.new_page()
    try:
        page.goto(base + "/login/?next=/account/tokens/")
        page.fill("#id_username", "carol")
        page.fill("#id_password", "Carol-Password-42")
        page.click("button.primary")
        expect(page).to_have_url(base + "/account/tokens/")

        page.fill("#id_name", "ticketing")
        page.check("input[name=scopes][value=read]")
        page.click("button:has-text('Create token')")
        token = page.locator("#new-token-value").inner_text().strip()
        assert ApiToken.objects.get(user__username="carol").token_key == token[:15]

        button = page.locator("button.copy")
        expect(button).to_be_visible()
        button.click()
        expect(button).to_have_text("Copied")
        assert page.evaluate("navigator.clipboard.readText()") == token
        expect(button).to_have_text("Copy", timeout=5000)
    finally:
        context.close()
