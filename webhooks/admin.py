"""Django admin of outbound webhooks: endpoints, the delivery log (with a "Redeliver" action) and
events.

Endpoints are administered here. The secret is generated on creation and never shown on the
change form (only its last four characters): the endpoint's "secret" page
(``<pk>/secret/``, change permission) shows it in full, with ``Cache-Control: no-store``, and
rotates it on a POST. Deliveries, attempts and events are view-only: they change only through
``webhooks.delivery``; "Redeliver" (``webhooks.events.redeliver``) makes a *new* delivery of the same event.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from portal.admin_mixins import ReadOnlyAdminMixin, ReadOnlyTabularInline
from webhooks import events as webhook_events
from webhooks.choices import DeliveryStatus, event_type_choices
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent


class WebhookEndpointForm(forms.ModelForm):
    """The endpoint form: the event filter as tick boxes of the known event types."""

    event_types = forms.MultipleChoiceField(
        label=_("events"),
        choices=event_type_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None ticked: every event."),
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("name", "url", "event_types", "active")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    """Endpoints: URL, event filter, active; the secret on its own page (reveal and rotate)."""

    form = WebhookEndpointForm
    list_display = ("name", "url", "active", "event_filter", "last_delivery_status")
    list_filter = ("active",)
    search_fields = ("name", "url")
    readonly_fields = ("secret_display", "created", "updated")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ("name", "url", "event_types", "active")
        return ("name", "url", "event_types", "active", "secret_display", "created", "updated")

    def get_queryset(self, request: HttpRequest) -> QuerySet[WebhookEndpoint]:
        latest = WebhookDelivery.objects.filter(endpoint=OuterRef("pk")).order_by("-created", "-pk")
        return super().get_queryset(request).annotate(latest_status=Subquery(latest.values("status")[:1]))

    @admin.display(description=_("events"))
    def event_filter(self, obj: WebhookEndpoint) -> str:
        return ", ".join(obj.event_types) if obj.event_types else str(_("all events"))

    @admin.display(description=_("last delivery"), ordering="latest_status")
    def last_delivery_status(self, obj: WebhookEndpoint) -> str:
        status = getattr(obj, "latest_status", None)
        return str(DeliveryStatus(status).label) if status else "—"

    @admin.display(description=_("secret"))
    def secret_display(self, obj: WebhookEndpoint) -> str:
        url = reverse("admin:webhooks_webhookendpoint_secret", args=[obj.pk])
        return format_html(
            '<code>{}</code> <a href="{}">{}</a>', obj.masked_secret, url, _("Reveal or rotate")
        )

    def get_urls(self) -> list[URLPattern]:
        secret = path(
            "<path:object_id>/secret/",
            self.admin_site.admin_view(self.secret_view),
            name="webhooks_webhookendpoint_secret",
        )
        return [secret, *super().get_urls()]

    def secret_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: show the secret in full. POST with ``rotate``: replace it, log it, show the new
        one. Both need the change permission.

        Raises:
            Http404: no such endpoint. PermissionDenied: no change permission.
        """
        try:
            endpoint = get_object_or_404(WebhookEndpoint, pk=int(object_id))
        except ValueError:
            raise Http404 from None
        if not self.has_change_permission(request, endpoint):
            raise PermissionDenied
        if request.method == "POST" and "rotate" in request.POST:
            endpoint.rotate_secret()
            self.log_change(request, endpoint, [{"changed": {"fields": ["secret"]}}])
            self.message_user(
                request,
                _("The secret was rotated. Update the receiver: deliveries are now signed with the new one."),
                messages.WARNING,
            )
            return HttpResponseRedirect(request.path)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": endpoint,
            "secret": endpoint.secret,
            "title": _("Secret of %(name)s") % {"name": endpoint.name},
            "change_url": reverse("admin:webhooks_webhookendpoint_change", args=[endpoint.pk]),
        }
        response = TemplateResponse(request, "admin/webhooks/webhookendpoint/secret.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def response_add(
        self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: Any = None
    ) -> HttpResponse:
        """After adding, go to the secret page (the receiver needs the secret)."""
        super().response_add(request, obj, post_url_continue)
        return HttpResponseRedirect(reverse("admin:webhooks_webhookendpoint_secret", args=[obj.pk]))


class WebhookAttemptInline(ReadOnlyTabularInline):
    model = WebhookAttempt
    fields = ("number", "started_at", "duration_ms", "status_code", "error", "response_excerpt")
    ordering = ("number",)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """The delivery log, view only, with the attempts inline and a "Redeliver" action."""

    list_display = (
        "id",
        "event_type",
        "endpoint",
        "status",
        "attempts",
        "last_status_code",
        "next_attempt_at",
        "created",
    )
    list_filter = ("status", "endpoint", "event__type", "created")
    list_select_related = ("endpoint", "event")
    search_fields = ("=id", "=event__id", "endpoint__name", "last_error")
    date_hierarchy = "created"
    inlines = (WebhookAttemptInline,)
    actions = ("redeliver",)
    fields = (
        "endpoint",
        "event",
        "status",
        "attempts",
        "next_attempt_at",
        "last_status_code",
        "last_error",
        "redelivery_of",
        "created",
        "updated",
    )
    readonly_fields = fields

    @admin.display(description=_("event"), ordering="event__type")
    def event_type(self, obj: WebhookDelivery) -> str:
        return obj.event.type

    def has_redeliver_permission(self, request: HttpRequest) -> bool:
        """Redelivering needs the model's change permission (the admin UI itself is read-only)."""
        return bool(request.user.has_perm("webhooks.change_webhookdelivery"))

    @admin.action(description=_("Redeliver the selected events"), permissions=["redeliver"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        """A new delivery of each selected delivery's event to the same endpoint (inactive
        endpoints skipped), enqueued when the transaction commits."""
        made = skipped = 0
        for item in queryset.select_related("endpoint"):
            if not item.endpoint.active:
                skipped += 1
                continue
            webhook_events.redeliver(item)
            made += 1
        if made:
            self.message_user(
                request,
                ngettext("%(n)d redelivery queued.", "%(n)d redeliveries queued.", made) % {"n": made},
                messages.SUCCESS,
            )
        if skipped:
            self.message_user(
                request,
                ngettext(
                    "%(n)d delivery skipped: its endpoint is inactive.",
                    "%(n)d deliveries skipped: their endpoints are inactive.",
                    skipped,
                )
                % {"n": skipped},
                messages.WARNING,
            )


class WebhookDeliveryInline(ReadOnlyTabularInline):
    model = WebhookDelivery
    fk_name = "event"
    show_change_link = True
    fields = ("endpoint", "status", "attempts", "last_status_code", "created")


@admin.register(WebhookEvent)
class WebhookEventAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Events as sent, view only (the payload pretty-printed)."""

    list_display = ("id", "type", "occurred_at", "created")
    list_filter = ("type", "occurred_at")
    search_fields = ("=id", "type")
    date_hierarchy = "occurred_at"
    inlines = (WebhookDeliveryInline,)
    fields = ("id", "type", "occurred_at", "created", "payload_display")
    readonly_fields = fields

    @admin.display(description=_("payload"))
    def payload_display(self, obj: WebhookEvent) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.payload, indent=2, ensure_ascii=False))
