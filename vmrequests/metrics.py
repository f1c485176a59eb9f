"""The requests' Prometheus metrics (registered by ``portal.metrics``, docs/operations.md).

``gpu_portal_vm_requests{status}``: requests per status (every status, zeros included).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from django.db.models import Count
from prometheus_client.core import Metric

from portal.metrics import DatabaseCollector, status_gauge
from vmrequests.choices import VMRequestStatus
from vmrequests.models import VMRequest

VM_REQUESTS = "gpu_portal_vm_requests"


class RequestsCollector(DatabaseCollector):
    """``VM_REQUESTS{status}`` from one grouped count."""

    names: ClassVar[tuple[str, ...]] = (VM_REQUESTS,)

    def query(self) -> dict[str, int]:
        """``{status: number of requests}``."""
        return dict(
            VMRequest.objects.values_list("status").annotate(n=Count("pk")).values_list("status", "n")
        )

    def metrics(self, data: dict[str, int]) -> Iterator[Metric]:
        """One sample per ``VMRequestStatus``."""
        yield status_gauge(VM_REQUESTS, "VM requests per status.", data, list(VMRequestStatus.values))


COLLECTORS = [RequestsCollector]
