"""Active reservations as capacity counts them (read side; ``gpuinventory.reservations`` writes).

A reservation is *active* while no ``GpuConsumer`` (a bound, non-terminal pod recorded by the
sync) carries its VMI's name in its namespace; from then on the pod's devices are in
``GpuResource.used`` and the reservation no longer counts, so devices are never counted twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.db.models import Exists, OuterRef, QuerySet

from gpuinventory.models import GpuConsumer, GpuResource, Reservation

Reserved = dict[tuple[int, str], int]
#: ``Reserved`` key marking a node promised to a re-profile that has not finished.
REPROFILING = "reprofiling"


def active_reservations() -> QuerySet[Reservation]:
    """Reservations whose VMI has no bound launcher pod yet (no ``GpuConsumer`` carries its name)."""
    bound = GpuConsumer.objects.filter(pod_namespace=OuterRef("vmi_namespace"), vmi_name=OuterRef("vmi_name"))
    return Reservation.objects.filter(~Exists(bound))


def reserved_devices(node_ids: Iterable[int] | None = None) -> Reserved:
    """Active reservations summed per ``(node id, Reservation.key)`` (one query); a node with an
    unfinished re-profile also gets ``(node id, REPROFILING): 1``."""
    qs = active_reservations()
    if node_ids is not None:
        qs = qs.filter(node_id__in=list(node_ids))
    out: Reserved = defaultdict(int)
    for node_id, name, vtype, count, config, done in qs.values_list(
        "node_id", "resource_name", "vgpu_type", "count", "reprofile_config", "reprofile_done"
    ):
        out[(node_id, name or f"vgpu:{vtype}")] += count
        if config and not done:
            out[(node_id, REPROFILING)] = 1
    return out


def reserved_of(r: GpuResource, reserved: Reserved) -> int:
    """Devices of ``r`` held by active reservations (by name, or by vGPU type before re-profiling)."""
    n = reserved.get((r.node_id, r.name), 0)
    if r.vgpu_type:
        n += reserved.get((r.node_id, f"vgpu:{r.vgpu_type}"), 0)
    return n
