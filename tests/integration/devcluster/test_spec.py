"""The demo spec applied to the real API server: nodes built from the real samples, exact values."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from devcluster import nodestate as ns
from devcluster.server import default_shared_dir
from devcluster.spec import ClusterSpec, apply_spec, load_spec

pytestmark = pytest.mark.integration


def _wait(fn: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
def demo(k8s_api: k8s.ApiClient) -> ClusterSpec:
    """The demo spec applied on top of the session cluster (its nodes have their own names)."""
    from pathlib import Path

    spec = load_spec(
        Path(__file__).resolve().parents[3] / "devcluster" / "specs" / "demo.yaml", default_shared_dir()
    )
    apply_spec(k8s_api, spec)
    apply_spec(k8s_api, spec)  # idempotent: a second run only meets AlreadyExists
    return spec


def _node(api: k8s.ApiClient, name: str) -> dict[str, Any]:
    return k8s.ApiClient().sanitize_for_serialization(k8s.CoreV1Api(api).read_node(name))


def _gpu(n: dict[str, Any], part: str = "allocatable") -> dict[str, str]:
    return {k: v for k, v in n["status"][part].items() if k.startswith("nvidia.com/")}


def test_t4_default_node_matches_the_openshift_sample(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    n = _node(k8s_api, "t4-node-01")
    assert _gpu(n) == {"nvidia.com/GRID_T4-8Q": "16", "nvidia.com/gpu": "0"}
    assert n["status"]["allocatable"]["cpu"] == "95500m"
    assert n["status"]["allocatable"]["devices.kubevirt.io/kvm"] == "1k"
    labels = n["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu.workload.config": "vm-vgpu",
        "nvidia.com/gpu.deploy.cc-manager": "true",
        "nvidia.com/gpu.deploy.nvsm": "",
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
        "nvidia.com/gpu.deploy.sandbox-validator": "true",
        "nvidia.com/gpu.deploy.vgpu-device-manager": "true",
        "nvidia.com/gpu.deploy.vgpu-manager": "true",
        "nvidia.com/gpu.deploy.client": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/vgpu.config.state": "success",
    }


def test_t4_custom_node_matches_the_readme_figures(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    n = _node(k8s_api, "t4-node-02")
    assert _gpu(n) == {
        "nvidia.com/GRID_T4-16C": "1",
        "nvidia.com/GRID_T4-8C": "2",
        "nvidia.com/GRID_T4-8Q": "12",
        "nvidia.com/gpu": "0",
    }
    assert n["metadata"]["labels"][ns.LABEL_VGPU_CONFIG] == "T4-custom"
    assert n["metadata"]["labels"][ns.LABEL_VGPU_STATE] == "success"


def test_a2000_passthrough_node_keeps_stale_zero_entries(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    n = _node(k8s_api, "a2000-node-01")
    want = {"nvidia.com/2571": "0", "nvidia.com/GA106_RTX_A2000_12GB": "1", "nvidia.com/gpu": "0"}
    assert _gpu(n) == want and _gpu(n, "capacity") == want
    assert n["status"]["capacity"]["cpu"] == "20" and n["status"]["allocatable"]["cpu"] == "19"
    assert n["metadata"]["labels"]["nvidia.com/gpu.deploy.vfio-manager"] == "true"


def test_b200_container_node_without_workload_label(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    n = _node(k8s_api, "b200-node-01")
    labels = n["metadata"]["labels"]
    assert ns.LABEL_WORKLOAD not in labels  # ClusterPolicy defaultWorkload (container) applies
    assert _gpu(n) == {"nvidia.com/gpu": "8", "nvidia.com/roce": "0"}
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert labels["nvidia.com/gpu.memory"] == "183359"
    assert labels["nvidia.com/gpu.machine"] == "PowerEdge-XE9680L"
    assert labels["topology.topolvm.io/node"] == "b200-node-01"  # placeholder host name renamed
    assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true"
    pods = k8s.CoreV1Api(k8s_api).list_namespaced_pod("team-research").items
    on_node = {
        p.metadata.name: (p.status.phase, p.spec.containers[0].resources.limits)
        for p in pods
        if p.spec.node_name == "b200-node-01"
    }
    assert on_node == {
        "llm-pretrain-0": ("Running", {"nvidia.com/gpu": "4"}),
        "llm-pretrain-1": ("Running", {"nvidia.com/gpu": "2"}),
    }


def test_seed_article_nodes(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    assert _gpu(_node(k8s_api, "gpu-node-01")) == {"nvidia.com/gpu": "4"}
    assert _gpu(_node(k8s_api, "gpu-node-02")) == {"nvidia.com/GA100_A100_PCIE_40GB": "4"}
    assert _gpu(_node(k8s_api, "gpu-node-03")) == {"nvidia.com/NVIDIA_A100-20C": "4"}
    labels = _node(k8s_api, "gpu-node-02")["metadata"]["labels"]
    assert labels[ns.LABEL_WORKLOAD] == "vm-passthrough"


def test_config_objects(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    custom = k8s.CustomObjectsApi(k8s_api)
    cp = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    assert cp["spec"]["sandboxWorkloads"]["enabled"] is True
    assert cp["spec"]["sandboxWorkloads"]["defaultWorkload"] == "container"
    cm = k8s.CoreV1Api(k8s_api).read_namespaced_config_map("default-vgpu-devices-config", "gpu-operator")
    sample = (default_shared_dir() / "samples" / "gpu-operator-default-vgpu-devices-config.yaml").read_text()
    import yaml

    assert cm.data["config.yaml"] == yaml.safe_load(sample)["data"]["config.yaml"]
    kv = custom.get_namespaced_custom_object("kubevirt.io", "v1", "kubevirt", "kubevirts", "kubevirt")
    phd = kv["spec"]["configuration"]["permittedHostDevices"]
    assert all(d["externalResourceProvider"] is True for d in phd["pciHostDevices"] + phd["mediatedDevices"])
    # The demo's own KubeVirt CR (built from its nodes) covers every demo resource.
    demo_phd = demo.kubevirt["spec"]["configuration"]["permittedHostDevices"]
    names = {d["resourceName"] for d in demo_phd["pciHostDevices"] + demo_phd["mediatedDevices"]}
    assert {
        "nvidia.com/GA100_A100_PCIE_40GB",
        "nvidia.com/GA106_RTX_A2000_12GB",
        "nvidia.com/GRID_T4-8Q",
        "nvidia.com/GRID_T4-16C",
        "nvidia.com/GRID_T4-8C",
        "nvidia.com/NVIDIA_A100-20C",
    } <= names
    t4 = next(d for d in demo_phd["mediatedDevices"] if d["resourceName"] == "nvidia.com/GRID_T4-8Q")
    assert t4["mdevNameSelector"] == "GRID T4-8Q"


def test_demo_vmi_runs_on_a_passthrough_node(k8s_api: k8s.ApiClient, demo: ClusterSpec) -> None:
    custom = k8s.CustomObjectsApi(k8s_api)

    def running() -> dict[str, Any] | None:
        v = custom.get_namespaced_custom_object(
            "kubevirt.io", "v1", "team-quant", "virtualmachineinstances", "quant-analyst-01"
        )
        return v if (v.get("status") or {}).get("phase") == "Running" else None

    v = _wait(running, "demo VMI Running")
    node = _node(k8s_api, v["status"]["nodeName"])
    assert _gpu(node).get("nvidia.com/GA100_A100_PCIE_40GB") in ("2", "4")


def test_shared_sample_vmi_adapted_to_the_demo_reaches_running(
    k8s_api: k8s.ApiClient, demo: ClusterSpec
) -> None:
    """The constructed sample VMI of ../shared/samples, pinned to the demo's A100 passthrough node."""
    import yaml

    sample = yaml.safe_load(
        (default_shared_dir() / "samples" / "vmi-gpu-passthrough-example.yaml").read_text()
    )
    # Adapted: the sample pins to gpu-node-01, which is the container-mode node of the demo;
    # the seed article's passthrough node is gpu-node-02.
    sample["metadata"].update(name="sample-passthrough-01", namespace="gpu-vms")
    sample["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-node-02"}
    assert sample["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_PCIE_40GB"}
    ]
    custom = k8s.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object(
        "kubevirt.io", "v1", "gpu-vms", "virtualmachineinstances", sample, field_validation="Strict"
    )

    def running() -> dict[str, Any] | None:
        v = custom.get_namespaced_custom_object(
            "kubevirt.io", "v1", "gpu-vms", "virtualmachineinstances", "sample-passthrough-01"
        )
        return v if (v.get("status") or {}).get("phase") == "Running" else None

    vmi = _wait(running, "sample VMI Running")
    assert vmi["status"]["nodeName"] == "gpu-node-02"
    assert vmi["metadata"]["labels"]["kubevirt.io/nodeName"] == "gpu-node-02"
    pods = (
        k8s.CoreV1Api(k8s_api)
        .list_namespaced_pod("gpu-vms", label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}")
        .items
    )
    assert len(pods) == 1
    assert pods[0].spec.node_name == "gpu-node-02"
    assert pods[0].spec.containers[0].resources.limits == {"nvidia.com/GA100_A100_PCIE_40GB": "1"}
    assert pods[0].metadata.labels["app.kubernetes.io/managed-by"] == "gpu-vm-portal"
