"""Token authentication with scopes and per-token throttling (django-rest-knox underneath)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from knox.auth import TokenAuthentication
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from portal.api.problems import ProblemError
from portal.models import ApiToken, TokenScope

#: ``last_used`` is written at most this often per token (a write per call would be wasteful).
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ScopedTokenAuthentication(TokenAuthentication):
    """knox's ``Authorization: Token <token>`` (hashed lookup, expiry, 401 when expired or
    unknown) that also records ``ApiToken.last_used`` (minute resolution)."""

    def validate_user(self, auth_token: Any) -> tuple[Any, Any]:
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used is None or now - token.last_used >= LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used=now)
            token.last_used = now
        return user, token


def required_scope(request: Request, view: Any) -> str:
    """The scope a call needs: the view's ``scope_for_action[action]`` when set, else ``read``
    for safe methods and ``write`` for the rest."""
    action = getattr(view, "action", None)
    mapping = getattr(view, "scope_for_action", {}) or {}
    if action in mapping:
        return str(mapping[action])
    return TokenScope.READ if request.method in permissions.SAFE_METHODS else TokenScope.WRITE


class HasTokenScope(permissions.BasePermission):
    """Token calls need the scope of the action (``required_scope``); 403 ``missing-scope``
    otherwise. Session calls (the browser) are not limited by scopes."""

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        scope = required_scope(request, view)
        if token.has_scope(scope):
            return True
        raise ProblemError(
            403,
            "missing-scope",
            str(
                _("This token has the scopes %(has)s; this call needs the %(needs)s scope.")
                % {"has": ", ".join(token.scopes) or "-", "needs": scope}
            ),
            extra={"required_scope": scope},
        )


class TokenRateThrottle(SimpleRateThrottle):
    """Rate limit per API token (``DEFAULT_THROTTLE_RATES["token"]``); session calls are
    limited per user with the same rate. Over the limit: 429 with ``Retry-After``."""

    scope = "token"

    def get_rate(self) -> str | None:
        """The rate from the settings at call time (DRF copies it once at import otherwise)."""
        from rest_framework.settings import api_settings

        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return str(rate) if rate is not None else None

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        token = request.auth
        if isinstance(token, ApiToken):
            ident = f"token:{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"anon:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
