"""Browser tests: Playwright for Python driving Debian's Chromium against pytest-django's live server.

The live server listens on 127.0.0.1 only. Chromium comes from the Debian package
(``/usr/bin/chromium``; ``make test`` installs it), never from Playwright's own download,
which this network cannot reach. Screenshots go to ``test-artifacts/screenshots/``.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

# Playwright's sync API runs an event loop in the test thread; Django's ORM refuses to run
# "inside" it unless told that this thread is a plain synchronous one.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Return Debian's Chromium, or fail with the package to install."""
    for candidate in (os.environ.get("PORTAL_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    raise pytest.UsageError("Chromium not found: apt-get install chromium (or set PORTAL_CHROMIUM)")


@pytest.fixture(autouse=True)
def roles(transactional_db: None) -> None:
    """Re-create the groups and permission of migration ``vmrequests.0001_roles``.

    Live-server tests run in transactional mode, which empties every table after each test,
    data-migration rows included; the next test would find no ``analysts`` group.
    """
    from django.apps import apps

    migration = importlib.import_module("vmrequests.migrations.0001_roles")
    migration.create_roles(apps, None)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def screenshot(page: Page, request: pytest.FixtureRequest) -> Iterator[object]:
    """Call ``screenshot("step-name")`` to keep a PNG of the page under test-artifacts/screenshots/."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(name: str) -> Path:
        path = ARTIFACTS / f"{request.node.name}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    yield take
