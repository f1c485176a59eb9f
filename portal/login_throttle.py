"""Login throttling with django-axes: the lockout page and the metrics of failed sign-ins.

Axes (settings ``AXES_*`` in ``portal/settings.py``) counts failed sign-ins per username and
client address (``portal.client_ip``) on ``/login/`` and ``/admin/login/`` alike: the
``PORTAL_LOGIN_FAILURE_LIMIT``-th failure locks that pair out for ``PORTAL_LOGIN_LOCKOUT_MINUTES``
(every further try during the lockout restarts it), a success before the limit resets the count.
Admins unlock under Axes › Access attempts (delete the row) or with
``manage.py axes_reset_username USERNAME``.

``LoginThrottleBackend`` (first in ``AUTHENTICATION_BACKENDS``) is axes' backend for every
sign-in that comes with a request, which every HTTP sign-in does (the login views pass it);
``authenticate()`` without a request (the shell, a management command, the test client's
``login()``) is not an HTTP client and is not throttled, where axes would raise.

``lockout_response`` (``AXES_LOCKOUT_CALLABLE``) renders ``registration/locked_out.html`` with 429.
``/metrics`` (:mod:`portal.auth_metrics`) counts failures and lockouts.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' standalone backend, skipped when ``authenticate()`` gets no request."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Refuse a locked-out sign-in (axes); None (no opinion) without a request.

        Raises:
            axes.exceptions.AxesBackendPermissionDenied: the username + address pair is locked out.
        """
        if request is None:
            return None
        return super().authenticate(request, username, password, **kwargs)


def retry_at(now: datetime | None = None) -> datetime:
    """When a pair locked out now may try again: now + the cool-off, in the current time zone."""
    moment = now or timezone.now()
    return timezone.localtime(moment + settings.AXES_COOLOFF_TIME)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    """429 page: who is locked out (the username tried), until when and in how many minutes.

    Args:
        request: the sign-in request refused; credentials: what was posted (axes passes it).
    """
    field = str(getattr(settings, "AXES_USERNAME_FORM_FIELD", "username"))
    username = ""
    if isinstance(credentials, dict):
        username = str(credentials.get(field, "") or "")
    username = username or str(request.POST.get(field, ""))
    context = {
        "username": username[:150],
        "retry_at": retry_at(),
        "minutes": math.ceil(settings.AXES_COOLOFF_TIME.total_seconds() / 60),
    }
    return render(request, "registration/locked_out.html", context, status=429)
