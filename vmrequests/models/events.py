"""A request's append-only timeline: one ``VMRequestEvent`` per status change or step."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from vmrequests.choices import EventAction, VMRequestStatus


class VMRequestEvent(models.Model):
    """One append-only timeline entry of a request: who did what, from which status to which.

    ``actor`` is the user, or None with ``actor_label`` ``"policy"`` / ``"worker"`` / ``"system"``.
    ``data`` holds details (placement, quota, re-profile plan). Rows are never updated or deleted.
    """

    request = models.ForeignKey("vmrequests.VMRequest", on_delete=models.CASCADE, related_name="events")
    created = models.DateTimeField(_("time"), default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    actor_label = models.CharField(max_length=20, blank=True)
    action = models.CharField(_("action"), max_length=30, choices=EventAction.choices)
    from_status = models.CharField(max_length=20, choices=VMRequestStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=VMRequestStatus.choices)
    message = models.TextField(_("message"), blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["created", "pk"]
        verbose_name = _("request event")
        verbose_name_plural = _("request events")

    def __str__(self) -> str:
        return f"#{self.request_id} {self.action} {self.from_status}→{self.to_status}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Insert only: the timeline is append-only.

        Raises:
            ValueError: on an attempt to update an existing row.
        """
        if self.pk is not None and not self._state.adding:
            raise ValueError("request events are append-only")
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("vmrequests:vmrequest", args=[self.request_id]) + f"#event-{self.pk}"

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: the timeline is append-only.

        Raises:
            ValueError: always.
        """
        raise ValueError("request events are append-only")

    @property
    def actor_display(self) -> str:
        """The user's name, or the translated actor label."""
        if self.actor is not None:
            return self.actor.get_full_name() or self.actor.get_username()
        return {"policy": str(_("policy")), "worker": str(_("worker")), "system": str(_("system"))}.get(
            self.actor_label, self.actor_label
        )
