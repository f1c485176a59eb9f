"""English and Simplified Chinese: the switcher, Accept-Language, and a complete catalog."""

from __future__ import annotations

from pathlib import Path

import polib
import pytest
from django.test import Client

pytestmark = pytest.mark.django_db
LOCALE = Path(__file__).resolve().parents[2] / "locale" / "zh_Hans" / "LC_MESSAGES"


def test_language_switch_renders_chinese() -> None:
    client = Client()
    english = client.get("/login/").content.decode()
    assert "<h1>Sign in</h1>" in english
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/login/"})
    assert response.status_code == 302
    assert response["Location"] == "/login/"
    chinese = client.get("/login/").content.decode()
    assert "<h1>登录</h1>" in chinese
    assert '<html lang="zh-hans">' in chinese
    client.post("/i18n/setlang/", {"language": "en", "next": "/login/"})
    assert "<h1>Sign in</h1>" in client.get("/login/").content.decode()


def test_accept_language_picks_chinese() -> None:
    page = Client().get("/login/", headers={"Accept-Language": "zh-CN,zh;q=0.9"}).content.decode()
    assert "GPU 虚拟机门户" in page


def test_catalog_is_complete_and_compiled() -> None:
    po = polib.pofile(str(LOCALE / "django.po"))
    assert po.untranslated_entries() == []
    assert po.fuzzy_entries() == []
    mo = polib.mofile(str(LOCALE / "django.mo"))
    compiled = {entry.msgid: entry.msgstr for entry in mo}
    source = {entry.msgid: entry.msgstr for entry in po.translated_entries()}
    assert compiled == source, "django.mo is stale: run `make messages`"


def test_no_inline_scripts_or_styles_in_pages() -> None:
    page = Client().get("/login/").content.decode()
    assert page.count("<script") == page.count("<script src=")
    assert "<style" not in page
    assert " style=" not in page
