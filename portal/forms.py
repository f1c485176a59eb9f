"""Forms of the API token pages (``portal/views_tokens.py``) and of the token admin.

``ApiTokenForm(user, data=None)`` creates a token for the signed-in user; ``save()`` returns
``(ApiToken, plain_token)``. Scopes are ``TokenScope`` values; ``approve`` is offered only to
users who may approve (``portal.roles.may_use_approve_scope``, which asks the apps) and refused with a field error when another
user posts it anyway.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from portal.models import ApiToken, TokenScope, max_token_days
from portal.roles import may_use_approve_scope

#: Shortest validity of a new token, in days (the longest: ``max_token_days()``).
MIN_TOKEN_DAYS = 1


def scopes_field() -> forms.MultipleChoiceField:
    """A checkbox field over every ``TokenScope``; at least one must be ticked."""
    return forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=TokenScope.choices,
        widget=forms.CheckboxSelectMultiple,
        help_text=_(
            "read: every GET call. write: create, cancel, release and extend requests. "
            "approve: approve and reject requests of the teams you approve for."
        ),
        error_messages={"required": _("Choose at least one scope.")},
    )


def days_field() -> forms.IntegerField:
    """Validity in days, 1 to ``PORTAL_API_TOKEN_MAX_DAYS`` read now (forms build it in
    ``__init__`` so a changed setting applies), initially ``PORTAL_API_TOKEN_TTL_DAYS``."""
    maximum = max_token_days()
    return forms.IntegerField(
        label=_("Valid for (days)"),
        min_value=MIN_TOKEN_DAYS,
        max_value=maximum,
        initial=settings.PORTAL_API_TOKEN_TTL_DAYS,
        help_text=_("The token stops working after this many days (1 to %(maximum)d).")
        % {"maximum": maximum},
    )


def ordered_scopes(scopes: list[str]) -> list[str]:
    """``scopes`` in the canonical ``TokenScope`` order, without duplicates."""
    return [scope for scope in TokenScope.values if scope in scopes]


class ApiTokenForm(forms.Form):
    """Create an API token for ``user``: name, scopes, validity in days.

    Args:
        user: the signed-in user who will own the token.

    ``save()`` (after ``is_valid()``) issues the token and returns ``(instance, plain_token)``.
    """

    name = forms.CharField(
        label=_("Name"),
        max_length=100,
        help_text=_("What will use the token, e.g. “ServiceNow production”."),
    )
    scopes = scopes_field()
    days = forms.IntegerField()  # replaced by days_field() in __init__

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["scopes"].initial = [TokenScope.READ.value]
        self.fields["days"] = days_field()
        self.may_approve = may_use_approve_scope(user)
        if not self.may_approve:
            # Valid choices stay complete so a posted "approve" gets the explanation below
            # rather than a generic "not one of the available choices".
            scopes = self.fields["scopes"]
            scopes.widget.choices = [c for c in TokenScope.choices if c[0] != TokenScope.APPROVE]

    def clean_scopes(self) -> list[str]:
        """Refuse ``approve`` for users who may not approve; return the scopes in canonical order."""
        scopes = ordered_scopes(list(self.cleaned_data["scopes"]))
        if TokenScope.APPROVE in scopes and not self.may_approve:
            raise forms.ValidationError(
                _("Only approvers can create tokens with the approve scope."), code="approve_not_allowed"
            )
        return scopes

    def save(self) -> tuple[ApiToken, str]:
        """Issue the token.

        Returns:
            ``(instance, plain_token)``; the plain token exists only in this return value.
        """
        data = self.cleaned_data
        return ApiToken.issue(self.user, data["name"], data["scopes"], data["days"])


class ApiTokenAdminAddForm(forms.ModelForm):
    """Admin "add API token": user, name, scopes, days; ``save()`` issues through
    ``ApiToken.issue`` and keeps the plain token in ``plain_token`` for one message."""

    scopes = scopes_field()
    days = forms.IntegerField()  # replaced by days_field() in __init__

    class Meta:
        model = ApiToken
        fields = ("user", "name", "scopes")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["scopes"].initial = [TokenScope.READ.value]
        self.fields["days"] = days_field()
        self.plain_token: str | None = None

    def clean_scopes(self) -> list[str]:
        return ordered_scopes(list(self.cleaned_data["scopes"]))

    def save(self, commit: bool = True) -> ApiToken:
        """Issue the token, whatever ``commit`` says: knox creates the row and its digest together.

        Returns:
            the stored ``ApiToken``; the plain token is in ``self.plain_token``.
        """
        data = self.cleaned_data
        self.instance, self.plain_token = ApiToken.issue(
            data["user"], data["name"], data["scopes"], data["days"]
        )
        return self.instance

    def save_m2m(self) -> None:
        """Nothing to do: no many-to-many fields (the admin calls this after ``save(commit=False)``)."""


class ApiTokenAdminChangeForm(forms.ModelForm):
    """Admin "change API token": the name and the scopes; digest, key, owner and expiry stay as
    issued (revoke and issue a new token to change them)."""

    scopes = scopes_field()

    class Meta:
        model = ApiToken
        fields = ("name", "scopes")

    def clean_scopes(self) -> list[str]:
        return ordered_scopes(list(self.cleaned_data["scopes"]))
