"""The inventory's Prometheus metrics (registered by ``portal.metrics``, docs/operations.md).

``gpu_portal_inventory_last_sync_timestamp_seconds{status}``: Unix time of the newest sync run that
ended ``success`` / ``failed`` (absent before the first one). Alert when
``time() - ...{status="success"}`` exceeds a few ``PORTAL_SYNC_INTERVAL``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import ClassVar

from django.db.models import Max
from prometheus_client.core import GaugeMetricFamily, Metric

from gpuinventory.choices import SyncStatus
from gpuinventory.models import SyncRun
from portal.metrics import DatabaseCollector

LAST_SYNC = "gpu_portal_inventory_last_sync_timestamp_seconds"


class LastSyncCollector(DatabaseCollector):
    """``LAST_SYNC{status}`` from one grouped query over ``SyncRun``."""

    names: ClassVar[tuple[str, ...]] = (LAST_SYNC,)

    def query(self) -> dict[str, datetime | None]:
        """``{status: newest finished}`` of the success and failed runs."""
        return dict(
            SyncRun.objects.filter(status__in=[SyncStatus.SUCCESS, SyncStatus.FAILED])
            .values_list("status")
            .annotate(last=Max("finished"))
            .values_list("status", "last")
        )

    def metrics(self, data: dict[str, datetime | None]) -> Iterator[Metric]:
        """One sample per status that has a finished run."""
        sync = GaugeMetricFamily(
            LAST_SYNC, "Unix time the newest inventory sync run with this status finished.", labels=["status"]
        )
        for status, finished in sorted(data.items()):
            if finished is not None:
                sync.add_metric([status], finished.timestamp())
        yield sync


COLLECTORS = [LastSyncCollector]
