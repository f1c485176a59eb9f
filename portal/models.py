"""Portal-wide models: API tokens with scopes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from knox.models import AbstractAuthToken


def max_token_days() -> int:
    """The longest validity of a new API token, in days (``PORTAL_API_TOKEN_MAX_DAYS``)."""
    return int(settings.PORTAL_API_TOKEN_MAX_DAYS)


class TokenScope(models.TextChoices):
    """What an API token may do (checked by ``portal.api.permissions.HasTokenScope``).

    ``read``: every GET. ``write``: create, cancel, release and extend requests.
    ``approve``: approve and reject (the user must also be an approver of the request's team).
    A browser session has every scope; the user's own permissions still apply.
    """

    READ = "read", _("read")
    WRITE = "write", _("write")
    APPROVE = "approve", _("approve")


class ApiToken(AbstractAuthToken):
    """A django-rest-knox token (SHA-512 digest stored, never the token) with a name and scopes.

    Create with ``ApiToken.objects.create(user=..., expiry=timedelta, name=..., scopes=[...])``,
    which returns ``(instance, token_string)``; the string is shown once. Revoking deletes the row.
    ``expiry`` is required in this portal (no everlasting tokens); knox refuses and deletes
    expired tokens when they are next presented.
    """

    name = models.CharField(_("name"), max_length=100)
    scopes = models.JSONField(_("scopes"), default=list)
    last_used = models.DateTimeField(_("last used"), null=True, blank=True)

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key}…, {self.user})"

    def has_scope(self, scope: str) -> bool:
        """True when ``scope`` (a ``TokenScope`` value) was granted."""
        return scope in self.scopes

    @property
    def expired(self) -> bool:
        """True after ``expiry``."""
        return self.expiry is not None and self.expiry <= timezone.now()

    @classmethod
    def issue(cls, user: Any, name: str, scopes: list[str], days: int) -> tuple[ApiToken, str]:
        """Create a token valid for ``days`` days (1 to ``PORTAL_API_TOKEN_MAX_DAYS``).

        Every way of issuing a token (the user's page, the admin, ``create_api_token``) ends
        here, so this is the one place the maximum is enforced; forms show it beforehand.

        Returns:
            ``(instance, token)``: the plain token is returned only here.

        Raises:
            ValueError: unknown scope, no scope, or days out of range.
        """
        unknown = sorted(set(scopes) - set(TokenScope.values))
        if unknown or not scopes:
            raise ValueError(f"scopes must be a non-empty subset of {TokenScope.values}, got {scopes!r}")
        if not 1 <= days <= max_token_days():
            raise ValueError(f"days must be between 1 and {max_token_days()} (PORTAL_API_TOKEN_MAX_DAYS)")
        ordered = [s for s in TokenScope.values if s in scopes]
        return cls.objects.create(user=user, expiry=timedelta(days=days), name=name, scopes=ordered)
