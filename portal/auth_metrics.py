"""Prometheus counters of sign-in failures and lockouts (``/metrics``).

- ``gpu_portal_login_failures_total{site}``: failed sign-ins (Django's ``user_login_failed``;
  a try refused during a lockout counts too).
- ``gpu_portal_login_lockouts_total{site}``: username + address pairs locked out (axes'
  ``user_locked_out`` at the failure that reaches the limit; axes sends it again for every try
  refused during the lockout, which counts as a failure only).

``site`` is ``admin`` for ``/admin/login/`` and ``portal`` for ``/login/`` (and any other sign-in).
Alert on a rising rate of either: that is a password-guessing run. Counters are per process
(Prometheus sums the web pods).
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest
from prometheus_client import Counter

SITES = ("portal", "admin")

LOGIN_FAILURES = Counter(
    "gpu_portal_login_failures", "Failed sign-ins (wrong password, or refused during a lockout).", ["site"]
)
LOGIN_LOCKOUTS = Counter(
    "gpu_portal_login_lockouts", "Username and client address pairs locked out by django-axes.", ["site"]
)
for _site in SITES:
    LOGIN_FAILURES.labels(site=_site)
    LOGIN_LOCKOUTS.labels(site=_site)


def site_of(request: HttpRequest | None) -> str:
    """``admin`` for a request under ``/admin/``, else ``portal``."""
    path = getattr(request, "path", "") or ""
    return "admin" if path.startswith("/admin/") else "portal"


@receiver(user_login_failed, dispatch_uid="portal.auth_metrics.failed")
def count_failure(
    sender: Any, credentials: Any = None, request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """Count one failed sign-in."""
    LOGIN_FAILURES.labels(site=site_of(request)).inc()


@receiver(user_locked_out, dispatch_uid="portal.auth_metrics.locked_out")
def count_lockout(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Count a lockout when this failure is the one that reached the limit."""
    limit = settings.AXES_FAILURE_LIMIT
    if getattr(request, "axes_failures_since_start", limit) == limit:
        LOGIN_LOCKOUTS.labels(site=site_of(request)).inc()
