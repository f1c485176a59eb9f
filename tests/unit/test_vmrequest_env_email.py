"""Email settings: ``EMAIL_URL`` (``Env.mailer``), ``PORTAL_EMAIL_FROM``, ``PORTAL_BASE_URL``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from portal.env import Env

ROOT = Path(__file__).resolve().parents[2]
SMTP = "django.core.mail.backends.smtp.EmailBackend"


def mailer(url: str | None) -> dict[str, Any]:
    return Env({} if url is None else {"EMAIL_URL": url}).mailer("EMAIL_URL", "consolemail://")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, {"BACKEND": "django.core.mail.backends.console.EmailBackend", "OPTIONS": {}}),
        ("  ", {"BACKEND": "django.core.mail.backends.console.EmailBackend", "OPTIONS": {}}),
        ("memorymail://", {"BACKEND": "django.core.mail.backends.locmem.EmailBackend", "OPTIONS": {}}),
        ("dummymail://", {"BACKEND": "django.core.mail.backends.dummy.EmailBackend", "OPTIONS": {}}),
        (
            "filemail:////var/spool/portal-mail",
            {
                "BACKEND": "django.core.mail.backends.filebased.EmailBackend",
                "OPTIONS": {"file_path": "/var/spool/portal-mail"},
            },
        ),
        (
            "smtp://mail.example.com",
            {"BACKEND": SMTP, "OPTIONS": {"host": "mail.example.com", "use_tls": False, "use_ssl": False}},
        ),
        (
            "smtp+tls://portal%40corp:p%40ss%3Aw%2Frd%23@mail.example.com:587?timeout=10",
            {
                "BACKEND": SMTP,
                "OPTIONS": {
                    "host": "mail.example.com",
                    "port": 587,
                    "username": "portal@corp",
                    "password": "p@ss:w/rd#",
                    "use_tls": True,
                    "use_ssl": False,
                    "timeout": 10,
                },
            },
        ),
        (
            "smtps://u:p@mail.example.com",
            {
                "BACKEND": SMTP,
                "OPTIONS": {
                    "host": "mail.example.com",
                    "username": "u",
                    "password": "p",
                    "use_tls": True,
                    "use_ssl": False,
                },
            },
        ),
        (
            "smtp+ssl://mail.example.com:465",
            {
                "BACKEND": SMTP,
                "OPTIONS": {"host": "mail.example.com", "port": 465, "use_tls": False, "use_ssl": True},
            },
        ),
    ],
)
def test_mailer_parses_the_url(url: str | None, expected: dict[str, Any]) -> None:
    assert mailer(url) == expected


@pytest.mark.parametrize(
    ("url", "port"),
    [("smtp://h", 25), ("smtp+tls://h", 587), ("smtp+ssl://h", 465), ("smtp://h:2525", 2525)],
)
def test_mailer_options_build_djangos_smtp_backend(url: str, port: int) -> None:
    config = mailer(url)
    backend = import_string(config["BACKEND"])(alias="default", **config["OPTIONS"])
    assert (backend.host, backend.port) == ("h", port)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nonsense", "EMAIL_URL: unsupported scheme ''"),
        ("mailgun://key@example.com", "EMAIL_URL: unsupported scheme 'mailgun'"),
        ("smtp://", "EMAIL_URL: an SMTP URL needs a host"),
        ("smtp://user:secret@:25", "EMAIL_URL: an SMTP URL needs a host"),
        ("smtp://h:twenty-five", "EMAIL_URL could not be parsed: Port could not be cast to integer"),
        ("smtp://h?use_tls=1", "EMAIL_URL: unknown option 'use_tls'"),
        ("smtp://h?timeout=soon", "EMAIL_URL: timeout='soon' is not an integer"),
        ("smtp://h?timeout=0", "EMAIL_URL: timeout must be at least 1 second"),
        ("consolemail://?timeout=5", "EMAIL_URL: unknown option 'timeout' (SMTP only"),
        ("filemail://", "EMAIL_URL: filemail needs a directory"),
    ],
)
def test_mailer_refuses_malformed_urls(url: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as exc:
        mailer(url)
    assert str(exc.value).startswith(message)


def test_mailer_errors_never_repeat_the_password() -> None:
    for url in ("smtp://user:s3cret-pw@:25", "smtpx://user:s3cret-pw@h", "smtp://user:s3cret-pw@h?x=1"):
        with pytest.raises(ImproperlyConfigured) as exc:
            mailer(url)
        assert "s3cret-pw" not in str(exc.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "gpu-portal@localhost"),
        ("portal@example.com", "portal@example.com"),
        ("GPU Portal <portal@example.com>", "GPU Portal <portal@example.com>"),
    ],
)
def test_email_address(raw: str | None, expected: str) -> None:
    env = Env({} if raw is None else {"PORTAL_EMAIL_FROM": raw})
    assert env.email_address("PORTAL_EMAIL_FROM", "gpu-portal@localhost") == expected


@pytest.mark.parametrize("raw", ["portal", "portal@", "GPU Portal <nope>", "a@b@c"])
def test_email_address_refuses_non_addresses(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured) as exc:
        Env({"PORTAL_EMAIL_FROM": raw}).email_address("PORTAL_EMAIL_FROM", "x@localhost")
    assert (
        str(exc.value) == f"PORTAL_EMAIL_FROM={raw!r} is not an email address (e.g. gpu-portal@example.com)"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, "http://127.0.0.1:8000"),
        ("https://portal.example.com/", "https://portal.example.com"),
        ("https://portal.example.com//", "https://portal.example.com"),
        ("http://gpu.corp:8080/portal/", "http://gpu.corp:8080/portal"),
    ],
)
def test_http_url(raw: str | None, expected: str) -> None:
    env = Env({} if raw is None else {"PORTAL_BASE_URL": raw})
    assert env.http_url("PORTAL_BASE_URL", "http://127.0.0.1:8000") == expected


@pytest.mark.parametrize(
    "raw",
    [
        "portal.example.com",
        "ftp://portal.example.com",
        "https://",
        "https://x.example.com/?a=1",
        "https://x/#top",
    ],
)
def test_http_url_refuses_anything_else(raw: str) -> None:
    with pytest.raises(ImproperlyConfigured) as exc:
        Env({"PORTAL_BASE_URL": raw}).http_url("PORTAL_BASE_URL", "http://127.0.0.1:8000")
    assert str(exc.value) == (
        f"PORTAL_BASE_URL={raw!r} must be an http:// or https:// URL with a host and no query "
        "(e.g. https://portal.example.com)"
    )


def _manage(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_", "EMAIL_"))}
    base.update({"PORTAL_VAR_DIR": str(tmp_path / "var"), **env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_settings_read_the_email_variables(tmp_path: Path) -> None:
    code = (
        "from django.conf import settings as s;"
        "print(s.MAILERS['default']['BACKEND'], s.MAILERS['default']['OPTIONS'].get('host'),"
        " s.DEFAULT_FROM_EMAIL, s.SERVER_EMAIL, s.PORTAL_BASE_URL)"
    )
    result = _manage(tmp_path, {}, "shell", "--no-imports", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.core.mail.backends.console.EmailBackend",
        "None",
        "gpu-portal@localhost",
        "gpu-portal@localhost",
        "http://127.0.0.1:8000",
    ]
    env = {
        "EMAIL_URL": "smtp+tls://u:p@mail.example.com:587",
        "PORTAL_EMAIL_FROM": "portal@example.com",
        "PORTAL_BASE_URL": "https://gpu.example.com/",
    }
    result = _manage(tmp_path, env, "shell", "--no-imports", "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.core.mail.backends.smtp.EmailBackend",
        "mail.example.com",
        "portal@example.com",
        "portal@example.com",
        "https://gpu.example.com",
    ]
    assert "RemovedInDjango2028Warning" not in result.stderr


def test_malformed_email_url_stops_start_up(tmp_path: Path) -> None:
    result = _manage(tmp_path, {"EMAIL_URL": "smtp://h?timeout=0"}, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured: EMAIL_URL: timeout must be at least 1 second" in result.stderr
