"""Outbound webhooks: endpoints (admin-managed), events, deliveries and their attempt log.

An *event* (``WebhookEvent``) is one thing that happened, with the exact versioned JSON body every
endpoint receives (``payload``). A *delivery* (``WebhookDelivery``) is that event on its way to one
endpoint: pending → (retrying)* → succeeded | failed; each HTTP try is a ``WebhookAttempt`` row.
A redelivery is a new ``WebhookDelivery`` of the same event (same event ID, so receivers can
de-duplicate). The rules live in ``webhooks/delivery.py``; docs/webhooks.md is the user's view.

The models were first part of ``vmrequests`` (migration ``vmrequests/0004_webhooks``). The app
``webhooks`` took them over without touching the database: ``webhooks/0001_initial`` adds them
to its state with the existing ``db_table`` names and moves their content types (so permissions
and admin log entries follow), ``vmrequests/0007_webhooks_moved_to_own_app`` drops them from the
``vmrequests`` state.
"""

from __future__ import annotations

import secrets
import uuid

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import URLValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from webhooks.choices import ALL_REQUEST_EVENTS, FILTER_VALUES, REQUEST_PREFIX, DeliveryStatus


def generate_secret() -> str:
    """A new signing secret: 32 random bytes, URL-safe base64 (43 characters)."""
    return secrets.token_urlsafe(32)


class WebhookEndpoint(models.Model):
    """A receiver URL the portal POSTs signed events to.

    ``event_types`` is a list of event types (``choices.EVENT_TYPES``, or ``"vm_request.*"``);
    empty means every event. ``secret`` signs each delivery (HMAC-SHA256, ``webhooks/signing.py``);
    it is generated on creation and shown only on the admin's "secret" page, which can also
    rotate it. An inactive endpoint gets no new deliveries, and its open ones fail at their next
    try.
    """

    name = models.CharField(_("name"), max_length=100, unique=True)
    url = models.URLField(
        _("URL"),
        max_length=500,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text=_("http:// or https:// URL that receives a POST per event. Redirects are not followed."),
    )
    secret = models.CharField(_("secret"), max_length=200, default=generate_secret)
    event_types = models.JSONField(
        _("events"),
        default=list,
        blank=True,
        help_text=_("The event types sent to this endpoint; none ticked means every event."),
    )
    active = models.BooleanField(_("active"), default=True)
    created = models.DateTimeField(_("created"), auto_now_add=True)
    updated = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        db_table = "vmrequests_webhookendpoint"  # created by vmrequests 0004_webhooks; kept
        ordering = ["name"]
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("admin:webhooks_webhookendpoint_change", args=[self.pk])

    def clean(self) -> None:
        """``event_types`` must be a list of known event types.

        Raises:
            ValidationError: not a list, or an unknown type (named in the message).
        """
        if not isinstance(self.event_types, list) or not all(isinstance(t, str) for t in self.event_types):
            raise ValidationError({"event_types": _("Give a list of event types.")})
        unknown = sorted(set(self.event_types) - FILTER_VALUES)
        if unknown:
            raise ValidationError(
                {"event_types": _("Unknown event types: %(types)s.") % {"types": ", ".join(unknown)}}
            )

    def matches(self, event_type: str) -> bool:
        """True when this endpoint wants ``event_type`` (empty filter: every event; ``vm_request.*``:
        every request event). Does not look at ``active``."""
        if not self.event_types:
            return True
        if event_type in self.event_types:
            return True
        return event_type.startswith(REQUEST_PREFIX) and ALL_REQUEST_EVENTS in self.event_types

    @property
    def masked_secret(self) -> str:
        """The secret's last four characters behind a mask, e.g. ``"••••••••x1Yz"``."""
        return "•" * 8 + self.secret[-4:] if self.secret else ""

    def rotate_secret(self) -> str:
        """Replace the secret with a new random one (saved at once) and return it. Deliveries
        attempted from now on are signed with the new secret."""
        self.secret = generate_secret()
        self.save(update_fields=["secret", "updated"])
        return self.secret


class WebhookEvent(models.Model):
    """One event as every endpoint receives it; never changed after creation.

    ``payload`` is the whole versioned body: ``{"version": 1, "id": "<uuid>", "type": ...,
    "occurred_at": "<ISO-8601 UTC>", "data": {...}}`` (docs/webhooks.md). ``id`` is also sent as
    ``X-Portal-Webhook-Id``.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    type = models.CharField(_("type"), max_length=100, db_index=True)
    occurred_at = models.DateTimeField(_("occurred at"), db_index=True)
    payload = models.JSONField(_("payload"), encoder=DjangoJSONEncoder)
    created = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        db_table = "vmrequests_webhookevent"  # created by vmrequests 0004_webhooks; kept
        ordering = ["-occurred_at", "-created"]
        verbose_name = _("webhook event")
        verbose_name_plural = _("webhook events")

    def __str__(self) -> str:
        return f"{self.type} {self.id}"

    def get_absolute_url(self) -> str:
        return reverse("admin:webhooks_webhookevent_change", args=[self.pk])


class WebhookDelivery(models.Model):
    """One event on its way to one endpoint, and the outcome so far.

    ``attempts`` = HTTP tries made; ``next_attempt_at`` = when the next try is due (None once
    succeeded or failed); ``last_status_code``/``last_error`` describe the latest try.
    ``redelivery_of`` links a redelivery (admin action) to the delivery it repeats.
    """

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("endpoint")
    )
    event = models.ForeignKey(
        WebhookEvent, on_delete=models.CASCADE, related_name="deliveries", verbose_name=_("event")
    )
    status = models.CharField(
        _("status"), max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    next_attempt_at = models.DateTimeField(_("next attempt at"), null=True, blank=True, default=timezone.now)
    last_status_code = models.PositiveSmallIntegerField(_("last status code"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    redelivery_of = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("redelivery of"),
    )
    created = models.DateTimeField(_("created"), auto_now_add=True, db_index=True)
    updated = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        db_table = "vmrequests_webhookdelivery"  # created by vmrequests 0004_webhooks; kept
        ordering = ["-created", "-pk"]
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhookdelivery_due")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.event.type} → {self.endpoint} ({self.status})"

    def get_absolute_url(self) -> str:
        return reverse("admin:webhooks_webhookdelivery_change", args=[self.pk])


class WebhookAttempt(models.Model):
    """One HTTP try of a delivery (append-only).

    ``status_code`` is None when no response came (``error`` says why: timeout, connection
    refused, ...); ``response_excerpt`` holds the first 500 characters of the response body;
    ``duration_ms`` is the wall time of the POST in milliseconds.
    """

    delivery = models.ForeignKey(
        WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log", verbose_name=_("delivery")
    )
    number = models.PositiveIntegerField(_("attempt"))
    started_at = models.DateTimeField(_("started at"))
    duration_ms = models.PositiveIntegerField(_("duration (ms)"))
    status_code = models.PositiveSmallIntegerField(_("status code"), null=True, blank=True)
    response_excerpt = models.TextField(_("response excerpt"), blank=True)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        db_table = "vmrequests_webhookattempt"  # created by vmrequests 0004_webhooks; kept
        ordering = ["delivery", "number"]
        verbose_name = _("webhook attempt")
        verbose_name_plural = _("webhook attempts")
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhookattempt_unique_number")
        ]

    def __str__(self) -> str:
        outcome = self.status_code if self.status_code is not None else (self.error[:40] or "?")
        return f"#{self.delivery_id} try {self.number}: {outcome}"

    def get_absolute_url(self) -> str:
        return reverse("admin:webhooks_webhookdelivery_change", args=[self.delivery_id])
