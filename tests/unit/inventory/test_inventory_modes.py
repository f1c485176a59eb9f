"""Workload-mode rules (DOMAIN.md §1) on the real samples and the documented edge cases."""

from __future__ import annotations

import pytest
from django.utils import translation

from gpuinventory.choices import ModeSource, WorkloadMode
from gpuinventory.flags import describe
from gpuinventory.modes import ModeDecision, decide_mode, deploy_disagreements
from tests.factories import cluster_policy, sample_node

B200 = "node-container-b200-network-operator-2471.yaml"
MIG = "node-container-mig-mixed-a100-network-operator-211.yaml"
T4 = "node-vm-vgpu-t4-openshift.yaml"

VGPU_DEPLOY = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
    "nvidia.com/gpu.deploy.sandbox-validator": "true",
    "nvidia.com/gpu.deploy.vgpu-device-manager": "true",
    "nvidia.com/gpu.deploy.vgpu-manager": "true",
}
PASSTHROUGH_DEPLOY = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
    "nvidia.com/gpu.deploy.sandbox-validator": "true",
    "nvidia.com/gpu.deploy.vfio-manager": "true",
}


def codes(decision: ModeDecision) -> list[str]:
    return [f["code"] for f in decision.flags]


def test_b200_container_without_cluster_policy() -> None:
    labels = sample_node(B200).labels
    d = decide_mode(labels, None)
    assert d is not None
    assert (d.mode, d.source, d.label_value, d.transitioning) == (
        WorkloadMode.CONTAINER,
        ModeSource.SANDBOX_DISABLED,
        "",
        False,
    )
    assert d.flags == ({"code": "no_cluster_policy", "params": {"value": "-"}},)


def test_b200_container_sandbox_disabled_and_enabled() -> None:
    labels = sample_node(B200).labels
    off = decide_mode(labels, cluster_policy(sandbox_enabled=False))
    on = decide_mode(labels, cluster_policy())
    assert off is not None and on is not None
    assert (off.mode, off.source, off.flags, off.transitioning) == (
        WorkloadMode.CONTAINER,
        ModeSource.SANDBOX_DISABLED,
        (),
        False,
    )
    # No label, sandbox on: the cluster default (container), deploy labels agree (nvsm is unknown, ignored).
    assert (on.mode, on.source, on.flags) == (WorkloadMode.CONTAINER, ModeSource.CLUSTER_DEFAULT, ())


def test_mig_mixed_a100_is_container() -> None:
    d = decide_mode(sample_node(MIG).labels, cluster_policy())
    assert d is not None
    assert (d.mode, d.source, d.transitioning, d.flags) == (
        WorkloadMode.CONTAINER,
        ModeSource.CLUSTER_DEFAULT,
        False,
        (),
    )


def test_t4_vgpu_node_by_label() -> None:
    d = decide_mode(sample_node(T4).labels, cluster_policy())
    assert d is not None
    assert (d.mode, d.source, d.label_value, d.transitioning, d.flags) == (
        WorkloadMode.VM_VGPU,
        ModeSource.LABEL,
        "vm-vgpu",
        False,
        (),
    )


def test_t4_label_ignored_when_sandbox_disabled() -> None:
    d = decide_mode(sample_node(T4).labels, cluster_policy(sandbox_enabled=False, name="gpu-cluster-policy"))
    assert d is not None
    assert (d.mode, d.source, d.label_value) == (
        WorkloadMode.CONTAINER,
        ModeSource.SANDBOX_DISABLED,
        "vm-vgpu",
    )
    assert d.flags[0] == {
        "code": "workload_label_ignored",
        "params": {"value": "vm-vgpu", "policy": "gpu-cluster-policy"},
    }
    # The vGPU deploy labels contradict container mode: device-plugin absent, vGPU operands still true.
    assert d.transitioning is True
    assert d.flags[1]["code"] == "transitioning"
    assert d.flags[1]["params"]["labels"] == (
        "nvidia.com/gpu.deploy.device-plugin=<absent>, "
        "nvidia.com/gpu.deploy.cc-manager=true, "
        "nvidia.com/gpu.deploy.sandbox-device-plugin=true, "
        "nvidia.com/gpu.deploy.sandbox-validator=true, "
        "nvidia.com/gpu.deploy.vgpu-device-manager=true, "
        "nvidia.com/gpu.deploy.vgpu-manager=true"
    )


def test_not_a_gpu_node() -> None:
    # The second T4 item shows only two labels (no nvidia.com/gpu.present): not touched by the operator.
    assert decide_mode(sample_node(T4, 1).labels, cluster_policy()) is None
    assert decide_mode({"nvidia.com/gpu.present": "false"}, cluster_policy()) is None
    assert decide_mode({}, None) is None


@pytest.mark.parametrize(
    ("default_workload", "expected"),
    [
        ("container", WorkloadMode.CONTAINER),
        ("vm-passthrough", WorkloadMode.VM_PASSTHROUGH),
        ("vm-vgpu", WorkloadMode.VM_VGPU),
        ("bogus", WorkloadMode.CONTAINER),
    ],
)
def test_invalid_label_kata_falls_back_to_default(default_workload: str, expected: WorkloadMode) -> None:
    """gpu-operator#1871: the label value ``kata`` is not validated; the operator uses the default."""
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.workload.config": "kata"}
    d = decide_mode(labels, cluster_policy(default_workload=default_workload))
    assert d is not None
    assert (d.mode, d.source, d.label_value) == (expected, ModeSource.INVALID_LABEL, "kata")
    assert d.flags[0] == {"code": "invalid_mode_label", "params": {"value": "kata", "default": str(expected)}}


def test_label_is_case_sensitive() -> None:
    labels = {**PASSTHROUGH_DEPLOY, "nvidia.com/gpu.workload.config": "VM-Passthrough"}
    d = decide_mode(labels, cluster_policy())
    assert d is not None
    assert (d.mode, d.source) == (WorkloadMode.CONTAINER, ModeSource.INVALID_LABEL)


def test_no_label_uses_cluster_default() -> None:
    d = decide_mode(PASSTHROUGH_DEPLOY, cluster_policy(default_workload="vm-passthrough"))
    assert d is not None
    assert (d.mode, d.source, d.label_value, d.transitioning, d.flags) == (
        WorkloadMode.VM_PASSTHROUGH,
        ModeSource.CLUSTER_DEFAULT,
        "",
        False,
        (),
    )


def test_transitioning_paused_for_vgpu_change() -> None:
    """The vGPU Device Manager pauses the sandbox plugin and validator while it reconfigures (DOMAIN.md §3 step 3)."""
    labels = {
        **VGPU_DEPLOY,
        "nvidia.com/gpu.workload.config": "vm-vgpu",
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "paused-for-vgpu-change",
        "nvidia.com/gpu.deploy.sandbox-validator": "paused-for-vgpu-change",
    }
    d = decide_mode(labels, cluster_policy())
    assert d is not None
    assert (d.mode, d.transitioning) == (WorkloadMode.VM_VGPU, True)
    assert d.flags == (
        {
            "code": "transitioning",
            "params": {
                "mode": "vm-vgpu",
                "labels": "nvidia.com/gpu.deploy.sandbox-device-plugin=paused-for-vgpu-change, "
                "nvidia.com/gpu.deploy.sandbox-validator=paused-for-vgpu-change",
                "cause": "vgpu_paused",
            },
        },
    )
    # The mode is not changing: the title says why the operands are paused.
    with translation.override("en"):
        described = describe(d.flags[0], node="n1")
    assert (described.title, described.severity) == ("Operands paused for a vGPU reconfiguration", "warning")
    assert "The workload mode (vm-vgpu) is not changing." in described.detail
    assert "Mode change" not in described.title


def test_transitioning_relabel_passthrough_to_vgpu() -> None:
    """Relabelled to vm-vgpu while the passthrough operands are still deployed."""
    labels = {**PASSTHROUGH_DEPLOY, "nvidia.com/gpu.workload.config": "vm-vgpu"}
    assert deploy_disagreements(labels, WorkloadMode.VM_VGPU) == [
        "nvidia.com/gpu.deploy.vgpu-manager=<absent>",
        "nvidia.com/gpu.deploy.vfio-manager=true",
    ]
    d = decide_mode(labels, cluster_policy())
    assert d is not None and d.transitioning is True
    (transitioning,) = [f for f in d.flags if f["code"] == "transitioning"]
    assert "cause" not in transitioning["params"]  # a real mode change keeps the generic wording
    with translation.override("en"):
        assert describe(transitioning).title == "Mode change in progress"


@pytest.mark.parametrize("value", ["", "false"])
def test_transitioning_indicator_not_true(value: str) -> None:
    """gpu-operator#491: deploy labels stuck at "" are not "true"."""
    labels = {
        **VGPU_DEPLOY,
        "nvidia.com/gpu.workload.config": "vm-vgpu",
        "nvidia.com/gpu.deploy.vgpu-manager": value,
    }
    assert deploy_disagreements(labels, WorkloadMode.VM_VGPU) == [
        f"nvidia.com/gpu.deploy.vgpu-manager={value}"
    ]


def test_operands_disabled() -> None:
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.workload.config": "vm-passthrough",
        "nvidia.com/gpu.deploy.operands": "false",
    }
    d = decide_mode(labels, cluster_policy())
    assert d is not None
    assert (d.mode, d.transitioning) == (WorkloadMode.VM_PASSTHROUGH, False)
    assert codes(d) == ["operands_disabled"]


def test_kata_mode_flagged_on_vm_nodes_only() -> None:
    policy = cluster_policy(sandbox_mode="kata")
    passthrough = {
        **PASSTHROUGH_DEPLOY,
        "nvidia.com/gpu.workload.config": "vm-passthrough",
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "false",
        "nvidia.com/gpu.deploy.kata-sandbox-device-plugin": "true",
    }
    d = decide_mode(passthrough, policy)
    assert d is not None
    assert codes(d) == ["kata_mode"]
    assert d.flags[0]["params"] == {"mode": "vm-passthrough"}
    c = decide_mode(sample_node(B200).labels, policy)
    assert c is not None and codes(c) == []
