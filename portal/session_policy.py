"""The session policy: idle timeout and absolute lifetime of a signed-in browser session.

- Signing in (``user_logged_in``) records ``_portal_signed_in`` and ``_portal_last_seen`` (Unix
  seconds) in the session.
- ``SessionPolicyMiddleware`` (after ``AuthenticationMiddleware`` and ``MessageMiddleware``,
  before ``LoginRequiredMiddleware``) signs the user out when the last request is more than
  ``PORTAL_SESSION_IDLE_MINUTES`` ago or the sign-in more than ``PORTAL_SESSION_MAX_HOURS`` ago,
  with a message saying why; ``LoginRequiredMiddleware`` then sends the browser to the login page
  (DRF's session authentication sees an anonymous user: 403). ``_portal_last_seen`` is written
  at most once a minute, so htmx polling does not save the session every 3 s.

``SESSION_COOKIE_AGE`` equals the lifetime and, in production, ``SESSION_EXPIRE_AT_BROWSER_CLOSE``
is on (``portal/settings.py``; documented in docs/configuration.md and docs/security.md).
API tokens do not use sessions; their bound is ``PORTAL_API_TOKEN_MAX_DAYS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils.translation import ngettext

SIGNED_IN = "_portal_signed_in"
LAST_SEEN = "_portal_last_seen"
#: Seconds between two writes of ``LAST_SEEN`` (the idle timeout is accurate to this much).
TOUCH_EVERY = 60


@receiver(user_logged_in, dispatch_uid="portal.session_policy.stamp")
def stamp_session(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """Record the sign-in time (also the first activity) in the new session."""
    if request is None or not hasattr(request, "session"):
        return
    now = int(time.time())
    request.session[SIGNED_IN] = now
    request.session[LAST_SEEN] = now


def expiry_reason(session: Any, now: int) -> str | None:
    """Why the session must end now (a translated sentence), or None while it may go on.

    Args:
        session: the request's session (``SIGNED_IN``/``LAST_SEEN`` missing count as ``now``).
        now: Unix seconds.
    """
    idle = settings.PORTAL_SESSION_IDLE_MINUTES
    hours = settings.PORTAL_SESSION_MAX_HOURS
    if now - int(session.get(SIGNED_IN, now)) > hours * 3600:
        return ngettext(
            "Your session reached its maximum length of %(hours)d hour. Sign in again.",
            "Your session reached its maximum length of %(hours)d hours. Sign in again.",
            hours,
        ) % {"hours": hours}
    if now - int(session.get(LAST_SEEN, now)) > idle * 60:
        return ngettext(
            "You were signed out after %(minutes)d minute without activity. Sign in again.",
            "You were signed out after %(minutes)d minutes without activity. Sign in again.",
            idle,
        ) % {"minutes": idle}
    return None


class SessionPolicyMiddleware:
    """Sign out idle or too old sessions (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            session = request.session
            now = int(time.time())
            reason = expiry_reason(session, now)
            if reason is not None:
                logout(request)
                messages.info(request, reason)
            else:
                session.setdefault(SIGNED_IN, now)
                if now - int(session.get(LAST_SEEN, 0)) >= TOUCH_EVERY:
                    session[LAST_SEEN] = now
        return self.get_response(request)
