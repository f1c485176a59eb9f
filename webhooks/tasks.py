"""Celery tasks of outbound webhooks: thin wrappers over ``webhooks.delivery``.

Names are stable (``webhooks.deliver``, ``webhooks.sweep``), arguments are primary keys, and both
are idempotent: ``delivery.deliver`` claims a delivery before each try and never re-sends a
succeeded or failed one, so duplicate messages are harmless.
"""

from __future__ import annotations

from celery import shared_task

from webhooks import delivery


@shared_task(name="webhooks.deliver", ignore_result=True)
def deliver(delivery_id: int) -> str:
    """Make the next try of delivery ``delivery_id``; when it asks for a retry, enqueue the next
    try with its countdown (``next_attempt_at`` is already set, so the sweep covers a lost message).

    Returns:
        The outcome's action (``"sent"``, ``"skipped"``, ``"not_due"``, ``"lost"``, ...).
    """
    outcome = delivery.deliver(delivery_id)
    if outcome.retry_in is not None:
        delivery.enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.action


@shared_task(name="webhooks.sweep", ignore_result=True)
def sweep() -> int:
    """Re-enqueue overdue pending/retrying deliveries (beat every 60 s). Returns how many."""
    return delivery.sweep()
