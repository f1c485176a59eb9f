"""Celery tasks of the webhooks app, and ``enqueue`` that sends their messages.

The task names are those of the release that kept webhooks inside ``vmrequests``
(``vmrequests.webhook_deliver``, ``vmrequests.webhook_sweep``): messages already queued by it,
and the beat entry ``vmrequests-webhook-sweep``, are consumed unchanged. Arguments are primary
keys only; both tasks are idempotent (``delivery.deliver`` claims before each try).
"""

from __future__ import annotations

import logging

from celery import shared_task

from webhooks import delivery

log = logging.getLogger("webhooks")


@shared_task(name="vmrequests.webhook_deliver", ignore_result=True)
def webhook_deliver(delivery_id: int) -> str:
    """Make the next try of webhook delivery ``delivery_id``; when it asks for a retry, enqueue the
    next try with its countdown (``next_attempt_at`` is already set, so the sweep covers a lost
    message). Idempotent: ``deliver`` claims the delivery before each try and never re-sends a
    succeeded or failed one, so duplicate messages are harmless.

    Returns:
        The outcome's action (``"sent"``, ``"skipped"``, ``"not_due"``, ``"lost"``, ...).
    """
    outcome = delivery.deliver(delivery_id)
    if outcome.retry_in is not None:
        enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.action


@shared_task(name="vmrequests.webhook_sweep", ignore_result=True)
def webhook_sweep() -> int:
    """Enqueue every overdue delivery (``delivery.due_deliveries``; beat every 60 s): messages lost
    while the broker was down, retries whose message vanished, tries whose worker died.

    Returns:
        How many were handed to the broker.
    """
    return sum(enqueue(pk) for pk in delivery.due_deliveries())


def enqueue(delivery_id: int, countdown: int | None = None) -> bool:
    """Send a ``vmrequests.webhook_deliver`` message (after ``countdown`` seconds). Never raises: a
    broker that is down is logged, and the sweep sends the delivery later.

    Returns:
        True when the message was handed to the broker.
    """
    try:
        if countdown is None:
            webhook_deliver.apply_async((delivery_id,), retry=False)
        else:
            webhook_deliver.apply_async((delivery_id,), countdown=countdown, retry=False)
    except Exception:
        log.warning("could not enqueue webhook delivery %s; the sweep will", delivery_id, exc_info=True)
        return False
    return True
