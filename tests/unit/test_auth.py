"""Login required everywhere but the public pages; roles from the data migration."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.test.utils import override_settings

pytestmark = pytest.mark.django_db


def test_anonymous_is_sent_to_login() -> None:
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/"


@pytest.mark.parametrize("path", ["/login/", "/healthz", "/readyz"])
def test_public_pages_need_no_login(path: str) -> None:
    assert Client().get(path).status_code == 200


def test_groups_and_approve_permission_exist() -> None:
    permission = Permission.objects.get(content_type__app_label="vmrequests", codename="approve_vmrequest")
    assert permission.name == "Can approve or reject VM requests"
    assert set(Group.objects.values_list("name", flat=True)) >= {"analysts", "approvers"}
    assert list(Group.objects.get(name="approvers").permissions.all()) == [permission]
    assert list(Group.objects.get(name="analysts").permissions.all()) == []


def test_demo_users_get_their_roles(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("create_demo_users")
    out = capsys.readouterr().out
    passwords = dict(re.findall(r"^\s+(analyst|approver|admin)\s+(\S+)$", out, re.M))
    assert set(passwords) == {"analyst", "approver", "admin"}
    analyst = User.objects.get(username="analyst")
    approver = User.objects.get(username="approver")
    admin = User.objects.get(username="admin")
    assert not analyst.has_perm("vmrequests.approve_vmrequest")
    assert approver.has_perm("vmrequests.approve_vmrequest")
    assert admin.is_superuser and admin.is_staff
    assert not approver.is_staff

    client = Client()
    response = client.post("/login/", {"username": "approver", "password": passwords["approver"]})
    assert response.status_code == 302
    assert response["Location"] == "/"
    home = client.get("/").content.decode()
    assert "Welcome, approver" in home
    assert 'class="badge role-approver">Approver<' in home
    assert 'class="badge role-analyst">Analyst<' in home


def test_demo_users_reset_passwords_on_rerun(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("create_demo_users", password="first-Password-1")
    call_command("create_demo_users", password="second-Password-2")
    assert User.objects.filter(username__in=["analyst", "approver", "admin"]).count() == 3
    assert Client().login(username="analyst", password="second-Password-2")
    assert not Client().login(username="analyst", password="first-Password-1")


def test_wrong_password_shows_an_error_and_stays_on_login() -> None:
    User.objects.create_user("someone", password="right-Password-9")
    response = Client().post("/login/", {"username": "someone", "password": "wrong"})
    assert response.status_code == 200
    assert "Please enter a correct username and password." in response.content.decode()


def test_demo_users_refused_in_production() -> None:
    with override_settings(PRODUCTION=True), pytest.raises(CommandError, match="not created when PORTAL_ENV"):
        call_command("create_demo_users")
