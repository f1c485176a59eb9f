"""#14 finding 9: a maximum validity for API tokens and a session policy.

Before: any user could give themselves a 10-year token (``days=3650``) and a browser session
lived two weeks whatever the activity. Now ``PORTAL_API_TOKEN_MAX_DAYS`` (default 365) bounds
every way a token is issued (the user's page, the admin, ``create_api_token``, ``ApiToken.issue``)
and ``portal.session_policy`` ends a session after ``PORTAL_SESSION_IDLE_MINUTES`` without a
request or ``PORTAL_SESSION_MAX_HOURS`` after sign-in.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.test.utils import override_settings

from portal.models import ApiToken
from tests.factories import portal_user

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- token maximum ---------------------------------------------------------------------------


def test_token_page_refuses_more_than_the_maximum() -> None:
    client = _client(portal_user("analyst"))
    response = client.post("/account/tokens/", {"name": "ten years", "scopes": ["read"], "days": "3650"})
    assert response.status_code == 200
    assert response.context["form"].errors == {"days": ["Ensure this value is less than or equal to 365."]}
    assert ApiToken.objects.count() == 0
    page = client.get("/account/tokens/").content.decode()
    assert 'max="365"' in page
    assert "The token stops working after this many days (1 to 365)." in page


@override_settings(PORTAL_API_TOKEN_MAX_DAYS=30, PORTAL_API_TOKEN_TTL_DAYS=30)
def test_token_page_follows_the_setting() -> None:
    client = _client(portal_user("analyst"))
    refused = client.post("/account/tokens/", {"name": "t", "scopes": ["read"], "days": "31"})
    assert refused.context["form"].errors == {"days": ["Ensure this value is less than or equal to 30."]}
    accepted = client.post("/account/tokens/", {"name": "t", "scopes": ["read"], "days": "30"})
    assert accepted.context["new_token_obj"].name == "t"
    assert ApiToken.objects.count() == 1


def test_admin_refuses_more_than_the_maximum() -> None:
    service = User.objects.create_user("servicenow")
    client = _client(portal_user("admin"))
    response = client.post(
        "/admin/portal/apitoken/add/", {"user": service.pk, "name": "x", "scopes": ["read"], "days": "366"}
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "days": ["Ensure this value is less than or equal to 365."]
    }
    assert ApiToken.objects.count() == 0


def test_command_and_model_refuse_more_than_the_maximum() -> None:
    user = User.objects.create_user("x")
    with pytest.raises(CommandError, match=r"--days must be between 1 and 365 \(PORTAL_API_TOKEN_MAX_DAYS\)"):
        call_command("create_api_token", "x", "--days", "366")
    with pytest.raises(ValueError, match=r"days must be between 1 and 365 \(PORTAL_API_TOKEN_MAX_DAYS\)"):
        ApiToken.issue(user, "x", ["read"], 366)
    assert ApiToken.objects.count() == 0
    token, _plain = ApiToken.issue(user, "x", ["read"], 365)
    assert token.name == "x"


# --- session policy ----------------------------------------------------------------------------


def _age_session(client: Client, **seconds_ago: int) -> None:
    session = client.session
    now = int(time.time())
    for key, ago in seconds_ago.items():
        session[f"_portal_{key}"] = now - ago
    session.save()


def test_login_records_the_sign_in_time() -> None:
    client = _client(portal_user("analyst"))
    client.get("/")
    session = client.session
    assert abs(session["_portal_signed_in"] - time.time()) < 5
    assert abs(session["_portal_last_seen"] - time.time()) < 5


def test_idle_session_ends_with_a_message() -> None:
    client = _client(portal_user("analyst"))
    _age_session(client, signed_in=61 * 60, last_seen=61 * 60)  # default idle timeout: 60 minutes
    response = client.get("/requests/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/requests/")
    page = client.get(response["Location"])
    assert [str(m) for m in page.context["messages"]] == [
        "You were signed out after 60 minutes without activity. Sign in again."
    ]
    assert "_auth_user_id" not in client.session


def test_activity_keeps_the_session_alive() -> None:
    client = _client(portal_user("analyst"))
    _age_session(client, signed_in=59 * 60, last_seen=59 * 60)
    assert client.get("/requests/").status_code == 200
    assert abs(client.session["_portal_last_seen"] - time.time()) < 5
    assert client.get("/requests/").status_code == 200


def test_absolute_lifetime_ends_even_an_active_session() -> None:
    client = _client(portal_user("analyst"))
    _age_session(client, signed_in=12 * 3600 + 1, last_seen=10)  # default lifetime: 12 hours
    response = client.get("/requests/")
    assert (response.status_code, response["Location"]) == (302, "/login/?next=/requests/")
    page = client.get(response["Location"])
    assert [str(m) for m in page.context["messages"]] == [
        "Your session reached its maximum length of 12 hours. Sign in again."
    ]


def test_idle_session_is_refused_by_the_api_too() -> None:
    client = _client(portal_user("analyst"))
    _age_session(client, signed_in=61 * 60, last_seen=61 * 60)
    response = client.get("/api/v1/me/")
    assert (response.status_code, response["WWW-Authenticate"]) == (401, "Token")
    assert response.json()["detail"] == "Authentication credentials were not provided."


@override_settings(PORTAL_SESSION_IDLE_MINUTES=5)
def test_idle_timeout_follows_the_setting() -> None:
    client = _client(portal_user("analyst"))
    _age_session(client, last_seen=5 * 60 + 1)
    response = client.get("/requests/")
    assert response.status_code == 302
    page = client.get(response["Location"])
    assert [str(m) for m in page.context["messages"]] == [
        "You were signed out after 5 minutes without activity. Sign in again."
    ]


def test_cookie_and_store_lifetime_defaults() -> None:
    from django.conf import settings

    assert settings.SESSION_COOKIE_AGE == 12 * 3600
    assert settings.SESSION_EXPIRE_AT_BROWSER_CLOSE is False  # development default
