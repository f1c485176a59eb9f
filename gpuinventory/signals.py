"""Signals of the inventory app."""

from __future__ import annotations

from django.dispatch import Signal

#: Sent by ``gpuinventory.sync`` when a sync run ends ``failed`` after a successful one (the
#: first failure of a streak; later failures of the same streak are not signalled), after its row is saved:
#: ``sender=SyncRun``, ``run`` (the ``SyncRun``, with ``error``). Webhooks listen to it
#: (connected in ``vmrequests/apps.py``). Sent with ``send_robust``: a receiver's error never
#: fails the sync.
sync_failed = Signal()

#: Sent when a sync run succeeds after failed ones (the end of a failure streak); same
#: arguments as ``sync_failed``.
sync_recovered = Signal()
