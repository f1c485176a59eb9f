"""``run_sync``: the lock, then snapshot → derive → apply, and the ``SyncRun`` row (docs/inventory.md
§3, step 1)."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from gpuinventory.choices import SyncStatus
from gpuinventory.models import SyncRun
from gpuinventory.sync.apply import apply
from gpuinventory.sync.derive import derive
from gpuinventory.sync.snapshot import take_snapshot
from portal import k8s

logger = logging.getLogger("gpuinventory.sync")

TRIGGERS = frozenset({"beat", "manual", "command"})


def lock_ttl_seconds() -> int:
    """Age (s) after which a ``running`` SyncRun counts as abandoned: the Celery hard time limit
    plus a minute (a worker killed there never marks its row)."""
    return int(settings.CELERY_TASK_TIME_LIMIT) + 60


def _acquire(trigger: str, now: datetime) -> tuple[SyncRun, bool]:
    """Insert the ``running`` row (the lock). Returns ``(row, won)``; on loss, the winner's row."""
    for _attempt in range(2):
        try:
            with transaction.atomic():
                return SyncRun.objects.create(started=now, trigger=trigger, status=SyncStatus.RUNNING), True
        except IntegrityError:
            holder = SyncRun.objects.filter(status=SyncStatus.RUNNING).first()
            if holder is None:
                continue  # it finished between our insert and this read: try again
            age = (now - holder.started).total_seconds()
            if age <= lock_ttl_seconds():
                return holder, False
            taken = SyncRun.objects.filter(pk=holder.pk, status=SyncStatus.RUNNING).update(
                status=SyncStatus.FAILED,
                finished=now,
                error=f"abandoned: still running after {int(age)} s (worker killed?); taken over",
            )
            if taken:
                logger.warning("inventory sync %s was abandoned after %d s; taking over", holder.pk, int(age))
    holder = SyncRun.objects.filter(status=SyncStatus.RUNNING).first()
    if holder is None:  # pragma: no cover - only under a pathological race
        raise RuntimeError("could not take the inventory sync lock")
    return holder, False


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def run_sync(trigger: str = "beat") -> SyncRun:
    """Run one inventory sync (docs/inventory.md §3).

    Args:
        trigger: ``"beat"``, ``"manual"`` (the "Sync now" button) or ``"command"``.

    Returns:
        This run's ``SyncRun``: ``success`` or ``failed`` (``error`` says why; the inventory rows
        are then untouched). When another sync holds the lock, that sync's row (status
        ``running``, a different ``trigger``/``started``) is returned and nothing is done.
        ``counts`` = nodes, added, changed, absent, rows_written; ``timings`` (ms) = list_ms,
        derive_ms, apply_ms, total_ms; ``warnings`` = ``[{"code", "params"}]``.

    Raises:
        ValueError: unknown ``trigger``.
    """
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown sync trigger {trigger!r}; one of {sorted(TRIGGERS)}")
    started = timezone.now()
    run, won = _acquire(trigger, started)
    if not won:
        logger.info(
            "inventory sync (%s) skipped: sync %s (%s) running since %s",
            trigger,
            run.pk,
            run.trigger,
            run.started,
        )
        return run
    t0 = time.perf_counter()
    timings: dict[str, int] = {}
    try:
        return _sync(run, started, t0, timings)
    except Exception as exc:
        logger.exception("inventory sync failed unexpectedly")
        run.error = f"internal error: {exc.__class__.__name__}: {exc}"
        return _finish(run, SyncStatus.FAILED, t0, timings)


def _sync(run: SyncRun, started: datetime, t0: float, timings: dict[str, int]) -> SyncRun:
    """The work of :func:`run_sync` once it holds the lock: snapshot, derive, apply, finish."""
    try:
        snapshot = take_snapshot()
    except k8s.K8sError as exc:
        run.error = f"cannot read the cluster: {exc}"
        logger.warning("inventory sync failed: %s", run.error)
        return _finish(run, SyncStatus.FAILED, t0, timings)
    t1 = time.perf_counter()
    timings["list_ms"] = _ms(t1 - t0)
    run.cluster_version = snapshot.version[:40]
    derived = derive(snapshot)
    t2 = time.perf_counter()
    timings["derive_ms"] = _ms(t2 - t1)
    last_success = (
        SyncRun.objects.filter(status=SyncStatus.SUCCESS)
        .order_by("-started")
        .values_list("started", flat=True)
        .first()
    )
    with transaction.atomic():
        result = apply(derived, started, last_success)
    timings["apply_ms"] = _ms(time.perf_counter() - t2)
    run.warnings = derived.warnings
    run.counts = {
        "nodes": len(derived.nodes),
        "added": result.added,
        "changed": result.changed,
        "absent": result.absent,
        "rows_written": result.rows_written,
    }
    return _finish(run, SyncStatus.SUCCESS, t0, timings)


def _finish(run: SyncRun, status: str, t0: float, timings: dict[str, int]) -> SyncRun:
    timings["total_ms"] = _ms(time.perf_counter() - t0)
    run.status = status
    run.timings = timings
    run.finished = timezone.now()
    run.save(
        update_fields=["status", "timings", "finished", "error", "counts", "warnings", "cluster_version"]
    )
    if status == SyncStatus.SUCCESS:
        logger.info("inventory %s", summary_line(run))
    # Signal the start and the end of a failure streak only (one webhook while the cluster is
    # unreachable, not one per beat).
    previous = (
        SyncRun.objects.filter(started__lt=run.started, status__in=[SyncStatus.SUCCESS, SyncStatus.FAILED])
        .order_by("-started")
        .values_list("status", flat=True)
        .first()
    )
    from gpuinventory.signals import sync_failed, sync_recovered

    if status == SyncStatus.FAILED and previous != SyncStatus.FAILED:
        sync_failed.send_robust(sender=SyncRun, run=run)
    elif status == SyncStatus.SUCCESS and previous == SyncStatus.FAILED:
        sync_recovered.send_robust(sender=SyncRun, run=run)
    return run


def summary_line(run: SyncRun) -> str:
    """One line about a finished run, e.g.
    ``sync ok: 9 nodes (2 added, 1 changed, 0 absent), 14 rows written in 412 ms``, or
    ``sync failed: <reason>``."""
    if run.status == SyncStatus.SUCCESS:
        c = run.counts
        return (
            f"sync ok: {c.get('nodes', 0)} nodes ({c.get('added', 0)} added, {c.get('changed', 0)} changed, "
            f"{c.get('absent', 0)} absent), {c.get('rows_written', 0)} rows written in "
            f"{run.timings.get('total_ms', 0)} ms"
        )
    if run.status == SyncStatus.RUNNING:
        return (
            f"sync skipped: another sync ({run.trigger}, started {run.started:%Y-%m-%d %H:%M:%S}) is running"
        )
    return f"sync failed: {run.error}"
