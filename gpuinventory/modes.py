"""Workload mode per node: which of container / vm-passthrough / vm-vgpu the GPU Operator runs.

DOMAIN.md §1 "Mode detection for the portal", mirroring [GO] ``controllers/state_manager.go``
``getWorkloadConfig()`` and ``controllers/nodelabeling_controller.go``:

1. only nodes with ``nvidia.com/gpu.present=true`` ([GO] ``reconcileCommonGPULabel()``);
2. ``ClusterPolicy.spec.sandboxWorkloads.enabled`` not true → ``container``, whatever the label;
3. else the label ``nvidia.com/gpu.workload.config`` when it is exactly one of the three values,
   else ``spec.sandboxWorkloads.defaultWorkload`` (or ``container``). The label is not validated
   by anything: an invalid value (``kata``, https://github.com/NVIDIA/gpu-operator/issues/1871)
   only makes the operator log a warning and use the default;
4. cross-check the ``nvidia.com/gpu.deploy.*`` labels ([GO] ``gpuStateLabels``) and flag any
   disagreement as "transitioning".

Kata mode (``sandboxWorkloads.mode: kata``, v26.3+) is flagged on VM nodes: vm-passthrough nodes
then serve Kata (``nvidia.com/pgpu``), and the KubeVirt sandbox device plugin only runs in
``kubevirt`` mode (DOMAIN.md §1 notes, §2 "Kata mode", pitfall 15).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuinventory.choices import ModeSource, WorkloadMode
from gpuinventory.flags import Flag, flag
from portal.k8s import ClusterPolicyInfo
from portal.labels import GPU_DEPLOY_PREFIX as DEPLOY_PREFIX
from portal.labels import GPU_PRESENT as GPU_PRESENT_LABEL
from portal.labels import GPU_WORKLOAD_CONFIG as WORKLOAD_LABEL

OPERANDS_LABEL = DEPLOY_PREFIX + "operands"
VALID_MODES = frozenset(m.value for m in WorkloadMode)

#: Deploy keys (after ``nvidia.com/gpu.deploy.``) the operator writes per mode, [GO]
#: ``gpuStateLabels`` (identical v23.9.0 … v26.3.0; ``client`` from v26.7.0). vm-passthrough
#: includes both the kubevirt (``sandbox-device-plugin``) and kata (``kata-sandbox-device-plugin``) variant.
MODE_DEPLOY_KEYS: dict[WorkloadMode, frozenset[str]] = {
    WorkloadMode.CONTAINER: frozenset(
        {
            "driver",
            "gpu-feature-discovery",
            "container-toolkit",
            "device-plugin",
            "dcgm",
            "dcgm-exporter",
            "node-status-exporter",
            "operator-validator",
            "mig-manager",
            "client",
        }
    ),
    WorkloadMode.VM_PASSTHROUGH: frozenset(
        {
            "sandbox-device-plugin",
            "kata-sandbox-device-plugin",
            "sandbox-validator",
            "vfio-manager",
            "kata-manager",
            "cc-manager",
            "client",
        }
    ),
    WorkloadMode.VM_VGPU: frozenset(
        {
            "sandbox-device-plugin",
            "vgpu-manager",
            "vgpu-device-manager",
            "sandbox-validator",
            "cc-manager",
            "client",
        }
    ),
}

#: The deploy key that must be ``"true"`` for each mode (DOMAIN.md §1 step 4).
MODE_INDICATOR: dict[WorkloadMode, str] = {
    WorkloadMode.CONTAINER: "device-plugin",
    WorkloadMode.VM_PASSTHROUGH: "vfio-manager",
    WorkloadMode.VM_VGPU: "vgpu-manager",
}


@dataclass(frozen=True)
class ModeDecision:
    """How the portal decided a node's workload mode.

    Attributes:
        mode: the mode the GPU Operator acts on.
        source: ``ModeSource`` (label / cluster default / invalid label → default / sandbox disabled;
            no ClusterPolicy counts as sandbox disabled, with the ``no_cluster_policy`` flag).
        label_value: the raw ``nvidia.com/gpu.workload.config`` value, ``""`` when absent.
        transitioning: deploy labels disagree with ``mode`` (see ``deploy_disagreements``).
        flags: ``no_cluster_policy``, ``workload_label_ignored``, ``invalid_mode_label``,
            ``transitioning``, ``operands_disabled``, ``kata_mode``.
    """

    mode: WorkloadMode
    source: ModeSource
    label_value: str
    transitioning: bool
    flags: tuple[Flag, ...] = ()


#: Deploy-label value the vGPU Device Manager writes while it reconfigures (DOMAIN.md §3 step 3).
VGPU_PAUSED = "paused-for-vgpu-change"


def is_gpu_node(labels: Mapping[str, str]) -> bool:
    """``nvidia.com/gpu.present == "true"`` (DOMAIN.md §1 "Which nodes are touched")."""
    return labels.get(GPU_PRESENT_LABEL) == "true"


def deploy_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The ``nvidia.com/gpu.deploy.<key>`` labels as ``{key: value}``."""
    return {k.removeprefix(DEPLOY_PREFIX): v for k, v in labels.items() if k.startswith(DEPLOY_PREFIX)}


def deploy_disagreements(labels: Mapping[str, str], mode: WorkloadMode) -> list[str]:
    """Deploy labels that contradict ``mode``, as ``"nvidia.com/gpu.deploy.<key>=<value>"`` texts.

    Disagreement (DOMAIN.md §1 step 4 and notes; pitfall 7):

    * the mode's indicator (``device-plugin`` / ``vfio-manager`` / ``vgpu-manager``) is not
      ``"true"`` (absent, ``""``, ``"false"`` or paused; absent renders as ``<key>=<absent>``);
    * any deploy value ``paused-*`` (e.g. ``paused-for-vgpu-change`` written by the vGPU Device
      Manager during a reconfiguration, [VDM] ``maybeSetPaused()``);
    * a key only another mode uses is still ``"true"`` (the operator deletes those, so they
      linger only mid-switch). Keys the operator does not know (``nvsm``) are ignored.

    Returns an empty list when ``nvidia.com/gpu.deploy.operands=false`` (the operator removes all
    deploy labels then, [GO] ``hasOperandsDisabled()``).
    """
    deploy = deploy_labels(labels)
    if deploy.get("operands") == "false":
        return []
    found: list[str] = []
    indicator = MODE_INDICATOR[mode]
    if deploy.get(indicator) != "true":
        found.append(f"{DEPLOY_PREFIX}{indicator}={deploy.get(indicator, '<absent>')}")
    own = MODE_DEPLOY_KEYS[mode]
    foreign = frozenset().union(*(keys for m, keys in MODE_DEPLOY_KEYS.items() if m != mode)) - own
    for key in sorted(deploy):
        value = deploy[key]
        if key == indicator:
            continue
        if value.startswith("paused-") or (key in foreign and value == "true"):
            found.append(f"{DEPLOY_PREFIX}{key}={value}")
    return found


def decide_mode(labels: Mapping[str, str], policy: ClusterPolicyInfo | None) -> ModeDecision | None:
    """Decide a node's workload mode (DOMAIN.md §1 "Mode detection for the portal").

    Args:
        labels: the node's labels.
        policy: the ClusterPolicy (the first one listed, pitfall 14), or None when there is none.

    Returns:
        None when ``nvidia.com/gpu.present`` is not ``"true"`` (not a GPU node for the operator);
        else a ``ModeDecision``. Never raises.
    """
    if not is_gpu_node(labels):
        return None
    value = labels.get(WORKLOAD_LABEL, "")
    flags: list[Flag] = []
    if policy is None:
        mode, source = WorkloadMode.CONTAINER, ModeSource.SANDBOX_DISABLED
        flags.append(flag("no_cluster_policy", value=value or "-"))
    elif not policy.sandbox_enabled:
        mode, source = WorkloadMode.CONTAINER, ModeSource.SANDBOX_DISABLED
        if value and value != WorkloadMode.CONTAINER:
            flags.append(flag("workload_label_ignored", value=value, policy=policy.name))
    else:
        default = (
            WorkloadMode(policy.default_workload)
            if policy.default_workload in VALID_MODES
            else WorkloadMode.CONTAINER
        )
        if value in VALID_MODES:
            mode, source = WorkloadMode(value), ModeSource.LABEL
        elif value:
            mode, source = default, ModeSource.INVALID_LABEL
            flags.append(flag("invalid_mode_label", value=value, default=str(default)))
        else:
            mode, source = default, ModeSource.CLUSTER_DEFAULT
        if policy.sandbox_mode == "kata" and mode != WorkloadMode.CONTAINER:
            flags.append(flag("kata_mode", mode=str(mode)))

    if deploy_labels(labels).get("operands") == "false":
        flags.append(flag("operands_disabled"))
    disagreements = deploy_disagreements(labels, mode)
    if disagreements:
        params: dict[str, str | int] = {"mode": str(mode), "labels": ", ".join(disagreements)}
        if all(d.endswith("=" + VGPU_PAUSED) for d in disagreements):
            # The mode is not changing: the vGPU Device Manager paused the operands ([VDM]
            # maybeSetPaused(), DOMAIN.md §3 step 3). flags.describe() words it so.
            params["cause"] = "vgpu_paused"
        flags.append(flag("transitioning", **params))
    return ModeDecision(
        mode=mode,
        source=source,
        label_value=value,
        transitioning=bool(disagreements),
        flags=tuple(flags),
    )
