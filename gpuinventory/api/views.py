"""Read-only inventory API: nodes (with the UI's FilterSet), summary, vGPU configs, permitted devices.

Any signed-in user (analyst, approver, admin) or token with the ``read`` scope may read; anonymous
callers get a 401 problem-details body (never a login redirect). Every operation documents its
error responses as problem details (``portal.api.schema.problem_responses``).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import filters, viewsets
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from gpuinventory.api.serializers import (
    GpuNodeDetailSerializer,
    GpuNodeSerializer,
    InventorySummarySerializer,
    PermittedDeviceSerializer,
    VgpuConfigSerializer,
)
from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.filtersets import GpuNodeFilterSet, PermittedDeviceFilterSet, VgpuConfigFilterSet
from gpuinventory.models import GpuConsumer, GpuNode, PermittedDevice, VgpuConfig
from gpuinventory.summary import inventory_summary
from gpuinventory.tables import annotate_node_counts, stable_order
from portal.api.pagination import StandardPagination
from portal.api.schema import list_problem_responses, problem_responses

#: Errors of list endpoints: 400 bad filter value, 404 page out of range.
LIST_ERRORS = list_problem_responses(400, 401, 403, 429)
#: Errors of detail endpoints: 404 no object of that name.
DETAIL_ERRORS = problem_responses(401, 403, 404, 429)


class StableOrderingFilter(filters.OrderingFilter):
    """DRF's ``?ordering=`` with the node-name tie-breaker and NULLs last (:func:`stable_order`)."""

    def filter_queryset(self, request: Request, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        ordering = self.get_ordering(request, queryset, view)
        return stable_order(queryset, list(ordering)) if ordering else queryset


@extend_schema_view(
    list=extend_schema(
        summary="List GPU nodes", responses={200: GpuNodeSerializer(many=True), **LIST_ERRORS}
    ),
    retrieve=extend_schema(
        summary="One GPU node with resources, consumers and diagnostics",
        responses={200: GpuNodeDetailSerializer, **DETAIL_ERRORS},
    ),
)
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
    pagination_class = StandardPagination

    def get_queryset(self) -> QuerySet[GpuNode]:
        """Nodes with device totals; the detail also prefetches consumers."""
        queryset = annotate_node_counts(GpuNode.objects.all()).order_by("name")
        if self.action == "retrieve":
            queryset = queryset.prefetch_related(
                Prefetch("consumers", queryset=GpuConsumer.objects.order_by("resource_name", "pod_name"))
            )
        return queryset

    def get_serializer(self, *args: Any, **kwargs: Any) -> BaseSerializer[GpuNode]:
        """The serializer, after building the ``CapacitySnapshot`` of the nodes it shows (the page,
        or the one node; one query) that its numbers come from."""
        if args:
            nodes = list(args[0]) if kwargs.get("many") else [args[0]]
            self._capacity = CapacitySnapshot.of_nodes(nodes)
        return super().get_serializer(*args, **kwargs)

    def get_serializer_context(self) -> dict[str, Any]:
        """Adds ``capacity``: the snapshot the numbers come from."""
        return {**super().get_serializer_context(), "capacity": getattr(self, "_capacity", None)}

    def get_serializer_class(self) -> type[BaseSerializer[GpuNode]]:
        """The list shows totals; the detail adds resources, consumers and flags."""
        return GpuNodeDetailSerializer if self.action == "retrieve" else GpuNodeSerializer


@extend_schema_view(
    list=extend_schema(
        summary="Fleet summary: nodes and devices per workload mode",
        description="The dashboard's numbers: per workload mode the present nodes and the devices "
        "(total, used, free, free but not requestable and why), by GPU model and by resource; "
        "the last sync run and the age of the data.",
        responses={200: InventorySummarySerializer, **problem_responses(401, 403, 429)},
    )
)
class SummaryViewSet(viewsets.ViewSet):
    """The dashboard's numbers: per mode nodes and devices total/used/free, by model and by resource."""

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Return :meth:`gpuinventory.summary.InventorySummary.as_dict`."""
        return Response(inventory_summary().as_dict())


@extend_schema_view(
    list=extend_schema(
        summary="List vGPU Device Manager configs",
        responses={200: VgpuConfigSerializer(many=True), **LIST_ERRORS},
    ),
    retrieve=extend_schema(summary="One vGPU config", responses={200: VgpuConfigSerializer, **DETAIL_ERRORS}),
)
class VgpuConfigViewSet(viewsets.ReadOnlyModelViewSet[VgpuConfig]):
    """Configs of the vGPU Device Manager file; detail by config name."""

    queryset = VgpuConfig.objects.all()
    serializer_class = VgpuConfigSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filter_backends = [DjangoFilterBackend]
    filterset_class = VgpuConfigFilterSet
    pagination_class = StandardPagination


@extend_schema_view(
    list=extend_schema(
        summary="List devices KubeVirt permits",
        responses={200: PermittedDeviceSerializer(many=True), **LIST_ERRORS},
    ),
    retrieve=extend_schema(
        summary="One permitted device", responses={200: PermittedDeviceSerializer, **DETAIL_ERRORS}
    ),
)
class PermittedDeviceViewSet(viewsets.ReadOnlyModelViewSet[PermittedDevice]):
    """``permittedHostDevices`` entries of the KubeVirt CR."""

    queryset = PermittedDevice.objects.all()
    serializer_class = PermittedDeviceSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = PermittedDeviceFilterSet
    pagination_class = StandardPagination
