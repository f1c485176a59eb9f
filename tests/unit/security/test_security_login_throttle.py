"""#14 finding 2: brute force on ``/login/`` and ``/admin/login/`` (django-axes).

Before: 200 wrong passwords were answered 200 and the right one still worked. Now the fifth
failure for one username from one client address locks that pair out for 15 minutes
(``PORTAL_LOGIN_FAILURE_LIMIT``, ``PORTAL_LOGIN_LOCKOUT_MINUTES``): 429 with a page saying when
to retry, in the reader's language. Other addresses and other users are not affected, an admin
unlocks by deleting the access attempt in the admin, and ``/metrics`` counts failures and
lockouts. The client address is ``REMOTE_ADDR`` unless ``PORTAL_TRUSTED_PROXY_COUNT`` proxies
in front append to ``X-Forwarded-For``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone

from tests.factories import portal_user

pytestmark = pytest.mark.django_db

PASSWORD = "x-Password-1"  # tests.factories.portal_user
ATTACKER = "198.51.100.7"


def _login(path: str, username: str, password: str, ip: str = ATTACKER, **extra: Any) -> Any:
    client = Client(REMOTE_ADDR=ip, **extra)
    response = client.post(path, {"username": username, "password": password})
    response.client_for_test = client  # type: ignore[attr-defined]
    return response


def _signed_in(response: Any) -> bool:
    return "_auth_user_id" in response.client_for_test.session


def _fail(path: str, username: str, times: int, ip: str = ATTACKER) -> list[int]:
    return [_login(path, username, "wrong", ip).status_code for _ in range(times)]


def _metrics() -> dict[str, float]:
    text = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpu_portal_login_")
    }


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_fifth_failure_locks_the_user_from_that_address(path: str) -> None:
    user = portal_user("admin", "ana")
    assert _fail(path, "ana", 4) == [200, 200, 200, 200]
    locked = _login(path, "ana", "wrong")
    assert locked.status_code == 429
    right = _login(path, "ana", PASSWORD)
    assert right.status_code == 429
    assert not _signed_in(right)
    page = right.content.decode()
    assert "Too many failed sign-ins for “ana” from your address." in page
    assert user.is_active


def test_the_lockout_says_when_to_retry() -> None:
    portal_user("analyst", "ana")
    _fail("/login/", "ana", 5)
    before = timezone.now() + timedelta(minutes=15)
    response = _login("/login/", "ana", PASSWORD)
    after = timezone.now() + timedelta(minutes=15)
    shown = re.search(r"Try again after (\d\d:\d\d) UTC \(in 15 minutes\)\.", response.content.decode())
    assert shown is not None, response.content.decode()
    assert shown.group(1) in {before.strftime("%H:%M"), after.strftime("%H:%M")}
    assert "registration/locked_out.html" in [t.name for t in response.templates]


def test_the_lockout_message_in_chinese() -> None:
    portal_user("analyst", "ana")
    _fail("/login/", "ana", 5)
    response = _login("/login/", "ana", PASSWORD, HTTP_ACCEPT_LANGUAGE="zh-hans")
    page = response.content.decode()
    assert response.status_code == 429
    assert "来自您的地址的 “ana” 登录失败次数过多。" in page
    assert re.search(r"请在 \d\d:\d\d UTC（15 分钟后）再试。", page), page


def test_other_addresses_and_other_users_are_not_locked() -> None:
    portal_user("analyst", "ana")
    portal_user("analyst", "tim")
    _fail("/login/", "ana", 5)
    elsewhere = _login("/login/", "ana", PASSWORD, ip="192.0.2.10")
    assert (elsewhere.status_code, _signed_in(elsewhere)) == (302, True)
    colleague = _login("/login/", "tim", PASSWORD)
    assert (colleague.status_code, _signed_in(colleague)) == (302, True)


def test_success_before_the_limit_resets_the_count() -> None:
    portal_user("analyst", "ana")
    _fail("/login/", "ana", 4)
    assert _login("/login/", "ana", PASSWORD).status_code == 302
    assert _fail("/login/", "ana", 4) == [200, 200, 200, 200]


def test_the_lockout_ends_after_the_cool_off() -> None:
    from axes.models import AccessAttempt

    portal_user("analyst", "ana")
    _fail("/login/", "ana", 5)
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=15, seconds=1))
    response = _login("/login/", "ana", PASSWORD)
    assert (response.status_code, _signed_in(response)) == (302, True)


def test_an_admin_unlocks_in_the_admin() -> None:
    from axes.models import AccessAttempt

    portal_user("analyst", "ana")
    _fail("/login/", "ana", 5)
    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.ip_address, attempt.failures_since_start) == ("ana", ATTACKER, 5)
    admin = Client()
    admin.force_login(portal_user("admin", "root"))
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "ana" in listing.content.decode()
    response = admin.post(
        "/admin/axes/accessattempt/",
        {"action": "delete_selected", "_selected_action": [attempt.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert AccessAttempt.objects.count() == 0
    assert _login("/login/", "ana", PASSWORD).status_code == 302


def test_failures_and_lockouts_are_counted_in_metrics() -> None:
    portal_user("analyst", "ana")
    before = _metrics()
    _fail("/login/", "ana", 6)
    _fail("/admin/login/", "ana", 1, ip="192.0.2.10")
    after = _metrics()

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    # The sixth try is refused during the lockout: still a failed login, not a new lockout.
    assert delta('gpu_portal_login_failures_total{site="portal"}') == 6.0
    assert delta('gpu_portal_login_failures_total{site="admin"}') == 1.0
    assert delta('gpu_portal_login_lockouts_total{site="portal"}') == 1.0
    assert delta('gpu_portal_login_lockouts_total{site="admin"}') == 0.0


def test_x_forwarded_for_is_ignored_without_trusted_proxies() -> None:
    """Rotating a forged X-Forwarded-For does not escape the lockout of the real address."""
    portal_user("analyst", "ana")
    for index in range(5):
        _login("/login/", "ana", "wrong", HTTP_X_FORWARDED_FOR=f"203.0.113.{index}")
    assert _login("/login/", "ana", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.99").status_code == 429


@override_settings(PORTAL_TRUSTED_PROXY_COUNT=1)
def test_behind_one_proxy_the_client_is_the_last_forwarded_address() -> None:
    from axes.models import AccessAttempt

    portal_user("analyst", "ana")
    proxy = "10.0.0.2"
    for _ in range(5):
        _login("/login/", "ana", "wrong", ip=proxy, HTTP_X_FORWARDED_FOR="1.1.1.1, 198.51.100.7")
    assert AccessAttempt.objects.get().ip_address == "198.51.100.7"
    locked = _login("/login/", "ana", PASSWORD, ip=proxy, HTTP_X_FORWARDED_FOR="203.0.113.1, 198.51.100.7")
    assert locked.status_code == 429
    other = _login("/login/", "ana", PASSWORD, ip=proxy, HTTP_X_FORWARDED_FOR="198.51.100.8")
    assert other.status_code == 302


def test_client_ip_rules() -> None:
    from django.test import RequestFactory

    from portal.client_ip import client_ip

    def ip(remote: str, forwarded: str | None, count: int) -> str:
        request = RequestFactory().get("/", REMOTE_ADDR=remote)
        if forwarded is not None:
            request.META["HTTP_X_FORWARDED_FOR"] = forwarded
        with override_settings(PORTAL_TRUSTED_PROXY_COUNT=count):
            return client_ip(request)

    assert ip("10.0.0.2", "198.51.100.7", 0) == "10.0.0.2"
    assert ip("10.0.0.2", "198.51.100.7", 1) == "198.51.100.7"
    assert ip("10.0.0.2", "203.0.113.1, 198.51.100.7, 10.0.0.9", 2) == "198.51.100.7"
    assert ip("10.0.0.2", "198.51.100.7", 2) == "10.0.0.2"  # fewer hops than proxies: the peer
    assert ip("10.0.0.2", "not-an-ip", 1) == "10.0.0.2"
    assert ip("10.0.0.2", None, 1) == "10.0.0.2"
    assert ip("10.0.0.2", " 2001:db8::1 ", 1) == "2001:db8::1"
