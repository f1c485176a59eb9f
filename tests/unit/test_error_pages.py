"""Error pages and the login form's field errors, in both languages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.test.utils import override_settings
from django.views.defaults import permission_denied

pytestmark = pytest.mark.django_db


@override_settings(DEBUG=False)
def test_404_page_is_the_portals_and_translated() -> None:
    client = Client()
    client.force_login(User.objects.create_user("bob"))
    english = client.get("/no-such-page/")
    assert english.status_code == 404
    assert "<h1>Page not found</h1>" in english.content.decode()
    chinese = client.get("/no-such-page/", headers={"Accept-Language": "zh-Hans"})
    assert "<h1>页面不存在</h1>" in chinese.content.decode()


@override_settings(DEBUG=False)
def test_csrf_failure_page_says_what_to_do() -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403
    page = response.content.decode()
    assert "<h1>Form expired</h1>" in page
    assert "Reload the page and send it again; nothing was changed." in page


def test_403_page() -> None:
    request = RequestFactory().get("/somewhere/")
    request.user = AnonymousUser()
    response = permission_denied(request, PermissionDenied())
    assert response.status_code == 403
    assert "<h1>Access denied</h1>" in response.content.decode()


def test_login_shows_field_errors_and_limits_the_username() -> None:
    response = Client().post("/login/", {"username": "", "password": ""})
    page = response.content.decode()
    assert response.status_code == 200
    assert page.count('<p class="field-error" role="alert">This field is required.</p>') == 2
    assert 'maxlength="150"' in page


def test_favicon_is_served_without_login() -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.svg"
    page = Client().get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
