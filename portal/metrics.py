"""Domain metrics for Prometheus, read from the database at scrape time (docs/operations.md).

Exported next to django-prometheus's request/DB metrics on ``/metrics``:

- ``gpu_portal_inventory_last_sync_timestamp_seconds{status}``: Unix time of the newest sync run
  that ended ``success`` / ``failed`` (absent before the first one). Alert when
  ``time() - ...{status="success"}`` exceeds a few ``PORTAL_SYNC_INTERVAL``.
- ``gpu_portal_vm_requests{status}``: requests per status (every status, zeros included).
- ``gpu_portal_webhook_deliveries{status}``: webhook deliveries per status (``failed`` ones need
  an admin's look; ``retrying`` ones are waiting for a receiver).

Three grouped queries per scrape; a database error drops these series for that scrape (logged)
instead of failing the whole endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.db.models import Count, Max
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

logger = logging.getLogger(__name__)


class PortalCollector(Collector):
    """Collects the gauges listed in the module docstring."""

    def describe(self) -> Iterator[Metric]:
        """The metric names, without samples (the registry calls this at registration; without
        it, it would call ``collect`` and query the database while apps load)."""
        yield GaugeMetricFamily("gpu_portal_inventory_last_sync_timestamp_seconds", "", labels=["status"])
        yield GaugeMetricFamily("gpu_portal_vm_requests", "", labels=["status"])
        yield GaugeMetricFamily("gpu_portal_webhook_deliveries", "", labels=["status"])

    def collect(self) -> Iterator[Metric]:
        from gpuinventory.choices import SyncStatus
        from gpuinventory.models import SyncRun
        from vmrequests.choices import VMRequestStatus
        from vmrequests.models import VMRequest
        from webhooks.choices import DeliveryStatus
        from webhooks.models import WebhookDelivery

        try:
            last_sync = dict(
                SyncRun.objects.filter(status__in=[SyncStatus.SUCCESS, SyncStatus.FAILED])
                .values_list("status")
                .annotate(last=Max("finished"))
                .values_list("status", "last")
            )
            requests = dict(
                VMRequest.objects.values_list("status").annotate(n=Count("pk")).values_list("status", "n")
            )
            deliveries = dict(
                WebhookDelivery.objects.values_list("status")
                .annotate(n=Count("pk"))
                .values_list("status", "n")
            )
        except Exception:
            logger.exception("portal metrics: database query failed")
            return
        sync = GaugeMetricFamily(
            "gpu_portal_inventory_last_sync_timestamp_seconds",
            "Unix time the newest inventory sync run with this status finished.",
            labels=["status"],
        )
        for status, finished in sorted(last_sync.items()):
            if finished is not None:
                sync.add_metric([status], finished.timestamp())
        yield sync
        by_status = GaugeMetricFamily("gpu_portal_vm_requests", "VM requests per status.", labels=["status"])
        for status in VMRequestStatus.values:
            by_status.add_metric([status], requests.get(status, 0))
        yield by_status
        hooks = GaugeMetricFamily(
            "gpu_portal_webhook_deliveries", "Webhook deliveries per status.", labels=["status"]
        )
        for status in DeliveryStatus.values:
            hooks.add_metric([status], deliveries.get(status, 0))
        yield hooks


_registered = False


def register() -> None:
    """Add ``PortalCollector`` to prometheus_client's default registry (once per process)."""
    global _registered
    if not _registered:
        REGISTRY.register(PortalCollector())
        _registered = True
