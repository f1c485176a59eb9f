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
    assert capacity.free_on_node("c2") == {"nvidia.com/gpu": 0}  # cordoned: as free_by_resource
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


def test_free_on_node_agrees_with_free_by_resource(fleet: None) -> None:
    per_node: dict[str, int] = {}
    for name in ("c1", "c2", "p1", "p2", "v1", "v2", "v3", "v4", "v5", "v6"):
        per_node[name] = sum(capacity.free_on_node(name).values())
    assert per_node == {
        "c1": 2, "c2": 0, "p1": 3, "p2": 0, "v1": 16, "v2": 14, "v3": 0, "v4": 0, "v5": 0, "v6": 16,
    }  # fmt: skip
    assert sum(per_node.values()) == sum(r.free for r in capacity.free_by_resource()) == 51


@pytest.mark.parametrize(
    ("node_fields", "resource_fields", "reason"),
    [
        ({}, {}, ""),
        ({"present": False}, {}, "node_absent"),
        ({"ready": False}, {}, "node_not_ready"),
        ({"ready": None}, {}, ""),  # unknown readiness counts as ready
        ({"unschedulable": True}, {}, "node_cordoned"),
        ({"vgpu_config_state": "pending"}, {}, "vgpu_reconfiguring"),
        ({"vgpu_config_state": "failed"}, {}, ""),  # still advertises: requestable
        ({"transitioning": True}, {}, "transitioning"),
        ({}, {"permitted": False}, "not_permitted"),
        ({}, {"permitted": None}, ""),
        ({"ready": False, "unschedulable": True}, {"permitted": False}, "node_not_ready"),  # first wins
    ],
)
def test_requestable_rule(node_fields: dict[str, Any], resource_fields: dict[str, Any], reason: str) -> None:
    node = stored_node("n", "vm-vgpu", **node_fields)
    res = stored_resource(node, T4_8Q, 4, used=1, vgpu_type="T4-8Q", **{"permitted": True, **resource_fields})
    assert capacity.unusable_reason(res, node) == reason
    assert capacity.requestable(res, node) is (reason == "")
    assert capacity.requestable_free(res, node) == (3 if reason == "" else 0)
    assert res.free == 3  # the raw device truth is unchanged
    from gpuinventory.models import GpuResource

    assert GpuResource.objects.filter(capacity.requestable_q()).count() == (1 if reason == "" else 0)


def test_other_mode_resource_is_not_requestable() -> None:
    node = stored_node("v", "vm-vgpu")
    res = stored_resource(node, "nvidia.com/gpu", 1, kind="gpu")
    assert (capacity.unusable_reason(res, node), capacity.requestable(res, node)) == ("other_mode", False)


def test_summary_counts_only_requestable_free(fleet: None) -> None:
    from gpuinventory.summary import inventory_summary

    data = inventory_summary().as_dict()["modes"]
    picked = {
        mode: (m["total"], m["used"], m["free"], m["free_unusable"], m["free_unusable_reasons"])
        for mode, m in data.items()
    }
    assert picked == {
        "container": (12, 6, 2, 4, {"node_cordoned": 4}),
        "vm-passthrough": (4, 1, 3, 0, {}),
        "vm-vgpu": (69, 2, 46, 21, {"vgpu_reconfiguring": 16, "other_mode": 1, "not_permitted": 4}),
    }
    # the same numbers as the capacity service (the request form)
    for mode in picked:
        assert data[mode]["free"] == sum(r.free for r in capacity.free_by_resource(mode))
    by_res = {
        g["resource"]: (g["free"], g["free_unusable"], g["free_unusable_reasons"])
        for g in data["vm-vgpu"]["by_resource"]
    }
    assert by_res == {
        A10_12Q: (0, 4, {"not_permitted": 4}),
        "nvidia.com/gpu": (0, 1, {"other_mode": 1}),
        T4_8Q: (46, 16, {"vgpu_reconfiguring": 16}),
    }
    by_model = {g["label"]: (g["free"], g["free_unusable"]) for g in data["vm-vgpu"]["by_model"]}
    assert by_model == {"": (0, 0), "A10": (0, 4), "Tesla T4": (46, 17)}


def test_node_table_free_column_is_requestable(fleet: None) -> None:
    from gpuinventory.models import GpuNode
    from gpuinventory.tables import annotate_node_counts

    rows = annotate_node_counts(GpuNode.objects.filter(present=True)).order_by("name")
    got = {n.name: (n.devices_total, n.devices_used, n.devices_free) for n in rows}  # type: ignore[attr-defined]
    assert got == {
        "c1": (8, 6, 2), "c2": (4, 0, 0), "p1": (4, 1, 3), "v1": (17, 0, 16), "v2": (16, 2, 14),
        "v3": (16, 0, 0), "v4": (4, 0, 0), "v5": (0, 0, 0), "v6": (16, 0, 16),
    }  # fmt: skip
