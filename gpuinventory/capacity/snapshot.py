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
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

from gpuinventory.capacity.reprofile import ReprofileCandidate, reprofile_offers
from gpuinventory.capacity.reserved import REPROFILING, Reserved, reserved_devices
from gpuinventory.capacity.rules import UNUSABLE_REASONS, gpu_equivalent, reason_for
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
    """Sums over resource rows (devices), plus GPU-equivalents of the devices whose size is known
    (``gpus_*``, exact fractions); ``devices_unsized`` counts allocatable devices without one.

    Devices are summed per size (integers) and turned into GPUs only when asked, which keeps
    adding thousands of rows cheap.
    """

    allocatable: int = 0
    used: int = 0
    reserved: int = 0
    free: int = 0
    unusable: int = 0
    unusable_reasons: dict[str, int] = field(default_factory=dict)
    node_ids: set[int] = field(default_factory=set)
    nodes_with_free: set[int] = field(default_factory=set)
    max_free_on_one_node: int = 0
    devices_unsized: int = 0
    #: ``{size in GPUs: [allocatable, used (≤ allocatable per row), reserved, free]}``
    by_size: dict[Fraction, list[int]] = field(default_factory=dict)

    def add(self, row: ResourceRow) -> None:
        """Count ``row`` in."""
        self.allocatable += row.allocatable
        self.used += row.used
        self.reserved += row.reserved
        self.free += row.free
        self.node_ids.add(row.node_id)
        if row.free:
            self.nodes_with_free.add(row.node_id)
            if row.free > self.max_free_on_one_node:
                self.max_free_on_one_node = row.free
        if row.unusable:
            self.unusable += row.unusable
            self.unusable_reasons[row.reason] = self.unusable_reasons.get(row.reason, 0) + row.unusable
        if row.gpu_equivalent is None:
            self.devices_unsized += row.allocatable
            return
        sums = self.by_size.get(row.gpu_equivalent)
        if sums is None:
            sums = self.by_size[row.gpu_equivalent] = [0, 0, 0, 0]
        sums[0] += row.allocatable
        sums[1] += min(row.used, row.allocatable)
        sums[2] += row.reserved
        sums[3] += row.free

    def _gpus(self, index: int) -> Fraction:
        return sum((size * sums[index] for size, sums in self.by_size.items()), Fraction(0))

    @property
    def gpus_allocatable(self) -> Fraction:
        """GPU-equivalents of the allocatable devices."""
        return self._gpus(0)

    @property
    def gpus_used(self) -> Fraction:
        """GPU-equivalents in use (per row at most its allocatable)."""
        return self._gpus(1)

    @property
    def gpus_reserved(self) -> Fraction:
        """GPU-equivalents held by active reservations."""
        return self._gpus(2)

    @property
    def gpus_free(self) -> Fraction:
        """GPU-equivalents of the requestable free devices."""
        return self._gpus(3)

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


class _Source(NamedTuple):
    """The fields of one (resource, node) pair that the rules read, in ``_FIELDS`` order."""

    node_id: int
    node: str
    present: bool
    ready: bool | None
    unschedulable: bool
    mode: str
    vgpu_config_state: str
    transitioning: bool
    node_model: str
    gpu_memory_mib: int | None
    name: str
    kind: str
    model: str
    pci_device_id: str
    vgpu_type: str
    framebuffer_gb: Decimal | None
    allocatable: int
    used: int
    permitted: bool | None


#: ``GpuResource`` lookups of ``_Source`` (the rest, e.g. labels and flags JSON, is never loaded).
_FIELDS = (
    "node_id", "node__name", "node__present", "node__ready", "node__unschedulable", "node__workload_mode",
    "node__vgpu_config_state", "node__transitioning", "node__gpu_model", "node__gpu_memory_mib",
    "name", "kind", "model", "pci_device_id", "vgpu_type", "framebuffer_gb", "allocatable", "used",
    "permitted",
)  # fmt: skip


def _source(r: GpuResource, node: GpuNode) -> _Source:
    return _Source(
        node.pk, node.name, node.present, node.ready, node.unschedulable, node.workload_mode,
        node.vgpu_config_state, node.transitioning, node.gpu_model, node.gpu_memory_mib,
        r.name, r.kind, r.model, r.pci_device_id, r.vgpu_type, r.framebuffer_gb, r.allocatable, r.used,
        r.permitted,
    )  # fmt: skip


def _row(src: _Source, reserved: Reserved) -> ResourceRow:
    held = reserved.get((src.node_id, src.name), 0)
    if src.vgpu_type:
        held += reserved.get((src.node_id, f"vgpu:{src.vgpu_type}"), 0)
    left = max(0, src.allocatable - src.used - held)
    reason = reason_for(
        src.present,
        src.ready,
        src.unschedulable,
        src.mode,
        src.vgpu_config_state,
        src.transitioning,
        src.kind,
        src.permitted,
    )
    if not reason and (src.node_id, REPROFILING) in reserved:
        reason = "reprofile_promised"
    return ResourceRow(
        node_id=src.node_id,
        node=src.node,
        mode=src.mode,
        node_model=src.node_model,
        resource_name=src.name,
        kind=src.kind,
        model=src.model,
        vgpu_type=src.vgpu_type,
        pci_device_id=src.pci_device_id,
        allocatable=src.allocatable,
        used=src.used,
        reserved=held,
        free=0 if reason else left,
        unusable=left if reason else 0,
        reason=reason if left else "",
        gpu_equivalent=gpu_equivalent(src.kind, src.vgpu_type, src.framebuffer_gb, src.gpu_memory_mib),
    )


def _resource(src: _Source, nodes: dict[int, GpuNode]) -> GpuResource:
    """A ``GpuResource`` (with its node) rebuilt from a source tuple, for callers of ``resources``."""
    node = nodes.get(src.node_id)
    if node is None:
        node = nodes[src.node_id] = GpuNode(
            pk=src.node_id, name=src.node, present=src.present, ready=src.ready,
            unschedulable=src.unschedulable, workload_mode=src.mode, vgpu_config_state=src.vgpu_config_state,
            transitioning=src.transitioning, gpu_model=src.node_model, gpu_memory_mib=src.gpu_memory_mib,
        )  # fmt: skip
    r = GpuResource(
        node=node, name=src.name, kind=src.kind, model=src.model, pci_device_id=src.pci_device_id,
        vgpu_type=src.vgpu_type, framebuffer_gb=src.framebuffer_gb, allocatable=src.allocatable,
        used=src.used, stale=False, permitted=src.permitted,
    )  # fmt: skip
    return r


class CapacitySnapshot:
    """The capacity picture at one moment (module docstring).

    ``CapacitySnapshot()`` loads every present node's non-stale resources and the active
    reservations (two queries; five more on the first re-profile question).
    ``CapacitySnapshot.of_nodes(nodes)`` builds it over given nodes whose ``resources`` are
    prefetched (absent nodes included, their rows carry ``node_absent``): one query.

    Attributes:
        rows: every counted row, by node name then resource name.
        reserved: active reservations per ``(node id, key)`` (``reserved_devices``).
    """

    def __init__(
        self,
        _pairs: Sequence[tuple[GpuResource, GpuNode]] | None = None,
        _reserved: Reserved | None = None,
    ) -> None:
        if _pairs is None:
            qs = GpuResource.objects.filter(node__present=True, stale=False).order_by("node__name", "name")
            sources = [_Source(*values) for values in qs.values_list(*_FIELDS)]
            self._resources: list[GpuResource] | None = None
        else:
            sources = [_source(r, node) for r, node in _pairs]
            self._resources = [r for r, _node in _pairs]
        self.reserved: Reserved = reserved_devices() if _reserved is None else _reserved
        self._sources = sources
        self.rows: list[ResourceRow] = [_row(src, self.reserved) for src in sources]
        self._by_key: dict[tuple[int, str], ResourceRow] = {
            (row.node_id, row.resource_name): row for row in self.rows
        }
        self._aggregates: dict[str, dict[Any, Tally]] | None = None
        self._reprofile: dict[str, list[ReprofileCandidate]] | None = None

    @property
    def resources(self) -> list[GpuResource]:
        """The ``GpuResource`` objects (node attached) of the rows that ``counts_for_requests``, for
        callers that walk resources (built on first use from the loaded values)."""
        if self._resources is None:
            nodes: dict[int, GpuNode] = {}
            self._resources = [_resource(src, nodes) for src in self._sources]
        return [r for r, row in zip(self._resources, self.rows, strict=True) if row.counts_for_requests]

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
