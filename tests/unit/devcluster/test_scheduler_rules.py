"""kube-scheduler filter order and FitError message format, KubeVirt permission check (no cluster)."""

from decimal import Decimal

from devcluster.simulator.kubevirt import launcher_pod, not_permitted
from devcluster.simulator.scheduler import filter_node, fit_error_message, parse_quantity
from devcluster.spec import vmi_manifest


def _node(name: str, alloc: dict[str, str], labels: dict[str, str] | None = None, **spec: object) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": dict(spec),
        "status": {"allocatable": alloc},
    }


def _pod(requests: dict[str, str], selector: dict[str, str] | None = None) -> dict:
    spec: dict = {"containers": [{"name": "compute", "resources": {"requests": requests, "limits": {}}}]}
    if selector:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": "p", "namespace": "n"}, "spec": spec}


def test_quantities() -> None:
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("16Gi") == 16 * 2**30
    assert parse_quantity("1k") == 1000
    assert parse_quantity(2) == 2


def test_message_single_reason() -> None:
    pod = _pod({"nvidia.com/GA102GL_A10": "1"})
    results = [filter_node(pod, _node(f"n{i}", {"pods": "110"}), {}) for i in range(3)]
    assert fit_error_message(3, results) == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/GA102GL_A10. no new claims to deallocate, "
        "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )


def test_message_mixed_reasons_sorted_and_first_failing_filter_wins() -> None:
    pod = _pod({"nvidia.com/gpu": "1", "cpu": "2"}, {"team": "a"})
    nodes = [
        _node("cordoned", {"nvidia.com/gpu": "8"}, {"team": "a"}, unschedulable=True),
        _node(
            "tainted", {"nvidia.com/gpu": "8"}, {"team": "a"}, taints=[{"key": "k", "effect": "NoSchedule"}]
        ),
        _node("other", {"nvidia.com/gpu": "8"}, {"team": "b"}),
        _node("full", {"nvidia.com/gpu": "1", "cpu": "1", "pods": "110"}, {"team": "a"}),
    ]
    results = [filter_node(pod, n, {"nvidia.com/gpu": Decimal(1)}) for n in nodes]
    assert fit_error_message(4, results) == (
        "0/4 nodes are available: 1 Insufficient cpu, 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint(s), "
        "1 node(s) were unschedulable. no new claims to deallocate, preemption: 0/4 nodes are available: "
        "1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )


def test_histogram_sorts_as_strings_like_go() -> None:
    results = [(["Insufficient x"], True)] * 10 + [(["node(s) were unschedulable"], False)] * 2
    assert fit_error_message(12, results).startswith(
        "0/12 nodes are available: 10 Insufficient x, 2 node(s) were unschedulable."
    )


def test_fits_when_free() -> None:
    pod = _pod({"nvidia.com/gpu": "2"})
    assert filter_node(
        pod, _node("n", {"nvidia.com/gpu": "4", "pods": "10"}), {"nvidia.com/gpu": Decimal(2)}
    ) == ([], True)


def test_not_permitted_message_inputs() -> None:
    vmi = vmi_manifest("v", "ns", ["nvidia.com/GRID_T4-8Q", "nvidia.com/GA102GL_A10"])
    cr = {
        "spec": {
            "configuration": {
                "permittedHostDevices": {
                    "mediatedDevices": [
                        {"mdevNameSelector": "GRID T4-8Q", "resourceName": "nvidia.com/GRID_T4-8Q"}
                    ]
                }
            }
        }
    }
    assert not_permitted(vmi, cr) == "nvidia.com/GA102GL_A10"
    assert not_permitted(vmi, {"spec": {"configuration": {}}}) is None  # check skipped without the field


def test_launcher_pod_shape() -> None:
    vmi = vmi_manifest(
        "vm1", "ns", ["nvidia.com/GRID_T4-8Q"] * 2, labels={"req": "42"}, memory="16Gi", cores=4
    )
    vmi["metadata"]["uid"] = "u-1"
    pod = launcher_pod(vmi)
    assert (
        pod["metadata"]["name"].startswith("virt-launcher-vm1-")
        and len(pod["metadata"]["name"]) == len("virt-launcher-vm1-") + 5
    )
    assert pod["metadata"]["labels"] == {
        "req": "42",
        "kubevirt.io": "virt-launcher",
        "kubevirt.io/created-by": "u-1",
        "vm.kubevirt.io/name": "vm1",
        "vmi.kubevirt.io/id": "vm1",
    }
    res = pod["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {"memory": "16Gi", "cpu": "400m", "nvidia.com/GRID_T4-8Q": "2"},
        "limits": {"nvidia.com/GRID_T4-8Q": "2"},
    }
