"""What a provisioning step returns or raises (``Outcome``, ``Wait``), and the helpers every
step shares: load the request, fail it, the requeue delay."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings

from vmrequests.models import TransitionError, VMRequest

log = logging.getLogger("vmrequests.provisioning")


class Wait(Exception):
    """Not done yet: run the step again in ``countdown`` seconds (the task retries itself)."""

    def __init__(self, countdown: float, why: str) -> None:
        self.countdown = countdown
        self.why = why
        super().__init__(why)


@dataclass(frozen=True)
class Outcome:
    """What a provisioning or reconcile step did: ``action`` (e.g. ``"created"``, ``"failed"``)."""

    request_id: int
    action: str
    detail: str = ""


def _minutes(seconds: float) -> str:
    """Seconds as minutes for messages: ``600`` → ``"10"``, ``90`` → ``"1.5"``, ``10`` → ``"0.2"``."""
    minutes = round(seconds / 60, 1)
    return str(int(minutes)) if minutes == int(minutes) else str(minutes)


def _requeue_after() -> timedelta:
    """``PORTAL_REQUEUE_AFTER``: no progress for this long → enqueue the provisioning task again."""
    return timedelta(seconds=settings.PORTAL_REQUEUE_AFTER)


def _load(request_id: int) -> VMRequest:
    return VMRequest.objects.select_related("image", "team", "requester").get(pk=request_id)


def _fail(req: VMRequest, reason: str, *, data: dict[str, Any] | None = None) -> Outcome:
    """Fail the request (provisioning|running → failed) unless someone else already moved it."""
    try:
        req.mark_failed(reason, data=data)
    except TransitionError as exc:
        return Outcome(req.pk, "lost", str(exc))
    log.warning("request failed", extra={"request_id": req.pk, "reason": reason})
    return Outcome(req.pk, "failed", reason)
