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
  consumer (non-terminal pod) holds any vGPU resource of it, and its config state is neither
  ``pending`` (busy) nor ``failed`` (needs an admin).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db.models import Q, QuerySet

from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, VgpuConfig
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
        free: Σ max(0, allocatable − used) on usable nodes (see module docstring).
        nodes: usable nodes with at least one free device.
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


@dataclass(frozen=True)
class NodeFree:
    """One usable node offering a resource: ``free`` devices of ``resource_name`` now."""

    node: str
    mode: str
    resource_name: str
    free: int
    allocatable: int


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


def _free_of(r: GpuResource) -> int:
    return requestable_free(r, r.node)


def free_by_resource(mode: WorkloadMode | str | None = None) -> list[ResourceFree]:
    """Free devices per (mode, resource name) across present nodes (one query).

    Args:
        mode: only this workload mode; None = all three.

    Returns:
        Sorted by mode then resource name. Resources with nothing allocatable anywhere are left out.
    """
    groups: dict[tuple[str, str], list[GpuResource]] = defaultdict(list)
    for r in _counted(_present_resources(mode)):
        groups[(r.node.workload_mode, r.name)].append(r)
    out = []
    for (node_mode, name), rows in sorted(groups.items()):
        models = {r.model for r in rows}
        frees = [_free_of(r) for r in rows]
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
    rows = _counted(_present_resources(None).filter(node__name=node_name))
    return {r.name: _free_of(r) for r in rows}


def nodes_offering(resource_name: str, count: int = 1) -> list[NodeFree]:
    """Usable nodes with at least ``count`` free devices of ``resource_name`` now (one query).

    Returns:
        Most free first, then by node name.
    """
    rows = _counted(_present_resources(None).filter(name=resource_name))
    out = [
        NodeFree(r.node.name, r.node.workload_mode, r.name, free, r.allocatable)
        for r in rows
        if (free := _free_of(r)) >= count
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


def reprofile_candidates(vgpu_type: str) -> list[ReprofileCandidate]:
    """vm-vgpu nodes that could offer ``vgpu_type`` after re-profiling (three queries).

    A node qualifies when it is present, ready (or unknown), not cordoned, not transitioning, its
    vGPU config state is neither ``pending`` nor ``failed``, its GPU supports the type's family,
    it does not already advertise the type, no consumer holds any vGPU resource of it, and a
    stored vGPU config (present) gives it instances of the type (``configs_for_model`` +
    ``instances_offered`` over ``gpu_count`` GPUs of the same PCI ID).

    Args:
        vgpu_type: bare type, e.g. ``"T4-8Q"`` or ``"A100-20C"``.

    Returns:
        Candidates sorted by instances (most first), then node name. ``[]`` for an unparsable type.
    """
    parsed = parse_vgpu_type(vgpu_type)
    if parsed is None:
        return []
    nodes = list(
        GpuNode.objects.filter(_usable_q(), workload_mode=WorkloadMode.VM_VGPU)
        .exclude(vgpu_config_state__in=BUSY_VGPU_STATES)
        .filter(gpu_count__gt=0)
        .order_by("name")
    )
    if not nodes:
        return []
    ids = [n.pk for n in nodes]
    families: dict[int, set[str]] = defaultdict(set)
    advertising: set[int] = set()
    for node_id, rtype, stale, alloc in GpuResource.objects.filter(
        node_id__in=ids, kind=ResourceKind.VGPU
    ).values_list("node_id", "vgpu_type", "stale", "allocatable"):
        p = parse_vgpu_type(rtype) if rtype else None
        if p is not None:
            families[node_id].add(p.gpu)
        if rtype == vgpu_type and not stale and alloc > 0:
            advertising.add(node_id)
    busy = {
        node_id
        for node_id, rname in GpuConsumer.objects.filter(node_id__in=ids).values_list(
            "node_id", "resource_name"
        )
        if (info := classify_resource(rname)) is not None and info.kind == ResourceKind.VGPU
    }
    configs = {c.name: entries_from_json(c.entries) for c in VgpuConfig.objects.filter(present=True)}
    out = []
    for node in nodes:
        if node.pk in busy or node.pk in advertising:
            continue
        pci_id = _node_pci_id(node, families[node.pk], parsed.gpu)
        if pci_id is None or node.gpu_count is None:
            continue
        gpus = [pci_id] * node.gpu_count
        names = configs_for_model(configs, pci_id, parsed.gpu)
        offers = {name: instances_offered(configs[name], gpus) for name in names}
        chosen = _choose(offers, vgpu_type)
        if chosen is None:
            continue
        config, instances = chosen
        out.append(
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
    return sorted(out, key=lambda c: (-c.instances, c.node))
