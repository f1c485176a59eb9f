"""Read-only inventory API: nodes (with the UI's FilterSet), summary, vGPU configs, permitted devices.

Any signed-in user (analyst, approver, admin) may read; anonymous callers get 403 JSON from DRF's
default ``IsAuthenticated`` (never a login redirect).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import filters, viewsets
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from gpuinventory.api.serializers import (
    GpuNodeDetailSerializer,
    GpuNodeSerializer,
    PermittedDeviceSerializer,
    VgpuConfigSerializer,
)
from gpuinventory.filtersets import GpuNodeFilterSet, PermittedDeviceFilterSet, VgpuConfigFilterSet
from gpuinventory.models import GpuConsumer, GpuNode, PermittedDevice, VgpuConfig
from gpuinventory.summary import inventory_summary
from gpuinventory.tables import annotate_node_counts, stable_order


class StableOrderingFilter(filters.OrderingFilter):
    """DRF's ``?ordering=`` with the node-name tie-breaker and NULLs last (:func:`stable_order`)."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        ordering = self.get_ordering(request, queryset, view)
        return stable_order(queryset, list(ordering)) if ordering else queryset


class InventoryPagination(PageNumberPagination):
    """``?page=`` and ``?page_size=`` (at most 500)."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class GpuNodeViewSet(viewsets.ReadOnlyModelViewSet[GpuNode]):
    """GPU nodes; filters as in the UI (``q``, ``mode``, ``model``, ``resource``, ``ready``, ``present``,
    ``has_flags``, ``transitioning``); ``ordering`` by name, mode, model, devices; detail by node name."""

    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filter_backends = [DjangoFilterBackend, StableOrderingFilter]
    filterset_class = GpuNodeFilterSet
    ordering_fields = [
        "name",
        "workload_mode",
        "gpu_model",
        "gpu_count",
        "devices_total",
        "devices_free",
        "last_seen",
    ]
    ordering = ["name"]
    pagination_class = InventoryPagination

    def get_queryset(self) -> QuerySet[GpuNode]:
        """Nodes with device totals; the detail also prefetches consumers."""
        queryset = annotate_node_counts(GpuNode.objects.all()).order_by("name")
        if self.action == "retrieve":
            queryset = queryset.prefetch_related(
                Prefetch("consumers", queryset=GpuConsumer.objects.order_by("resource_name", "pod_name"))
            )
        return queryset

    def get_serializer_class(self) -> type[BaseSerializer[GpuNode]]:
        """The list shows totals; the detail adds resources, consumers and flags."""
        return GpuNodeDetailSerializer if self.action == "retrieve" else GpuNodeSerializer


class SummaryViewSet(viewsets.ViewSet):
    """The dashboard's numbers: per mode nodes and devices total/used/free, by model and by resource."""

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Return :meth:`gpuinventory.summary.InventorySummary.as_dict`."""
        return Response(inventory_summary().as_dict())


class VgpuConfigViewSet(viewsets.ReadOnlyModelViewSet[VgpuConfig]):
    """Configs of the vGPU Device Manager file; detail by config name."""

    queryset = VgpuConfig.objects.all()
    serializer_class = VgpuConfigSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filter_backends = [DjangoFilterBackend]
    filterset_class = VgpuConfigFilterSet
    pagination_class = InventoryPagination


class PermittedDeviceViewSet(viewsets.ReadOnlyModelViewSet[PermittedDevice]):
    """``permittedHostDevices`` entries of the KubeVirt CR."""

    queryset = PermittedDevice.objects.all()
    serializer_class = PermittedDeviceSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = PermittedDeviceFilterSet
    pagination_class = InventoryPagination
