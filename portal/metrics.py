"""Domain metrics for Prometheus, read from the database at scrape time (docs/operations.md).

The apps own their metrics: each app's ``metrics`` module (found by
:func:`portal.discovery.app_modules`, so this package imports no app) lists its collectors in
``COLLECTORS``, subclasses of :class:`DatabaseCollector`. Exported next to django-prometheus's
request/DB metrics on ``/metrics``:

- ``gpu_portal_inventory_last_sync_timestamp_seconds{status}`` (``gpuinventory/metrics.py``);
- ``gpu_portal_vm_requests{status}`` (``vmrequests/metrics.py``);
- ``gpu_portal_webhook_deliveries{status}`` (``webhooks/metrics.py``).

One grouped query per collector and scrape; a database error drops that collector's series for
that scrape (logged) instead of failing the whole endpoint.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from portal.discovery import app_modules

logger = logging.getLogger(__name__)


class DatabaseCollector(Collector):
    """A collector of gauges computed from one database read per scrape.

    Subclasses set ``names`` (the metric names they yield) and implement ``query`` (the database
    read) and ``metrics`` (the gauges built from its result).
    """

    names: ClassVar[tuple[str, ...]] = ()

    def describe(self) -> Iterator[Metric]:
        """The metric names, without samples (the registry calls this at registration; without
        it, it would call ``collect`` and query the database while apps load)."""
        for name in self.names:
            yield GaugeMetricFamily(name, "", labels=["status"])

    @abstractmethod
    def query(self) -> Any:
        """Read what the gauges need (runs at scrape time)."""

    @abstractmethod
    def metrics(self, data: Any) -> Iterator[Metric]:
        """The gauges built from ``query``'s result."""

    def collect(self) -> Iterator[Metric]:
        """``metrics(query())``; nothing (and a logged error) when the database read fails."""
        try:
            data = self.query()
        except Exception:
            logger.exception("portal metrics: database query failed (%s)", type(self).__name__)
            return
        yield from self.metrics(data)


def status_gauge(name: str, documentation: str, counts: dict[str, int], statuses: list[str]) -> Metric:
    """A gauge ``name{status}`` with one sample per status of ``statuses`` (zeros included)."""
    gauge = GaugeMetricFamily(name, documentation, labels=["status"])
    for status in statuses:
        gauge.add_metric([status], counts.get(status, 0))
    return gauge


_registered = False


def register() -> None:
    """Add every app's ``COLLECTORS`` to prometheus_client's default registry (once per process)."""
    global _registered
    if _registered:
        return
    for module in app_modules("metrics"):
        for collector in getattr(module, "COLLECTORS", ()):
            REGISTRY.register(collector())
    _registered = True
