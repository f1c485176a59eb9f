"""API token pages (``/account/tokens/``) and the token admin: create (shown once, stored
hashed, authenticates), bad input, approve scope for approvers only, revoke, 404 for others."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from knox.crypto import hash_token

from portal.models import ApiToken
from tests.factories import portal_user
from tests.vmrequest_factories import stored_team

pytestmark = pytest.mark.django_db

PAGE = "/account/tokens/"
SUMMARY = "/api/v1/inventory/summary/"
NEW_TOKEN = re.compile(r'<code id="new-token-value">([^<]+)</code>')


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _api(token: str) -> int:
    return Client().get(SUMMARY, headers={"Authorization": f"Token {token}"}).status_code


def _create(client: Client, **data: Any) -> Any:
    payload = {"name": "ServiceNow prod", "scopes": ["read"], "days": "30"} | data
    return client.post(PAGE, payload)


def _issue(
    user: Any, name: str = "t", scopes: tuple[str, ...] = ("read",), days: int = 30
) -> tuple[ApiToken, str]:
    return ApiToken.issue(user, name, list(scopes), days)


# --- create ------------------------------------------------------------------------------------


def test_create_shows_the_token_once_stores_a_hash_and_it_authenticates() -> None:
    user = portal_user("analyst")
    client = _client(user)

    response = _create(client, scopes=["write", "read"])

    assert response.status_code == 200  # rendered in the POST response, no redirect
    assert "no-store" in response["Cache-Control"]
    html = response.content.decode()
    tokens = NEW_TOKEN.findall(html)
    assert len(tokens) == 1
    token = tokens[0]
    assert html.count(token) == 1
    assert "it will not be shown again" in html
    assert "New token “ServiceNow prod”" in html

    stored = ApiToken.objects.get(user=user)
    assert (stored.name, stored.scopes) == ("ServiceNow prod", ["read", "write"])
    assert token not in (stored.digest, stored.token_key)
    assert stored.digest == hash_token(token)
    assert token.startswith(stored.token_key) and len(stored.token_key) == 15
    assert timedelta(days=29, hours=23) < stored.expiry - timezone.now() <= timedelta(days=30)

    # Not kept anywhere for a later page: not in the session, the cookies or the next render.
    assert token not in str(dict(client.session.items()))
    assert token not in str(client.cookies)
    again = client.get(PAGE).content.decode()
    assert token not in again
    assert f"<code>{stored.token_key}…</code>" in again
    assert "New token" not in again

    assert _api(token) == 200
    stored.refresh_from_db()
    assert stored.last_used is not None


def test_page_lists_only_own_tokens_with_their_details(django_assert_max_num_queries: Any) -> None:
    user = portal_user("analyst")
    other = portal_user("analyst", "bob")
    mine, _plain = _issue(user, "jira", ("read", "write"), days=10)
    old, _plain = _issue(user, "old-script")
    ApiToken.objects.filter(pk=old.pk).update(expiry=timezone.now() - timedelta(days=1))
    theirs, _plain = _issue(other, "bobs-token")
    for n in range(5):
        _issue(user, f"extra-{n}")
    client = _client(user)

    with django_assert_max_num_queries(6):
        response = client.get(PAGE)

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<tr class="stale">') == 1  # the expired one
    assert html.count('<span class="badge tone-bad">expired</span>') == 1
    assert html.count("/revoke/") == 7
    assert f"<code>{mine.token_key}…</code>" in html
    assert '<span class="badge">read</span><span class="badge">write</span>' in html
    assert "never" in html
    assert "bobs-token" not in html and theirs.token_key not in html
    assert 'name="days" value="90"' in html  # PORTAL_API_TOKEN_TTL_DAYS default
    assert 'value="approve"' not in html  # analysts are not offered the approve scope
    assert "The approve scope is offered to approvers only." in html


def test_user_menu_links_to_the_token_page() -> None:
    html = _client(portal_user("analyst")).get("/").content.decode()
    assert '<a href="/account/tokens/">API tokens</a>' in html


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"scopes": []}, "scopes", "Choose at least one scope."),
        ({"days": "0"}, "days", "Ensure this value is greater than or equal to 1."),
        ({"days": "366"}, "days", "Ensure this value is less than or equal to 365."),
        ({"days": "soon"}, "days", "Enter a whole number."),
        ({"name": "  "}, "name", "This field is required."),
        ({"name": "x" * 101}, "name", "Ensure this value has at most 100 characters (it has 101)."),
        (
            {"scopes": ["read", "root"]},
            "scopes",
            "Select a valid choice. root is not one of the available choices.",
        ),
        (
            {"scopes": ["read", "approve"]},
            "scopes",
            "Only approvers can create tokens with the approve scope.",
        ),
    ],
)
def test_bad_input_gives_field_errors_and_creates_nothing(
    data: dict[str, Any], field: str, message: str
) -> None:
    client = _client(portal_user("analyst"))

    response = _create(client, **data)

    assert response.status_code == 200
    assert response.context["form"].errors == {field: [message]}
    assert "Please correct the fields marked below." in response.content.decode()
    assert NEW_TOKEN.search(response.content.decode()) is None
    assert ApiToken.objects.count() == 0


@pytest.mark.parametrize("how", ["permission", "team_approver"])
def test_approvers_may_create_approve_tokens(how: str) -> None:
    if how == "permission":
        user = portal_user("approver")  # in the approvers group: vmrequests.approve_vmrequest
    else:
        user = portal_user("analyst")
        stored_team("quant", approvers=(user,))
    client = _client(user)
    assert 'value="approve"' in client.get(PAGE).content.decode()

    response = _create(client, scopes=["approve", "read"])

    assert response.status_code == 200
    token = NEW_TOKEN.findall(response.content.decode())[0]
    assert ApiToken.objects.get(user=user).scopes == ["read", "approve"]
    assert _api(token) == 200


# --- revoke ------------------------------------------------------------------------------------


def test_revoke_own_token_after_confirmation_then_it_is_401() -> None:
    user = portal_user("analyst")
    keep, keep_plain = _issue(user, "keep")
    token, plain = _issue(user, "ci-script")
    assert _api(plain) == 200
    client = _client(user)
    url = f"/account/tokens/{token.token_key}/revoke/"

    confirm = client.get(url)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "ci-script" in html and f'action="{url}"' in html
    assert ApiToken.objects.filter(pk=token.pk).exists()  # GET only asks

    response = client.post(url)

    assert response.status_code == 302
    assert response["Location"] == PAGE
    assert list(ApiToken.objects.filter(user=user)) == [keep]
    assert f"Token “ci-script” ({token.token_key}…) revoked." in client.get(PAGE).content.decode()
    assert _api(plain) == 401
    assert _api(keep_plain) == 200


def test_revoking_another_users_token_is_404_and_it_still_works() -> None:
    owner = portal_user("analyst", "owner")
    token, plain = _issue(owner, "owners-token")
    client = _client(portal_user("analyst", "mallory"))
    url = f"/account/tokens/{token.token_key}/revoke/"

    assert client.get(url).status_code == 404
    assert client.post(url).status_code == 404
    assert client.post("/account/tokens/0123456789abcde/revoke/").status_code == 404

    assert ApiToken.objects.filter(pk=token.pk).exists()
    assert _api(plain) == 200


def test_revoke_needs_csrf() -> None:
    user = portal_user("analyst")
    token, plain = _issue(user)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    response = client.post(f"/account/tokens/{token.token_key}/revoke/")

    assert response.status_code == 403
    assert _api(plain) == 200


@pytest.mark.parametrize("path", [PAGE, "/account/tokens/0123456789abcde/revoke/"])
def test_anonymous_is_sent_to_login(path: str) -> None:
    get = Client().get(path)
    post = Client().post(path, {"name": "x", "scopes": ["read"], "days": "1"})
    assert (get.status_code, get["Location"]) == (302, f"/login/?next={path}")
    assert (post.status_code, post["Location"]) == (302, f"/login/?next={path}")
    assert ApiToken.objects.count() == 0


# --- admin -------------------------------------------------------------------------------------

ADMIN = "/admin/portal/apitoken/"


def test_admin_add_issues_the_token_and_shows_it_once() -> None:
    """#14 finding 6: the plain token is on the response page only, never in the signed (not
    encrypted) messages cookie nor in the session; the page is not cached."""
    admin = portal_user("admin")
    service = User.objects.create_user("servicenow")
    client = _client(admin)
    form = client.get(f"{ADMIN}add/")
    assert form.status_code == 200
    assert 'name="days"' in form.content.decode() and 'name="digest"' not in form.content.decode()

    response = client.post(
        f"{ADMIN}add/",
        {"user": service.pk, "name": "ticketing", "scopes": ["read", "write"], "days": "7"},
    )

    assert response.status_code == 200
    assert response.templates[0].name == "admin/portal/apitoken/issued.html"
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    shown = re.search(r'<code id="new-token-value">([^<]+)</code>', page)
    assert shown is not None
    plain = shown.group(1)
    assert "API token for servicenow" in page and "it will not be shown again" in page
    assert "messages" not in response.cookies
    assert plain not in str(dict(client.session))
    stored = ApiToken.objects.get(user=service)
    assert (stored.name, stored.scopes) == ("ticketing", ["read", "write"])
    assert stored.digest == hash_token(plain) and plain not in (stored.digest, stored.token_key)
    assert timedelta(days=6, hours=23) < stored.expiry - timezone.now() <= timedelta(days=7)
    assert _api(plain) == 200
    after = client.get(ADMIN)
    assert plain not in after.content.decode()  # shown once only
    assert "messages" not in after.cookies or plain not in after.cookies["messages"].value


def test_admin_add_refuses_bad_input() -> None:
    service = User.objects.create_user("servicenow")
    client = _client(portal_user("admin"))

    response = client.post(f"{ADMIN}add/", {"user": service.pk, "name": "x", "scopes": [], "days": "0"})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {
        "scopes": ["Choose at least one scope."],
        "days": ["Ensure this value is greater than or equal to 1."],
    }
    assert ApiToken.objects.count() == 0


def test_admin_change_keeps_digest_key_owner_and_expiry() -> None:
    owner = portal_user("analyst")
    token, plain = _issue(owner, "old-name")
    before = ApiToken.objects.values().get(pk=token.pk)
    client = _client(portal_user("admin"))
    url = f"{ADMIN}{token.pk}/change/"
    page = client.get(url).content.decode()
    assert 'name="token_key"' not in page and 'name="digest"' not in page and 'name="expiry"' not in page

    response = client.post(
        url,
        {
            "name": "new-name",
            "scopes": ["write"],
            "token_key": "ffffffffffffffff",
            "digest": "0" * 128,
            "user": portal_user("analyst", "eve").pk,
            "expiry_0": "2099-01-01",
        },
    )

    assert response.status_code == 302
    after = ApiToken.objects.values().get(pk=token.pk)
    assert (after["name"], after["scopes"]) == ("new-name", ["write"])
    for field in ("digest", "token_key", "user_id", "expiry", "created"):
        assert after[field] == before[field]
    assert _api(plain) == 403  # the token is still valid but lost the read scope


def test_admin_list_filters_search_and_revoke() -> None:
    owner = portal_user("analyst", "alice")
    reader, _plain = _issue(owner, "reader")
    writer, writer_plain = _issue(owner, "writer", ("read", "write"))
    expired, _plain = _issue(portal_user("analyst", "bob"), "expired-one")
    ApiToken.objects.filter(pk=expired.pk).update(expiry=timezone.now() - timedelta(minutes=1))
    client = _client(portal_user("admin"))

    def listed(query: str) -> set[str]:
        response = client.get(f"{ADMIN}?{query}")
        assert response.status_code == 200
        return {t.name for t in response.context["cl"].result_list}

    assert listed("") == {"reader", "writer", "expired-one"}
    assert listed("scope=write") == {"writer"}
    assert listed("scope=approve") == set()
    assert listed("expired=yes") == {"expired-one"}
    assert listed("expired=no") == {"reader", "writer"}
    assert listed("q=bob") == {"expired-one"}
    assert listed("q=writ") == {"writer"}
    assert "Revoke (delete) selected API tokens" in client.get(ADMIN).content.decode()

    response = client.post(
        ADMIN, {"action": "delete_selected", "_selected_action": [writer.pk], "post": "yes"}
    )

    assert response.status_code == 302
    assert set(ApiToken.objects.values_list("name", flat=True)) == {"reader", "expired-one"}
    assert _api(writer_plain) == 401
    assert reader.pk in set(ApiToken.objects.values_list("pk", flat=True))
