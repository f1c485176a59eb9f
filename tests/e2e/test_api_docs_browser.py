"""The API docs (Swagger UI at /api/docs/, Redoc at /api/redoc/) run in a real Chromium under the
portal's Content Security Policy, from local static files only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from playwright.sync_api import ConsoleMessage, Page, Request, expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
HTTP_METHODS = {"get", "put", "post", "patch", "delete", "head", "options", "trace"}


def committed_operations() -> list[tuple[str, str, str]]:
    """``(METHOD, path, summary)`` of every operation in docs/openapi.yaml."""
    schema = yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))
    return [
        (method.upper(), path, operation.get("summary", ""))
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


def sign_in(page: Page, base: str) -> None:
    """Give the browser the session cookie of a freshly signed-in analyst."""
    user = User.objects.create_user("doris", password="Doris-Password-42")
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": cookie.key, "value": cookie.value, "url": base}])


def watch(page: Page, base: str) -> tuple[list[str], list[str], list[str]]:
    """Collect console errors (CSP violations are reported there), the requests the page tried
    to send to other hosts, and those of them that got a response."""
    errors: list[str] = []
    attempted: list[str] = []
    answered: list[str] = []

    def foreign(request: Request) -> bool:
        return not request.url.startswith((base, "data:", "blob:"))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", on_console)
    page.on("request", lambda request: attempted.append(request.url) if foreign(request) else None)
    page.on("requestfinished", lambda request: answered.append(request.url) if foreign(request) else None)
    return errors, attempted, answered


def test_swagger_ui_lists_every_operation_without_csp_errors(live_server: object, page: Page) -> None:
    base = str(live_server.url)  # type: ignore[attr-defined]
    sign_in(page, base)
    errors, attempted, answered = watch(page, base)
    operations = committed_operations()

    page.goto(base + "/api/docs/")
    blocks = page.locator("#swagger-ui .opblock")
    expect(blocks).to_have_count(len(operations))
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("GPU VM Portal API")
    shown = {
        (
            blocks.nth(i).locator(".opblock-summary-method").inner_text().strip(),
            blocks.nth(i).locator(".opblock-summary-path").get_attribute("data-path"),
        )
        for i in range(len(operations))
    }
    assert shown == {(method, path) for method, path, _ in operations}
    # The "Authorize" dialog offers the token and the session cookie schemes.
    page.locator("#swagger-ui .auth-wrapper .authorize").click()
    schemes = page.locator(".auth-container h4")
    expect(schemes).to_have_count(2)
    assert sorted(" ".join(text.split()) for text in schemes.all_inner_texts()) == [
        "cookieAuth (apiKey)",
        "tokenAuth (apiKey)",
    ]
    assert errors == []
    assert attempted == []
    assert answered == []


def test_redoc_renders_every_operation_without_csp_errors(live_server: object, page: Page) -> None:
    base = str(live_server.url)  # type: ignore[attr-defined]
    sign_in(page, base)
    errors, attempted, answered = watch(page, base)
    operations = committed_operations()

    # Redoc's sidebar always shows Redocly's logo from its CDN (hidden when it fails to load); the
    # CSP blocks that request (the portal runs air-gapped). Wait for that, as Redoc asks for the
    # logo only after its first render.
    with page.expect_event("requestfailed", lambda request: request.url == REDOC_LOGO):
        page.goto(base + "/api/redoc/")
    expect(page.locator("h1").first).to_contain_text("GPU VM Portal API")
    expect(page.locator("[data-section-id*='/operation/'] h2")).to_have_count(len(operations))
    titles = page.locator("[data-section-id*='/operation/'] h2").all_inner_texts()
    assert sorted(titles) == sorted(summary for _, _, summary in operations)
    assert attempted == [REDOC_LOGO]
    assert answered == []
    assert [e for e in errors if not (REDOC_LOGO in e and "img-src" in e)] == []


def test_anonymous_browser_is_sent_to_the_login_page(live_server: object, page: Page) -> None:
    base = str(live_server.url)  # type: ignore[attr-defined]
    page.goto(base + "/api/docs/")
    expect(page).to_have_url(base + "/login/?next=/api/docs/")
