"""The adapter's raw-JSON parsing (portal/k8s/), fed the real samples of ../shared/samples in place,
and its pagination/timeout/error handling with a fake client method (no cluster)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import urllib3
from django.test import override_settings
from kubernetes.client.exceptions import ApiException

from portal import k8s
from portal.k8s import raw as k8s_raw
from tests.factories import load_sample, sample_objects


def test_b200_sample_nodes() -> None:
    labels_item, status_item = sample_objects("node-container-b200-network-operator-2471.yaml")
    n = k8s.parse_node(labels_item)
    assert (n.name, n.uid, n.resource_version, n.ready, n.unschedulable) == (
        "gpu-node-01",
        "",
        "232218950",
        None,
        False,
    )
    assert n.labels["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert n.labels["nvidia.com/gpu.memory"] == "183359"
    assert n.labels["nvidia.com/gpu.count"] == "8"
    assert n.allocatable == {} and n.capacity == {}
    s = k8s.parse_node(status_item)
    assert {k: v for k, v in s.allocatable.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "8",
        "nvidia.com/roce": "0",
    }
    assert s.allocatable["cpu"] == "223500m"


def test_a2000_passthrough_sample_keeps_raw_quantities() -> None:
    n = k8s.parse_node(load_sample("node-vm-passthrough-a2000-gpu-operator-551.yaml"))
    gpu = {k: v for k, v in n.capacity.items() if k.startswith("nvidia.com/")}
    assert gpu == {"nvidia.com/2571": "0", "nvidia.com/GA106_RTX_A2000_12GB": "1", "nvidia.com/gpu": "0"}
    assert n.allocatable["cpu"] == "19" and n.capacity["cpu"] == "20"
    assert n.allocatable["devices.kubevirt.io/kvm"] == "1k"


def test_t4_vgpu_sample_labels_keep_empty_values() -> None:
    first, second = sample_objects("node-vm-vgpu-t4-openshift.yaml")[:2]
    n = k8s.parse_node(first)
    assert n.labels["nvidia.com/gpu.deploy.nvsm"] == ""
    assert n.labels["nvidia.com/vgpu.config.state"] == "success"
    assert n.allocatable["nvidia.com/GRID_T4-8Q"] == "16"
    assert k8s.parse_node(second).labels["nvidia.com/vgpu.config"] == "T4-custom"


def test_ready_condition_and_cordon() -> None:
    def node(status: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "n", "uid": "u1", "labels": {"a": "b"}},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": status},
                ]
            },
        }

    assert [k8s.parse_node(node(s)).ready for s in ("True", "False", "Unknown")] == [True, False, None]
    assert k8s.parse_node(node("True")).unschedulable is True


def test_vmi_samples() -> None:
    v = k8s.parse_vmi(load_sample("vmi-vgpu-example.yaml"))
    assert v == k8s.VmiInfo(
        namespace="gpu-vms",
        name="analyst-a10-12q-01",
        labels={"app.kubernetes.io/managed-by": "gpu-vm-portal"},
        gpu_device_names=("nvidia.com/NVIDIA_A10-12Q",),
    )
    p = k8s.parse_vmi(load_sample("vmi-gpu-passthrough-example.yaml"))
    assert (p.name, p.gpu_device_names, p.node_name, p.phase) == (
        "analyst-a100-01",
        ("nvidia.com/GA100_A100_PCIE_40GB",),
        None,
        "",
    )
    running: dict[str, Any] = {
        "metadata": {"name": "x", "namespace": "ns", "labels": {"kubevirt.io/nodeName": "from-label"}},
        "status": {"phase": "Running"},
    }
    assert k8s.parse_vmi(running).node_name == "from-label"
    running["status"]["nodeName"] = "from-status"
    assert k8s.parse_vmi(running).node_name == "from-status"


def test_kubevirt_samples() -> None:
    docs = k8s.parse_kubevirt(load_sample("kubevirt-cr-nvidia-docs-gpu-operator.yaml"))
    assert docs == k8s.KubeVirtInfo(
        namespace="kubevirt",
        name="kubevirt",
        permitted_configured=True,
        pci_host_devices=(k8s.PermittedPci("10DE:2236", "nvidia.com/GA102GL_A10", True),),
        mediated_devices=(k8s.PermittedMdev("NVIDIA A10-12Q", "nvidia.com/NVIDIA_A10-12Q", True),),
    )
    old = k8s.parse_kubevirt(load_sample("kubevirt-cr-pcihostdevices-kubevirt-4950.yaml"))
    assert old.pci_host_devices == (k8s.PermittedPci("10DE:1E02", "nvidia.com/TU102_TITAN_RTX", False),)
    assert old.mediated_devices == () and old.permitted_configured is True


def test_kubevirt_without_permitted_devices_and_hyperconverged_spelling() -> None:
    bare = k8s.parse_kubevirt({"metadata": {"name": "kv", "namespace": "ns"}, "spec": {"configuration": {}}})
    assert bare.permitted_configured is False
    empty = k8s.parse_kubevirt({"spec": {"configuration": {"permittedHostDevices": {}}}})
    assert empty.permitted_configured is True and empty.pci_host_devices == ()
    hco = k8s.parse_kubevirt(
        {
            "spec": {
                "configuration": {
                    "permittedHostDevices": {
                        "pciHostDevices": [
                            {"pciDeviceSelector": "10DE:2236", "resourceName": "nvidia.com/GA102GL_A10"}
                        ]
                    }
                }
            }
        }
    )
    assert hco.pci_host_devices == (k8s.PermittedPci("10DE:2236", "nvidia.com/GA102GL_A10", False),)


def test_cluster_policy_defaults_and_values() -> None:
    assert k8s.parse_cluster_policy(
        {"metadata": {"name": "gpu-cluster-policy"}, "spec": {}}
    ) == k8s.ClusterPolicyInfo(name="gpu-cluster-policy")
    cp = k8s.parse_cluster_policy(
        {
            "metadata": {"name": "cluster-policy"},
            "spec": {
                "sandboxWorkloads": {"enabled": True, "defaultWorkload": "vm-passthrough", "mode": "kata"},
                "vgpuDeviceManager": {
                    "enabled": True,
                    "config": {"name": "custom-vgpu-config", "default": "T4-8Q"},
                },
            },
        }
    )
    assert cp == k8s.ClusterPolicyInfo(
        "cluster-policy", True, "vm-passthrough", "kata", "custom-vgpu-config", "T4-8Q"
    )
    empty_name = k8s.parse_cluster_policy(
        {"spec": {"vgpuDeviceManager": {"config": {"name": "", "default": ""}}}}
    )
    assert (empty_name.vgpu_config_name, empty_name.vgpu_default_config) == (
        "default-vgpu-devices-config",
        "default",
    )


def _container(
    name: str, requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "resources": resources}


def _pod(spec: dict[str, Any], phase: str = "Running", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", **meta},
        "spec": {"nodeName": "node-1", **spec},
        "status": {"phase": phase},
    }


def test_pod_requests_sum_containers_and_take_limits_when_requests_missing() -> None:
    p = k8s.parse_pod(
        _pod(
            {
                "containers": [
                    _container("a", {"nvidia.com/gpu": "2", "cpu": "1"}),
                    _container("b", limits={"nvidia.com/gpu": "1", "memory": "1Gi"}),
                    _container("c", {"cpu": "500m"}),
                ]
            },
            labels={"kubevirt.io": "virt-launcher"},
        )
    )
    assert p == k8s.PodInfo(
        namespace="ns",
        name="p",
        uid="u",
        node_name="node-1",
        phase="Running",
        labels={"kubevirt.io": "virt-launcher"},
        requests={"nvidia.com/gpu": 3},
    )


def test_pod_requests_with_init_and_sidecar_containers() -> None:
    spec = {
        "containers": [_container("app", {"nvidia.com/gpu": "1"})],
        "initContainers": [
            _container("init-big", {"nvidia.com/gpu": "4"}),
            {**_container("sidecar", {"nvidia.com/gpu": "1"}), "restartPolicy": "Always"},
            _container("init-after-sidecar", {"nvidia.com/gpu": "2"}),
        ],
    }
    requests, bad = k8s.pod_gpu_requests(spec)
    # max(app 1 + sidecar 1, init-big 4, init-after-sidecar 2 + sidecar 1) = 4
    assert (requests, bad) == ({"nvidia.com/gpu": 4}, {})


def test_pod_fractional_quantity_is_left_out_and_reported() -> None:
    p = k8s.parse_pod(
        _pod({"containers": [_container("a", {"nvidia.com/gpu": "500m", "nvidia.com/x": "1"})]})
    )
    assert p is not None
    assert (p.requests, p.bad_quantities) == ({"nvidia.com/x": 1}, {"nvidia.com/gpu": "500m"})


def test_terminal_pods_are_dropped_and_deleting_is_seen() -> None:
    assert k8s.parse_pod(_pod({}, phase="Succeeded")) is None
    assert k8s.parse_pod(_pod({}, phase="Failed")) is None
    pending = k8s.parse_pod(
        {"metadata": {"name": "q", "namespace": "n", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    assert pending == k8s.PodInfo(namespace="n", name="q", deleting=True)


class _Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.released = False

    def release_conn(self) -> None:
        self.released = True


def _fake_lister(pages: list[dict[str, Any]], calls: list[dict[str, Any]]) -> Callable[..., _Response]:
    def lister(**kwargs: Any) -> _Response:
        calls.append(kwargs)
        return _Response(pages[len(calls) - 1])

    return lister


@override_settings(PORTAL_KUBE_TIMEOUT=7)
def test_pagination_passes_limit_continue_and_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [
        {"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "tok-1"}},
        {"items": [{"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}], "metadata": {"continue": ""}},
    ]
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(k8s_raw, "_lister", lambda kind: _fake_lister(pages, calls))
    assert [n.name for n in k8s.list_nodes()] == ["a", "b", "c"]
    assert calls == [
        {"limit": 500, "_preload_content": False, "_request_timeout": 7},
        {"limit": 500, "_preload_content": False, "_continue": "tok-1", "_request_timeout": 7},
    ]


def test_list_pods_drops_terminal_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [{"items": [_pod({}, phase="Running"), _pod({}, phase="Succeeded")], "metadata": {}}]
    monkeypatch.setattr(k8s_raw, "_lister", lambda kind: _fake_lister(pages, []))
    assert [p.phase for p in k8s.list_pods()] == ["Running"]


def _raiser(exc: Exception) -> Callable[..., Any]:
    def fail(**kwargs: Any) -> Any:
        raise exc

    return fail


def test_errors_are_typed_and_missing_crds_tolerated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        k8s_raw, "_lister", lambda kind: _raiser(ApiException(status=404, reason="Not Found"))
    )
    assert k8s.list_kubevirts() == []
    assert k8s.list_vmis() == []
    assert k8s.get_cluster_policy() is None
    with pytest.raises(k8s.K8sNotFound):
        k8s.list_nodes()
    monkeypatch.setattr(
        k8s_raw, "_lister", lambda kind: _raiser(ApiException(status=403, reason="Forbidden"))
    )
    with pytest.raises(k8s.K8sForbidden):
        k8s.list_kubevirts()
    monkeypatch.setattr(
        k8s_raw,
        "_lister",
        lambda kind: _raiser(
            urllib3.exceptions.MaxRetryError(
                urllib3.HTTPSConnectionPool("127.0.0.1", 1),
                "/api/v1/nodes",
                ConnectionRefusedError("refused"),
            )
        ),
    )
    with pytest.raises(k8s.K8sTransientError, match="Kubernetes API unreachable: MaxRetryError"):
        k8s.list_pods()


def test_cluster_policy_first_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [
        {
            "items": [{"metadata": {"name": "z-policy"}}, {"metadata": {"name": "cluster-policy"}}],
            "metadata": {},
        }
    ]
    monkeypatch.setattr(k8s_raw, "_lister", lambda kind: _fake_lister(pages, []))
    policy = k8s.get_cluster_policy()
    assert policy is not None and policy.name == "cluster-policy"
