"""``CapacitySnapshot``: the one picture of allocatable, used, reserved and free devices.

Built once per page, API call, approval or worker pass, in a fixed number of queries, and asked
many times. Every number the portal shows or acts on about free devices comes from it: the
dashboard and ``/api/v1/inventory/summary/`` (``gpuinventory/summary.py``), the node list and the
nodes API (``CapacitySnapshot.of_nodes`` over the page's rows), the node page, the request form's
options and the queue verdicts (``vmrequests/placement.py``), approvals and the worker.

Per resource row (node × resource name; present or, for ``of_nodes``, given nodes; stale
entries never count, DOMAIN.md pitfall 5):

- ``allocatable``, ``used`` (Σ requests of non-terminal pods, stored by the sync),
- ``reserved``: devices promised by *active* reservations (approved, launcher pod not bound
  yet, ``gpuinventory.reservations``), by resource name, or by vGPU type before a re-profile,
- ``free`` = ``max(0, allocatable − used − reserved)`` when the row is requestable, else 0,
- ``unusable`` = the free devices that cannot be requested, and ``reason`` (one of
  ``rules.UNUSABLE_REASONS``), so ``free + unusable = max(0, allocatable − used − reserved)``.

A node promised to a re-profile that has not finished offers nothing now (``reprofile_promised``).
Aggregates (:class:`Tally`) per mode, per (mode, resource name), per (mode, vGPU type), per
(mode, GPU model of the node) and per node, each with GPU-equivalents (``rules.gpu_equivalent``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuinventory.capacity.reprofile import ReprofileCandidate, reprofile_offers
from gpuinventory.capacity.reserved import REPROFILING, Reserved, reserved_devices, reserved_of
from gpuinventory.capacity.rules import UNUSABLE_REASONS, gpu_equivalent, unusable_reason
from gpuinventory.models import GpuNode, GpuResource


@dataclass(frozen=True)
class ResourceRow:
    """One resource of one node as capacity counts it (module docstring for the rules).

    ``gpu_equivalent``: one device in whole GPUs (``rules.gpu_equivalent``), None when unknown.
    """

    node_id: int
    node: str
    mode: str
    node_model: str
    resource_name: str
    kind: str
    model: str
    vgpu_type: str
    pci_device_id: str
    allocatable: int
    used: int
    reserved: int
    free: int
    unusable: int
    reason: str
    gpu_equivalent: Fraction | None

    @property
    def counts_for_requests(self) -> bool:
        """A resource of the node's own mode with devices (what forms and placement may offer)."""
        return self.reason != "other_mode" and self.allocatable > 0


@dataclass
class Tally:
    """Sums over resource rows. ``gpus_*`` are GPU-equivalents (exact fractions) of the devices
    whose size is known; ``devices_unsized`` counts allocatable devices without one."""

    allocatable: int = 0
    used: int = 0
    reserved: int = 0
    free: int = 0
    unusable: int = 0
    unusable_reasons: dict[str, int] = field(default_factory=dict)
    node_ids: set[int] = field(default_factory=set)
    nodes_with_free: set[int] = field(default_factory=set)
    max_free_on_one_node: int = 0
    gpus_allocatable: Fraction = Fraction(0)
    gpus_used: Fraction = Fraction(0)
    gpus_reserved: Fraction = Fraction(0)
    gpus_free: Fraction = Fraction(0)
    devices_unsized: int = 0

    def add(self, row: ResourceRow) -> None:
        """Count ``row`` in."""
        self.allocatable += row.allocatable
        self.used += row.used
        self.reserved += row.reserved
        self.free += row.free
        self.node_ids.add(row.node_id)
        if row.free:
            self.nodes_with_free.add(row.node_id)
            self.max_free_on_one_node = max(self.max_free_on_one_node, row.free)
        if row.unusable:
            self.unusable += row.unusable
            self.unusable_reasons[row.reason] = self.unusable_reasons.get(row.reason, 0) + row.unusable
        if row.gpu_equivalent is None:
            self.devices_unsized += row.allocatable
            return
        self.gpus_allocatable += row.allocatable * row.gpu_equivalent
        self.gpus_used += min(row.used, row.allocatable) * row.gpu_equivalent
        self.gpus_reserved += row.reserved * row.gpu_equivalent
        self.gpus_free += row.free * row.gpu_equivalent

    @property
    def ordered_reasons(self) -> dict[str, int]:
        """``unusable_reasons`` in ``UNUSABLE_REASONS`` order (stable JSON)."""
        return {k: self.unusable_reasons[k] for k in UNUSABLE_REASONS if k in self.unusable_reasons}

    def gpu_equivalents(self) -> dict[str, float | int]:
        """``{"total", "used", "reserved", "free"}`` in GPUs (rounded to 3 decimals; whole numbers as
        ints) and ``"unsized_devices"`` (allocatable devices left out: no known size)."""
        return {
            "total": _gpus(self.gpus_allocatable),
            "used": _gpus(self.gpus_used),
            "reserved": _gpus(self.gpus_reserved),
            "free": _gpus(self.gpus_free),
            "unsized_devices": self.devices_unsized,
        }


def _gpus(value: Fraction) -> float | int:
    rounded = round(float(value), 3)
    return int(rounded) if rounded.is_integer() else rounded


@dataclass(frozen=True)
class NodeFree:
    """One usable node offering a resource: ``free`` devices of ``resource_name`` now (active
    reservations already subtracted; ``reserved`` says how many)."""

    node: str
    mode: str
    resource_name: str
    free: int
    allocatable: int
    reserved: int = 0


def _row(r: GpuResource, node: GpuNode, reserved: Reserved) -> ResourceRow:
    held = reserved_of(r, reserved)
    left = max(0, r.allocatable - r.used - held)
    reason = unusable_reason(r, node)
    if not reason and (node.pk, REPROFILING) in reserved:
        reason = "reprofile_promised"
    return ResourceRow(
        node_id=node.pk,
        node=node.name,
        mode=node.workload_mode,
        node_model=node.gpu_model,
        resource_name=r.name,
        kind=r.kind,
        model=r.model,
        vgpu_type=r.vgpu_type,
        pci_device_id=r.pci_device_id,
        allocatable=r.allocatable,
        used=r.used,
        reserved=held,
        free=0 if reason else left,
        unusable=left if reason else 0,
        reason=reason if left else "",
        gpu_equivalent=gpu_equivalent(r.kind, r.vgpu_type, r.framebuffer_gb, node.gpu_memory_mib),
    )


class CapacitySnapshot:
    """The capacity picture at one moment (module docstring).

    ``CapacitySnapshot()`` loads every present node's non-stale resources and the active
    reservations (two queries; five more on the first re-profile question).
    ``CapacitySnapshot.of_nodes(nodes)`` builds it over given nodes whose ``resources`` are
    prefetched (absent nodes included, their rows carry ``node_absent``): one query.

    Attributes:
        rows: every counted row, by node name then resource name.
        resources: the ``GpuResource`` objects behind the rows that ``counts_for_requests``
            (node loaded), for callers that walk resources.
        reserved: active reservations per ``(node id, key)`` (``reserved_devices``).
    """

    def __init__(
        self, _pairs: Sequence[tuple[GpuResource, GpuNode]] | None = None, _reserved: Reserved | None = None
    ):
        if _pairs is None:
            qs = GpuResource.objects.filter(node__present=True, stale=False).select_related("node")
            _pairs = [(r, r.node) for r in qs.order_by("node__name", "name")]
        self.reserved: Reserved = reserved_devices() if _reserved is None else _reserved
        self.rows: list[ResourceRow] = []
        self.resources: list[GpuResource] = []
        self._by_key: dict[tuple[int, str], ResourceRow] = {}
        for r, node in _pairs:
            row = _row(r, node, self.reserved)
            self.rows.append(row)
            self._by_key[(node.pk, r.name)] = row
            if row.counts_for_requests:
                self.resources.append(r)
        self._aggregates: dict[str, dict[Any, Tally]] | None = None
        self._reprofile: dict[str, list[ReprofileCandidate]] | None = None

    @classmethod
    def of_nodes(cls, nodes: Iterable[GpuNode]) -> CapacitySnapshot:
        """The snapshot over ``nodes`` (``resources`` prefetched or loaded per node): one query for
        their reservations. Stale resources are left out, as everywhere."""
        nodes = list(nodes)
        pairs = [
            (r, node)
            for node in nodes
            for r in sorted(node.resources.all(), key=lambda r: r.name)
            if not r.stale
        ]
        return cls(pairs, reserved_devices([n.pk for n in nodes]) if nodes else {})

    # --- per row ----------------------------------------------------------------------------

    def row(self, node_id: int, resource_name: str) -> ResourceRow | None:
        """The row of one resource of one node, None when it is not counted (stale, absent node)."""
        return self._by_key.get((node_id, resource_name))

    def free_of(self, r: GpuResource) -> int:
        """Requestable free devices of one resource row, reservations subtracted (0 when not counted)."""
        row = self._by_key.get((r.node_id, r.name))
        return row.free if row is not None else 0

    # --- aggregates ---------------------------------------------------------------------------

    def _aggregate(self) -> dict[str, dict[Any, Tally]]:
        if self._aggregates is None:
            out: dict[str, dict[Any, Tally]] = {
                "mode": defaultdict(Tally),
                "resource": defaultdict(Tally),
                "vgpu_type": defaultdict(Tally),
                "model": defaultdict(Tally),
                "node": defaultdict(Tally),
            }
            for row in self.rows:
                out["mode"][row.mode].add(row)
                out["resource"][(row.mode, row.resource_name)].add(row)
                if row.vgpu_type:
                    out["vgpu_type"][(row.mode, row.vgpu_type)].add(row)
                out["model"][(row.mode, row.node_model)].add(row)
                out["node"][row.node_id].add(row)
            self._aggregates = out
        return self._aggregates

    def by_mode(self) -> dict[str, Tally]:
        """``{mode: Tally}`` over every row (other-mode leftovers included, as ``other_mode``)."""
        return self._aggregate()["mode"]

    def by_resource(self) -> dict[tuple[str, str], Tally]:
        """``{(mode, resource name): Tally}``."""
        return self._aggregate()["resource"]

    def by_vgpu_type(self) -> dict[tuple[str, str], Tally]:
        """``{(mode, bare vGPU type): Tally}`` (vGPU rows only)."""
        return self._aggregate()["vgpu_type"]

    def by_model(self) -> dict[tuple[str, str], Tally]:
        """``{(mode, the node's GPU model): Tally}``."""
        return self._aggregate()["model"]

    def node(self, node_id: int) -> Tally:
        """The ``Tally`` of one node (empty when it has no counted rows)."""
        return self._aggregate()["node"].get(node_id) or Tally()

    # --- questions of the form, the queue and approvals ---------------------------------------

    def nodes_offering(self, resource_name: str, count: int = 1) -> list[NodeFree]:
        """Usable nodes with ``count`` free devices of ``resource_name`` now, most free first."""
        out = [
            NodeFree(row.node, row.mode, row.resource_name, row.free, row.allocatable, row.reserved)
            for row in self.rows
            if row.resource_name == resource_name and row.counts_for_requests and row.free >= count
        ]
        return sorted(out, key=lambda n: (-n.free, n.node))

    def max_free_on_one_node(self, resource_name: str) -> int:
        """The most free devices of ``resource_name`` any single usable node has."""
        return max((row.free for row in self.rows if row.resource_name == resource_name), default=0)

    def resource_names_for_type(self, vgpu_type: str) -> list[str]:
        """Advertised resource names (of the node's own mode) whose bare vGPU type is ``vgpu_type``."""
        return sorted({r.name for r in self.resources if r.vgpu_type == vgpu_type})

    def reprofile_offers(self) -> dict[str, list[ReprofileCandidate]]:
        """``reprofile.reprofile_offers()`` for every type, computed on first use."""
        if self._reprofile is None:
            self._reprofile = reprofile_offers()
        return self._reprofile

    def reprofile_candidates(self, vgpu_type: str) -> list[ReprofileCandidate]:
        """Idle nodes that could offer ``vgpu_type`` after re-profiling (most instances first)."""
        return self.reprofile_offers().get(vgpu_type, [])
