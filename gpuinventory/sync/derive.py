"""Deriving the inventory from a snapshot: every GPU node, the vGPU configs, the permitted
devices and the run's warnings (docs/inventory.md §3, step 3)."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from gpuinventory.flags import FLAG_TYPES, Flag, flag
from gpuinventory.models import PermittedDevice
from gpuinventory.nodeview import (
    DerivedNode,
    derive_node,
)
from gpuinventory.permitted import kubevirt_flags
from gpuinventory.sync.snapshot import Snapshot
from gpuinventory.vgpuconfig import (
    CONFIG_KEY,
    ConfigEntry,
    VgpuConfigError,
    parse_config_file,
    parse_config_map_data,
)
from portal import k8s


def _warning(code: str, **params: str | int) -> Flag:
    """A ``SyncRun.warnings`` item; uses ``flags.flag`` for registered codes (validated)."""
    if code in FLAG_TYPES:
        return flag(code, **params)
    return {"code": code, "params": dict(params)}


@functools.lru_cache(maxsize=4)
def _parse_configs_text(text: str) -> dict[str, list[ConfigEntry]]:
    return parse_config_file(text)


def _parse_configs(text: str | None) -> dict[str, list[ConfigEntry]]:
    """Parse the ConfigMap's ``config.yaml``, cached by content: the operator's default file has
    711 configs and takes most of a second to parse, and it rarely changes between syncs.

    Raises:
        VgpuConfigError: the key is missing or the file is invalid.
    """
    if text is None:
        return parse_config_map_data({})  # raises "the ConfigMap has no key 'config.yaml'"
    return _parse_configs_text(text)


@dataclass
class Derived:
    """The snapshot turned into what the tables should hold."""

    nodes: dict[str, DerivedNode]
    vgpu_configs: dict[str, list[ConfigEntry]] | None  # None: keep the stored rows (file invalid)
    config_map: str  # "namespace/name"
    permitted: dict[tuple[str, str, str], dict[str, Any]]  # (kind, resource, selector) -> fields
    warnings: list[Flag] = field(default_factory=list)


# Memo of derive_node across syncs in this process: node name -> (inputs key, result). derive_node
# is pure, so an unchanged key (same node resourceVersion, same GPU pods, same policy, KubeVirt CR
# and parsed config file) gives the same result; a long-lived beat worker skips most of the work.
_DERIVED: dict[str, tuple[Hashable, DerivedNode | None]] = {}


def _derive_key(
    node: k8s.NodeInfo,
    pods: Sequence[k8s.PodInfo],
    policy: k8s.ClusterPolicyInfo | None,
    kubevirt: k8s.KubeVirtInfo | None,
    configs_key: Hashable,
) -> Hashable:
    pod_key = tuple(
        (
            p.namespace,
            p.name,
            p.uid,
            p.phase,
            tuple(sorted(p.requests.items())),
            tuple(sorted(p.labels.items())),
        )
        for p in pods
    )
    # resourceVersion changes with every change of the Node; uid guards against a re-created node.
    node_key = (node.uid, node.resource_version) if node.resource_version else (node.uid, repr(node))
    return (node_key, pod_key, policy, kubevirt, configs_key)


def derive(snapshot: Snapshot) -> Derived:
    """Derive every GPU node, the vGPU configs and the permitted devices; collect warnings.

    Warnings (``SyncRun.warnings``): ``vgpu_config_map_missing``, ``vgpu_config_file_invalid``,
    ``no_cluster_policy``, ``kubevirt_multiple``, ``pod_quantity_fractional`` and the KubeVirt
    CR's own entry problems (``permitted.kubevirt_flags``).
    """
    warnings: list[Flag] = []
    namespace = settings.PORTAL_GPU_OPERATOR_NAMESPACE
    config_map = f"{namespace}/{snapshot.config_map_name}"
    configs, configs_for_nodes = _derive_configs(snapshot, warnings)
    if snapshot.policy is None:
        warnings.append(_warning("no_cluster_policy", value="-"))
    kubevirt = snapshot.kubevirts[0] if snapshot.kubevirts else None
    if len(snapshot.kubevirts) > 1:
        warnings.append(
            _warning(
                "kubevirt_multiple",
                used=f"{kubevirt.namespace}/{kubevirt.name}" if kubevirt else "",
                count=len(snapshot.kubevirts),
            )
        )
    if kubevirt is not None:
        warnings.extend(kubevirt_flags(kubevirt))

    pods_by_node = _pods_by_node(snapshot.pods, warnings)
    nodes = _derive_nodes(snapshot, pods_by_node, kubevirt, configs_for_nodes)
    permitted = _derive_permitted(snapshot.kubevirts)
    return Derived(nodes, configs, config_map, permitted, warnings)


def _derive_configs(
    snapshot: Snapshot, warnings: list[Flag]
) -> tuple[dict[str, list[ConfigEntry]] | None, dict[str, list[ConfigEntry]] | None]:
    """``(configs to store, configs for the nodes)`` from the vGPU devices ConfigMap: ``({}, None)``
    when it is missing (every stored config becomes absent), ``(None, None)`` when its file does
    not parse (stored ones kept); a warning says which."""
    configs: dict[str, list[ConfigEntry]] | None = None
    configs_for_nodes: dict[str, list[ConfigEntry]] | None = None
    if snapshot.config_map_data is None:
        warnings.append(_warning("vgpu_config_map_missing", config_map=snapshot.config_map_name))
        configs = {}  # the ConfigMap is gone: every stored config becomes absent
    else:
        try:
            configs = _parse_configs(snapshot.config_map_data.get(CONFIG_KEY))
            configs_for_nodes = configs
        except VgpuConfigError as exc:
            warnings.append(
                _warning("vgpu_config_file_invalid", config_map=snapshot.config_map_name, error=str(exc))
            )
    return configs, configs_for_nodes


def _pods_by_node(pods: Iterable[k8s.PodInfo], warnings: list[Flag]) -> dict[str, list[k8s.PodInfo]]:
    """The pods holding GPU requests, by node; a warning per fractional ``nvidia.com/*`` quantity."""
    pods_by_node: dict[str, list[k8s.PodInfo]] = defaultdict(list)
    for pod in pods:
        if pod.bad_quantities:
            for resource, value in sorted(pod.bad_quantities.items()):
                warnings.append(
                    _warning(
                        "pod_quantity_fractional",
                        pod=f"{pod.namespace}/{pod.name}",
                        pod_namespace=pod.namespace,
                        pod_name=pod.name,
                        resource=resource,
                        value=value,
                    )
                )
        if pod.node_name and pod.requests:
            pods_by_node[pod.node_name].append(pod)
    return pods_by_node


def _derive_nodes(
    snapshot: Snapshot,
    pods_by_node: Mapping[str, list[k8s.PodInfo]],
    kubevirt: k8s.KubeVirtInfo | None,
    configs_for_nodes: dict[str, list[ConfigEntry]] | None,
) -> dict[str, DerivedNode]:
    """``derive_node`` of every node, reusing last run's result for a node whose inputs did not
    change (``_DERIVED``, keyed by ``_derive_key``)."""
    text = (snapshot.config_map_data or {}).get(CONFIG_KEY)
    configs_key = (configs_for_nodes is not None, len(text), hash(text)) if text is not None else None
    nodes: dict[str, DerivedNode] = {}
    seen: dict[str, tuple[Hashable, DerivedNode | None]] = {}
    for node in snapshot.nodes:
        pods = pods_by_node.get(node.name, [])
        key = _derive_key(node, pods, snapshot.policy, kubevirt, configs_key)
        cached = _DERIVED.get(node.name)
        if cached is not None and cached[0] == key:
            derived = cached[1]
        else:
            derived = derive_node(node, pods, snapshot.policy, kubevirt, configs_for_nodes)
        seen[node.name] = (key, derived)
        if derived is not None:
            nodes[derived.name] = derived
    _DERIVED.clear()
    _DERIVED.update(seen)
    return nodes


def _derive_permitted(kubevirts: Iterable[k8s.KubeVirtInfo]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The permitted host devices of every KubeVirt CR, keyed ``(kind, resource, selector)``
    (the first CR naming one wins)."""
    permitted: dict[tuple[str, str, str], dict[str, Any]] = {}
    for kv in kubevirts:
        source = f"{kv.namespace}/{kv.name}"
        entries: Iterable[tuple[str, k8s.PermittedPci | k8s.PermittedMdev]] = [
            *((PermittedDevice.Kind.PCI.value, d) for d in kv.pci_host_devices),
            *((PermittedDevice.Kind.MDEV.value, d) for d in kv.mediated_devices),
        ]
        for kind, entry in entries:
            key = (kind, entry.resource_name[:253], entry.selector[:253])
            permitted.setdefault(
                key, {"external_resource_provider": entry.external_resource_provider, "source": source[:253]}
            )
    return permitted
