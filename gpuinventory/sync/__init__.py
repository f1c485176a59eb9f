"""Inventory sync: one snapshot of the cluster → derive → diff against the stored rows → apply.

``run_sync`` is the only writer of the inventory tables (gpuinventory/models.py). Design
(docs/inventory.md §3):

1. **Lock.** A ``SyncRun`` row with status ``running`` is the lock: a partial unique constraint
   (``syncrun_single_running``) lets only one such row exist, in SQLite and PostgreSQL alike, so
   Celery beat, the "Sync now" button and ``manage.py sync_inventory`` in any process never
   overlap. The loser returns the winner's row untouched and logs it. A ``running`` row older
   than :func:`lock_ttl_seconds` (a worker killed by the hard time limit) is taken over.
   No cache is needed (the default cache is per process, so a cache ``add`` lock would not lock).
2. **Snapshot.** ``GET /version`` and every LIST (nodes, non-terminal pods, VMIs, ClusterPolicy,
   KubeVirt CRs) plus the vGPU ConfigMap the ClusterPolicy names, read from
   ``PORTAL_GPU_OPERATOR_NAMESPACE``. Any Kubernetes error → the run fails with the reason and no
   inventory row is touched (the last good data stays, with its age on the dashboard).
3. **Derive** each GPU node with ``gpuinventory.nodeview.derive_node``.
4. **Diff and apply** in one transaction, writing only rows whose derived fields differ. A sync
   with no cluster change writes zero rows (``counts["rows_written"] == 0``).

``GpuNode.last_seen`` is written together with the row: when a node is added or changes, and
when it vanishes (then it becomes the start of the last successful sync, which listed it). A
present node is therefore "seen" as of the latest successful ``SyncRun``; bumping ``last_seen``
on every run would rewrite every row every 30 s.

One step per module: ``snapshot`` (the read), ``derive``, ``apply`` (the diff) and ``run``
(``run_sync``, the lock and the ``SyncRun`` row). The public names are re-exported here.
"""

from __future__ import annotations

from gpuinventory.sync.apply import ApplyResult, apply
from gpuinventory.sync.derive import Derived, derive
from gpuinventory.sync.run import TRIGGERS, lock_ttl_seconds, run_sync, summary_line
from gpuinventory.sync.snapshot import Snapshot, take_snapshot

__all__ = [
    "TRIGGERS",
    "ApplyResult",
    "Derived",
    "Snapshot",
    "apply",
    "derive",
    "lock_ttl_seconds",
    "run_sync",
    "summary_line",
    "take_snapshot",
]
