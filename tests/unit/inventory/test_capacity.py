"""The capacity service (gpuinventory/capacity.py) over stored rows built explicitly."""

from __future__ import annotations

from typing import Any

import pytest

from gpuinventory import capacity
from gpuinventory.capacity import NodeFree, ReprofileCandidate, ResourceFree
from tests.factories import stored_consumer, stored_node, stored_resource, stored_vgpu_config

pytestmark = pytest.mark.django_db

T4_8Q = "nvidia.com/GRID_T4-8Q"
A100_PT = "nvidia.com/GA100_A100_PCIE_40GB"
A10_12Q = "nvidia.com/NVIDIA_A10-12Q"
T4_FILTER = ["0x1EB810DE"]


def t4(name: str, alloc: int = 16, **fields: Any) -> Any:
    fields.setdefault("vgpu_config_state", "success")
    node = stored_node(name, "vm-vgpu", gpu_model="Tesla T4", gpu_count=8, **fields)
    stored_resource(node, T4_8Q, alloc, vgpu_type="T4-8Q", model="Tesla T4", series="Q", permitted=True)
    return node


@pytest.fixture
def fleet() -> None:
    c1 = stored_node("c1", gpu_model="NVIDIA-B200", gpu_count=8)
    stored_resource(c1, "nvidia.com/gpu", 8, used=6)
    stored_consumer(c1, "nvidia.com/gpu", "train-0", 6)
    c2 = stored_node("c2", unschedulable=True)
    stored_resource(c2, "nvidia.com/gpu", 4)
    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(p1, A100_PT, 4, used=1, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    stored_resource(p1, "nvidia.com/gpu", 0, kind="gpu")  # stale leftover of container mode
    p2 = stored_node("p2", "vm-passthrough", present=False)
    stored_resource(p2, A100_PT, 2, model="A100 PCIe 40GB", permitted=True)
    v1 = t4("v1")
    stored_resource(v1, "nvidia.com/gpu", 1, kind="gpu")  # a container resource on a VM node: not usable
    v2 = t4("v2")
    v2.resources.filter(name=T4_8Q).update(used=2)
    stored_consumer(v2, T4_8Q, "virt-launcher-vm-a-abcde", 2, vmi_name="vm-a")
    t4("v3", vgpu_config_state="pending")
    t4("v6", vgpu_config_state="failed")
    v4 = stored_node("v4", "vm-vgpu", gpu_model="A10", gpu_count=2, vgpu_config_state="success")
    stored_resource(v4, A10_12Q, 4, vgpu_type="A10-12Q", model="A10", permitted=False)
    v5 = stored_node("v5", "vm-vgpu", gpu_model="", gpu_count=2, vgpu_config="T4-custom")
    stored_resource(v5, T4_8Q, 0, vgpu_type="T4-8Q")
    stored_vgpu_config(
        "default",
        [
            {"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}},
            {"device_filter": ["0x223610DE"], "devices": "all", "vgpu_devices": {"A10-12Q": 2}},
        ],
    )
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )
    stored_vgpu_config(
        "T4-custom",
        [
            {"device_filter": None, "devices": [0], "vgpu_devices": {"T4-16C": 1}},
            {"device_filter": None, "devices": [1], "vgpu_devices": {"T4-8C": 2}},
            {"device_filter": None, "devices": [2, 3], "vgpu_devices": {"T4-8Q": 2}},
        ],
    )
    stored_vgpu_config(
        "T4-4Q-gone",
        [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-4Q": 4}}],
        present=False,
    )


def test_free_by_resource(fleet: None) -> None:
    assert capacity.free_by_resource() == [
        ResourceFree("container", "nvidia.com/gpu", "gpu", "", "", 12, 6, 2, 1),
        ResourceFree("vm-passthrough", A100_PT, "passthrough", "A100 PCIe 40GB", "", 4, 1, 3, 1),
        # v1 16 + v2 14 + v6 16 free (failed still advertises); v3 is pending: counted, not free.
        ResourceFree("vm-vgpu", T4_8Q, "vgpu", "Tesla T4", "T4-8Q", 64, 2, 46, 3),
        ResourceFree("vm-vgpu", A10_12Q, "vgpu", "A10", "A10-12Q", 4, 0, 0, 0),
    ]
    assert capacity.free_by_resource("container") == [
        ResourceFree("container", "nvidia.com/gpu", "gpu", "", "", 12, 6, 2, 1)
    ]


def test_free_on_node(fleet: None) -> None:
    assert capacity.free_on_node("c1") == {"nvidia.com/gpu": 2}
    assert capacity.free_on_node("c2") == {"nvidia.com/gpu": 4}  # cordoned: the caller decides
    assert capacity.free_on_node("p1") == {A100_PT: 3}  # the stale nvidia.com/gpu is not listed
    assert capacity.free_on_node("p2") == {}  # absent
    assert capacity.free_on_node("v1") == {T4_8Q: 16}  # the container resource on a VM node is not
    assert capacity.free_on_node("v4") == {A10_12Q: 0}  # not permitted by KubeVirt
    assert capacity.free_on_node("nope") == {}


def test_nodes_offering(fleet: None) -> None:
    assert capacity.nodes_offering(T4_8Q, 15) == [
        NodeFree("v1", "vm-vgpu", T4_8Q, 16, 16),
        NodeFree("v6", "vm-vgpu", T4_8Q, 16, 16),
    ]
    assert [n.node for n in capacity.nodes_offering(T4_8Q)] == ["v1", "v6", "v2"]
    assert capacity.nodes_offering("nvidia.com/gpu", 3) == []  # c2 is cordoned, c1 has 2
    assert capacity.nodes_offering(A10_12Q) == []


def test_reprofile_candidates(fleet: None) -> None:
    # v1: 8 GPUs; v2 busy (a VM holds a vGPU); v3 pending; v6 failed; v4 is an A10; v5 has no model
    # but its stale GRID_T4-8Q says T4; the absent config is not offered.
    assert capacity.reprofile_candidates("T4-16Q") == [
        ReprofileCandidate("v1", "Tesla T4", 8, "1eb8", "", "T4-16Q", 8, {"T4-16Q": 8}),
        ReprofileCandidate("v5", "", 2, "1eb8", "T4-custom", "T4-16Q", 2, {"T4-16Q": 2}),
    ]
    # v1 already advertises T4-8Q; for v5 "T4-8Q" and "default" tie and the one-type config named
    # like the type wins.
    assert capacity.reprofile_candidates("T4-8Q") == [
        ReprofileCandidate("v5", "", 2, "1eb8", "T4-custom", "T4-8Q", 4, {"T4-8Q": 4}),
    ]
    assert capacity.reprofile_candidates("T4-16C") == [
        ReprofileCandidate(
            "v1", "Tesla T4", 8, "1eb8", "", "T4-custom", 1, {"T4-16C": 1, "T4-8C": 2, "T4-8Q": 4}
        ),
        ReprofileCandidate("v5", "", 2, "1eb8", "T4-custom", "T4-custom", 1, {"T4-16C": 1, "T4-8C": 2}),
    ]
    assert capacity.reprofile_candidates("T4-4Q") == []  # only an absent config offers it
    assert capacity.reprofile_candidates("A10-12Q") == []  # v4 already advertises it
    assert capacity.reprofile_candidates("not a type") == []


def test_reprofile_candidate_freed_when_the_vm_goes(fleet: None) -> None:
    from gpuinventory.models import GpuConsumer

    GpuConsumer.objects.filter(node__name="v2").delete()
    assert [c.node for c in capacity.reprofile_candidates("T4-16Q")] == ["v1", "v2", "v5"]
