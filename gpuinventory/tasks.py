"""Celery tasks of the inventory: thin wrappers over ``gpuinventory.sync`` (CONVENTIONS "Background work")."""

from __future__ import annotations

from celery import shared_task

from gpuinventory.sync import run_sync


@shared_task(name="gpuinventory.sync")
def sync(trigger: str = "beat") -> None:
    """Run one inventory sync (beat every ``PORTAL_SYNC_INTERVAL`` s, or "Sync now" with ``manual``).

    Idempotent and overlap-safe: a second concurrent run returns at once (the SyncRun lock).
    Failures are recorded on the ``SyncRun`` row, not retried: the next beat is the retry.

    Args:
        trigger: ``"beat"`` or ``"manual"``.
    """
    run_sync(trigger)
