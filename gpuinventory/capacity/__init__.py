"""Capacity owns "free": allocatable, used, reserved and free devices, and why free ones are unusable.

One snapshot (:class:`CapacitySnapshot`, ``snapshot.py``) answers every question about free
devices; the dashboard, node list and node page, the summary and nodes APIs, the request form,
the approval queue, approvals and the worker all read it (docs/inventory.md §4).

Modules: ``rules.py`` (per-row rule: requestable, ``UNUSABLE_REASONS``, GPU-equivalents),
``reserved.py`` (active reservations, read side), ``snapshot.py`` (the snapshot and its
aggregates), ``sorting.py`` (the node list's SQL sort key, checked against the snapshot),
``reprofile.py`` (where a vGPU type could be made available). Reservations are written only by
``gpuinventory.reservations``.

The module-level functions below are shorthands over a fresh snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuinventory.capacity.reprofile import (
    BUSY_VGPU_STATES,
    ReprofileCandidate,
    entries_from_json,
    reprofile_candidates,
    reprofile_offers,
)
from gpuinventory.capacity.reserved import (
    REPROFILING,
    Reserved,
    active_reservations,
    reserved_devices,
    reserved_of,
)
from gpuinventory.capacity.rules import (
    UNUSABLE_REASONS,
    gpu_equivalent,
    kind_matches_mode,
    requestable,
    requestable_free,
    requestable_q,
    unusable_reason,
    usable_q,
)
from gpuinventory.capacity.snapshot import CapacitySnapshot, NodeFree, ResourceRow, Tally
from gpuinventory.choices import WorkloadMode
from gpuinventory.models import GpuNode

__all__ = [
    "BUSY_VGPU_STATES",
    "REPROFILING",
    "UNUSABLE_REASONS",
    "CapacitySnapshot",
    "NodeFree",
    "ReprofileCandidate",
    "Reserved",
    "ResourceFree",
    "ResourceRow",
    "Tally",
    "active_reservations",
    "entries_from_json",
    "free_by_resource",
    "free_on_node",
    "gpu_equivalent",
    "kind_matches_mode",
    "nodes_offering",
    "reprofile_candidates",
    "reprofile_offers",
    "requestable",
    "requestable_free",
    "requestable_q",
    "reserved_devices",
    "reserved_of",
    "unusable_reason",
    "usable_q",
]


@dataclass(frozen=True)
class ResourceFree:
    """Free devices of one resource name in one workload mode, across the cluster.

    Attributes:
        mode: workload mode of the nodes. resource_name: e.g. ``"nvidia.com/GRID_T4-8Q"``.
        kind: ``ResourceKind`` value. model: GPU model, ``""`` when the rows disagree.
        vgpu_type: bare vGPU type or ``""``. allocatable, used: Σ on present nodes (devices).
        free: requestable free devices (reservations subtracted). nodes: usable nodes with a
        free device. reserved: devices held by active reservations.
    """

    mode: str
    resource_name: str
    kind: str
    model: str
    vgpu_type: str
    allocatable: int
    used: int
    free: int
    nodes: int
    reserved: int = 0


def free_by_resource(mode: WorkloadMode | str | None = None) -> list[ResourceFree]:
    """Free devices per (mode, resource name) of the node's own mode, from one snapshot.

    Args:
        mode: only this workload mode; None = all three.

    Returns:
        Sorted by mode then resource name; resources with nothing allocatable are left out.
    """
    snap = CapacitySnapshot()
    groups: dict[tuple[str, str], list[ResourceRow]] = {}
    for row in snap.rows:
        if row.counts_for_requests and (mode is None or row.mode == str(mode)):
            groups.setdefault((row.mode, row.resource_name), []).append(row)
    out = []
    for (node_mode, name), rows in sorted(groups.items()):
        models = {r.model for r in rows}
        out.append(
            ResourceFree(
                mode=node_mode,
                resource_name=name,
                kind=rows[0].kind,
                model=models.pop() if len(models) == 1 else "",
                vgpu_type=rows[0].vgpu_type,
                allocatable=sum(r.allocatable for r in rows),
                used=sum(r.used for r in rows),
                free=sum(r.free for r in rows),
                nodes=sum(1 for r in rows if r.free > 0),
                reserved=sum(r.reserved for r in rows),
            )
        )
    return out


def free_on_node(node_name: str) -> dict[str, int]:
    """Requestable free devices per resource of the node's own mode on one node (three queries).

    Returns:
        ``{resource name: free}`` (0 on a cordoned, not-ready, ... node); ``{}`` for an absent
        or unknown node.
    """
    node = GpuNode.objects.filter(name=node_name, present=True).prefetch_related("resources").first()
    if node is None:
        return {}
    snap = CapacitySnapshot.of_nodes([node])
    return {row.resource_name: row.free for row in snap.rows if row.counts_for_requests}


def nodes_offering(resource_name: str, count: int = 1) -> list[NodeFree]:
    """Usable nodes with at least ``count`` free devices of ``resource_name`` now, most free first."""
    return CapacitySnapshot().nodes_offering(resource_name, count)
