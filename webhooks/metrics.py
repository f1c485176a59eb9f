"""The webhooks' Prometheus metrics (registered by ``portal.metrics``, docs/operations.md).

``gpu_portal_webhook_deliveries{status}``: deliveries per status (``failed`` ones need an admin's
look; ``retrying`` ones are waiting for a receiver).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from django.db.models import Count
from prometheus_client.core import Metric

from portal.metrics import DatabaseCollector, status_gauge
from webhooks.choices import DeliveryStatus
from webhooks.models import WebhookDelivery

DELIVERIES = "gpu_portal_webhook_deliveries"


class DeliveriesCollector(DatabaseCollector):
    """``DELIVERIES{status}`` from one grouped count."""

    names: ClassVar[tuple[str, ...]] = (DELIVERIES,)

    def query(self) -> dict[str, int]:
        """``{status: number of deliveries}``."""
        return dict(
            WebhookDelivery.objects.values_list("status").annotate(n=Count("pk")).values_list("status", "n")
        )

    def metrics(self, data: dict[str, int]) -> Iterator[Metric]:
        """One sample per ``DeliveryStatus``."""
        yield status_gauge(DELIVERIES, "Webhook deliveries per status.", data, list(DeliveryStatus.values))


COLLECTORS = [DeliveriesCollector]
