"""Project-level Celery tasks: liveness only. Domain tasks live in their apps."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from celery import shared_task
from django.conf import settings

logger = logging.getLogger(__name__)
_NONCE = re.compile(r"^[A-Za-z0-9_-]{8,64}$")


@shared_task(name="portal.heartbeat")
def heartbeat() -> None:
    """Log that a worker consumed a beat-scheduled message (proves broker, beat and worker)."""
    logger.info(
        "worker heartbeat: beat schedule delivered through %s", settings.CELERY_BROKER_URL.split("://")[0]
    )


@shared_task(name="portal.ping")
def ping(nonce: str) -> None:
    """Write ``<PORTAL_VAR_DIR>/ping/<nonce>`` so a caller can see the task ran on a real worker.

    Args:
        nonce: 8-64 characters of ``[A-Za-z0-9_-]``; anything else is refused.

    Raises:
        ValueError: for an invalid nonce (never used as a path otherwise).
    """
    if not _NONCE.match(nonce):
        raise ValueError("invalid nonce")
    directory = Path(settings.VAR_DIR) / "ping"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / nonce).write_text("pong\n")
    logger.info("ping %s handled", nonce)
