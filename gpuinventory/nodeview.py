"""One node's derived inventory: mode, GPU identity, resources, consumers and flags.

``derive_node`` combines the rules of ``modes``, ``naming``, ``vgpuconfig`` and ``permitted`` into
plain dataclasses that map 1:1 onto ``GpuNode``, ``GpuResource`` and ``GpuConsumer``
(gpuinventory/models.py), so the sync (``gpuinventory/sync/``) can compare them with the stored rows and write only
what changed. Pure: no ORM, no Kubernetes.

Counting rules (DOMAIN.md §2 "Allocatable is not free", pitfalls 5 and 6; kubevirt/kubevirt#13359):
``used`` = Σ requests of the given (non-terminal) pods bound to the node, virt-launcher pods
included; ``free`` = max(0, allocatable − used); an entry with 0 devices is "stale": shown,
never counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gpuinventory.choices import ModeSource, ResourceKind, WorkloadMode
from gpuinventory.flags import Flag, flag
from gpuinventory.identity import GpuIdentity, identify_gpus
from gpuinventory.modes import VGPU_PAUSED, decide_mode, deploy_labels
from gpuinventory.naming import (
    KATA_RESOURCES,
    KIND_MODE,
    ModelSource,
    ResourceInfo,
    classify_resource,
    resolve_bare_id,
)
from gpuinventory.permitted import permitted_state, resource_flags
from gpuinventory.vgpuconfig import ConfigEntry, config_types, uniform_instances_for_family
from portal.k8s import ClusterPolicyInfo, KubeVirtInfo, NodeInfo, PodInfo
from portal.k8s.quantity import parse_count
from portal.labels import HOSTNAME, KUBEVIRT_APP, KUBEVIRT_VM_NAME, NFD_IOMMU_ENABLED, VIRT_LAUNCHER
from portal.labels import VGPU_CONFIG as VGPU_CONFIG_LABEL
from portal.labels import VGPU_CONFIG_STATE as VGPU_CONFIG_STATE_LABEL

#: Labels kept on ``GpuNode.labels`` (the GPU-related ones; DOMAIN.md §1, §3, §4).
_KEPT_LABEL_PREFIXES = ("nvidia.com/", "feature.node.kubernetes.io/pci-10de")
_KEPT_LABELS = frozenset({HOSTNAME, NFD_IOMMU_ENABLED})


def _count(quantity: str) -> int | None:
    """A device count from a quantity string (``portal.k8s.quantity.parse_count``); None when it is
    not a whole, non-negative number (the caller flags ``unparsed_quantity``)."""
    try:
        return parse_count(quantity)
    except ValueError:
        return None


def vgpu_reconfiguring(mode: WorkloadMode | str, labels: Mapping[str, str]) -> bool:
    """A vm-vgpu node the vGPU Device Manager is reconfiguring: ``nvidia.com/vgpu.config.state=pending``
    or a deploy label ``paused-for-vgpu-change`` (DOMAIN.md §3 "What a label change does", step 3).
    Its vGPU resources are gone for a while, so its GPU model/count cannot be derived then.
    Works on raw node labels and on the stored ``GpuNode.labels`` (they keep ``nvidia.com/*``).
    """
    if mode != WorkloadMode.VM_VGPU:
        return False
    if labels.get(VGPU_CONFIG_STATE_LABEL) == "pending":
        return True
    return VGPU_PAUSED in deploy_labels(labels).values()


#: Identity flags a reconfiguring vGPU node does not get (``vgpu_config_pending`` or the paused
#: ``transitioning`` flag explains the missing devices; the sync keeps the stored identity).
_IDENTITY_UNKNOWN_FLAGS = frozenset({"gpu_model_unknown", "gpu_count_unknown"})


def gpu_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels stored on ``GpuNode.labels``: ``nvidia.com/*``, ``feature.node.kubernetes.io/pci-10de*``,
    ``feature.node.kubernetes.io/iommu-enabled`` and ``kubernetes.io/hostname``, sorted by key."""
    return {k: labels[k] for k in sorted(labels) if k.startswith(_KEPT_LABEL_PREFIXES) or k in _KEPT_LABELS}


@dataclass(frozen=True)
class DerivedResource:
    """One GPU resource of a node; fields = ``GpuResource`` minus ``node``/``id``."""

    name: str
    kind: ResourceKind
    model: str = ""
    pci_device_id: str = ""
    vgpu_type: str = ""
    framebuffer_gb: Decimal | None = None
    series: str = ""
    capacity: int = 0
    allocatable: int = 0
    used: int = 0
    stale: bool = False
    permitted: bool | None = None

    @property
    def free(self) -> int:
        """Devices still requestable: 0 when stale, else ``max(0, allocatable − used)``."""
        return 0 if self.stale else max(0, self.allocatable - self.used)

    def model_fields(self) -> dict[str, Any]:
        """Field dict for ``GpuResource`` (without ``node``)."""
        return {
            "name": self.name,
            "kind": str(self.kind),
            "model": self.model,
            "pci_device_id": self.pci_device_id,
            "vgpu_type": self.vgpu_type,
            "framebuffer_gb": self.framebuffer_gb,
            "series": self.series,
            "capacity": self.capacity,
            "allocatable": self.allocatable,
            "used": self.used,
            "stale": self.stale,
            "permitted": self.permitted,
        }


@dataclass(frozen=True)
class DerivedConsumer:
    """A pod holding GPU devices on the node; fields = ``GpuConsumer`` minus ``node``/``id``."""

    resource_name: str
    count: int
    pod_namespace: str
    pod_name: str
    vmi_name: str = ""

    def model_fields(self) -> dict[str, Any]:
        """Field dict for ``GpuConsumer`` (without ``node``)."""
        return {
            "resource_name": self.resource_name,
            "count": self.count,
            "pod_namespace": self.pod_namespace,
            "pod_name": self.pod_name,
            "vmi_name": self.vmi_name,
        }


@dataclass(frozen=True)
class DerivedNode:
    """A GPU node as the inventory stores it; fields = ``GpuNode`` minus the sync's bookkeeping
    (``present``, ``first_seen``, ``last_seen``, ``created``, ``updated``), plus its resources
    and consumers (sorted by name / by resource, namespace, pod)."""

    name: str
    uid: str
    workload_mode: WorkloadMode
    mode_source: ModeSource
    mode_label_value: str
    transitioning: bool
    gpu_model: str
    gpu_count: int | None
    gpu_memory_mib: int | None
    model_source: str
    ready: bool | None
    unschedulable: bool
    vgpu_config: str
    vgpu_config_state: str
    labels: dict[str, str] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    resources: tuple[DerivedResource, ...] = ()
    consumers: tuple[DerivedConsumer, ...] = ()

    def model_fields(self) -> dict[str, Any]:
        """Field dict for ``GpuNode`` (everything the sync derives; not ``present``/timestamps)."""
        return {
            "name": self.name,
            "uid": self.uid,
            "workload_mode": str(self.workload_mode),
            "mode_source": str(self.mode_source),
            "mode_label_value": self.mode_label_value,
            "transitioning": self.transitioning,
            "gpu_model": self.gpu_model,
            "gpu_count": self.gpu_count,
            "gpu_memory_mib": self.gpu_memory_mib,
            "model_source": self.model_source,
            "ready": self.ready,
            "unschedulable": self.unschedulable,
            "vgpu_config": self.vgpu_config,
            "vgpu_config_state": self.vgpu_config_state,
            "labels": dict(self.labels),
            "flags": [{"code": f["code"], "params": dict(f["params"])} for f in self.flags],
        }

    def resource(self, name: str) -> DerivedResource:
        """The resource called ``name``.

        Raises:
            KeyError: the node has no such resource.
        """
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)

    def flag_codes(self) -> list[str]:
        """Codes of ``flags`` in order (handy for tests and filters)."""
        return [f["code"] for f in self.flags]


def vmi_name_for(pod: PodInfo) -> str:
    """The VMI a virt-launcher pod runs, ``""`` for other pods (DOMAIN.md §5.4).

    Launcher pods carry ``kubevirt.io=virt-launcher`` and ``vm.kubevirt.io/name=<VMI hostname>``
    (its name unless ``spec.hostname`` is set; the label is deprecated). Without that label the
    name is taken from the pod name ``virt-launcher-<vmi>-<5 chars>`` (KubeVirt's generateName).
    """
    if pod.labels.get(KUBEVIRT_APP) != VIRT_LAUNCHER:
        return ""
    name = pod.labels.get(KUBEVIRT_VM_NAME, "")
    if name:
        return name
    m = re.fullmatch(r"virt-launcher-(.+)-[a-z0-9]{5}", pod.name)
    return m.group(1) if m else ""


def _effective_vgpu_config(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> tuple[str, str]:
    """(config name the vGPU Device Manager applies, raw label value). An absent label means the
    ClusterPolicy's ``vgpuDeviceManager.config.default`` (DOMAIN.md §3 "Labels")."""
    raw = labels.get(VGPU_CONFIG_LABEL, "")
    if raw:
        return raw, raw
    return (policy.vgpu_default_config if policy else "default"), ""


def derive_node(
    node: NodeInfo,
    pods: Sequence[PodInfo],
    policy: ClusterPolicyInfo | None,
    kubevirt: KubeVirtInfo | None,
    vgpu_configs: Mapping[str, Sequence[ConfigEntry]] | None,
) -> DerivedNode | None:
    """Derive one node's inventory (DOMAIN.md §1–§5).

    Args:
        node: the Node.
        pods: non-terminal pods bound to this node (the caller filters by ``node_name``).
        policy: the ClusterPolicy, or None when the cluster has none.
        kubevirt: the KubeVirt CR (the first one), or None.
        vgpu_configs: parsed vGPU Device Manager file of the ClusterPolicy's ConfigMap, or None
            when it is missing or does not parse (the sync reports that once, as a SyncRun warning).

    Returns:
        None when the node is not a GPU node (``nvidia.com/gpu.present`` not ``"true"``), else a
        ``DerivedNode``. Never raises on odd cluster data; oddities become flags.
    """
    decision = decide_mode(node.labels, policy)
    if decision is None:
        return None
    mode = decision.mode
    flags: list[Flag] = list(decision.flags)
    kata_mode = policy is not None and policy.sandbox_mode == "kata"
    used, consumers = _pod_usage(pods)
    resources, advertised = _derive_resources(node, used, mode, kata_mode, kubevirt, flags)
    vgpu_label = node.labels.get(VGPU_CONFIG_LABEL, "")
    vgpu_state = node.labels.get(VGPU_CONFIG_STATE_LABEL, "")
    entries = _vgpu_config_entries(node, mode, policy, vgpu_configs, flags)
    identity = _identity(node, mode, advertised, entries, flags)
    if identity.source == ModelSource.GFD:
        # Container resources name no model; on a container node it is GFD's (DOMAIN.md §4).
        resources = [
            replace(r, model=identity.model) if KIND_MODE[r.kind] == WorkloadMode.CONTAINER else r
            for r in resources
        ]
    flags.extend(_missing_device_flags(mode, advertised, vgpu_state, kata_mode, kubevirt))
    return DerivedNode(
        name=node.name,
        uid=node.uid,
        workload_mode=mode,
        mode_source=decision.source,
        mode_label_value=decision.label_value,
        transitioning=decision.transitioning,
        gpu_model=identity.model[:100],
        gpu_count=identity.count,
        gpu_memory_mib=identity.memory_mib,
        model_source=identity.source,
        ready=node.ready,
        unschedulable=node.unschedulable,
        vgpu_config=vgpu_label,
        vgpu_config_state=vgpu_state,
        labels=gpu_labels(node.labels),
        flags=_dedupe(flags),
        resources=tuple(resources),
        consumers=tuple(sorted(consumers, key=lambda c: (c.resource_name, c.pod_namespace, c.pod_name))),
    )


def _pod_usage(pods: Sequence[PodInfo]) -> tuple[dict[str, int], list[DerivedConsumer]]:
    """``used`` per GPU resource (Σ requests of the node's pods) and one consumer per pod and resource."""
    used: dict[str, int] = {}
    consumers: list[DerivedConsumer] = []
    for pod in pods:
        vmi = vmi_name_for(pod)
        for rname, count in pod.requests.items():
            if count <= 0 or classify_resource(rname) is None:
                continue
            used[rname] = used.get(rname, 0) + count
            consumers.append(DerivedConsumer(rname, count, pod.namespace, pod.name, vmi))
    return used, consumers


def _derive_resources(
    node: NodeInfo,
    used: Mapping[str, int],
    mode: WorkloadMode,
    kata_mode: bool,
    kubevirt: KubeVirtInfo | None,
    flags: list[Flag],
) -> tuple[list[DerivedResource], list[tuple[ResourceInfo, int]]]:
    """Every GPU resource the node advertises or its pods use (DOMAIN.md §2), and the non-stale
    ones as ``(info, allocatable)``; oddities are appended to ``flags``."""
    resources: list[DerivedResource] = []
    advertised: list[tuple[ResourceInfo, int]] = []
    for rname in sorted(set(node.capacity) | set(node.allocatable) | set(used)):
        if rname in KATA_RESOURCES:
            count = _count(node.allocatable.get(rname, "0")) or 0
            if count and not kata_mode:
                flags.append(flag("kata_resource", resource=rname, count=count))
            continue
        info = classify_resource(rname)
        if info is None:
            continue
        info = resolve_bare_id(info, kubevirt)
        resource = _derive_resource(node, info, used.get(rname, 0), mode, kubevirt, flags)
        resources.append(resource)
        if not resource.stale:
            advertised.append((info, resource.allocatable))
    return resources, advertised


def _derive_resource(
    node: NodeInfo,
    info: ResourceInfo,
    used: int,
    mode: WorkloadMode,
    kubevirt: KubeVirtInfo | None,
    flags: list[Flag],
) -> DerivedResource:
    """One GPU resource of the node: capacity and allocatable parsed (stale when both are 0),
    with its flags (unparsed quantity, stale, unhealthy devices, other mode, permitted, vGPU type)."""
    rname = info.name
    alloc_raw = node.allocatable.get(rname)
    cap_raw = node.capacity.get(rname, alloc_raw)
    allocatable = _count(alloc_raw) if alloc_raw is not None else 0
    capacity = _count(cap_raw) if cap_raw is not None else allocatable
    for raw, parsed in ((alloc_raw, allocatable), (cap_raw, capacity)):
        if raw is not None and parsed is None:
            flags.append(flag("unparsed_quantity", resource=rname, value=raw))
            break
    allocatable, capacity = allocatable or 0, capacity or 0
    stale = allocatable == 0 and capacity == 0
    if stale and (alloc_raw is not None or cap_raw is not None):
        flags.append(flag("stale_resource", resource=rname))
    if capacity > allocatable:
        flags.append(flag("devices_unhealthy", resource=rname, capacity=capacity, allocatable=allocatable))
    if not stale:
        if KIND_MODE[info.kind] != mode:
            flags.append(
                flag(
                    "resource_other_mode",
                    resource=rname,
                    count=allocatable,
                    kind=str(info.kind),
                    mode=str(mode),
                )
            )
        flags.extend(resource_flags(info, kubevirt))
        if info.kind == ResourceKind.VGPU and not info.series:
            flags.append(flag("vgpu_type_unparsed", resource=rname, vgpu_type=info.vgpu_type))
    return DerivedResource(
        name=rname,
        kind=info.kind,
        model=info.model,
        pci_device_id=info.pci_device_id,
        vgpu_type=info.vgpu_type,
        framebuffer_gb=info.framebuffer_gb,
        series=info.series,
        capacity=capacity,
        allocatable=allocatable,
        used=used,
        stale=stale,
        permitted=permitted_state(info, kubevirt),
    )


def _vgpu_config_entries(
    node: NodeInfo,
    mode: WorkloadMode,
    policy: ClusterPolicyInfo | None,
    vgpu_configs: Mapping[str, Sequence[ConfigEntry]] | None,
    flags: list[Flag],
) -> Sequence[ConfigEntry] | None:
    """The entries of a vm-vgpu node's effective vGPU config (DOMAIN.md §3), None when unknown;
    its state (pending, failed) and an unknown config are appended to ``flags``."""
    if mode != WorkloadMode.VM_VGPU:
        return None
    effective, _raw = _effective_vgpu_config(node.labels, policy)
    vgpu_state = node.labels.get(VGPU_CONFIG_STATE_LABEL, "")
    if vgpu_state == "pending":
        flags.append(flag("vgpu_config_pending", config=effective))
    elif vgpu_state == "failed":
        flags.append(flag("vgpu_config_failed", config=effective))
    if vgpu_configs is None:
        return None
    entries = vgpu_configs.get(effective)
    if entries is None:
        flags.append(
            flag(
                "vgpu_config_unknown",
                config=effective,
                config_map=policy.vgpu_config_name if policy else "default-vgpu-devices-config",
            )
        )
    return entries


def _identity(
    node: NodeInfo,
    mode: WorkloadMode,
    advertised: Sequence[tuple[ResourceInfo, int]],
    entries: Sequence[ConfigEntry] | None,
    flags: list[Flag],
) -> GpuIdentity:
    """The node's GPU model and count (DOMAIN.md §4); the identity's flags are appended to
    ``flags``, except "unknown" ones while a vGPU re-profile explains them."""
    per_gpu = None
    if entries is not None:
        families = {i.vgpu_family for i, _ in advertised if i.kind == ResourceKind.VGPU}
        if len(families) == 1:
            per_gpu = uniform_instances_for_family(entries, families.pop())
    identity = identify_gpus(
        mode,
        node.labels,
        node.annotations,
        advertised,
        config_types=config_types(entries) if entries else (),
        per_gpu_instances=per_gpu,
    )
    if vgpu_reconfiguring(mode, node.labels):
        flags.extend(f for f in identity.flags if f["code"] not in _IDENTITY_UNKNOWN_FLAGS)
    else:
        flags.extend(identity.flags)
    return identity


def _missing_device_flags(
    mode: WorkloadMode,
    advertised: Sequence[tuple[ResourceInfo, int]],
    vgpu_state: str,
    kata_mode: bool,
    kubevirt: KubeVirtInfo | None,
) -> list[Flag]:
    """Flags for a node that advertises nothing of its mode, and a VM node without KubeVirt."""
    flags: list[Flag] = []
    if not any(KIND_MODE[i.kind] == mode for i, _ in advertised):
        if mode == WorkloadMode.VM_PASSTHROUGH and not kata_mode:
            flags.append(flag("passthrough_no_devices"))
        elif mode == WorkloadMode.VM_VGPU and vgpu_state != "pending" and not kata_mode:
            flags.append(flag("vgpu_no_devices", state=vgpu_state or "-"))
        elif mode == WorkloadMode.CONTAINER:
            flags.append(flag("container_no_devices"))
    if mode != WorkloadMode.CONTAINER and kubevirt is None:
        flags.append(flag("kubevirt_missing", mode=str(mode)))
    return flags


def _dedupe(flags: list[Flag]) -> list[Flag]:
    """Drop repeated identical flags, keeping the first occurrence's position."""
    seen: set[str] = set()
    out: list[Flag] = []
    for f in flags:
        key = f["code"] + repr(sorted(f["params"].items()))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
