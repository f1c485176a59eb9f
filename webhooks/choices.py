"""Event types and delivery statuses of outbound webhooks (docs/webhooks.md).

Event types: ``vm_request.<status>`` for every ``VMRequestStatus`` (one event per status change
of a request, named after the status it reached), ``inventory.sync_failed`` (the first failed
sync after a successful one) and ``inventory.sync_recovered`` (the first success after failures). An endpoint's
filter may also hold ``vm_request.*`` (every request event).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from vmrequests.choices import VMRequestStatus

#: Prefix of the request events; ``vm_request.*`` in a filter matches all of them.
REQUEST_PREFIX = "vm_request."
ALL_REQUEST_EVENTS = "vm_request.*"
SYNC_FAILED = "inventory.sync_failed"
SYNC_RECOVERED = "inventory.sync_recovered"


def request_event_type(status: str) -> str:
    """The event type of a request reaching ``status``: ``"approved"`` → ``"vm_request.approved"``."""
    return f"{REQUEST_PREFIX}{status}"


#: Every event type the portal sends, in a stable order (request statuses, then inventory).
EVENT_TYPES: tuple[str, ...] = (
    *(request_event_type(s) for s in VMRequestStatus.values),
    SYNC_FAILED,
    SYNC_RECOVERED,
)
#: What an endpoint's ``event_types`` may hold.
FILTER_VALUES = frozenset({*EVENT_TYPES, ALL_REQUEST_EVENTS})


def event_type_choices() -> list[tuple[str, str]]:
    """``(value, label)`` pairs for the admin's event filter (a callable: labels are translated
    when the form renders), ``vm_request.*`` first."""
    choices: list[tuple[str, str]] = [(ALL_REQUEST_EVENTS, str(_("every request status change")))]
    for status in VMRequestStatus:
        label = _("request %(status)s") % {"status": status.label}
        choices.append((request_event_type(status.value), f"{request_event_type(status.value)} ({label})"))
    choices.append((SYNC_FAILED, f"{SYNC_FAILED} ({_('inventory sync failed')})"))
    choices.append((SYNC_RECOVERED, f"{SYNC_RECOVERED} ({_('inventory sync works again')})"))
    return choices


class DeliveryStatus(models.TextChoices):
    """Where one delivery of one event to one endpoint is."""

    PENDING = "pending", _("pending")
    RETRYING = "retrying", _("retrying")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")


#: Deliveries that may still be attempted (the sweep re-enqueues these when due).
OPEN_DELIVERY_STATES = frozenset({DeliveryStatus.PENDING, DeliveryStatus.RETRYING})
