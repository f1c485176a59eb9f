"""Token authentication of the read API (django-rest-knox: hashed storage, expiry) and the
``create_api_token`` command (name, scopes, days)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from portal.models import ApiToken

pytestmark = pytest.mark.django_db


def _token(capsys: pytest.CaptureFixture[str], username: str, *extra: str) -> str:
    call_command("create_api_token", username, *extra)
    out = capsys.readouterr().out.strip().splitlines()
    assert re.match(rf"^token for {username} \(expires \d{{4}}-\d\d-\d\d \d\d:\d\d UTC\):$", out[0])
    return out[1]


def test_token_reads_the_inventory(capsys: pytest.CaptureFixture[str]) -> None:
    User.objects.create_user("ticketing")
    token = _token(capsys, "ticketing", "--days", "7")
    response = Client().get("/api/v1/inventory/summary/", headers={"Authorization": f"Token {token}"})
    assert response.status_code == 200
    stored = ApiToken.objects.get(user__username="ticketing")
    assert token not in (stored.digest, stored.token_key)  # only a hash and a prefix are stored
    assert token.startswith(stored.token_key)
    assert timedelta(days=6, hours=23) < stored.expiry - timezone.now() <= timedelta(days=7)
    assert (stored.name, stored.scopes) == ("cli", ["read"])


def test_name_and_repeated_scopes(
    capsys: pytest.CaptureFixture[str], settings: pytest.FixtureRequest
) -> None:
    settings.PORTAL_API_TOKEN_TTL_DAYS = 30  # type: ignore[attr-defined]
    User.objects.create_user("snow")
    _token(capsys, "snow", "--name", "ServiceNow prod", "--scope", "write", "--scope", "read")
    stored = ApiToken.objects.get(user__username="snow")
    assert stored.name == "ServiceNow prod"
    assert stored.scopes == ["read", "write"]  # canonical order
    assert timedelta(days=29, hours=23) < stored.expiry - timezone.now() <= timedelta(days=30)


def test_expired_or_wrong_token_is_401(capsys: pytest.CaptureFixture[str]) -> None:
    User.objects.create_user("old")
    token = _token(capsys, "old")
    ApiToken.objects.filter(user__username="old").update(expiry=timezone.now() - timedelta(seconds=1))
    expired = Client().get("/api/v1/inventory/nodes/", headers={"Authorization": f"Token {token}"})
    assert expired.status_code == 401
    wrong = Client().get("/api/v1/inventory/nodes/", headers={"Authorization": "Token " + "0" * 64})
    assert wrong.status_code == 401


def test_command_refuses_unknown_user_bad_days_bad_name_and_bad_scope() -> None:
    with pytest.raises(CommandError, match="no active user 'ghost'"):
        call_command("create_api_token", "ghost")
    User.objects.create_user("x")
    with pytest.raises(CommandError, match=r"--days must be between 1 and 365 \(PORTAL_API_TOKEN_MAX_DAYS\)"):
        call_command("create_api_token", "x", "--days", "9999")
    with pytest.raises(CommandError, match=r"--days must be between 1 and 365 \(PORTAL_API_TOKEN_MAX_DAYS\)"):
        call_command("create_api_token", "x", "--days", "0")
    with pytest.raises(CommandError, match="--name must be 1 to 100 characters"):
        call_command("create_api_token", "x", "--name", " ")
    with pytest.raises(CommandError, match="invalid choice: 'admin'"):
        call_command("create_api_token", "x", "--scope", "admin")
    assert ApiToken.objects.count() == 0
