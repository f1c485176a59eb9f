"""Signals of the inventory app."""

from __future__ import annotations

from django.dispatch import Signal

#: Sent by ``gpuinventory.sync`` when a sync run ends ``failed``, after its row is saved:
#: ``sender=SyncRun``, ``run`` (the ``SyncRun``, with ``error``). Webhooks listen to it
#: (connected in ``vmrequests/apps.py``). Sent with ``send_robust``: a receiver's error never
#: fails the sync.
sync_failed = Signal()
