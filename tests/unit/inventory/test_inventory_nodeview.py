"""derive_node on the real node samples (DOMAIN.md §1-§5): exact derived rows and flags.

Some samples are excerpts that lack labels the rules need; each test says what it supplements:
* the A2000 node (gpu-operator#551) was converted from ``kubectl describe`` Capacity/Allocatable
  only: it gets ``gpu.present``, the vm-passthrough label and the passthrough deploy labels the
  issue implies (sandbox device plugin running; DOMAIN.md §7 confirms vfio-manager +
  sandbox-device-plugin on a real passthrough node);
* the T4-custom node (item 2) only shows two labels: it gets item 1's GPU Operator labels
  (same cluster, same operator), minus the vGPU config state.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuinventory.choices import ModeSource, ResourceKind, WorkloadMode
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource
from gpuinventory.nodeview import DerivedConsumer, DerivedResource, derive_node
from gpuinventory.vgpuconfig import ConfigEntry, parse_config_map_data
from portal.k8s import NodeInfo
from tests.factories import (
    cluster_policy,
    config_map_data,
    launcher_pod,
    node_info,
    pod,
    sample_kubevirt,
    sample_node,
    sample_objects,
)

A2000 = "node-vm-passthrough-a2000-gpu-operator-551.yaml"
T4 = "node-vm-vgpu-t4-openshift.yaml"
B200 = "node-container-b200-network-operator-2471.yaml"
MIG = "node-container-mig-mixed-a100-network-operator-211.yaml"
NVIDIA_DOCS_CR = "kubevirt-cr-nvidia-docs-gpu-operator.yaml"

PASSTHROUGH_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.workload.config": "vm-passthrough",
    "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
    "nvidia.com/gpu.deploy.sandbox-validator": "true",
    "nvidia.com/gpu.deploy.vfio-manager": "true",
}


@pytest.fixture(scope="module")
def default_configs() -> dict[str, list[ConfigEntry]]:
    return parse_config_map_data(config_map_data("gpu-operator-default-vgpu-devices-config.yaml"))


@pytest.fixture(scope="module")
def custom_configs() -> dict[str, list[ConfigEntry]]:
    return parse_config_map_data(config_map_data("vgpu-custom-configmap-t4-openshift.yaml"))


def a2000_node() -> NodeInfo:
    return sample_node(A2000, extra_labels=PASSTHROUGH_LABELS)


def t4_custom_node() -> NodeInfo:
    node1 = sample_node(T4, 0).labels
    extra = {k: v for k, v in node1.items() if k.startswith("nvidia.com/gpu.")}
    return sample_node(T4, 1, extra_labels=extra)


def test_a2000_passthrough_node() -> None:
    d = derive_node(a2000_node(), [], cluster_policy(), None, None)
    assert d is not None
    assert (d.workload_mode, d.mode_source, d.mode_label_value, d.transitioning) == (
        WorkloadMode.VM_PASSTHROUGH,
        ModeSource.LABEL,
        "vm-passthrough",
        False,
    )
    assert (d.gpu_model, d.gpu_count, d.gpu_memory_mib, d.model_source) == (
        "RTX A2000 12GB",
        1,
        None,
        "passthrough_name",
    )
    assert d.resources == (
        DerivedResource("nvidia.com/2571", ResourceKind.PASSTHROUGH, "RTX A2000 12GB", "2571", stale=True),
        DerivedResource(
            "nvidia.com/GA106_RTX_A2000_12GB",
            ResourceKind.PASSTHROUGH,
            "RTX A2000 12GB",
            "2571",
            capacity=1,
            allocatable=1,
        ),
        DerivedResource("nvidia.com/gpu", ResourceKind.GPU, stale=True),
    )
    assert d.resource("nvidia.com/GA106_RTX_A2000_12GB").free == 1
    assert d.resource("nvidia.com/2571").free == 0
    assert d.flags == [
        {"code": "stale_resource", "params": {"resource": "nvidia.com/2571"}},
        {"code": "stale_resource", "params": {"resource": "nvidia.com/gpu"}},
        {"code": "kubevirt_missing", "params": {"mode": "vm-passthrough"}},
    ]
    # devices.kubevirt.io/*, cpu, memory... are not GPU resources; only GPU-related labels are kept.
    assert set(d.labels) == set(PASSTHROUGH_LABELS)


def test_a2000_used_by_a_vmi_and_not_permitted() -> None:
    launcher = launcher_pod("analyst-a2000-01", "nvidia.com/GA106_RTX_A2000_12GB")
    other = pod("cuda-job", requests={"nvidia.com/roce": 1})
    d = derive_node(a2000_node(), [launcher, other], cluster_policy(), sample_kubevirt(NVIDIA_DOCS_CR), None)
    assert d is not None
    r = d.resource("nvidia.com/GA106_RTX_A2000_12GB")
    assert (r.allocatable, r.used, r.free, r.permitted) == (1, 1, 0, False)
    assert d.resource("nvidia.com/2571").permitted is False  # stale: shown, not flagged
    assert d.consumers == (
        DerivedConsumer(
            "nvidia.com/GA106_RTX_A2000_12GB",
            1,
            "gpu-vms",
            "virt-launcher-analyst-a2000-01-abcde",
            "analyst-a2000-01",
        ),
    )
    assert d.flag_codes() == ["stale_resource", "not_permitted", "stale_resource"]


def test_a2000_zero_devices_flags_iommu_checks() -> None:
    node = sample_node(A2000, extra_labels=PASSTHROUGH_LABELS)
    empty = NodeInfo(name=node.name, labels=node.labels, allocatable={"nvidia.com/GA106_RTX_A2000_12GB": "0"})
    d = derive_node(empty, [], cluster_policy(), sample_kubevirt(NVIDIA_DOCS_CR), None)
    assert d is not None
    assert d.flag_codes() == [
        "stale_resource",
        "gpu_model_unknown",
        "gpu_count_unknown",
        "passthrough_no_devices",
    ]


def test_t4_default_config_node(default_configs: dict[str, list[ConfigEntry]]) -> None:
    d = derive_node(
        sample_node(T4, 0), [], cluster_policy(), sample_kubevirt(NVIDIA_DOCS_CR), default_configs
    )
    assert d is not None
    assert (d.workload_mode, d.mode_source, d.transitioning) == (
        WorkloadMode.VM_VGPU,
        ModeSource.LABEL,
        False,
    )
    assert (d.gpu_model, d.gpu_count, d.model_source) == ("Tesla T4", 8, "vgpu_type")
    assert (d.vgpu_config, d.vgpu_config_state) == ("", "success")
    assert d.resources == (
        DerivedResource(
            "nvidia.com/GRID_T4-8Q",
            ResourceKind.VGPU,
            "Tesla T4",
            vgpu_type="T4-8Q",
            framebuffer_gb=Decimal(8),
            series="Q",
            capacity=16,
            allocatable=16,
            permitted=False,
        ),
        DerivedResource("nvidia.com/gpu", ResourceKind.GPU, stale=True),
    )
    assert d.flags == [
        {
            "code": "not_permitted",
            "params": {"resource": "nvidia.com/GRID_T4-8Q", "section": "mediatedDevices"},
        },
        {"code": "stale_resource", "params": {"resource": "nvidia.com/gpu"}},
    ]
    assert d.labels["nvidia.com/gpu.deploy.nvsm"] == ""


def test_t4_custom_mix_node(custom_configs: dict[str, list[ConfigEntry]]) -> None:
    assert (
        derive_node(sample_node(T4, 1), [], cluster_policy(), None, custom_configs) is None
    )  # no gpu.present
    pods = [
        launcher_pod("vm-a", "nvidia.com/GRID_T4-8Q", node_name="gpu-node-02"),
        launcher_pod("vm-b", "nvidia.com/GRID_T4-8Q", node_name="gpu-node-02"),
        launcher_pod("vm-c", "nvidia.com/GRID_T4-16C", node_name="gpu-node-02"),
    ]
    d = derive_node(
        t4_custom_node(), pods, cluster_policy(vgpu_config_name="custom-vgpu-config"), None, custom_configs
    )
    assert d is not None
    assert (d.workload_mode, d.vgpu_config, d.vgpu_config_state, d.transitioning) == (
        WorkloadMode.VM_VGPU,
        "T4-custom",
        "",
        False,
    )
    assert (d.gpu_model, d.gpu_count, d.model_source) == ("Tesla T4", 8, "vgpu_type")
    got = {
        r.name: (r.vgpu_type, r.framebuffer_gb, r.series, r.allocatable, r.used, r.free) for r in d.resources
    }
    assert got == {
        "nvidia.com/GRID_T4-16C": ("T4-16C", Decimal(16), "C", 1, 1, 0),
        "nvidia.com/GRID_T4-8C": ("T4-8C", Decimal(8), "C", 2, 0, 2),
        "nvidia.com/GRID_T4-8Q": ("T4-8Q", Decimal(8), "Q", 12, 2, 10),
    }
    assert [c.vmi_name for c in d.consumers] == ["vm-c", "vm-a", "vm-b"]
    assert d.flag_codes() == ["kubevirt_missing"]


def test_vgpu_pending_failed_and_unknown(custom_configs: dict[str, list[ConfigEntry]]) -> None:
    base = t4_custom_node()
    pending = NodeInfo(
        name=base.name,
        labels={**base.labels, "nvidia.com/vgpu.config.state": "pending"},
        allocatable={"nvidia.com/GRID_T4-8Q": "0"},
    )
    d = derive_node(pending, [], cluster_policy(), sample_kubevirt(NVIDIA_DOCS_CR), custom_configs)
    assert d is not None
    # No gpu_count_unknown while pending: vgpu_config_pending explains it (the sync keeps the count).
    assert d.flag_codes() == ["stale_resource", "vgpu_config_pending"]
    assert (d.gpu_model, d.gpu_count, d.gpu_memory_mib, d.model_source) == (
        "Tesla T4",
        None,
        15360,
        "vgpu_config",
    )
    failed = NodeInfo(
        name=base.name,
        labels={**base.labels, "nvidia.com/vgpu.config": "A10-12Q", "nvidia.com/vgpu.config.state": "failed"},
    )
    f = derive_node(failed, [], cluster_policy(vgpu_config_name="custom-vgpu-config"), None, custom_configs)
    assert f is not None
    assert f.flags[:2] == [
        {"code": "vgpu_config_failed", "params": {"config": "A10-12Q"}},
        {"code": "vgpu_config_unknown", "params": {"config": "A10-12Q", "config_map": "custom-vgpu-config"}},
    ]
    assert "vgpu_no_devices" in f.flag_codes()


def test_b200_container_node() -> None:
    d = derive_node(sample_node(B200, 0), [], cluster_policy(sandbox_enabled=False), None, None)
    assert d is not None
    assert (d.workload_mode, d.mode_source, d.gpu_model, d.gpu_count, d.gpu_memory_mib, d.model_source) == (
        WorkloadMode.CONTAINER,
        ModeSource.SANDBOX_DISABLED,
        "B200",  # GFD's NVIDIA-B200 under the PCI table's name; the raw product stays in labels
        8,
        183359,
        "gfd",
    )
    # Item 1 of the excerpt has no status: nothing advertised.
    assert d.resources == ()
    assert d.flag_codes() == ["container_no_devices"]
    assert "sriovnetwork.openshift.io/device-plugin" not in d.labels
    # Item 2 (same cluster) shows allocatable but its labels were cut off (no gpu.present).
    assert derive_node(sample_node(B200, 1), [], cluster_policy(sandbox_enabled=False), None, None) is None


def test_b200_labels_with_item2_allocatable() -> None:
    """The two partial B200 nodes of one cluster combined: item 1's labels, item 2's allocatable."""
    objs = sample_objects(B200)
    merged = {**objs[0], "status": objs[1]["status"]}
    jobs = [pod("train-0", requests={"nvidia.com/gpu": 4}), pod("train-1", requests={"nvidia.com/gpu": 2})]
    d = derive_node(node_info(merged), jobs, None, None, None)
    assert d is not None
    assert d.resources == (
        DerivedResource("nvidia.com/gpu", ResourceKind.GPU, "B200", capacity=8, allocatable=8, used=6),
    )
    assert d.resources[0].free == 2
    assert d.flag_codes() == ["no_cluster_policy"]
    assert [(c.pod_name, c.count, c.vmi_name) for c in d.consumers] == [
        ("train-0", 4, ""),
        ("train-1", 2, ""),
    ]


def test_mig_mixed_a100_node() -> None:
    node = sample_node(MIG)
    d = derive_node(node, [], cluster_policy(), None, None)
    assert d is not None
    assert (d.workload_mode, d.gpu_model, d.gpu_count, d.gpu_memory_mib) == (
        WorkloadMode.CONTAINER,
        "A100 PCIe 40GB",
        None,
        40536,
    )
    assert d.labels["nvidia.com/gpu.product"] == "A100-PCIE-40GB"  # the raw GFD product is kept
    assert d.flag_codes() == ["gpu_count_unknown", "container_no_devices"]
    # With the allocatable MIG mixed gives (one resource per profile, nvidia.com/gpu left at 0; DOMAIN.md §2):
    with_alloc = NodeInfo(
        name=node.name,
        labels=node.labels,
        allocatable={"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "4", "nvidia.com/mig-2g.10gb": "2"},
    )
    m = derive_node(with_alloc, [], cluster_policy(), None, None)
    assert m is not None
    assert [(r.name, r.kind, r.model, r.framebuffer_gb, r.allocatable, r.stale) for r in m.resources] == [
        ("nvidia.com/gpu", ResourceKind.GPU, "A100 PCIe 40GB", None, 0, True),
        ("nvidia.com/mig-1g.5gb", ResourceKind.MIG, "A100 PCIe 40GB", Decimal(5), 4, False),
        ("nvidia.com/mig-2g.10gb", ResourceKind.MIG, "A100 PCIe 40GB", Decimal(10), 2, False),
    ]
    assert m.flag_codes() == ["stale_resource", "gpu_count_unknown"]


def test_relabel_shows_transitioning_and_other_mode_resources() -> None:
    """A container node relabelled vm-passthrough: device plugin still advertising nvidia.com/gpu."""
    node = NodeInfo(
        name="gpu-node-09",
        labels={
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.workload.config": "vm-passthrough",
            "nvidia.com/gpu.deploy.device-plugin": "true",
            "nvidia.com/gpu.product": "NVIDIA-A10",
        },
        allocatable={"nvidia.com/gpu": "2"},
    )
    d = derive_node(node, [], cluster_policy(), sample_kubevirt(NVIDIA_DOCS_CR), None)
    assert d is not None
    assert (d.workload_mode, d.transitioning) == (WorkloadMode.VM_PASSTHROUGH, True)
    assert d.flag_codes() == [
        "transitioning",
        "resource_other_mode",
        "stale_gfd_labels",
        "gpu_model_unknown",
        "gpu_count_unknown",
        "passthrough_no_devices",
    ]
    assert d.flags[0]["params"]["labels"] == (
        "nvidia.com/gpu.deploy.vfio-manager=<absent>, nvidia.com/gpu.deploy.device-plugin=true"
    )


def test_kata_mode_node() -> None:
    node = NodeInfo(
        name="gpu-node-10",
        labels={**PASSTHROUGH_LABELS, "nvidia.com/gpu.deploy.kata-sandbox-device-plugin": "true"},
        allocatable={"nvidia.com/pgpu": "4"},
    )
    d = derive_node(node, [], cluster_policy(sandbox_mode="kata"), None, None)
    assert d is not None
    assert d.resources == ()
    assert d.flag_codes() == ["kata_mode", "gpu_model_unknown", "gpu_count_unknown", "kubevirt_missing"]
    k = derive_node(node, [], cluster_policy(), None, None)
    assert k is not None and "kata_resource" in k.flag_codes()


def test_model_fields_map_onto_the_models() -> None:
    d = derive_node(
        a2000_node(), [launcher_pod("v", "nvidia.com/GA106_RTX_A2000_12GB")], cluster_policy(), None, None
    )
    assert d is not None
    node_fields = {f.name for f in GpuNode._meta.get_fields() if f.concrete} - {
        "id",
        "present",
        "first_seen",
        "last_seen",
        "created",
        "updated",
    }
    assert set(d.model_fields()) == node_fields
    res_fields = {f.name for f in GpuResource._meta.get_fields() if f.concrete} - {"id", "node"}
    assert set(d.resources[0].model_fields()) == res_fields
    con_fields = {f.name for f in GpuConsumer._meta.get_fields() if f.concrete} - {"id", "node"}
    assert set(d.consumers[0].model_fields()) == con_fields
    # Constructing unsaved model instances validates the value types against the fields.
    # (``ready``/``permitted`` are null=True without blank=True, so full_clean rejects None: excluded.)
    GpuNode(**d.model_fields()).full_clean(
        exclude=["first_seen", "last_seen", "ready"], validate_unique=False, validate_constraints=False
    )
    node = GpuNode(name=d.name)
    GpuResource(node=node, **d.resources[1].model_fields()).full_clean(
        exclude=["node", "permitted"], validate_unique=False, validate_constraints=False
    )
    GpuConsumer(node=node, **d.consumers[0].model_fields()).full_clean(
        exclude=["node"], validate_unique=False, validate_constraints=False
    )
    assert d.model_fields()["workload_mode"] == "vm-passthrough"


def test_unhealthy_and_unparsed() -> None:
    node = NodeInfo(
        name="n",
        labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true"},
        capacity={"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "x"},
        allocatable={"nvidia.com/gpu": "7", "nvidia.com/gpu.shared": "x"},
    )
    d = derive_node(node, [], cluster_policy(), None, None)
    assert d is not None
    assert d.flags[0] == {
        "code": "devices_unhealthy",
        "params": {"resource": "nvidia.com/gpu", "capacity": 8, "allocatable": 7},
    }
    assert "unparsed_quantity" in d.flag_codes()


def _paused_t4(state: str = "success") -> NodeInfo:
    """The T4 vGPU node while the vGPU Device Manager has paused its operands (DOMAIN.md §3 step 3):
    no vGPU resource left, no vGPU config known to the portal."""
    base = t4_custom_node()
    labels = {
        **base.labels,
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "paused-for-vgpu-change",
        "nvidia.com/gpu.deploy.sandbox-validator": "paused-for-vgpu-change",
        "nvidia.com/vgpu.config.state": state,
    }
    return NodeInfo(name=base.name, labels=labels)


@pytest.mark.parametrize("state", ["pending", "success"])
def test_reconfiguring_vgpu_node_gets_no_identity_unknown_flags(state: str) -> None:
    d = derive_node(_paused_t4(state), [], cluster_policy(), None, None)
    assert d is not None
    assert (d.gpu_model, d.gpu_count, d.gpu_memory_mib, d.transitioning) == ("", None, None, True)
    codes = d.flag_codes()
    assert "gpu_count_unknown" not in codes and "gpu_model_unknown" not in codes
    assert codes[0] == "transitioning"
    assert d.flags[0]["params"]["cause"] == "vgpu_paused"
    assert ("vgpu_config_pending" in codes) is (state == "pending")


def test_vgpu_node_without_devices_and_not_reconfiguring_still_asks_for_annotations() -> None:
    base = t4_custom_node()
    d = derive_node(NodeInfo(name=base.name, labels=base.labels), [], cluster_policy(), None, None)
    assert d is not None
    assert {"gpu_model_unknown", "gpu_count_unknown"} <= set(d.flag_codes())


@pytest.mark.django_db
def test_sync_keeps_the_stored_identity_while_reconfiguring() -> None:
    from gpuinventory.sync.apply import _keep_identity
    from tests.factories import stored_node

    stored = stored_node(
        t4_custom_node().name,
        "vm-vgpu",
        gpu_model="Tesla T4",
        gpu_count=2,
        gpu_memory_mib=15360,
        model_source="vgpu_type",
    )
    paused = derive_node(_paused_t4("pending"), [], cluster_policy(), None, None)
    assert paused is not None
    values = _keep_identity(paused, stored)
    assert (values["gpu_model"], values["gpu_count"], values["gpu_memory_mib"], values["model_source"]) == (
        "Tesla T4",
        2,
        15360,
        "vgpu_type",
    )
    assert values["vgpu_config_state"] == "pending"  # everything else is the new derivation
    # A model guessed from the config being applied (a shared config lists every family) is replaced too.
    from dataclasses import replace

    guessed = replace(
        paused, gpu_model="V100X + Tesla T4 + A10", model_source="vgpu_config", gpu_memory_mib=1
    )
    values = _keep_identity(guessed, stored)
    assert (values["gpu_model"], values["gpu_memory_mib"], values["model_source"]) == (
        "Tesla T4",
        15360,
        "vgpu_type",
    )
    # Not reconfiguring: an unknown count is stored as unknown.
    base = t4_custom_node()
    plain = derive_node(NodeInfo(name=base.name, labels=base.labels), [], cluster_policy(), None, None)
    assert plain is not None
    assert _keep_identity(plain, stored)["gpu_count"] is None
    assert _keep_identity(paused, None)["gpu_count"] is None  # a new node has nothing to keep
