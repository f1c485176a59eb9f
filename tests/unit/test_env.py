"""Settings parsing: good values are typed, malformed values fail with the variable's name."""

from __future__ import annotations

import ipaddress

import pytest
from django.core.exceptions import ImproperlyConfigured

from portal.env import Env


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("on", True),
        ("false", False),
        ("0", False),
        ("No", False),
        ("off", False),
    ],
)
def test_bool_accepts_the_usual_spellings(raw: str, expected: bool) -> None:
    assert Env({"DEBUG": raw}).bool("DEBUG", default=not expected) is expected


def test_bool_unset_or_blank_uses_default() -> None:
    assert Env({}).bool("DEBUG", default=True) is True
    assert Env({"DEBUG": "  "}).bool("DEBUG", default=False) is False


def test_bool_rejects_anything_else() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"DEBUG='maybe' is not a boolean"):
        Env({"DEBUG": "maybe"}).bool("DEBUG", default=False)


def test_int_parses_and_checks_bounds() -> None:
    env = Env({"N": " 42 ", "BAD": "4x", "LOW": "0"})
    assert env.int("N", 1) == 42
    assert env.int("UNSET", 7) == 7
    with pytest.raises(ImproperlyConfigured, match=r"BAD='4x' is not an integer"):
        env.int("BAD", 1)
    with pytest.raises(ImproperlyConfigured, match="LOW=0 is below the minimum 1"):
        env.int("LOW", 5, minimum=1)
    with pytest.raises(ImproperlyConfigured, match="N=42 is above the maximum 10"):
        env.int("N", 5, maximum=10)


def test_list_splits_on_commas_and_drops_blanks() -> None:
    assert Env({"HOSTS": "a.example.com, b.example.com,,"}).list("HOSTS", []) == [
        "a.example.com",
        "b.example.com",
    ]
    assert Env({}).list("HOSTS", ["x"]) == ["x"]


def test_choice() -> None:
    assert Env({"PORTAL_ENV": "production"}).choice(
        "PORTAL_ENV", "development", ("development", "production")
    ) == ("production")
    with pytest.raises(
        ImproperlyConfigured, match="PORTAL_ENV='prod' must be one of: development, production"
    ):
        Env({"PORTAL_ENV": "prod"}).choice("PORTAL_ENV", "development", ("development", "production"))


def test_required_string() -> None:
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY must be set"):
        Env({"SECRET_KEY": ""}).str("SECRET_KEY", required=True)


def test_networks() -> None:
    nets = Env({"CIDRS": "10.0.0.0/8, ::1"}).networks("CIDRS", [])
    assert nets == [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128")]
    with pytest.raises(ImproperlyConfigured, match="CIDRS: 'ten' is not an IP network"):
        Env({"CIDRS": "ten"}).networks("CIDRS", [])


def test_database_sqlite_and_postgres() -> None:
    sqlite = Env({}).database("DATABASE_URL", "sqlite:////tmp/x/portal.sqlite3")
    assert sqlite["ENGINE"] == "django.db.backends.sqlite3"
    assert sqlite["NAME"] == "/tmp/x/portal.sqlite3"
    pg = Env({"DATABASE_URL": "postgres://portal:s3cret@db.example.com:5433/portal"}).database(
        "DATABASE_URL", ""
    )
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["NAME"], pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"]) == (
        "portal",
        "portal",
        "s3cret",
        "db.example.com",
        5433,
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:p@h/db", "unsupported scheme 'mysql'"),
        ("not a url", "unsupported scheme ''"),
        ("postgres://u:p@h:5432/", "names no database"),
    ],
)
def test_database_rejects_malformed_urls(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        Env({"DATABASE_URL": url}).database("DATABASE_URL", "sqlite:///x")


def test_choice_can_ignore_case() -> None:
    env = Env({"LANGUAGE_CODE": "zh-Hans"})
    assert env.choice("LANGUAGE_CODE", "en", ("en", "zh-hans"), case_insensitive=True) == "zh-hans"
    with pytest.raises(ImproperlyConfigured, match="LANGUAGE_CODE='zh-Hans' must be one of: en, zh-hans"):
        env.choice("LANGUAGE_CODE", "en", ("en", "zh-hans"))
