"""What the GPU Operator, its device plugins, GFD, kubelet and the node lifecycle controller make of a Node.

Pure functions shared by :mod:`devcluster.spec` (initial objects) and the simulator's node controller
(:mod:`devcluster.simulator.nodes`), so a Node a test creates later with just a workload label and the
inventory annotation ends up exactly like one from a spec file.

The GPU inventory lives in the annotation :data:`ANN_GPUS`. It is **simulator-only** (it stands for the
PCI devices and mdevs the real host has); the portal must never read it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devcluster import labels as dlabels
from devcluster.naming import (
    RESOURCE_PREFIX,
    GpuModel,
    gfd_family,
    gfd_product,
    gpu_model,
    mdev_type_name,
    passthrough_resource_name,
    vgpu_resource_name,
)

SIM_PREFIX = "devcluster.gpu-vm-portal.io/"
ANN_GPUS = SIM_PREFIX + "gpus"
"""Simulator-only annotation: JSON ``{"model": "T4", "gpus": [{"index": 0, "mdevs": {"T4-8Q": 2}}, ...],
"vgpuConfig": "default"}``. ``vgpuConfig`` is the config the simulated vGPU Device Manager last processed."""
ANN_STALE = SIM_PREFIX + "stale-resources"
"""Simulator-only annotation: JSON ``{"nvidia.com/gpu": "0"}``, zero-valued leftovers kubelet keeps advertising."""

LABEL_WORKLOAD = dlabels.GPU_WORKLOAD_CONFIG
LABEL_GPU_PRESENT = dlabels.GPU_PRESENT
LABEL_VGPU_CONFIG = dlabels.VGPU_CONFIG
LABEL_VGPU_STATE = dlabels.VGPU_CONFIG_STATE
LABEL_NFD_PCI = "feature.node.kubernetes.io/pci-10de.present"
DEPLOY = dlabels.GPU_DEPLOY_PREFIX
PAUSED = "paused-for-vgpu-change"

MODES = ("container", "vm-passthrough", "vm-vgpu")

# gpuStateLabels, gpu-operator controllers/state_manager.go (DOMAIN.md §1 table).
_CONTAINER = (
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
)
_PASSTHROUGH = ("sandbox-device-plugin", "sandbox-validator", "vfio-manager", "kata-manager", "cc-manager")
_VGPU = ("sandbox-device-plugin", "vgpu-manager", "vgpu-device-manager", "sandbox-validator", "cc-manager")
KNOWN_DEPLOY_KEYS = frozenset(
    (*_CONTAINER, *_PASSTHROUGH, *_VGPU, "mig-manager", "client", "kata-sandbox-device-plugin")
)


def parse_version(version: str) -> tuple[int, ...]:
    """``"v26.7.0"`` → ``(26, 7, 0)``."""
    return tuple(int(p) for p in version.lstrip("v").split(".") if p.isdigit())


def deploy_keys(mode: str, model: GpuModel | None, operator_version: str) -> tuple[str, ...]:
    """The ``nvidia.com/gpu.deploy.<x>`` keys the operator sets to ``"true"`` for ``mode``.

    Source: gpu-operator ``gpuStateLabels`` (``controllers/state_manager.go``), DOMAIN.md §1: container adds
    ``mig-manager`` on MIG-capable GPUs; v26.7+ adds ``client`` to every mode.
    """
    if mode == "container":
        keys: tuple[str, ...] = _CONTAINER + (("mig-manager",) if model and model.mig_capable else ())
    elif mode == "vm-passthrough":
        keys = _PASSTHROUGH
    else:
        keys = _VGPU
    if parse_version(operator_version) >= (26, 7):
        keys += ("client",)
    return keys


def effective_mode(labels: dict[str, str], cluster_policy: dict[str, Any] | None) -> str:
    """Workload mode the operator applies to a node (``getWorkloadConfig()``, DOMAIN.md §1).

    Sandbox workloads disabled (or no ClusterPolicy) → ``container``; else a valid label value; else
    ``spec.sandboxWorkloads.defaultWorkload`` when valid; else ``container``.
    """
    sandbox = ((cluster_policy or {}).get("spec") or {}).get("sandboxWorkloads") or {}
    if not sandbox.get("enabled"):
        return "container"
    label = labels.get(LABEL_WORKLOAD)
    if label in MODES:
        return str(label)
    default = sandbox.get("defaultWorkload")
    return str(default) if default in MODES else "container"


@dataclass
class Inventory:
    """Decoded :data:`ANN_GPUS`: the node's board, per-GPU mdevs and the last processed vGPU config."""

    model: GpuModel
    mdevs: list[dict[str, int]]
    vgpu_config: str | None = None

    @property
    def count(self) -> int:
        """Number of GPUs."""
        return len(self.mdevs)

    def to_json(self) -> str:
        """Encode for the annotation (stable key order)."""
        return json.dumps(
            {
                "model": self.model.key,
                "gpus": [{"index": i, "mdevs": m} for i, m in enumerate(self.mdevs)],
                "vgpuConfig": self.vgpu_config,
            },
            sort_keys=True,
        )


def read_inventory(node: dict[str, Any]) -> Inventory | None:
    """Decode the inventory annotation of a Node dict; ``None`` when absent (not a simulated GPU node).

    Raises:
        KeyError: unknown model key. ValueError: malformed JSON.
    """
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANN_GPUS)
    if not raw:
        return None
    data = json.loads(raw)
    gpus = sorted(data.get("gpus") or [], key=lambda g: g["index"])
    return Inventory(
        model=gpu_model(data["model"]),
        mdevs=[{str(k): int(v) for k, v in (g.get("mdevs") or {}).items()} for g in gpus],
        vgpu_config=data.get("vgpuConfig"),
    )


def inventory_annotation(model_key: str, count: int, vgpu_config: str | None = None) -> str:
    """Annotation value for a fresh node with ``count`` GPUs of ``model_key`` and no mdevs."""
    return Inventory(gpu_model(model_key), [{} for _ in range(count)], vgpu_config).to_json()


def gfd_labels(model: GpuModel, count: int) -> dict[str, str]:
    """GFD labels of a container-mode node (k8s-device-plugin GFD "Generated Labels", DOMAIN.md §4)."""
    return {
        dlabels.GFD_PRODUCT: gfd_product(model.nvml_name),
        dlabels.GFD_COUNT: str(count),
        dlabels.GFD_MEMORY: str(model.memory_mib),
        "nvidia.com/gpu.family": gfd_family(model.compute_capability),
        "nvidia.com/gpu.compute.major": str(model.compute_capability[0]),
        "nvidia.com/gpu.compute.minor": str(model.compute_capability[1]),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
    }


def desired_labels(
    labels: dict[str, str], inv: Inventory, cluster_policy: dict[str, Any] | None, operator_version: str
) -> dict[str, str | None]:
    """Label patch (value ``None`` = delete) the operator, NFD and GFD would apply to a GPU node.

    - NFD ``feature.node.kubernetes.io/pci-10de.present=true``; operator ``nvidia.com/gpu.present=true``
      (``reconcileCommonGPULabel()``).
    - Deploy keys of the effective mode: added as ``"true"`` when absent or ``""``; other values such as
      ``paused-for-vgpu-change`` are left alone; known keys outside the mode's set are deleted; unknown
      keys (``gpu.deploy.nvsm``) are kept (``addGPUStateLabels()``, DOMAIN.md §1).
    - GFD labels only in container mode while GFD is deployed; added when missing, never removed
      (stale GFD labels on VM nodes are real, DOMAIN.md §4).
    """
    patch: dict[str, str | None] = {}

    def want(key: str, value: str) -> None:
        if labels.get(key) != value:
            patch[key] = value

    want(LABEL_NFD_PCI, "true")
    want(LABEL_GPU_PRESENT, "true")
    mode = effective_mode(labels, cluster_policy)
    keys = deploy_keys(mode, inv.model, operator_version)
    for key in keys:
        if labels.get(DEPLOY + key) in (None, ""):
            patch[DEPLOY + key] = "true"
    for full in labels:
        if full.startswith(DEPLOY):
            short = full[len(DEPLOY) :]
            if short in KNOWN_DEPLOY_KEYS and short not in keys:
                patch[full] = None
    if mode == "container" and "gpu-feature-discovery" in keys:
        for key, value in gfd_labels(inv.model, inv.count).items():
            if key not in labels:
                patch[key] = value
    return patch


def apply_label_patch(labels: dict[str, str], patch: dict[str, str | None]) -> dict[str, str]:
    """Labels after a merge patch."""
    out = dict(labels)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def advertised_resources(
    labels: dict[str, str], inv: Inventory, cluster_policy: dict[str, Any] | None
) -> dict[str, int]:
    """GPU extended resources the node's device plugin advertises right now (DOMAIN.md §2).

    - container: k8s-device-plugin (DaemonSet on ``gpu.deploy.device-plugin=true``) → ``nvidia.com/gpu``.
    - vm-passthrough: sandbox plugin (on ``gpu.deploy.sandbox-device-plugin=true``) → one resource per
      PCI device ID, named by ``getDeviceName()``.
    - vm-vgpu: same plugin → one resource per mdev type name, counts summed over the GPUs.

    A paused or absent plugin advertises nothing (the vGPU Device Manager pauses it during a change).
    """
    mode = effective_mode(labels, cluster_policy)
    if mode == "container":
        return {RESOURCE_PREFIX + "gpu": inv.count} if labels.get(DEPLOY + "device-plugin") == "true" else {}
    if labels.get(DEPLOY + "sandbox-device-plugin") != "true":
        return {}
    if mode == "vm-passthrough":
        return {passthrough_resource_name(inv.model): inv.count}
    out: dict[str, int] = {}
    for mdevs in inv.mdevs:
        for vtype, n in mdevs.items():
            if n:
                name = vgpu_resource_name(mdev_type_name(inv.model, vtype))
                out[name] = out.get(name, 0) + n
    return out


def stale_resources(node: dict[str, Any]) -> dict[str, str]:
    """Decoded :data:`ANN_STALE` (``{}`` when absent)."""
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ANN_STALE)
    return {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}


def resource_patch(
    current: dict[str, str], advertised: dict[str, int], stale: dict[str, str]
) -> dict[str, str | None]:
    """Patch for ``status.capacity``/``allocatable``: only ``nvidia.com/*`` keys are managed.

    Desired = stale zero entries overlaid with the advertised counts; other ``nvidia.com/*`` keys are removed.
    """
    desired: dict[str, str] = dict(stale)
    desired.update({k: str(v) for k, v in advertised.items()})
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    for key in current:
        if key.startswith(RESOURCE_PREFIX) and key not in desired:
            patch[key] = None
    return patch


def ready_status(node: dict[str, Any]) -> str | None:
    """Status of the node's ``Ready`` condition (``"True"``/``"False"``/``"Unknown"``), ``None`` if missing."""
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


def ready_condition(ready: bool, now: str) -> dict[str, str]:
    """A kubelet-style ``Ready`` condition (kubelet ``nodestatus.ReadyCondition``)."""
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime network not ready",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"


def desired_taints(node: dict[str, Any]) -> list[dict[str, str]]:
    """Taints the node lifecycle controller keeps in sync (kube-controller-manager ``nodelifecycle``,
    ``TaintNodesByCondition``): ``unschedulable:NoSchedule`` while cordoned, ``not-ready:NoSchedule`` while
    Ready=False, ``unreachable:NoSchedule`` while Ready=Unknown. Other taints are kept as they are.
    """
    managed = {TAINT_UNSCHEDULABLE, TAINT_NOT_READY, TAINT_UNREACHABLE}
    spec = node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in managed]
    if spec.get("unschedulable"):
        taints.append({"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"})
    ready = ready_status(node)
    if ready == "False":
        taints.append({"key": TAINT_NOT_READY, "effect": "NoSchedule"})
    elif ready in ("Unknown", None):
        taints.append({"key": TAINT_UNREACHABLE, "effect": "NoSchedule"})
    return taints


def same_taints(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Compare taint lists ignoring order and ``timeAdded``."""

    def norm(ts: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(t.get("key", ""), t.get("value", "") or "", t.get("effect", "")) for t in ts}

    return norm(a) == norm(b)
