"""The node list's sort keys in SQL: the snapshot's per-node numbers as queryset annotations.

The node table and ``/api/v1/inventory/nodes/`` paginate in the database, so sorting by free
devices needs the number in SQL. ``annotate_node_capacity`` writes the snapshot's rule
(``snapshot.py``) as correlated subqueries: Σ over the node's requestable resources of
``max(0, allocatable − used − reserved)``, 0 on a node promised to an unfinished re-profile.
The numbers *shown* still come from ``CapacitySnapshot.of_nodes`` over the page's rows; the
tests check the two agree on every node of the one-truth state
(``tests/unit/inventory/test_one_truth_capacity.py``).
"""

from __future__ import annotations

from django.db.models import Case, Exists, F, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce, Greatest

from gpuinventory.capacity.reserved import active_reservations
from gpuinventory.capacity.rules import requestable_q
from gpuinventory.models import GpuNode, GpuResource

_ZERO = Value(0)


def _reserved_for_resource() -> Subquery:
    """Σ active reservation counts of the outer ``GpuResource`` (by name, or by vGPU type)."""
    by_type = Q(resource_name="", vgpu_type=OuterRef("vgpu_type")) & ~Q(vgpu_type="")
    held = (
        active_reservations()
        .filter(node_id=OuterRef("node_id"))
        .filter(Q(resource_name=OuterRef("name")) | by_type)
        .order_by()
        .values("node_id")
        .annotate(n=Sum("count"))
        .values("n")
    )
    return Subquery(held, output_field=IntegerField())


def _free_of_node() -> Subquery:
    """Σ requestable free devices of the outer ``GpuNode``, reservations subtracted."""
    left = Greatest(
        Greatest(F("allocatable") - F("used"), _ZERO) - Coalesce(_reserved_for_resource(), _ZERO),
        _ZERO,
        output_field=IntegerField(),
    )
    per_node = (
        GpuResource.objects.filter(requestable_q(), node_id=OuterRef("pk"))
        .annotate(left=left)
        .order_by()
        .values("node_id")
        .annotate(total=Sum("left"))
        .values("total")
    )
    return Subquery(per_node, output_field=IntegerField())


def annotate_node_capacity(queryset: QuerySet[GpuNode]) -> QuerySet[GpuNode]:
    """Add the sort keys ``devices_total``, ``devices_used`` (Σ over non-stale resources) and
    ``devices_free`` (requestable free, reservations subtracted) to a ``GpuNode`` queryset."""
    promised = (
        active_reservations()
        .filter(node_id=OuterRef("pk"), reprofile_done=False)
        .exclude(reprofile_config="")
    )
    counted = GpuResource.objects.filter(node_id=OuterRef("pk"), stale=False).order_by().values("node_id")
    return queryset.annotate(
        devices_total=Coalesce(
            Subquery(counted.annotate(n=Sum("allocatable")).values("n"), output_field=IntegerField()), _ZERO
        ),
        devices_used=Coalesce(
            Subquery(counted.annotate(n=Sum("used")).values("n"), output_field=IntegerField()), _ZERO
        ),
        devices_free=Case(
            When(Exists(promised), then=_ZERO),
            default=Coalesce(_free_of_node(), _ZERO),
            output_field=IntegerField(),
        ),
    )
