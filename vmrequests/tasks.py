"""Celery tasks of the requests app: thin wrappers over ``vmrequests.provisioning`` (the webhook
tasks are in ``webhooks/tasks.py``).

Names are explicit and stable (``vmrequests.provision``, ``vmrequests.reconcile``); arguments
are primary keys only; every task is idempotent (CONVENTIONS "Background work"). ``acks_late`` +
``reject_on_worker_lost`` (portal/settings.py) redeliver a message whose worker died; the step
functions make that safe.
"""

from __future__ import annotations

import logging
from numbers import Real
from typing import cast

from celery import shared_task
from celery.app.task import Task
from celery.exceptions import Retry

from portal.k8s import K8sTransientError
from vmrequests import provisioning

log = logging.getLogger(__name__)

#: Transient Kubernetes errors: retried with exponential backoff and jitter, at most this often.
#: After that the request stays ``provisioning`` and ``reconcile`` enqueues it again later.
TRANSIENT_RETRIES = 8

#: Reconcile outcomes that changed a request's status or re-enqueued it (``reconcile``'s count).
#: Not counted: ``ok``/``waiting``/``skipped``/``deleting`` (nothing new), ``lease_warning`` (a
#: mail, no status change), ``lost`` (someone else changed it) and ``error`` (nothing changed).
CHANGED = frozenset({"requeue", "running", "failed", "expired", "deleted", "deleted_outside"})


@shared_task(
    name="vmrequests.provision",
    bind=True,
    autoretry_for=(K8sTransientError,),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=TRANSIENT_RETRIES,
)
def provision(self: Task, request_id: int) -> str:  # type: ignore[type-arg]
    """Provision one approved request (``provisioning.provision``); enqueued on commit of approval.

    A ``Wait`` (the vGPU Device Manager is still working) becomes a retry with its countdown that
    does not count against the transient-error budget: the message is sent again with
    ``retries=0``. (``self.retry(max_retries=None)`` would not do that: ``None`` there means "the
    task's default", so a re-profile polled more than ``TRANSIENT_RETRIES`` times would fail the
    task, and every wait would lengthen the backoff of a later transient error.)
    """
    try:
        outcome = provisioning.provision(request_id)
    except provisioning.Wait as wait:
        again = self.signature_from_request(countdown=wait.countdown, retries=0)
        again.apply_async()
        raise Retry(exc=wait, when=cast(Real, wait.countdown), sig=again) from None
    return outcome.action


@shared_task(
    name="vmrequests.delete_vmi",
    autoretry_for=(K8sTransientError,),
    retry_backoff=1,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=TRANSIENT_RETRIES,
)
def delete_vmi(request_id: int) -> str:
    """Delete the VMI of a request that is ``deleting`` (released, terminated, expired)."""
    return provisioning.delete_vmi_of(request_id).action


@shared_task(name="vmrequests.reconcile", ignore_result=True)
def reconcile() -> int:
    """Follow every live request's VMI (beat every ``PORTAL_RECONCILE_INTERVAL`` s); enqueue
    ``provision`` again for requests no worker has picked up. A failed LIST is not retried: the
    next beat is the retry.

    Returns:
        How many requests changed state or were re-enqueued.
    """
    try:
        outcomes = provisioning.reconcile()
    except K8sTransientError as exc:
        log.warning("reconcile skipped: %s", exc)
        return 0
    changed = 0
    for outcome in outcomes:
        if outcome.action == "requeue":
            provision.delay(outcome.request_id)
        if outcome.action in CHANGED:
            changed += 1
    return changed
