"""Cluster spec files: load (:func:`load_spec`) and create the objects (:func:`apply_spec`).

Format (YAML, documented in ``devcluster/README.md``): the operator version and namespace, the
ClusterPolicy, vGPU ConfigMaps, the KubeVirt CR, team namespaces, nodes, container pods and VMIs.
Nodes may take labels and non-GPU resources from a real sample in ``<shared>/samples`` (file + item
index), read at load time and never copied; GPU resources are always *computed* by the same rules the
simulator plays (:mod:`devcluster.nodestate`), so a spec node and a node a test creates later agree.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import secrets
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import labels as dlabels
from devcluster import nodestate as ns
from devcluster.naming import (
    GPU_MODELS,
    RESOURCE_PREFIX,
    gpu_model,
    mdev_type_name,
    passthrough_resource_name,
    vgpu_family,
    vgpu_resource_name,
)
from devcluster.vgpuconfig import VgpuConfigEntry, apply_config, max_instances, parse_config_file

log = logging.getLogger(__name__)

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with the libyaml loader when available (a 2,000-node spec loads 10x faster)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


@functools.lru_cache(maxsize=16)
def parsed_configs(text: str) -> dict[str, list[VgpuConfigEntry]]:
    """:func:`devcluster.vgpuconfig.parse_config_file`, cached per ``config.yaml`` text."""
    return parse_config_file(text)


DEFAULT_VGPU_CONFIGMAP = "default-vgpu-devices-config"
DEFAULT_VGPU_SAMPLE = "gpu-operator-default-vgpu-devices-config.yaml"
KUBEVIRT_NAMESPACE = "kubevirt"
BULK_WORKERS = 32


class SpecError(ValueError):
    """The spec file is invalid; the message names the offending entry."""


# The keys each part of a spec may have (devcluster/README.md "Spec format"). A misspelt key is an
# error, not a silently ignored setting.
SPEC_KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"gpuOperator", "clusterPolicy", "kubevirt", "namespaces", "nodes", "vmis"}),
    "gpuOperator": frozenset({"version", "namespace", "vgpuConfigMaps"}),
    "gpuOperator.vgpuConfigMaps[]": frozenset({"sample", "item", "name", "config", "mergeDefault"}),
    "clusterPolicy": frozenset({"name", "sandboxWorkloads", "vgpuDeviceManager"}),
    "kubevirt": frozenset({"extraPciHostDevices", "extraMediatedDevices", "omitResources", "featureGates"}),
    "nodes[]": frozenset(
        {
            "name",
            "gpu",
            "workloadLabel",
            "vgpuConfig",
            "vgpuHistory",
            "labelsFrom",
            "resourcesFrom",
            "resources",
            "staleResources",
            "labels",
            "cordoned",
            "ready",
            "pods",
        }
    ),
    "nodes[].gpu": frozenset({"model", "count"}),
    "nodes[].pods[]": frozenset({"namespace", "name", "gpus"}),
    "vmis[]": frozenset(
        {"name", "namespace", "deviceName", "gpus", "memory", "cores", "nodeSelector", "labels"}
    ),
}


def check_keys(raw: Any, part: str, where: str) -> None:
    """Raise :class:`SpecError` when mapping ``raw`` has a key :data:`SPEC_KEYS` does not list for ``part``.

    Args:
        raw: the parsed YAML mapping (anything else is reported as not a mapping).
        part: the key of :data:`SPEC_KEYS`, e.g. ``"nodes[]"``.
        where: the position for the message, e.g. ``"nodes[2] (t4-node-01)"``.
    """
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise SpecError(f"{where or 'spec'}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - SPEC_KEYS[part])
    if unknown:
        raise SpecError(
            f"{where or 'spec'}: unknown key(s) {', '.join(map(str, unknown))}; "
            f"allowed: {', '.join(sorted(SPEC_KEYS[part]))}"
        )


def _check_spec_keys(raw: dict[str, Any]) -> None:
    check_keys(raw, "", "")
    for part in ("gpuOperator", "clusterPolicy", "kubevirt"):
        check_keys(raw.get(part), part, part)
    for i, ref in enumerate((raw.get("gpuOperator") or {}).get("vgpuConfigMaps") or []):
        check_keys(ref, "gpuOperator.vgpuConfigMaps[]", f"gpuOperator.vgpuConfigMaps[{i}]")
    for i, node in enumerate(raw.get("nodes") or []):
        where = f"nodes[{i}] ({node.get('name') if isinstance(node, dict) else '?'})"
        check_keys(node, "nodes[]", where)
        check_keys(node.get("gpu"), "nodes[].gpu", where + ".gpu")
        for j, pod in enumerate(node.get("pods") or []):
            check_keys(pod, "nodes[].pods[]", f"{where}.pods[{j}]")
    for i, vmi in enumerate(raw.get("vmis") or []):
        check_keys(vmi, "vmis[]", f"vmis[{i}]")


@dataclass
class NodeSpec:
    """One node of the spec (see README for the YAML keys).

    Attributes:
        name: Node name (unique in the spec).
        model: GPU model key of :data:`devcluster.naming.GPU_MODELS`.
        count: Number of GPUs.
        workload_label: Value of ``nvidia.com/gpu.workload.config``; ``None`` = label absent.
        vgpu_config: Value of ``nvidia.com/vgpu.config``; ``None`` = label absent (default config applies).
        vgpu_history: Configs applied before ``vgpu_config`` (GPUs they touched keep their mdevs).
        cordoned: ``spec.unschedulable``.
        ready: Ready condition status.
        labels: Final node labels before the operator/NFD/GFD overlay (sample labels + extra labels).
        base_resources: Non-GPU capacity/allocatable, ``{"capacity": {...}, "allocatable": {...}}``.
        stale: Zero-valued stale GPU entries kept in capacity/allocatable.
        pods: Container pods bound to this node: ``{"namespace", "name", "gpus"}`` dicts.
    """

    name: str
    model: str
    count: int
    workload_label: str | None
    vgpu_config: str | None = None
    vgpu_history: list[str] = field(default_factory=list)
    cordoned: bool = False
    ready: bool = True
    labels: dict[str, str] = field(default_factory=dict)
    base_resources: dict[str, dict[str, str]] = field(default_factory=dict)
    stale: dict[str, str] = field(default_factory=dict)
    pods: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ClusterSpec:
    """A loaded spec; everything :func:`apply_spec` and the simulator need.

    Attributes:
        path: Spec file.
        shared_dir: The shared reference directory samples were read from.
        operator_version: GPU Operator version the labels follow (``client`` deploy key from v26.7).
        operator_namespace: Namespace of the operator and its vGPU ConfigMaps.
        cluster_policy: The ClusterPolicy object to create.
        kubevirt: The KubeVirt CR to create.
        configmaps: vGPU ConfigMaps (the operator default first) to create in ``operator_namespace``.
        namespaces: Namespaces to create.
        nodes: Node specs.
        vmis: VirtualMachineInstance objects to create.
    """

    path: Path
    shared_dir: Path
    operator_version: str
    operator_namespace: str
    cluster_policy: dict[str, Any]
    kubevirt: dict[str, Any]
    configmaps: list[dict[str, Any]]
    namespaces: list[str]
    nodes: list[NodeSpec]
    vmis: list[dict[str, Any]] = field(default_factory=list)

    def vgpu_configmap_name(self) -> str:
        """ConfigMap the vGPU Device Manager reads (``vgpuDeviceManager.config.name``, ``""`` = default)."""
        cfg = ((self.cluster_policy.get("spec") or {}).get("vgpuDeviceManager") or {}).get("config") or {}
        return str(cfg.get("name") or DEFAULT_VGPU_CONFIGMAP)

    def vgpu_default_config(self) -> str:
        """``vgpuDeviceManager.config.default`` (default ``"default"``), applied when the node has no label."""
        cfg = ((self.cluster_policy.get("spec") or {}).get("vgpuDeviceManager") or {}).get("config") or {}
        return str(cfg.get("default") or "default")

    def configmap_text(self, name: str) -> str | None:
        """``config.yaml`` of the spec's ConfigMap ``name``, or ``None``."""
        for cm in self.configmaps:
            if cm["metadata"]["name"] == name:
                return str(cm["data"]["config.yaml"])
        return None


# --------------------------------------------------------------------------------------------- loading


def _read_sample(shared_dir: Path, ref: dict[str, Any], where: str) -> dict[str, Any]:
    """Read ``{sample: FILE, item: N}`` from ``<shared>/samples``; ``item`` indexes a ``kind: List``."""
    path = shared_dir / "samples" / str(ref.get("sample"))
    if not path.is_file():
        raise SpecError(
            f"{where}: sample {path} not found (the shared directory comes from --shared-dir, else PORTAL_SHARED_DIR, else ../shared beside the repo)"
        )
    doc = _load_yaml(path.read_text())
    if doc.get("kind") == "List":
        try:
            return dict(doc["items"][int(ref.get("item", 0))])
        except (IndexError, ValueError) as exc:
            raise SpecError(f"{where}: bad item {ref.get('item')!r} in {path.name}") from exc
    return dict(doc)


def _merge_vgpu_configs(base_text: str, extra_text: str) -> str:
    """``config.yaml`` with the configs of ``extra_text`` added to (and overriding) those of ``base_text``."""
    base = yaml.safe_load(base_text)
    extra = yaml.safe_load(extra_text)
    merged = {"version": "v1", "vgpu-configs": {**base["vgpu-configs"], **extra["vgpu-configs"]}}
    return yaml.safe_dump(merged, sort_keys=False)


def _configmaps(raw: dict[str, Any], shared_dir: Path, namespace: str) -> list[dict[str, Any]]:
    default_cm = _read_sample(shared_dir, {"sample": DEFAULT_VGPU_SAMPLE}, "gpuOperator.defaultVgpuConfig")
    default_text = default_cm["data"]["config.yaml"]
    parse_config_file(default_text)
    out = [_configmap(DEFAULT_VGPU_CONFIGMAP, namespace, default_text)]
    for i, ref in enumerate(raw.get("vgpuConfigMaps") or []):
        where = f"gpuOperator.vgpuConfigMaps[{i}]"
        if "sample" in ref:
            cm = _read_sample(shared_dir, ref, where)
            name = str(ref.get("name") or cm["metadata"]["name"])
            text = cm["data"]["config.yaml"]
        else:
            name, text = str(ref["name"]), yaml.safe_dump(ref["config"], sort_keys=False)
        if ref.get("mergeDefault"):
            text = _merge_vgpu_configs(default_text, text)
        try:
            parse_config_file(text)
        except ValueError as exc:
            raise SpecError(f"{where}: {exc}") from exc
        out.append(_configmap(name, namespace, text))
    return out


def _configmap(name: str, namespace: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"config.yaml": text},
    }


def _cluster_policy(raw: dict[str, Any]) -> dict[str, Any]:
    """ClusterPolicy ``nvidia.com/v1`` with the CRD's required spec keys (GPU Operator v26.7 CRD)."""
    spec: dict[str, Any] = {
        k: {}
        for k in (
            "daemonsets",
            "dcgm",
            "dcgmExporter",
            "devicePlugin",
            "driver",
            "gfd",
            "nodeStatusExporter",
            "operator",
            "toolkit",
        )
    }
    spec["sandboxWorkloads"] = dict(
        raw.get("sandboxWorkloads") or {"enabled": True, "defaultWorkload": "container"}
    )
    spec["vgpuDeviceManager"] = dict(
        raw.get("vgpuDeviceManager") or {"enabled": True, "config": {"name": ""}}
    )
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": str(raw.get("name") or "cluster-policy")},
        "spec": spec,
    }


def _node_spec(raw: dict[str, Any], shared_dir: Path, index: int) -> NodeSpec:
    where = f"nodes[{index}] ({raw.get('name')})"
    if not raw.get("name"):
        raise SpecError(f"nodes[{index}]: name is required")
    gpu = raw.get("gpu") or {}
    if gpu.get("model") not in GPU_MODELS or not isinstance(gpu.get("count"), int) or gpu["count"] < 1:
        raise SpecError(f"{where}: gpu.model must be one of {sorted(GPU_MODELS)} and gpu.count >= 1")
    if "workloadLabel" not in raw:
        raise SpecError(f"{where}: workloadLabel is required (null = label absent)")
    name = str(raw["name"])
    labels: dict[str, str] = {}
    if raw.get("labelsFrom"):
        sample = _read_sample(shared_dir, raw["labelsFrom"], where + ".labelsFrom")
        old = sample["metadata"]["name"]
        # The samples use placeholder node names; label values naming that host follow the rename.
        labels.update(
            {k: (name if v == old else str(v)) for k, v in (sample["metadata"].get("labels") or {}).items()}
        )
    base: dict[str, dict[str, str]] = {}
    stale: dict[str, str] = {}
    if raw.get("resourcesFrom"):
        status = _read_sample(shared_dir, raw["resourcesFrom"], where + ".resourcesFrom").get("status") or {}
        alloc = {k: str(v) for k, v in (status.get("allocatable") or {}).items()}
        cap = {k: str(v) for k, v in (status.get("capacity") or alloc).items()}
        for part, values in (("capacity", cap), ("allocatable", alloc)):
            base[part] = {k: v for k, v in values.items() if not k.startswith(RESOURCE_PREFIX)}
        stale = {k: v for k, v in alloc.items() if k.startswith(RESOURCE_PREFIX) and v == "0"}
    else:
        res = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "500Gi"}
        res.update({k: str(v) for k, v in (raw.get("resources") or {}).items()})
        base = {"capacity": dict(res), "allocatable": dict(res)}
    stale.update({k: str(v) for k, v in (raw.get("staleResources") or {}).items()})
    labels.update({k: str(v) for k, v in (raw.get("labels") or {}).items()})
    labels[dlabels.HOSTNAME] = name
    labels.setdefault("kubernetes.io/os", "linux")
    labels.setdefault("kubernetes.io/arch", "amd64")
    pods = []
    for j, pod in enumerate(raw.get("pods") or []):
        pods.append(
            {
                "namespace": str(pod["namespace"]),
                "name": str(pod.get("name") or f"{name}-job-{j}"),
                "gpus": int(pod.get("gpus", 1)),
            }
        )
    return NodeSpec(
        name=name,
        model=str(gpu["model"]),
        count=int(gpu["count"]),
        workload_label=None if raw["workloadLabel"] is None else str(raw["workloadLabel"]),
        vgpu_config=None if raw.get("vgpuConfig") is None else str(raw["vgpuConfig"]),
        vgpu_history=[str(c) for c in raw.get("vgpuHistory") or []],
        cordoned=bool(raw.get("cordoned", False)),
        ready=bool(raw.get("ready", True)),
        labels=labels,
        base_resources=base,
        stale=stale,
        pods=pods,
    )


def load_spec(path: Path, shared_dir: Path) -> ClusterSpec:
    """Load and validate a spec file, reading the referenced samples from ``shared_dir``.

    Args:
        path: The spec YAML.
        shared_dir: The shared reference directory (``PORTAL_SHARED_DIR``, default ``../shared``).

    Returns:
        The loaded spec, KubeVirt CR included (its permitted devices are derived from the nodes).

    Raises:
        SpecError: on any invalid entry or missing sample. OSError: unreadable spec file.
    """
    try:
        raw = _load_yaml(Path(path).read_text()) or {}
    except yaml.YAMLError as exc:
        raise SpecError(f"{path} is not valid YAML: {exc}") from exc
    _check_spec_keys(raw)
    op = raw.get("gpuOperator") or {}
    operator_ns = str(op.get("namespace") or "gpu-operator")
    configmaps = _configmaps(op, shared_dir, operator_ns)
    cluster_policy = _cluster_policy(raw.get("clusterPolicy") or {})
    nodes = [_node_spec(n, shared_dir, i) for i, n in enumerate(raw.get("nodes") or [])]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise SpecError(f"node names must be unique: {sorted({n for n in names if names.count(n) > 1})}")
    namespaces = [str(n) for n in raw.get("namespaces") or []]
    for node in nodes:
        namespaces += [p["namespace"] for p in node.pods]
    vmis = [_vmi(v, i) for i, v in enumerate(raw.get("vmis") or [])]
    namespaces += [v["metadata"]["namespace"] for v in vmis]
    spec = ClusterSpec(
        path=Path(path),
        shared_dir=shared_dir,
        operator_version=str(op.get("version") or "v26.7.0"),
        operator_namespace=operator_ns,
        cluster_policy=cluster_policy,
        kubevirt={},
        configmaps=configmaps,
        namespaces=list(dict.fromkeys([*namespaces, operator_ns, KUBEVIRT_NAMESPACE])),
        nodes=nodes,
        vmis=vmis,
    )
    cm_name = spec.vgpu_configmap_name()
    if spec.configmap_text(cm_name) is None:
        raise SpecError(
            f"clusterPolicy.vgpuDeviceManager.config.name {cm_name!r} is not a ConfigMap of the spec"
        )
    spec.kubevirt = _kubevirt(raw.get("kubevirt") or {}, spec)
    return spec


def _vmi(raw: dict[str, Any], index: int) -> dict[str, Any]:
    """A minimal schema-valid VMI (shape of ``shared/samples/vmi-*-example.yaml``) from a short spec entry."""
    if not raw.get("name") or not raw.get("namespace") or not raw.get("deviceName"):
        raise SpecError(f"vmis[{index}]: name, namespace and deviceName are required")
    return vmi_manifest(
        name=str(raw["name"]),
        namespace=str(raw["namespace"]),
        device_names=[str(raw["deviceName"])] * int(raw.get("gpus", 1)),
        node_selector=raw.get("nodeSelector"),
        labels=raw.get("labels"),
        memory=str(raw.get("memory", "8Gi")),
        cores=int(raw.get("cores", 4)),
    )


def vmi_manifest(
    name: str,
    namespace: str,
    device_names: list[str],
    node_selector: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    memory: str = "8Gi",
    cores: int = 4,
) -> dict[str, Any]:
    """Build a VirtualMachineInstance like ``shared/samples/vmi-gpu-passthrough-example.yaml``.

    Args:
        name: VMI name. namespace: its namespace.
        device_names: One ``gpus[]`` entry per item (resource names, e.g. ``nvidia.com/GRID_T4-8Q``).
        node_selector: Optional ``spec.nodeSelector``.
        labels: Optional metadata labels (copied to the launcher pod by KubeVirt).
        memory: ``spec.domain.resources.requests.memory`` quantity. cores: ``spec.domain.cpu.cores``.
    """
    spec: dict[str, Any] = {
        "domain": {
            "cpu": {"cores": cores},
            "resources": {"requests": {"memory": memory}},
            "devices": {
                "disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                "gpus": [{"name": f"gpu{i + 1}", "deviceName": d} for i, d in enumerate(device_names)],
                "interfaces": [{"name": "default", "masquerade": {}}],
            },
        },
        "networks": [{"name": "default", "pod": {}}],
        "volumes": [
            {"name": "containerdisk", "containerDisk": {"image": "quay.io/containerdisks/ubuntu:22.04"}}
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


def _kubevirt(raw: dict[str, Any], spec: ClusterSpec) -> dict[str, Any]:
    """KubeVirt CR ``kubevirt/kubevirt`` with permittedHostDevices covering the spec's GPUs (DOMAIN.md §5.1).

    Passthrough: one ``pciHostDevices`` entry per board of a vm-passthrough node. vGPU: one
    ``mediatedDevices`` entry per vGPU type the boards of vm-vgpu nodes support (so re-profiling never
    needs a CR edit), with the exact ``mdev_type/name`` text. All ``externalResourceProvider: true``.
    ``omitResources`` drops names; ``extraPciHostDevices``/``extraMediatedDevices`` add entries.
    """
    limits = max_instances(parsed_configs(spec.configmap_text(DEFAULT_VGPU_CONFIGMAP) or ""))
    pci: dict[str, dict[str, Any]] = {}
    mdev: dict[str, dict[str, Any]] = {}
    for node in spec.nodes:
        model = gpu_model(node.model)
        mode = ns.effective_mode(_labels_with_workload(node), spec.cluster_policy)
        if mode == "vm-passthrough":
            name = passthrough_resource_name(model)
            pci[name] = {
                "pciVendorSelector": model.pci_vendor_selector,
                "resourceName": name,
                "externalResourceProvider": True,
            }
        elif mode == "vm-vgpu" and model.vgpu_family:
            for vtype in limits:
                if vgpu_family(vtype) == model.vgpu_family:
                    mdev_name = mdev_type_name(model, vtype)
                    res = vgpu_resource_name(mdev_name)
                    mdev[res] = {
                        "mdevNameSelector": mdev_name,
                        "resourceName": res,
                        "externalResourceProvider": True,
                    }
    for entry in raw.get("extraPciHostDevices") or []:
        pci[entry["resourceName"]] = dict(entry)
    for entry in raw.get("extraMediatedDevices") or []:
        mdev[entry["resourceName"]] = dict(entry)
    for name in raw.get("omitResources") or []:
        pci.pop(name, None)
        mdev.pop(name, None)
    configuration: dict[str, Any] = {
        "permittedHostDevices": {
            "pciHostDevices": [pci[k] for k in sorted(pci)],
            "mediatedDevices": [mdev[k] for k in sorted(mdev)],
        },
        # KubeVirt >= 1.8 replacement of the DisableMDEVConfiguration gate (DOMAIN.md §5.2).
        "mediatedDevicesConfiguration": {"enabled": False},
    }
    gates = raw.get("featureGates")
    if gates:
        configuration["developerConfiguration"] = {"featureGates": [str(g) for g in gates]}
    return {
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NAMESPACE},
        "spec": {"configuration": configuration},
    }


# ------------------------------------------------------------------------------------------ node objects


def _labels_with_workload(node: NodeSpec) -> dict[str, str]:
    labels = dict(node.labels)
    labels.pop(ns.LABEL_WORKLOAD, None)
    if node.workload_label is not None:
        labels[ns.LABEL_WORKLOAD] = node.workload_label
    labels.pop(ns.LABEL_VGPU_CONFIG, None)
    if node.vgpu_config is not None:
        labels[ns.LABEL_VGPU_CONFIG] = node.vgpu_config
    return labels


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_node(node: NodeSpec, spec: ClusterSpec) -> dict[str, Any]:
    """The Node object (metadata, spec and status) a spec node starts as.

    The vGPU mdevs come from running the spec's vGPU history then the node's config through the
    simulated vGPU Device Manager (:func:`devcluster.vgpuconfig.apply_config`); its state label is
    ``success`` or ``failed`` accordingly.

    Raises:
        SpecError: a vGPU config named by the node is not in the ConfigMap.
    """
    model = gpu_model(node.model)
    labels = _labels_with_workload(node)
    mode = ns.effective_mode(labels, spec.cluster_policy)
    inv = ns.Inventory(model, [{} for _ in range(node.count)])
    if mode == "vm-vgpu":
        text = spec.configmap_text(spec.vgpu_configmap_name()) or ""
        configs = parsed_configs(text)
        limits = max_instances(parsed_configs(spec.configmap_text(DEFAULT_VGPU_CONFIGMAP) or ""))
        state = "success"
        target = node.vgpu_config or spec.vgpu_default_config()
        for name in [*node.vgpu_history, target]:
            if name not in configs:
                raise SpecError(
                    f"node {node.name}: vGPU config {name!r} not in ConfigMap {spec.vgpu_configmap_name()}"
                )
            result = apply_config(configs[name], [model] * node.count, inv.mdevs, limits)
            inv.mdevs = result.mdevs
            state = "failed" if result.error else "success"
        inv.vgpu_config = target
        labels[ns.LABEL_VGPU_STATE] = state
    labels = ns.apply_label_patch(
        labels, ns.desired_labels(labels, inv, spec.cluster_policy, spec.operator_version)
    )
    advertised = ns.advertised_resources(labels, inv, spec.cluster_policy)
    annotations = {ns.ANN_GPUS: inv.to_json()}
    if node.stale:
        annotations[ns.ANN_STALE] = json.dumps(node.stale, sort_keys=True)
    status: dict[str, Any] = {"capacity": {}, "allocatable": {}}
    for part in ("capacity", "allocatable"):
        values = dict(node.base_resources.get(part) or {})
        values.update(node.stale)
        values.update({k: str(v) for k, v in advertised.items()})
        status[part] = values
    status["conditions"] = [ns.ready_condition(node.ready, _now())]
    status["addresses"] = [{"type": "Hostname", "address": node.name}]
    status["nodeInfo"] = _node_info()
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
        "spec": {"unschedulable": True} if node.cordoned else {},
        "status": status,
    }
    obj["spec"]["taints"] = ns.desired_taints(obj)
    return obj


def _node_info() -> dict[str, str]:
    return {
        "architecture": "amd64",
        "bootID": "",
        "containerRuntimeVersion": "containerd://2.1.4",
        "kernelVersion": "6.8.0-60-generic",
        "kubeProxyVersion": "",
        "kubeletVersion": "v1.37.2",
        "machineID": "",
        "operatingSystem": "linux",
        "osImage": "Ubuntu 24.04.2 LTS",
        "systemUUID": "",
    }


def container_pod(namespace: str, name: str, node_name: str, gpus: int) -> dict[str, Any]:
    """A workload pod bound to ``node_name``, requesting ``gpus`` x ``nvidia.com/gpu`` (none when 0)."""
    res = (
        {"nvidia.com/gpu": str(gpus), "cpu": "4", "memory": "16Gi"}
        if gpus
        else {"cpu": "500m", "memory": "1Gi"}
    )
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "training" if gpus else "service"},
        },
        "spec": {
            "nodeName": node_name,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"requests": dict(res), "limits": limits},
                }
            ],
        },
    }


def running_pod_status(pod_ip: str, host_ip: str | None = None) -> dict[str, Any]:
    """Status of a pod kubelet reports Running (one ready container)."""
    now = _now()
    conds = [
        {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": None}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "status": {
            "phase": "Running",
            "conditions": conds,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "hostIP": host_ip or pod_ip,
            "startTime": now,
        }
    }


# ------------------------------------------------------------------------------------------- applying


class _Raw:
    """Minimal JSON-over-HTTPS client sharing the ApiClient's TLS settings and bearer token.

    The generated client spends several milliseconds of CPU per call (pydantic validation and model
    (de)serialisation); bulk creates of 10,000 pods are client-bound with it, so :func:`apply_spec`
    talks to the REST paths directly through a urllib3 pool of :data:`BULK_WORKERS` connections.
    """

    def __init__(self, api: k8s.ApiClient) -> None:
        conf = deepcopy(api.configuration)
        conf.connection_pool_maxsize = BULK_WORKERS + 4
        self._client = k8s.ApiClient(conf)
        self._pool = self._client.rest_client.pool_manager
        self._host = conf.host.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        for auth in conf.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                self._headers[str(auth["key"])] = str(auth["value"])

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()

    def request(self, method: str, path: str, body: Any, content_type: str = "application/json") -> int:
        """Send one request; returns the status.

        Raises:
            ApiException: any status >= 400 except 409 (returned to the caller).
        """
        headers = {**self._headers, "Content-Type": content_type}
        resp = self._pool.request(
            method, self._host + path, body=json.dumps(body).encode(), headers=headers, timeout=60
        )
        if resp.status >= 400 and resp.status != 409:
            raise ApiException(status=resp.status, reason=resp.data.decode(errors="replace")[:500])
        return int(resp.status)

    def create(self, path: str, body: dict[str, Any]) -> bool:
        """POST ``body``; True if created, False if it already existed (409)."""
        return self.request("POST", path, body) != 409

    def patch_status(self, path: str, body: dict[str, Any]) -> None:
        """Strategic-merge-patch ``<path>/status`` (core objects only)."""
        self.request("PATCH", path + "/status", body, "application/strategic-merge-patch+json")


def _ip(n: int, base: str = "10.244") -> str:
    return f"{base}.{(n // 250) % 250}.{n % 250 + 2}"


def apply_spec(api: k8s.ApiClient, spec: ClusterSpec) -> None:
    """Create the spec's objects; objects that already exist are left as they are (re-runnable).

    Order: namespaces, vGPU ConfigMaps, ClusterPolicy, KubeVirt CR, Nodes (created with status, then
    the status written through ``nodes/status``), container pods (``spec.nodeName`` set at create, then
    ``pods/status`` Running), VMIs. Nodes, pods and VMIs are created from a thread pool
    (:data:`BULK_WORKERS`) over a lean HTTP path (:class:`_Raw`).

    Raises:
        kubernetes.client.rest.ApiException: any API error other than 409 AlreadyExists.
    """
    raw = _Raw(api)
    try:
        for name in spec.namespaces:
            raw.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        for cm in spec.configmaps:
            raw.create(f"/api/v1/namespaces/{cm['metadata']['namespace']}/configmaps", cm)
        raw.create("/apis/nvidia.com/v1/clusterpolicies", spec.cluster_policy)
        raw.create(f"/apis/kubevirt.io/v1/namespaces/{KUBEVIRT_NAMESPACE}/kubevirts", spec.kubevirt)

        def make_node(node: NodeSpec) -> None:
            obj = build_node(node, spec)
            if raw.create("/api/v1/nodes", obj):
                # Node create keeps status today, but write it through the subresource to be sure.
                raw.patch_status(f"/api/v1/nodes/{node.name}", {"status": obj["status"]})

        pods = [(node, p) for node in spec.nodes for p in node.pods]

        def make_pod(item: tuple[int, tuple[NodeSpec, dict[str, Any]]]) -> None:
            n, (node, p) = item
            path = f"/api/v1/namespaces/{p['namespace']}/pods"
            if raw.create(path, container_pod(p["namespace"], p["name"], node.name, p["gpus"])):
                raw.patch_status(f"{path}/{p['name']}", running_pod_status(_ip(n, "10.42")))

        def make_vmi(vmi: dict[str, Any]) -> None:
            raw.create(
                f"/apis/kubevirt.io/v1/namespaces/{vmi['metadata']['namespace']}/virtualmachineinstances", vmi
            )

        with ThreadPoolExecutor(max_workers=BULK_WORKERS, thread_name_prefix="apply") as pool:
            list(pool.map(make_node, spec.nodes))
            list(pool.map(make_pod, enumerate(pods)))
            list(pool.map(make_vmi, spec.vmis))
    finally:
        raw.close()


def random_suffix(n: int = 5) -> str:
    """Random suffix in the alphabet of apimachinery ``utilrand.String`` (no vowels, no confusable digits)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(n))
