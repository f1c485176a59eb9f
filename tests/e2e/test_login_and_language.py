"""A new user signs in with a real browser and switches the UI to Chinese and back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, User
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_analyst_signs_in_and_switches_language(
    live_server: object, page: Page, screenshot: Callable[[str], Path]
) -> None:
    analyst = User.objects.create_user("alice", password="Alice-Password-42")
    analyst.groups.add(Group.objects.get(name="analysts"))
    base = str(live_server.url)  # type: ignore[attr-defined]

    page.goto(base + "/")
    expect(page).to_have_url(base + "/login/?next=/")
    expect(page.locator("h1")).to_have_text("Sign in")
    screenshot("login")

    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button.primary")
    expect(page.locator(".error")).to_contain_text("Please enter a correct username and password")

    page.fill("#id_username", "alice")
    page.fill("#id_password", "Alice-Password-42")
    page.click("button.primary")
    expect(page).to_have_url(base + "/")
    expect(page.locator("h1")).to_have_text("Welcome, alice")
    expect(page.locator(".badge.role-analyst")).to_have_text("Analyst")
    screenshot("home-en")

    page.select_option("#language-select", "zh-hans")
    page.click(".langswitch button")
    expect(page.locator("h1")).to_have_text("欢迎，alice")
    expect(page.locator(".badge.role-analyst")).to_have_text("分析师")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    screenshot("home-zh")

    page.select_option("#language-select", "en")
    page.click(".langswitch button")
    expect(page.locator("h1")).to_have_text("Welcome, alice")


def test_page_loads_without_csp_violations(live_server: object, page: Page) -> None:
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if message.type == "error" else None)
    page.goto(str(live_server.url) + "/login/")  # type: ignore[attr-defined]
    expect(page.locator("h1")).to_have_text("Sign in")
    # htmx loaded from our own static files and ran under the CSP.
    assert page.evaluate("typeof window.htmx") == "object"
    assert violations == []


def test_password_guessing_locks_the_sign_in_and_says_when_to_retry(
    live_server: object, page: Page, screenshot: Callable[[str], Path]
) -> None:
    """#14 finding 2 in a browser: the fifth wrong password shows the lockout page (429), in the
    chosen language, and the right password is refused until the lockout ends."""
    User.objects.create_user("bob", password="Bob-Password-42")
    base = str(live_server.url)  # type: ignore[attr-defined]
    page.goto(base + "/login/")
    for _ in range(5):
        page.fill("#id_username", "bob")
        page.fill("#id_password", "wrong")
        page.click("button.primary")
    expect(page.locator("h1")).to_have_text("Sign-in locked")
    expect(page.locator(".error")).to_have_text("Too many failed sign-ins for “bob” from your address.")
    expect(page.locator("main")).to_contain_text("(in 15 minutes).")
    screenshot("login-locked")

    page.goto(base + "/login/")
    page.fill("#id_username", "bob")
    page.fill("#id_password", "Bob-Password-42")
    with page.expect_response(lambda r: r.url == base + "/login/" and r.request.method == "POST") as answer:
        page.click("button.primary")
    assert answer.value.status == 429
    expect(page.locator("h1")).to_have_text("Sign-in locked")

    page.goto(base + "/login/")
    page.select_option("#language-select", "zh-hans")
    page.click(".langswitch button")
    page.fill("#id_username", "bob")
    page.fill("#id_password", "Bob-Password-42")
    page.click("button.primary")
    expect(page.locator("h1")).to_have_text("登录已锁定")
    expect(page.locator(".error")).to_have_text("来自您的地址的 “bob” 登录失败次数过多。")
    screenshot("login-locked-zh")
