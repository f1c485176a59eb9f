"""Capacity service: what can be requested now, and where a vGPU type could be made available.

Reads only the stored inventory (the last successful sync); used by the request form and by
approvals (docs/inventory.md §4). Rules (DOMAIN.md §2 "Allocatable is not free", §3, pitfall 2):

- Only present nodes count; stale (zero-valued) resources never count.
- A resource counts only on a node whose workload mode matches the resource's kind (a leftover
  ``nvidia.com/gpu`` on a VM node cannot be used), and a VM resource KubeVirt does not permit
  (``permitted is False``) cannot be used by a VM: it is left out of ``free``.
- "Usable" nodes for ``free``: ready (or unknown), not cordoned, not transitioning between modes,
  and for vGPU nodes not in the middle of a vGPU reconfiguration (``pending``).
- ``requestable(resource, node)`` is that rule in one place, and ``unusable_reason`` names why a
  device is not requestable. The dashboard totals and ``/api/v1/inventory/summary/``
  (gpuinventory/summary.py), the node table's free column (gpuinventory/tables.py), the request
  form and ``free_on_node`` all use it. ``GpuResource.free`` stays the raw
  ``max(0, allocatable − used)`` of the device plugin (the device truth shown per resource row);
  "requestable" is what can be asked for now.
- Re-profiling a vGPU node deletes every vGPU on its GPUs, so a node is a candidate only when no
  consumer (non-terminal pod) holds any vGPU resource of it, no active reservation holds it, and
  its config state is neither ``pending`` (busy) nor ``failed`` (needs an admin).
- Devices reserved by approved requests (``gpuinventory.models.Reservation``) count as used until
  their VMI's launcher pod is bound (then the sync counts the pod in ``used``): every function
  here subtracts active reservations, so two approvals can never promise the same device. A node
  promised to a re-profile that has not finished offers nothing now.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db.models import Exists, OuterRef, Q, QuerySet

from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, Reservation, VgpuConfig
from gpuinventory.naming import KIND_MODE, PCI_MODELS, classify_resource, parse_vgpu_type, pci_ids_for_family
from gpuinventory.vgpuconfig import ConfigEntry, configs_for_model, instances_offered

BUSY_VGPU_STATES = frozenset({"pending", "failed"})


@dataclass(frozen=True)
class ResourceFree:
    """Free devices of one resource name in one workload mode, across the cluster.

    Attributes:
        mode: workload mode of the nodes (``WorkloadMode`` value).
        resource_name: e.g. ``"nvidia.com/GRID_T4-8Q"``.
        kind: ``ResourceKind`` value.
        model: GPU model of the resource (passthrough/vGPU), ``""`` when the rows disagree.
        vgpu_type: bare vGPU type (``"T4-8Q"``) or ``""``.
        allocatable: Σ allocatable on present nodes (devices).
        used: Σ used on present nodes.
        free: Σ max(0, allocatable − used − reserved) on usable nodes (see module docstring).
        nodes: usable nodes with at least one free device.
        reserved: devices held by active reservations (approved, launcher pod not bound yet).
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


@dataclass(frozen=True)
class ReprofileCandidate:
    """A vm-vgpu node that could offer a vGPU type after its ``nvidia.com/vgpu.config`` changes.

    Attributes:
        node: node name.
        gpu_model: e.g. ``"Tesla T4"``. gpu_count: GPUs on the node.
        pci_device_id: the GPUs' PCI device ID used for the config match (``"1eb8"``).
        current_config: the node's ``nvidia.com/vgpu.config`` label (``""`` = ClusterPolicy default).
        config: the config name to set (label value).
        instances: instances of the requested type the node would offer under ``config``.
        offers: every type → instances under ``config`` (e.g. ``{"T4-8Q": 16}``).
    """

    node: str
    gpu_model: str
    gpu_count: int
    pci_device_id: str
    current_config: str
    config: str
    instances: int
    offers: Mapping[str, int] = field(default_factory=dict)


#: Why free devices are not requestable, in the order ``unusable_reason`` checks them.
UNUSABLE_REASONS = (
    "node_absent",
    "node_not_ready",
    "node_cordoned",
    "vgpu_reconfiguring",
    "transitioning",
    "other_mode",
    "not_permitted",
)


def _usable_q(prefix: str = "") -> Q:
    """Q for usable nodes; ``prefix`` = ``"node__"`` when filtering resources."""
    return (
        Q(**{f"{prefix}present": True, f"{prefix}unschedulable": False, f"{prefix}transitioning": False})
        & ~Q(**{f"{prefix}ready": False})
        & ~Q(**{f"{prefix}workload_mode": WorkloadMode.VM_VGPU, f"{prefix}vgpu_config_state": "pending"})
    )


def _kind_matches_mode(kind: str, mode: str) -> bool:
    try:
        return KIND_MODE[ResourceKind(kind)] == mode
    except ValueError:
        return False


def requestable_q(prefix: str = "", node_prefix: str = "node__") -> Q:
    """``requestable()`` as a Q: over ``GpuResource`` by default; from ``GpuNode`` (e.g. a filtered
    aggregate) use ``prefix="resources__", node_prefix=""``."""
    same_mode = Q()
    for kind, mode in KIND_MODE.items():
        same_mode |= Q(**{f"{prefix}kind": str(kind), f"{node_prefix}workload_mode": str(mode)})
    return (
        Q(**{f"{prefix}stale": False})
        & same_mode
        & ~Q(**{f"{prefix}permitted": False})
        & _usable_q(node_prefix)
    )


def unusable_reason(resource: GpuResource, node: GpuNode) -> str:
    """Why the free devices of ``resource`` on ``node`` cannot be requested, ``""`` when they can.

    The single rule of "requestable" (module docstring; DOMAIN.md §2, §3, §5.1). A stale resource
    has no free devices at all and returns ``""`` (it is never counted). Reasons, first match
    wins: ``node_absent``, ``node_not_ready`` (Ready=False; unknown counts as ready),
    ``node_cordoned``, ``vgpu_reconfiguring`` (vm-vgpu and ``nvidia.com/vgpu.config.state=pending``),
    ``transitioning`` (deploy labels disagree with the mode), ``other_mode`` (e.g. a leftover
    ``nvidia.com/gpu`` on a VM node), ``not_permitted`` (KubeVirt CR does not permit it).
    """
    if not node.present:
        return "node_absent"
    if node.ready is False:
        return "node_not_ready"
    if node.unschedulable:
        return "node_cordoned"
    if node.workload_mode == WorkloadMode.VM_VGPU and node.vgpu_config_state == "pending":
        return "vgpu_reconfiguring"
    if node.transitioning:
        return "transitioning"
    if not _kind_matches_mode(resource.kind, node.workload_mode):
        return "other_mode"
    if resource.permitted is False:
        return "not_permitted"
    return ""


def requestable(resource: GpuResource, node: GpuNode) -> bool:
    """True when the free devices of ``resource`` on ``node`` can be requested now."""
    return not resource.stale and unusable_reason(resource, node) == ""


def requestable_free(resource: GpuResource, node: GpuNode) -> int:
    """Free devices a request can use: ``resource.free`` when ``requestable``, else 0."""
    return resource.free if requestable(resource, node) else 0


def _counted(rows: Iterable[GpuResource]) -> Iterable[GpuResource]:
    """Non-stale resources of the node's own mode (the node is selected with ``select_related``)."""
    for r in rows:
        if not r.stale and r.allocatable > 0 and _kind_matches_mode(r.kind, r.node.workload_mode):
            yield r


def _present_resources(mode: WorkloadMode | str | None) -> QuerySet[GpuResource]:
    qs = GpuResource.objects.filter(node__present=True, stale=False).select_related("node")
    if mode is not None:
        qs = qs.filter(node__workload_mode=str(mode))
    return qs


def active_reservations() -> QuerySet[Reservation]:
    """Reservations whose VMI has no bound launcher pod yet (no ``GpuConsumer`` carries its name)."""
    bound = GpuConsumer.objects.filter(pod_namespace=OuterRef("vmi_namespace"), vmi_name=OuterRef("vmi_name"))
    return Reservation.objects.filter(~Exists(bound))


Reserved = dict[tuple[int, str], int]
#: ``Reserved`` key marking a node promised to a re-profile that has not finished: it offers
#: nothing now (its current vGPUs will be deleted by the vGPU Device Manager, DOMAIN.md §3).
REPROFILING = "reprofiling"


def reserved_devices(node_ids: Iterable[int] | None = None) -> Reserved:
    """Active reservations summed per ``(node id, Reservation.key)`` (one query)."""
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


def _free_of(r: GpuResource, reserved: Reserved) -> int:
    if (r.node_id, REPROFILING) in reserved:
        # A re-profile is promised on this node: its current vGPUs are about to be replaced.
        return 0
    return max(0, requestable_free(r, r.node) - reserved_of(r, reserved))


def free_by_resource(mode: WorkloadMode | str | None = None) -> list[ResourceFree]:
    """Free devices per (mode, resource name) across present nodes (one query).

    Args:
        mode: only this workload mode; None = all three.

    Returns:
        Sorted by mode then resource name. Resources with nothing allocatable anywhere are left out.
    """
    groups: dict[tuple[str, str], list[GpuResource]] = defaultdict(list)
    reserved = reserved_devices()
    for r in _counted(_present_resources(mode)):
        groups[(r.node.workload_mode, r.name)].append(r)
    out = []
    for (node_mode, name), rows in sorted(groups.items()):
        models = {r.model for r in rows}
        frees = [_free_of(r, reserved) for r in rows]
        out.append(
            ResourceFree(
                mode=node_mode,
                resource_name=name,
                kind=rows[0].kind,
                model=models.pop() if len(models) == 1 else "",
                vgpu_type=rows[0].vgpu_type,
                allocatable=sum(r.allocatable for r in rows),
                used=sum(r.used for r in rows),
                free=sum(frees),
                nodes=sum(1 for f in frees if f > 0),
                reserved=sum(reserved_of(r, reserved) for r in rows),
            )
        )
    return out


def free_on_node(node_name: str) -> dict[str, int]:
    """Requestable free devices per resource on one node (one query).

    Same rule as ``free_by_resource`` (``requestable``): non-stale resources of the node's own
    mode are listed; each counts ``max(0, allocatable − used)`` only when requestable, so every
    resource of a cordoned, not-ready, transitioning or re-profiling node, and a resource
    KubeVirt does not permit, counts 0. ``GpuResource.free`` keeps the raw number.

    Returns:
        ``{resource name: free}``; ``{}`` for an absent or unknown node.
    """
    rows = list(_counted(_present_resources(None).filter(node__name=node_name)))
    reserved = reserved_devices({r.node_id for r in rows})
    return {r.name: _free_of(r, reserved) for r in rows}


def nodes_offering(resource_name: str, count: int = 1) -> list[NodeFree]:
    """Usable nodes with at least ``count`` free devices of ``resource_name`` now (one query).

    Args:
        resource_name: exact resource name, e.g. ``"nvidia.com/GA100_A100_PCIE_40GB"``.
        count: devices one VMI needs; they must all come from one node.

    Returns:
        Most free first, then by node name.
    """
    rows = list(_counted(_present_resources(None).filter(name=resource_name)))
    reserved = reserved_devices({r.node_id for r in rows})
    out = [
        NodeFree(r.node.name, r.node.workload_mode, r.name, free, r.allocatable, reserved_of(r, reserved))
        for r in rows
        if (free := _free_of(r, reserved)) >= count
    ]
    return sorted(out, key=lambda n: (-n.free, n.node))


def entries_from_json(entries: Sequence[Mapping[str, Any]]) -> list[ConfigEntry]:
    """Rebuild ``ConfigEntry`` objects from ``VgpuConfig.entries`` (the ``as_json`` shape)."""
    out = []
    for e in entries:
        raw_filter = e.get("device_filter")
        raw_devices = e.get("devices", "all")
        devices: Literal["all"] | tuple[int, ...] = (
            "all" if raw_devices == "all" else tuple(int(i) for i in raw_devices)
        )
        out.append(
            ConfigEntry(
                device_filter=tuple(raw_filter) if raw_filter is not None else None,
                devices=devices,
                vgpu_devices={str(k): int(v) for k, v in dict(e.get("vgpu_devices") or {}).items()},
            )
        )
    return out


def _node_pci_id(node: GpuNode, families: set[str], vgpu_family: str) -> str | None:
    """The node's GPU PCI device ID that supports ``vgpu_family``, from its model name or, failing
    that, from the vGPU families its resources (even stale ones) show."""
    supporting = pci_ids_for_family(vgpu_family)
    by_model = [i for i in supporting if PCI_MODELS[i].model == node.gpu_model]
    if by_model:
        return by_model[0]
    if vgpu_family in families and supporting:
        return supporting[0]
    return None


def _choose(offers: Mapping[str, Mapping[str, int]], vgpu_type: str) -> tuple[str, int] | None:
    """Pick the config: most instances of the type, then the config offering only that type,
    then the config named like the type (the operator's one-type configs), then by name."""
    best = None
    for name, offer in offers.items():
        n = offer.get(vgpu_type, 0)
        if n <= 0:
            continue
        key = (-n, len(offer) != 1, name != vgpu_type, name)
        if best is None or key < best[0]:
            best = (key, name, n)
    return (best[1], best[2]) if best else None


def _idle_vgpu_nodes() -> tuple[list[GpuNode], dict[int, set[str]], dict[int, set[str]]]:
    """Re-profile-able vm-vgpu nodes, the vGPU families their resources show, and the types they
    already advertise (three queries). Busy nodes (a consumer holds a vGPU, or an active
    reservation holds the node) are left out."""
    nodes = list(
        GpuNode.objects.filter(_usable_q(), workload_mode=WorkloadMode.VM_VGPU)
        .exclude(vgpu_config_state__in=BUSY_VGPU_STATES)
        .filter(gpu_count__gt=0)
        .order_by("name")
    )
    families: dict[int, set[str]] = defaultdict(set)
    advertising: dict[int, set[str]] = defaultdict(set)
    if not nodes:
        return [], families, advertising
    ids = [n.pk for n in nodes]
    for node_id, rtype, stale, alloc in GpuResource.objects.filter(
        node_id__in=ids, kind=ResourceKind.VGPU
    ).values_list("node_id", "vgpu_type", "stale", "allocatable"):
        p = parse_vgpu_type(rtype) if rtype else None
        if p is not None:
            families[node_id].add(p.gpu)
        if rtype and not stale and alloc > 0:
            advertising[node_id].add(rtype)
    busy = {
        node_id
        for node_id, rname in GpuConsumer.objects.filter(node_id__in=ids).values_list(
            "node_id", "resource_name"
        )
        if (info := classify_resource(rname)) is not None and info.kind == ResourceKind.VGPU
    }
    busy |= set(active_reservations().filter(node_id__in=ids).values_list("node_id", flat=True))
    return [n for n in nodes if n.pk not in busy], families, advertising


def reprofile_offers(vgpu_types: Iterable[str] | None = None) -> dict[str, list[ReprofileCandidate]]:
    """Every vGPU type that idle vm-vgpu nodes could offer after re-profiling (five queries).

    A node qualifies when it is present, ready (or unknown), not cordoned, not transitioning, its
    vGPU config state is neither ``pending`` nor ``failed``, no consumer holds any vGPU resource of
    it, no active reservation holds it (a promised re-profile or promised devices), and a stored
    vGPU config (present) gives it instances of the type (``configs_for_model`` +
    ``instances_offered`` over ``gpu_count`` GPUs of the same PCI ID). A type the node already
    advertises is not offered for it (it is requestable now, without re-profiling). The node's
    vGPU families come from its GPU model (``PCI_MODELS``) and from its resources, even stale ones.

    Args:
        vgpu_types: only these bare types (e.g. ``{"T4-8Q"}``); None = all.

    Returns:
        ``{type: candidates}``, candidates sorted by instances (most first), then node name.
    """
    wanted = set(vgpu_types) if vgpu_types is not None else None
    nodes, families, advertising = _idle_vgpu_nodes()
    if not nodes:
        return {}
    configs = {c.name: entries_from_json(c.entries) for c in VgpuConfig.objects.filter(present=True)}
    out: dict[str, list[ReprofileCandidate]] = defaultdict(list)
    for node in nodes:
        if node.gpu_count is None:
            continue
        node_families = set(families[node.pk])
        node_families.update(
            f for m in PCI_MODELS.values() if m.model == node.gpu_model for f in m.vgpu_families
        )
        for family in sorted(node_families):
            pci_id = _node_pci_id(node, families[node.pk], family)
            if pci_id is None:
                continue
            gpus = [pci_id] * node.gpu_count
            offers = {
                name: instances_offered(configs[name], gpus)
                for name in configs_for_model(configs, pci_id, family)
            }
            types = {t for offer in offers.values() for t in offer}
            for vgpu_type in sorted(types):
                if (wanted is not None and vgpu_type not in wanted) or vgpu_type in advertising[node.pk]:
                    continue
                chosen = _choose(offers, vgpu_type)
                if chosen is None:
                    continue
                config, instances = chosen
                out[vgpu_type].append(
                    ReprofileCandidate(
                        node=node.name,
                        gpu_model=node.gpu_model,
                        gpu_count=node.gpu_count,
                        pci_device_id=pci_id,
                        current_config=node.vgpu_config,
                        config=config,
                        instances=instances,
                        offers=offers[config],
                    )
                )
    return {t: sorted(c, key=lambda c: (-c.instances, c.node)) for t, c in sorted(out.items())}


def reprofile_candidates(vgpu_type: str) -> list[ReprofileCandidate]:
    """vm-vgpu nodes that could offer ``vgpu_type`` after re-profiling (``reprofile_offers`` rules).

    Args:
        vgpu_type: bare type, e.g. ``"T4-8Q"`` or ``"A100-20C"``.

    Returns:
        Candidates sorted by instances (most first), then node name. ``[]`` for an unparsable type.
    """
    if parse_vgpu_type(vgpu_type) is None:
        return []
    return reprofile_offers({vgpu_type}).get(vgpu_type, [])


class CapacitySnapshot:
    """The capacity picture at one moment, loaded once and asked many times (three queries, plus
    five for the first re-profile question).

    The request form, the approval queue and approvals ask about many (resource, count) pairs;
    answering them from one snapshot keeps their query count independent of the number of
    requests and options, and gives every answer of one page the same view of the cluster. Same
    rules as the functions above (``requestable``, active reservations subtracted).
    """

    def __init__(self) -> None:
        self.resources: list[GpuResource] = list(_counted(_present_resources(None)))
        self.reserved: Reserved = reserved_devices()
        self._reprofile: dict[str, list[ReprofileCandidate]] | None = None

    def free_of(self, r: GpuResource) -> int:
        """Requestable free devices of one resource row, reservations subtracted."""
        return _free_of(r, self.reserved)

    def nodes_offering(self, resource_name: str, count: int = 1) -> list[NodeFree]:
        """``nodes_offering`` on the snapshot: usable nodes with ``count`` free, most free first."""
        out = [
            NodeFree(
                r.node.name, r.node.workload_mode, r.name, free, r.allocatable, reserved_of(r, self.reserved)
            )
            for r in self.resources
            if r.name == resource_name and (free := self.free_of(r)) >= count
        ]
        return sorted(out, key=lambda n: (-n.free, n.node))

    def max_free_on_one_node(self, resource_name: str) -> int:
        """The most free devices of ``resource_name`` any single usable node has."""
        return max((self.free_of(r) for r in self.resources if r.name == resource_name), default=0)

    def resource_names_for_type(self, vgpu_type: str) -> list[str]:
        """Advertised (non-stale) resource names whose bare vGPU type is ``vgpu_type``."""
        return sorted({r.name for r in self.resources if r.vgpu_type == vgpu_type})

    def reprofile_offers(self) -> dict[str, list[ReprofileCandidate]]:
        """``reprofile_offers()`` for every type, computed on first use."""
        if self._reprofile is None:
            self._reprofile = reprofile_offers()
        return self._reprofile

    def reprofile_candidates(self, vgpu_type: str) -> list[ReprofileCandidate]:
        """Idle nodes that could offer ``vgpu_type`` after re-profiling (most instances first)."""
        return self.reprofile_offers().get(vgpu_type, [])
