"""Django admin for API tokens (``portal.ApiToken``, the project's knox token model).

Adding asks for user, name, scopes and validity in days and issues the token through
``ApiToken.issue``; the plain token is shown once, on the response page itself
(``admin/portal/apitoken/issued.html``, ``Cache-Control: no-store``), never in a message: the
messages cookie is signed, not encrypted, so a token there would travel in clear and sit in the
browser's cookie jar. Digest, key, owner and expiry are never editable (only name and scopes
are); deleting a token revokes it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import Action, ActionLocation
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext_lazy as _
from knox.models import AuthToken

from portal.forms import ApiTokenAdminAddForm, ApiTokenAdminChangeForm
from portal.models import ApiToken, TokenScope

# knox registers an admin for its own AuthToken; Django skips it while KNOX_TOKEN_MODEL swaps
# the model out, but never show two token admins should that change.
if admin.site.is_registered(AuthToken):
    admin.site.unregister(AuthToken)


class ScopeFilter(admin.SimpleListFilter):
    """Tokens that have one scope (``?scope=read|write|approve``)."""

    title = _("scope")
    parameter_name = "scope"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(TokenScope.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> QuerySet[ApiToken]:
        value = self.value()
        if value not in TokenScope.values:
            return queryset
        # JSON text match: portable to SQLite (no JSON "contains" there); scope names are
        # quoted and none is a substring of another.
        return queryset.filter(scopes__icontains=f'"{value}"')


class ExpiredFilter(admin.SimpleListFilter):
    """Expired (``?expired=yes``) or still valid (``?expired=no``) tokens."""

    title = _("expired")
    parameter_name = "expired"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> QuerySet[ApiToken]:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(expiry__lte=now)
        if self.value() == "no":
            return queryset.exclude(expiry__lte=now)
        return queryset


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "token_key", "scope_list", "created", "expiry", "last_used", "is_expired")
    list_filter = (ScopeFilter, ExpiredFilter)
    search_fields = ("name", "token_key", "user__username", "user__email")
    list_select_related = ("user",)
    ordering = ("-created",)
    add_fieldsets = ((None, {"fields": ("user", "name", "scopes", "days")}),)
    change_fieldsets = (
        (None, {"fields": ("user", "name", "token_key", "scopes")}),
        (_("Validity"), {"fields": ("created", "expiry", "last_used")}),
    )
    change_readonly_fields = ("user", "token_key", "created", "expiry", "last_used")
    autocomplete_fields = ("user",)

    def get_fieldsets(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        return self.add_fieldsets if obj is None else self.change_fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        return () if obj is None else self.change_readonly_fields

    def get_form(
        self, request: HttpRequest, obj: ApiToken | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        kwargs["form"] = ApiTokenAdminAddForm if obj is None else ApiTokenAdminChangeForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_actions(
        self, request: HttpRequest, action_location: ActionLocation = ActionLocation.CHANGE_LIST
    ) -> dict[str, Action | None]:
        """Django's "delete selected" (with its confirmation page), named for what it does here."""
        actions = super().get_actions(request, action_location=action_location)
        action = actions.get("delete_selected")
        if action is not None:
            label = str(_("Revoke (delete) selected %(verbose_name_plural)s"))
            actions["delete_selected"] = replace(action, description=label, plural_description=label)
        return actions

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """On add the form has already issued (stored) the token; on change save."""
        if change:
            super().save_model(request, obj, form, change)
            return
        # response_add shows the plain token; keep it on the request only.
        request._portal_plain_token = form.plain_token  # type: ignore[attr-defined]

    def response_add(self, request: HttpRequest, obj: ApiToken, post_url_continue: str | None = None) -> Any:
        """The plain token on this response only (no redirect, no message, no cache)."""
        plain = getattr(request, "_portal_plain_token", None)
        if plain is None:
            return super().response_add(request, obj, post_url_continue)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("API token issued"),
            "token": obj,
            "plain_token": plain,
        }
        response = TemplateResponse(request, "admin/portal/apitoken/issued.html", context)
        add_never_cache_headers(response)
        return response

    @admin.display(description=_("scopes"))
    def scope_list(self, obj: ApiToken) -> str:
        return ", ".join(obj.scopes or [])

    @admin.display(description=_("expired"), boolean=True)
    def is_expired(self, obj: ApiToken) -> bool:
        return obj.expired
