"""The simulated GPU Operator, vGPU Device Manager, scheduler and KubeVirt, against the real API server.

Every test makes its own nodes (unique names, deleted at the end) and namespace, and pins its VMIs with
a unique node label, so the session cluster's other nodes only add ``didn't match Pod's node
affinity/selector`` to scheduler messages (counted from the live node list).
"""

from __future__ import annotations

import ipaddress
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import nodestate as ns
from devcluster.spec import vmi_manifest

pytestmark = pytest.mark.integration

T = TypeVar("T")
VMI = ("kubevirt.io", "v1")


def wait_for[T](fn: Callable[[], T | None], what: str, timeout: float = 30.0, interval: float = 0.05) -> T:
    """Poll ``fn`` until it returns a truthy value (bounded); fail with ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def unique(prefix: str) -> str:
    """``<prefix>-<8 hex>``, a per-test unique name."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_gpu_node(
    api: k8s.ApiClient,
    name: str,
    model: str,
    count: int,
    workload: str | None,
    labels: dict[str, str] | None = None,
) -> None:
    """Create a bare Node the way a test adds hardware: workload label + simulator-only inventory annotation."""
    node_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if workload is not None:
        node_labels[ns.LABEL_WORKLOAD] = workload
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {ns.ANN_GPUS: ns.inventory_annotation(model, count)},
        },
        "status": {
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
        },
    }
    k8s.CoreV1Api(api).create_node(body)


def delete_node(api: k8s.ApiClient, name: str) -> None:
    """Delete a node, ignoring 404."""
    try:
        k8s.CoreV1Api(api).delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def node(api: k8s.ApiClient, name: str) -> dict[str, Any]:
    """The Node as a plain dict (labels, spec, status)."""
    return k8s.ApiClient().sanitize_for_serialization(k8s.CoreV1Api(api).read_node(name))


def gpu_alloc(n: dict[str, Any]) -> dict[str, str]:
    """``nvidia.com/*`` entries of allocatable."""
    return {
        k: v for k, v in (n.get("status", {}).get("allocatable") or {}).items() if k.startswith("nvidia.com/")
    }


def get_vmi(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """Read a VMI."""
    return k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        *VMI, namespace, "virtualmachineinstances", name
    )


def create_vmi(api: k8s.ApiClient, vmi: dict[str, Any]) -> dict[str, Any]:
    """Create a VMI with strict field validation."""
    return k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        *VMI, vmi["metadata"]["namespace"], "virtualmachineinstances", vmi, field_validation="Strict"
    )


def vmi_phase(api: k8s.ApiClient, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    """The VMI once it has ``phase``, else ``None`` (for :func:`wait_for`)."""
    v = get_vmi(api, namespace, name)
    return v if (v.get("status") or {}).get("phase") == phase else None


def launcher_pods(api: k8s.ApiClient, namespace: str, vmi_uid: str) -> list[Any]:
    """virt-launcher pods of a VMI (by ``kubevirt.io/created-by``)."""
    return (
        k8s.CoreV1Api(api)
        .list_namespaced_pod(
            namespace, label_selector=f"kubevirt.io=virt-launcher,kubevirt.io/created-by={vmi_uid}"
        )
        .items
    )


def node_count(api: k8s.ApiClient) -> int:
    """Number of Nodes in the cluster now."""
    return len(k8s.CoreV1Api(api).list_node().items)


def sched_message(total: int, mine: list[str], mine_resolvable: list[bool]) -> str:
    """The expected scheduler message: ``mine`` are the reasons of this test's nodes, every other node
    in the cluster fails the nodeSelector (UnschedulableAndUnresolvable)."""
    others = total - len(mine)
    reasons: dict[str, int] = {}
    for r in mine:
        reasons[r] = reasons.get(r, 0) + 1
    if others:
        reasons["node(s) didn't match Pod's node affinity/selector"] = others
    pre = {"No preemption victims found for incoming pod": sum(mine_resolvable)}
    pre["Preemption is not helpful for scheduling"] = others + len(mine_resolvable) - sum(mine_resolvable)
    hist = ", ".join(sorted(f"{n} {r}" for r, n in reasons.items()))
    phist = ", ".join(sorted(f"{n} {r}" for r, n in pre.items() if n))
    return (
        f"0/{total} nodes are available: {hist}. no new claims to deallocate, "
        f"preemption: 0/{total} nodes are available: {phist}."
    )


@pytest.fixture
def nodes_to_delete(k8s_api: k8s.ApiClient) -> Iterator[list[str]]:
    """Names appended here are deleted after the test."""
    names: list[str] = []
    yield names
    for name in names:
        delete_node(k8s_api, name)


VMI_GROUP = VMI
A100_PT = "nvidia.com/GA100_A100_PCIE_40GB"
DEPLOY_TRUE = "true"


def _deploy(n: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in n["metadata"]["labels"].items() if k.startswith(ns.DEPLOY)}


# ----------------------------------------------------------------------------------------------- nodes


def test_container_node_created_later_gets_operator_gfd_labels_and_gpu_resource(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("sim-ctr")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "A100-PCIE-40GB", 4, None)  # no label: ClusterPolicy default = container
    n = wait_for(
        lambda: (lambda x: x if gpu_alloc(x) == {"nvidia.com/gpu": "4"} else None)(node(k8s_api, name)),
        "gpu=4",
    )
    labels = n["metadata"]["labels"]
    assert _deploy(n) == {
        ns.DEPLOY + k: "true"
        for k in (
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
        )
    }
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-PCIE-40GB"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.memory"] == "40536"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert ns.LABEL_WORKLOAD not in labels
    assert n["status"]["capacity"]["nvidia.com/gpu"] == "4"
    ready = [c for c in n["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True" and ready[0]["reason"] == "KubeletReady"
    assert not n["spec"].get("taints")


def test_passthrough_node_has_sandbox_labels_no_gfd_and_pci_resource(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("sim-pt")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "A100-PCIE-40GB", 2, "vm-passthrough")
    n = wait_for(lambda: (lambda x: x if gpu_alloc(x) else None)(node(k8s_api, name)), "passthrough resource")
    assert gpu_alloc(n) == {A100_PT: "2"}
    assert _deploy(n) == {
        ns.DEPLOY + k: "true"
        for k in (
            "sandbox-device-plugin",
            "sandbox-validator",
            "vfio-manager",
            "kata-manager",
            "cc-manager",
            "client",
        )
    }
    assert "nvidia.com/gpu.product" not in n["metadata"]["labels"]


def test_mode_switch_drops_known_deploy_keys_and_keeps_unknown(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("sim-switch")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "A100-PCIE-40GB", 2, "container", labels={ns.DEPLOY + "nvsm": ""})
    wait_for(lambda: gpu_alloc(node(k8s_api, name)) == {"nvidia.com/gpu": "2"} or None, "container resources")
    k8s.CoreV1Api(k8s_api).patch_node(name, {"metadata": {"labels": {ns.LABEL_WORKLOAD: "vm-passthrough"}}})
    n = wait_for(
        lambda: (lambda x: x if gpu_alloc(x) == {A100_PT: "2"} else None)(node(k8s_api, name)), "switch"
    )
    deploy = _deploy(n)
    assert deploy[ns.DEPLOY + "nvsm"] == ""  # unknown key left alone
    assert ns.DEPLOY + "device-plugin" not in deploy and deploy[ns.DEPLOY + "vfio-manager"] == "true"
    # GFD labels are not removed when GFD goes away (stale on VM nodes, DOMAIN.md §4).
    assert n["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-PCIE-40GB"


def test_cordon_and_not_ready_get_lifecycle_taints(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("sim-taint")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "T4", 1, "vm-passthrough")
    wait_for(lambda: gpu_alloc(node(k8s_api, name)) or None, "resources")
    core = k8s.CoreV1Api(k8s_api)
    core.patch_node(name, {"spec": {"unschedulable": True}})
    core.patch_node_status(
        name, {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}}
    )

    def taints() -> set[tuple[str, str]] | None:
        got = {(t["key"], t["effect"]) for t in node(k8s_api, name)["spec"].get("taints") or []}
        return got if len(got) == 2 else None

    assert wait_for(taints, "taints") == {
        ("node.kubernetes.io/unschedulable", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoSchedule"),
    }


# ---------------------------------------------------------------------------------- vGPU device manager


def _vgpu_node(api: k8s.ApiClient, model: str, count: int, expect: dict[str, str], names: list[str]) -> str:
    name = unique("sim-vgpu")
    names.append(name)
    create_gpu_node(api, name, model, count, "vm-vgpu")
    wait_for(
        lambda: (
            (
                lambda x: (
                    x["metadata"]["labels"].get(ns.LABEL_VGPU_STATE) == "success" and gpu_alloc(x) == expect
                )
            )(node(api, name))
            or None
        ),
        f"default vGPU config on {name}",
    )
    return name


def _watch_states(
    api: k8s.ApiClient, name: str, done: Callable[[dict[str, Any]], bool]
) -> tuple[list[tuple], dict]:
    seen: list[tuple] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        n = node(api, name)
        labels = n["metadata"]["labels"]
        state = (
            labels.get(ns.LABEL_VGPU_STATE),
            labels.get(ns.DEPLOY + "sandbox-device-plugin"),
            labels.get(ns.DEPLOY + "sandbox-validator"),
            json.dumps(gpu_alloc(n), sort_keys=True),
        )
        if not seen or seen[-1] != state:
            seen.append(state)
        if done(n):
            return seen, n
        time.sleep(0.01)
    raise AssertionError(f"no final state; seen {seen}")


def test_vgpu_reprofile_goes_pending_then_success_with_new_counts(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = _vgpu_node(k8s_api, "T4", 2, {"nvidia.com/GRID_T4-8Q": "4"}, nodes_to_delete)
    k8s.CoreV1Api(k8s_api).patch_node(name, {"metadata": {"labels": {ns.LABEL_VGPU_CONFIG: "T4-4Q"}}})
    seen, final = _watch_states(
        k8s_api,
        name,
        lambda n: (
            gpu_alloc(n) == {"nvidia.com/GRID_T4-4Q": "8"}
            and n["metadata"]["labels"][ns.LABEL_VGPU_STATE] == "success"
        ),
    )
    assert ("pending", ns.PAUSED, ns.PAUSED, "{}") in seen  # all vGPU resources gone while paused
    assert _deploy(final)[ns.DEPLOY + "sandbox-device-plugin"] == "true"
    assert _deploy(final)[ns.DEPLOY + "sandbox-validator"] == "true"


def test_unknown_vgpu_config_fails_and_changes_nothing(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = _vgpu_node(k8s_api, "T4", 2, {"nvidia.com/GRID_T4-8Q": "4"}, nodes_to_delete)
    k8s.CoreV1Api(k8s_api).patch_node(
        name, {"metadata": {"labels": {ns.LABEL_VGPU_CONFIG: "no-such-config"}}}
    )
    seen, final = _watch_states(
        k8s_api, name, lambda n: n["metadata"]["labels"][ns.LABEL_VGPU_STATE] == "failed"
    )
    assert [s[0] for s in seen] in (["success", "failed"], ["failed"])  # never pending
    assert gpu_alloc(final) == {"nvidia.com/GRID_T4-8Q": "4"}
    assert _deploy(final)[ns.DEPLOY + "sandbox-device-plugin"] == "true"


def test_type_not_supported_by_the_board_fails_and_changes_nothing(
    k8s_api: k8s.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = _vgpu_node(k8s_api, "T4", 2, {"nvidia.com/GRID_T4-8Q": "4"}, nodes_to_delete)
    k8s.CoreV1Api(k8s_api).patch_node(name, {"metadata": {"labels": {ns.LABEL_VGPU_CONFIG: "A10-12Q"}}})
    _, final = _watch_states(
        k8s_api,
        name,
        lambda n: (
            n["metadata"]["labels"][ns.LABEL_VGPU_STATE] == "failed"
            and n["metadata"]["labels"][ns.DEPLOY + "sandbox-device-plugin"] == "true"
            and bool(gpu_alloc(n))
        ),
    )
    assert gpu_alloc(final) == {"nvidia.com/GRID_T4-8Q": "4"}
    assert json.loads(final["metadata"]["annotations"][ns.ANN_GPUS])["gpus"] == [
        {"index": 0, "mdevs": {"T4-8Q": 2}},
        {"index": 1, "mdevs": {"T4-8Q": 2}},
    ]


def test_t4_custom_only_touches_the_gpus_it_names(k8s_api: k8s.ApiClient, nodes_to_delete: list[str]) -> None:
    """The real T4-custom sample: 8x T4, default first, then T4-custom (ConfigMap custom-vgpu-config)."""
    name = _vgpu_node(k8s_api, "T4", 8, {"nvidia.com/GRID_T4-8Q": "16"}, nodes_to_delete)
    k8s.CoreV1Api(k8s_api).patch_node(name, {"metadata": {"labels": {ns.LABEL_VGPU_CONFIG: "T4-custom"}}})
    want = {"nvidia.com/GRID_T4-16C": "1", "nvidia.com/GRID_T4-8C": "2", "nvidia.com/GRID_T4-8Q": "12"}
    _, final = _watch_states(
        k8s_api,
        name,
        lambda n: gpu_alloc(n) == want and n["metadata"]["labels"][ns.LABEL_VGPU_STATE] == "success",
    )
    mdevs = [g["mdevs"] for g in json.loads(final["metadata"]["annotations"][ns.ANN_GPUS])["gpus"]]
    assert mdevs == [{"T4-16C": 1}, {"T4-8C": 2}] + [{"T4-8Q": 2}] * 6


# ---------------------------------------------------------------------------------------------- KubeVirt


def test_passthrough_vmi_reaches_running_with_node_and_ip(
    k8s_api: k8s.ApiClient, k8s_namespace: str, nodes_to_delete: list[str]
) -> None:
    sel = unique("sel")
    name = unique("sim-pt")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "A100-PCIE-40GB", 1, "vm-passthrough", labels={"test.sim/pool": sel})
    wait_for(lambda: gpu_alloc(node(k8s_api, name)) == {A100_PT: "1"} or None, "node ready")
    vmi = vmi_manifest(
        "analyst-a100-01",
        k8s_namespace,
        [A100_PT],
        {"test.sim/pool": sel},
        {"portal/request": "r1"},
        "32Gi",
        8,
    )
    uid = create_vmi(k8s_api, vmi)["metadata"]["uid"]
    v = wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "analyst-a100-01", "Running"), "Running")
    st = v["status"]
    assert st["nodeName"] == name
    assert v["metadata"]["labels"]["kubevirt.io/nodeName"] == name
    ip = st["interfaces"][0]["ipAddress"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network("10.244.0.0/16")
    assert st["interfaces"][0]["name"] == "default"
    assert [(c["type"], c["status"]) for c in st["conditions"]] == [("Ready", "True")]
    assert [p["phase"] for p in st["phaseTransitionTimestamps"]] == ["Scheduling", "Scheduled", "Running"]
    pods = launcher_pods(k8s_api, k8s_namespace, uid)
    assert len(pods) == 1
    pod = pods[0]
    assert pod.metadata.name.startswith("virt-launcher-analyst-a100-01-") and len(pod.metadata.name) == 35
    assert pod.metadata.labels == {
        "portal/request": "r1",
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": uid,
        "vm.kubevirt.io/name": "analyst-a100-01",
        "vmi.kubevirt.io/id": "analyst-a100-01",
    }
    assert pod.spec.node_name == name and pod.status.phase == "Running" and pod.status.pod_ip == ip
    assert pod.spec.containers[0].resources.requests == {"memory": "32Gi", "cpu": "800m", A100_PT: "1"}
    assert pod.spec.containers[0].resources.limits == {A100_PT: "1"}


def test_unpermitted_device_stays_pending_with_failed_create(
    k8s_api: k8s.ApiClient, k8s_namespace: str
) -> None:
    uid = create_vmi(k8s_api, vmi_manifest("a10-vm", k8s_namespace, ["nvidia.com/GA102GL_A10"]))["metadata"][
        "uid"
    ]
    v = wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "a10-vm", "Pending"), "Pending")
    cond = v["status"]["conditions"]
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in cond] == [
        (
            "Synchronized",
            "False",
            "FailedCreate",
            "failed to render launch manifest: GPU nvidia.com/GA102GL_A10 is not permitted in "
            "permittedHostDevices configuration",
        )
    ]
    assert launcher_pods(k8s_api, k8s_namespace, uid) == []
    events = k8s.CoreV1Api(k8s_api).list_namespaced_event(k8s_namespace).items
    assert [(e.reason, e.type) for e in events if e.involved_object.name == "a10-vm"] == [
        ("FailedCreate", "Warning")
    ]


def test_unschedulable_vmi_waits_then_is_placed_when_capacity_frees(
    k8s_api: k8s.ApiClient, k8s_namespace: str, nodes_to_delete: list[str]
) -> None:
    sel = unique("sel")
    name = unique("sim-pt")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "A100-PCIE-40GB", 1, "vm-passthrough", labels={"test.sim/pool": sel})
    wait_for(lambda: gpu_alloc(node(k8s_api, name)) == {A100_PT: "1"} or None, "node ready")
    first = create_vmi(k8s_api, vmi_manifest("first", k8s_namespace, [A100_PT], {"test.sim/pool": sel}))
    wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "first", "Running"), "first Running")
    second = create_vmi(k8s_api, vmi_manifest("second", k8s_namespace, [A100_PT], {"test.sim/pool": sel}))
    v = wait_for(
        lambda: (lambda x: x if (x.get("status") or {}).get("conditions") else None)(
            get_vmi(k8s_api, k8s_namespace, "second")
        ),
        "PodScheduled condition",
    )
    expected = sched_message(node_count(k8s_api), [f"Insufficient {A100_PT}"], [True])
    assert v["status"]["phase"] == "Scheduling"
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in v["status"]["conditions"]] == [
        ("PodScheduled", "False", "Unschedulable", expected)
    ]
    pod = launcher_pods(k8s_api, k8s_namespace, second["metadata"]["uid"])[0]
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    pod_cond = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert (pod_cond.status, pod_cond.reason, pod_cond.message) == ("False", "Unschedulable", expected)

    # Deleting the first VMI deletes its launcher pod, which frees the GPU for the second.
    k8s.CustomObjectsApi(k8s_api).delete_namespaced_custom_object(
        *VMI, k8s_namespace, "virtualmachineinstances", "first"
    )
    wait_for(
        lambda: launcher_pods(k8s_api, k8s_namespace, first["metadata"]["uid"]) == [] or None,
        "launcher deleted",
    )
    v2 = wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "second", "Running"), "second Running")
    assert v2["status"]["nodeName"] == name


def test_mixed_reasons_message_and_placement_when_node_uncordoned(
    k8s_api: k8s.ApiClient, k8s_namespace: str, nodes_to_delete: list[str]
) -> None:
    sel = unique("sel")
    cordoned, small = unique("sim-cordon"), unique("sim-small")
    nodes_to_delete += [cordoned, small]
    create_gpu_node(k8s_api, cordoned, "A100-PCIE-40GB", 2, "vm-passthrough", labels={"test.sim/pool": sel})
    create_gpu_node(k8s_api, small, "A100-PCIE-40GB", 1, "vm-passthrough", labels={"test.sim/pool": sel})
    core = k8s.CoreV1Api(k8s_api)
    core.patch_node(cordoned, {"spec": {"unschedulable": True}})
    for n in (cordoned, small):
        wait_for(lambda n=n: gpu_alloc(node(k8s_api, n)) or None, "resources")
    create_vmi(k8s_api, vmi_manifest("two-gpus", k8s_namespace, [A100_PT, A100_PT], {"test.sim/pool": sel}))
    expected = sched_message(
        node_count(k8s_api), [f"Insufficient {A100_PT}", "node(s) were unschedulable"], [True, False]
    )
    v = wait_for(
        lambda: (
            lambda x: (
                x
                if [c.get("message") for c in (x.get("status") or {}).get("conditions") or []] == [expected]
                else None
            )
        )(get_vmi(k8s_api, k8s_namespace, "two-gpus")),
        f"message {expected}",
    )
    assert v["status"]["phase"] == "Scheduling"
    core.patch_node(cordoned, {"spec": {"unschedulable": False}})
    v = wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "two-gpus", "Running"), "Running after uncordon")
    assert v["status"]["nodeName"] == cordoned


def test_reprofile_fails_the_running_vgpu_vmi(
    k8s_api: k8s.ApiClient, k8s_namespace: str, nodes_to_delete: list[str]
) -> None:
    name = _vgpu_node(k8s_api, "T4", 2, {"nvidia.com/GRID_T4-8Q": "4"}, nodes_to_delete)
    create_vmi(
        k8s_api,
        vmi_manifest("vdi-01", k8s_namespace, ["nvidia.com/GRID_T4-8Q"], {"kubernetes.io/hostname": name}),
    )
    wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "vdi-01", "Running"), "Running")
    k8s.CoreV1Api(k8s_api).patch_node(name, {"metadata": {"labels": {ns.LABEL_VGPU_CONFIG: "T4-2Q"}}})
    v = wait_for(lambda: vmi_phase(k8s_api, k8s_namespace, "vdi-01", "Failed"), "Failed")
    assert v["status"]["reason"] == "VGPUDeviceRemoved"
    ready = v["status"]["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "PodFailed")
    assert ready["message"] == (
        f"mediated device nvidia.com/GRID_T4-8Q on GPU 0 was deleted by the vGPU Device Manager while in use "
        f"(nvidia.com/vgpu.config changed on {name})"
    )
    wait_for(
        lambda: gpu_alloc(node(k8s_api, name)) == {"nvidia.com/GRID_T4-2Q": "16"} or None,
        "new profile advertised",
    )
