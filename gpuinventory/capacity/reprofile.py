"""Re-profile offers: where a vGPU type could be made available by changing a node's vGPU config.

Re-profiling a vGPU node deletes every vGPU on its GPUs (DOMAIN.md §3, pitfall 2), so a node is a
candidate only when it is usable, no consumer (non-terminal pod) holds any vGPU resource of it,
no active reservation holds it, and its config state is neither ``pending`` (busy) nor
``failed`` (needs an admin). Configs come from the stored ``VgpuConfig`` rows (docs/inventory.md §4).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuinventory.capacity.reserved import active_reservations
from gpuinventory.capacity.rules import usable_q
from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, VgpuConfig
from gpuinventory.naming import PCI_MODELS, classify_resource, parse_vgpu_type, pci_ids_for_family
from gpuinventory.vgpuconfig import ConfigEntry, configs_for_model, instances_offered

BUSY_VGPU_STATES = frozenset({"pending", "failed"})


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
        GpuNode.objects.filter(usable_q(), workload_mode=WorkloadMode.VM_VGPU)
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
