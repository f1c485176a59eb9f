"""Reservations in the capacity service (gpuinventory/capacity.py): devices promised to approved
requests count as used until the VMI's launcher pod is bound, and never twice."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinventory import capacity
from gpuinventory.capacity import CapacitySnapshot, NodeFree, ResourceFree
from gpuinventory.models import GpuNode, GpuResource, Reservation
from tests.factories import stored_consumer, stored_node, stored_resource, stored_vgpu_config

pytestmark = pytest.mark.django_db

A100 = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_16Q = "nvidia.com/GRID_T4-16Q"
T4_FILTER = ["0x1EB810DE"]


def reserve(
    node: Any, vmi: str, resource: str, count: int, vgpu_type: str = "", ns: str = "team-quant"
) -> Any:
    return Reservation.objects.create(
        node=node,
        resource_name=resource,
        vgpu_type=vgpu_type,
        count=count,
        holder=f"vmrequest:{vmi}",
        vmi_namespace=ns,
        vmi_name=vmi,
    )


@pytest.fixture
def nodes() -> dict[str, Any]:
    """p1: 4 A100, 1 used; p2: 2 A100 free; v1 Tesla T4 × 2 idle under T4-16Q advertising 2 × T4-16Q;
    v2 Tesla T4 × 2 idle, under T4-8Q advertising 4 × T4-8Q; configs T4-8Q and T4-16Q stored."""
    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(p1, A100, 4, used=1, model="A100 PCIe 40GB", permitted=True)
    stored_consumer(p1, A100, "virt-launcher-old-abcde", 1, vmi_name="old", pod_namespace="team-quant")
    p2 = stored_node("p2", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=2)
    stored_resource(p2, A100, 2, model="A100 PCIe 40GB", permitted=True)
    v1 = stored_node(
        "v1", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-16Q", vgpu_config_state="success"
    )
    stored_resource(v1, T4_16Q, 2, model="Tesla T4", vgpu_type="T4-16Q", series="Q", permitted=True)
    v2 = stored_node(
        "v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(v2, T4_8Q, 4, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )
    return {"p1": p1, "p2": p2, "v1": v1, "v2": v2}


def a100_row() -> ResourceFree:
    return next(r for r in capacity.free_by_resource("vm-passthrough") if r.resource_name == A100)


def test_without_reservations(nodes: dict[str, Any]) -> None:
    assert a100_row() == ResourceFree(
        "vm-passthrough", A100, "passthrough", "A100 PCIe 40GB", "", 6, 1, 5, 2, 0
    )
    assert capacity.free_on_node("p1") == {A100: 3}
    assert capacity.nodes_offering(A100, 1) == [
        NodeFree("p1", "vm-passthrough", A100, 3, 4, 0),
        NodeFree("p2", "vm-passthrough", A100, 2, 2, 0),
    ]


def test_a_reservation_reduces_free_everywhere(nodes: dict[str, Any]) -> None:
    reserve(nodes["p1"], "alice-vm-1", A100, 2)
    assert a100_row() == ResourceFree(
        "vm-passthrough", A100, "passthrough", "A100 PCIe 40GB", "", 6, 1, 3, 2, 2
    )
    assert capacity.free_on_node("p1") == {A100: 1}
    assert capacity.free_on_node("p2") == {A100: 2}
    assert capacity.nodes_offering(A100, 1) == [
        NodeFree("p2", "vm-passthrough", A100, 2, 2, 0),
        NodeFree("p1", "vm-passthrough", A100, 1, 4, 2),
    ]
    assert capacity.nodes_offering(A100, 2) == [NodeFree("p2", "vm-passthrough", A100, 2, 2, 0)]
    snap = CapacitySnapshot()
    p1_row = next(r for r in snap.resources if r.node.name == "p1")
    assert snap.free_of(p1_row) == 1
    assert snap.nodes_offering(A100, 1) == capacity.nodes_offering(A100, 1)
    assert snap.max_free_on_one_node(A100) == 2
    assert dict(snap.reserved) == {(nodes["p1"].pk, A100): 2}


def test_free_never_goes_below_zero(nodes: dict[str, Any]) -> None:
    reserve(nodes["p2"], "alice-vm-1", A100, 2)
    reserve(nodes["p2"], "alice-vm-2", A100, 1)  # more than free: a stale promise after a node change
    assert capacity.free_on_node("p2") == {A100: 0}
    assert a100_row().free == 3
    assert a100_row().nodes == 1


def test_reservation_stops_counting_once_the_launcher_pod_is_bound(nodes: dict[str, Any]) -> None:
    reserve(nodes["p1"], "alice-vm-1", A100, 2)
    assert capacity.free_on_node("p1") == {A100: 1}
    # A pod of the same VMI name in another namespace is not this VMI.
    stored_consumer(
        nodes["p1"], A100, "virt-launcher-alice-vm-1-zzzzz", 2, vmi_name="alice-vm-1", pod_namespace="x"
    )
    assert list(capacity.active_reservations().values_list("vmi_name", flat=True)) == ["alice-vm-1"]
    # The sync records the launcher pod (a consumer) and the device plugin's used count.
    stored_consumer(
        nodes["p1"],
        A100,
        "virt-launcher-alice-vm-1-abcde",
        2,
        vmi_name="alice-vm-1",
        pod_namespace="team-quant",
    )
    GpuResource.objects.filter(node=nodes["p1"], name=A100).update(used=3)
    assert list(capacity.active_reservations()) == []
    assert capacity.free_on_node("p1") == {A100: 1}  # 4 − 3 used, not 4 − 3 − 2
    assert a100_row() == ResourceFree(
        "vm-passthrough", A100, "passthrough", "A100 PCIe 40GB", "", 6, 3, 3, 2, 0
    )
    assert CapacitySnapshot().reserved == {}


def test_a_reserved_node_is_not_a_reprofile_candidate(nodes: dict[str, Any]) -> None:
    assert [c.node for c in capacity.reprofile_candidates("T4-8Q")] == ["v1"]
    assert [c.node for c in capacity.reprofile_candidates("T4-16Q")] == ["v2"]
    reserve(nodes["v1"], "alice-vm-1", T4_16Q, 1, "T4-16Q")
    assert capacity.reprofile_candidates("T4-8Q") == []
    reserve(nodes["v2"], "alice-vm-2", "", 1, "T4-16Q")  # promised a re-profile of v2
    assert capacity.reprofile_candidates("T4-16Q") == []
    assert CapacitySnapshot().reprofile_candidates("T4-16Q") == []
    Reservation.objects.all().delete()
    assert [c.node for c in capacity.reprofile_candidates("T4-8Q")] == ["v1"]


def test_a_type_reservation_is_subtracted_from_that_type_on_its_node(nodes: dict[str, Any]) -> None:
    """Approved before the re-profile (resource name unknown), bound after it: the promise is
    subtracted from the T4-16Q resource the node now advertises, on that node only."""
    v2 = nodes["v2"]
    GpuResource.objects.filter(node=v2).update(stale=True, allocatable=0)
    GpuNode.objects.filter(pk=v2.pk).update(vgpu_config="T4-16Q")
    stored_resource(v2, T4_16Q, 2, model="Tesla T4", vgpu_type="T4-16Q", series="Q", permitted=True)
    reserve(v2, "alice-vm-2", "", 1, "T4-16Q")
    assert capacity.free_on_node("v2") == {T4_16Q: 1}
    assert capacity.free_on_node("v1") == {T4_16Q: 2}
    assert capacity.nodes_offering(T4_16Q, 2) == [NodeFree("v1", "vm-vgpu", T4_16Q, 2, 2, 0)]
    assert capacity.nodes_offering(T4_16Q, 1)[1] == NodeFree("v2", "vm-vgpu", T4_16Q, 1, 2, 1)
    row = next(r for r in capacity.free_by_resource("vm-vgpu") if r.resource_name == T4_16Q)
    assert (row.allocatable, row.free, row.nodes, row.reserved) == (4, 3, 2, 1)
    assert capacity.reserved_devices() == {(v2.pk, "vgpu:T4-16Q"): 1}


def test_a_type_reservation_does_not_touch_other_types(nodes: dict[str, Any]) -> None:
    reserve(nodes["v2"], "alice-vm-2", "", 1, "T4-16Q")
    assert capacity.free_on_node("v2") == {T4_8Q: 4}
    assert Reservation.objects.get().key == "vgpu:T4-16Q"
    assert str(Reservation.objects.get()) == "vmrequest:alice-vm-2: T4-16Q x1 on v2"
