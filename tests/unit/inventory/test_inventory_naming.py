"""Resource-name and GPU-identity rules (DOMAIN.md §2, §4) on the real samples."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuinventory import naming
from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.identity import gfd_count, gfd_memory_mib, gfd_model, identify_gpus
from gpuinventory.naming import (
    PCI_MODELS,
    ModelSource,
    ResourceInfo,
    classify_resource,
    gfd_family,
    kubevirt_pci_selector,
    mdev_type_name,
    model_for_pci_id,
    parse_pci_ids_line,
    parse_vgpu_type,
    passthrough_resource_name,
    resolve_bare_id,
    vgpu_resource_name,
)
from gpuinventory.vgpuconfig import device_filter_for
from portal.k8s import KubeVirtInfo, PermittedPci
from tests.factories import load_sample, sample_node

# DOMAIN.md §2 worked examples: (PCI ID, pci.ids text, resource).
WORKED_EXAMPLES = [
    ("1eb8", "TU104GL [Tesla T4]", "nvidia.com/TU104GL_TESLA_T4"),
    ("1db4", "GV100GL [Tesla V100 PCIe 16GB]", "nvidia.com/GV100GL_TESLA_V100_PCIE_16GB"),
    ("20b0", "GA100 [A100 SXM4 40GB]", "nvidia.com/GA100_A100_SXM4_40GB"),
    ("20b1", "GA100 [A100 PCIe 40GB]", "nvidia.com/GA100_A100_PCIE_40GB"),
    ("20f1", "GA100 [A100 PCIe 40GB]", "nvidia.com/GA100_A100_PCIE_40GB"),
    ("20b3", "GA100 [A100-SXM-64GB]", "nvidia.com/GA100_A100SXM64GB"),
    ("20b5", "GA100 [A100 PCIe 80GB]", "nvidia.com/GA100_A100_PCIE_80GB"),
    ("20b7", "GA100GL [A30 PCIe]", "nvidia.com/GA100GL_A30_PCIE"),
    ("2236", "GA102GL [A10]", "nvidia.com/GA102GL_A10"),
    ("2235", "GA102GL [A40]", "nvidia.com/GA102GL_A40"),
    ("2571", "GA106 [RTX A2000 12GB]", "nvidia.com/GA106_RTX_A2000_12GB"),
    ("25b6", "GA107GL [A2 / A16]", "nvidia.com/GA107GL_A2___A16"),
    ("26b9", "AD102GL [L40S]", "nvidia.com/AD102GL_L40S"),
    ("27b8", "AD104GL [L4]", "nvidia.com/AD104GL_L4"),
    ("2330", "GH100 [H100 SXM5 80GB]", "nvidia.com/GH100_H100_SXM5_80GB"),
    ("2331", "GH100 [H100 PCIe]", "nvidia.com/GH100_H100_PCIE"),
    ("2335", "GH100 [H200 SXM 141GB]", "nvidia.com/GH100_H200_SXM_141GB"),
    ("2901", "GB100 [B200]", "nvidia.com/GB100_B200"),
    (
        "2bb5",
        "GB202GL [RTX PRO 6000 Blackwell Server Edition]",
        "nvidia.com/GB202GL_RTX_PRO_6000_BLACKWELL_SERVER_EDITION",
    ),
]


@pytest.mark.parametrize(("device_id", "text", "resource"), WORKED_EXAMPLES)
def test_worked_examples_table(device_id: str, text: str, resource: str) -> None:
    assert passthrough_resource_name(text, device_id) == resource
    assert PCI_MODELS[device_id].pci_text == text
    info = classify_resource(resource)
    assert info is not None
    assert info.kind == ResourceKind.PASSTHROUGH
    assert info.model == text[text.index("[") + 1 : -1]
    # 20b1 and 20f1 share one name: then the name alone gives no single PCI ID.
    assert info.pci_device_id == ("" if device_id in {"20b1", "20f1"} else device_id)


def test_bare_ids() -> None:
    assert passthrough_resource_name(None, "26B5") == "nvidia.com/26b5"
    known = classify_resource("nvidia.com/2571")
    unknown = classify_resource("nvidia.com/26b5")
    assert known == ResourceInfo("nvidia.com/2571", ResourceKind.PASSTHROUGH, "RTX A2000 12GB", "2571")
    assert unknown == ResourceInfo(
        "nvidia.com/26b5", ResourceKind.PASSTHROUGH, "unknown model, PCI 10de:26b5", "26b5"
    )
    assert model_for_pci_id("2571") == "RTX A2000 12GB"
    assert model_for_pci_id("26B5") is None


def test_bare_id_resolved_through_kubevirt_selector() -> None:
    info = classify_resource("nvidia.com/26b5")
    assert info is not None
    kv = KubeVirtInfo(
        "kubevirt",
        "kubevirt",
        True,
        pci_host_devices=(
            PermittedPci("10DE:26B5", "nvidia.com/26b5", True),
            PermittedPci("10DE:26B5", "nvidia.com/AD102GL_L40", True),
        ),
    )
    assert resolve_bare_id(info, kv).model == "L40"
    assert resolve_bare_id(info, None) == info


def test_named_resource_gets_pci_id_from_kubevirt_sample() -> None:
    """kubevirt/kubevirt#4950 CR: TITAN RTX 10DE:1E02 (in the table too; a name the table lacks uses the CR)."""
    cr = load_sample("kubevirt-cr-pcihostdevices-kubevirt-4950.yaml")
    entry = cr["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0]
    info = classify_resource(entry["resourceName"])
    assert info == ResourceInfo("nvidia.com/TU102_TITAN_RTX", ResourceKind.PASSTHROUGH, "TITAN RTX", "1e02")
    other = classify_resource("nvidia.com/GA102GL_A10G")
    assert other == ResourceInfo("nvidia.com/GA102GL_A10G", ResourceKind.PASSTHROUGH, "A10G", "")
    kv = KubeVirtInfo(
        "kubevirt",
        "kubevirt",
        True,
        pci_host_devices=(PermittedPci("10DE:2237", "nvidia.com/GA102GL_A10G", True),),
    )
    assert resolve_bare_id(other, kv).pci_device_id == "2237"


@pytest.mark.parametrize(
    ("name", "kind", "model", "vgpu_type", "fb", "series", "mig"),
    [
        ("nvidia.com/GRID_T4-8Q", ResourceKind.VGPU, "Tesla T4", "T4-8Q", Decimal(8), "Q", False),
        ("nvidia.com/GRID_T4-16C", ResourceKind.VGPU, "Tesla T4", "T4-16C", Decimal(16), "C", False),
        ("nvidia.com/GRID_P40-1Q", ResourceKind.VGPU, "P40", "P40-1Q", Decimal(1), "Q", False),
        ("nvidia.com/NVIDIA_A10-12Q", ResourceKind.VGPU, "A10", "A10-12Q", Decimal(12), "Q", False),
        ("nvidia.com/NVIDIA_L40S-24Q", ResourceKind.VGPU, "L40S", "L40S-24Q", Decimal(24), "Q", False),
        (
            "nvidia.com/NVIDIA_RTX_Pro_6000_Blackwell_DC-48C",
            ResourceKind.VGPU,
            "RTX Pro 6000 Blackwell",
            "DC-48C",
            Decimal(48),
            "C",
            False,
        ),
        (
            "nvidia.com/NVIDIA_A100-1-5CME",
            ResourceKind.VGPU,
            "A100 PCIe 40GB",
            "A100-1-5CME",
            Decimal(5),
            "C",
            True,
        ),
        ("nvidia.com/GRID_M60-0Q", ResourceKind.VGPU, "M60", "M60-0Q", Decimal("0.5"), "Q", False),
        ("nvidia.com/gpu", ResourceKind.GPU, "", "", None, "", False),
        ("nvidia.com/gpu.shared", ResourceKind.GPU_SHARED, "", "", None, "", False),
        ("nvidia.com/mig-1g.5gb", ResourceKind.MIG, "", "", Decimal(5), "", True),
        ("nvidia.com/mig-2g.10gb", ResourceKind.MIG, "", "", Decimal(10), "", True),
        ("nvidia.com/mig-1g.10gb.me", ResourceKind.MIG, "", "", Decimal(10), "", True),
    ],
)
def test_classify(
    name: str, kind: ResourceKind, model: str, vgpu_type: str, fb: Decimal | None, series: str, mig: bool
) -> None:
    info = classify_resource(name)
    assert info is not None
    assert (info.kind, info.model, info.vgpu_type, info.framebuffer_gb, info.series, info.mig_backed) == (
        kind,
        model,
        vgpu_type,
        fb,
        series,
        mig,
    )


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "devices.kubevirt.io/kvm",
        "devices.kubevirt.io/vhost-net",
        "nvidia.com/roce",
        "nvidia.com/rdma_shared_device_a",
        "nvidia.com/pgpu",
        "nvidia.com/nvswitch",
        "openshift.io/ens31f0np0_roce",
        "rdma/ens34f0np0_roce",
    ],
)
def test_non_gpu_resources_ignored(name: str) -> None:
    assert classify_resource(name) is None


def test_every_resource_of_the_samples() -> None:
    b200 = sample_node("node-container-b200-network-operator-2471.yaml", 1)
    got = {n: classify_resource(n) for n in b200.allocatable}
    assert {n: i.kind for n, i in got.items() if i} == {"nvidia.com/gpu": ResourceKind.GPU}
    a2000 = sample_node("node-vm-passthrough-a2000-gpu-operator-551.yaml")
    got = {n: classify_resource(n) for n in a2000.capacity}
    assert {n: i.kind for n, i in got.items() if i} == {
        "nvidia.com/2571": ResourceKind.PASSTHROUGH,
        "nvidia.com/GA106_RTX_A2000_12GB": ResourceKind.PASSTHROUGH,
        "nvidia.com/gpu": ResourceKind.GPU,
    }
    t4 = sample_node("node-vm-vgpu-t4-openshift.yaml", 1)
    assert sorted(i.vgpu_type for n in t4.allocatable if (i := classify_resource(n))) == [
        "T4-16C",
        "T4-8C",
        "T4-8Q",
    ]


@pytest.mark.parametrize(
    ("text", "gpu", "g", "gb", "series", "attr"),
    [
        ("T4-8Q", "T4", 0, Decimal(8), "Q", ""),
        ("M60-0Q", "M60", 0, Decimal("0.5"), "Q", ""),
        ("A100-1-5C", "A100", 1, Decimal(5), "C", ""),
        ("A100-1-5CME", "A100", 1, Decimal(5), "C", "ME"),
        ("DC-1-24CGFX", "DC", 1, Decimal(24), "C", "GFX"),
        ("A100D-7-80C", "A100D", 7, Decimal(80), "C", ""),
        ("RTX6000-Ada-24Q", "RTX6000-Ada", 0, Decimal(24), "Q", ""),
        ("6000D-1-42C", "6000D", 1, Decimal(42), "C", ""),
        ("P40-1B", "P40", 0, Decimal(1), "B", ""),
    ],
)
def test_parse_vgpu_type(text: str, gpu: str, g: int, gb: Decimal, series: str, attr: str) -> None:
    t = parse_vgpu_type(text)
    assert t is not None
    assert (t.gpu, t.gpu_instances, t.framebuffer_gb, t.series, t.attribute, t.mig_backed) == (
        gpu,
        g,
        gb,
        series,
        attr,
        g > 0,
    )


@pytest.mark.parametrize("text", ["", "T4", "T4-8", "T4-8X", "t4-8Q", "A100-0-5C", "T4-08Q", "A100-1-5CXX"])
def test_parse_vgpu_type_rejects(text: str) -> None:
    assert parse_vgpu_type(text) is None


def test_vgpu_resource_names() -> None:
    assert vgpu_resource_name("GRID T4-8Q\n") == "nvidia.com/GRID_T4-8Q"
    assert vgpu_resource_name("GRID P40-1B") == "nvidia.com/GRID_P40-1B"
    assert vgpu_resource_name("NVIDIA RTX Pro 6000 Blackwell DC-48C") == (
        "nvidia.com/NVIDIA_RTX_Pro_6000_Blackwell_DC-48C"
    )
    assert mdev_type_name("nvidia.com/NVIDIA_A10-12Q") == "NVIDIA A10-12Q"


def test_h200_raw_inputs_give_the_derived_names() -> None:
    """shared/samples/h200-raw-inputs-and-derived-names.yaml."""
    doc = load_sample("h200-raw-inputs-and-derived-names.yaml")
    raw, derived = doc["raw"], doc["derived"]
    device_id, text = parse_pci_ids_line(raw["pci_ids_line"])
    assert (device_id, text) == ("2335", "GH100 [H200 SXM 141GB]")
    assert device_id == raw["sysfs"]["device"].removeprefix("0x")
    assert passthrough_resource_name(text, device_id) == derived["vm_passthrough_resource"]
    assert derived["vm_passthrough_resource"] == "nvidia.com/GH100_H200_SXM_141GB"
    assert kubevirt_pci_selector(device_id) == derived["kubevirt_pci_vendor_selector"] == "10DE:2335"
    assert device_filter_for(device_id) == derived["vgpu_device_manager_device_filter"] == "0x233510DE"
    assert device_filter_for(device_id) == raw["nvidia_smi"]["pci_device_id"]
    gfd = derived["container_mode_gfd_labels"]
    from gpuinventory.naming import gfd_product

    assert gfd_product(raw["nvidia_smi"]["name"]) == gfd["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert str(raw["nvidia_smi"]["memory_total_mib"]) == gfd["nvidia.com/gpu.memory"] == "143771"
    assert gfd_family(raw["nvidia_smi"]["compute_cap"]) == gfd["nvidia.com/gpu.family"] == "hopper"
    cc_major, cc_minor = raw["nvidia_smi"]["compute_cap"].split(".")
    assert (cc_major, cc_minor) == (gfd["nvidia.com/gpu.compute.major"], gfd["nvidia.com/gpu.compute.minor"])
    container = classify_resource(derived["container_mode_resource"])
    passthrough = classify_resource(derived["vm_passthrough_resource"])
    assert container is not None and container.kind == ResourceKind.GPU
    assert passthrough == ResourceInfo(
        "nvidia.com/GH100_H200_SXM_141GB", ResourceKind.PASSTHROUGH, "H200 SXM 141GB", "2335"
    )
    assert derived["nfd_labels"] == {"feature.node.kubernetes.io/pci-10de.present": "true"}
    assert gfd_model(gfd) == "NVIDIA-H200"
    assert gfd_memory_mib(gfd) == 143771


@pytest.mark.parametrize(
    ("cc", "family"),
    [
        ("7.0", "volta"),
        ("7.5", "turing"),
        ("8.0", "ampere"),
        ("8.9", "ada-lovelace"),
        ("9.0", "hopper"),
        ("10.0", "blackwell"),
        ("12.0", "blackwell"),
        ("13.0", "rubin"),
    ],
)
def test_gfd_family(cc: str, family: str) -> None:
    assert gfd_family(cc) == family


def test_gfd_helpers_on_b200_and_mig_samples() -> None:
    b200 = sample_node("node-container-b200-network-operator-2471.yaml").labels
    assert (gfd_model(b200), gfd_count(b200), gfd_memory_mib(b200)) == ("NVIDIA-B200", 8, 183359)
    mig = sample_node("node-container-mig-mixed-a100-network-operator-211.yaml").labels
    assert (gfd_model(mig), gfd_count(mig), gfd_memory_mib(mig)) == ("A100-PCIE-40GB", None, 40536)
    single = {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu.count": "56"}
    assert (gfd_model(single), gfd_count(single)) == ("A100-SXM4-40GB", None)
    shared = {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": "1"}
    assert (gfd_model(shared), gfd_count(shared)) == ("Tesla-T4", 1)


def _adv(*pairs: tuple[str, int]) -> list[tuple[ResourceInfo, int]]:
    out = []
    for name, n in pairs:
        info = classify_resource(name)
        assert info is not None
        out.append((info, n))
    return out


def test_identify_vm_nodes_ignores_stale_gfd_labels() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe", "nvidia.com/gpu.count": "4"}
    ident = identify_gpus(
        WorkloadMode.VM_PASSTHROUGH, labels, {}, _adv(("nvidia.com/GA100_A100_PCIE_80GB", 2))
    )
    assert (ident.model, ident.count, ident.memory_mib, ident.source) == (
        "A100 PCIe 80GB",
        2,
        81920,  # PCI_MODELS (modal-labs/modal-client#2797), not the stale GFD label
        ModelSource.PASSTHROUGH_NAME,
    )
    assert ident.flags == (
        {
            "code": "stale_gfd_labels",
            "params": {"mode": "vm-passthrough", "product": "NVIDIA-A100-80GB-PCIe"},
        },
    )


def test_identify_unknown_and_annotations() -> None:
    bare = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, {}, _adv(("nvidia.com/26b5", 2)))
    assert (bare.model, bare.count, bare.source) == ("unknown model, PCI 10de:26b5", 2, ModelSource.PCI_ID)
    assert [f["code"] for f in bare.flags] == ["gpu_model_unknown"]
    assert bare.flags[0]["params"] == {"annotation": "gpu-vm-portal.io/gpu-model"}
    annotated = identify_gpus(
        WorkloadMode.VM_PASSTHROUGH, {}, {"gpu-vm-portal.io/gpu-model": "L40"}, _adv(("nvidia.com/26b5", 2))
    )
    assert (annotated.model, annotated.source, annotated.flags) == ("L40", ModelSource.ANNOTATION, ())
    nothing = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, {"gpu-vm-portal.io/gpu-count": "2"}, [])
    assert (nothing.model, nothing.count, [f["code"] for f in nothing.flags]) == (
        "",
        2,
        ["gpu_model_unknown"],
    )


def test_identify_reads_the_deprecated_annotations_and_flags_them() -> None:
    """Nodes annotated before the keys moved to ``gpu-vm-portal.io/`` keep their model and count."""
    old = {"gpu-vm-portal/gpu-model": "L40", "gpu-vm-portal/gpu-count": " 2 "}
    ident = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, old, [])
    assert (ident.model, ident.count, ident.source) == ("L40", 2, ModelSource.ANNOTATION)
    assert list(ident.flags) == [
        {
            "code": "deprecated_annotation",
            "params": {"old": "gpu-vm-portal/gpu-model", "new": "gpu-vm-portal.io/gpu-model", "value": "L40"},
        },
        {
            "code": "deprecated_annotation",
            "params": {"old": "gpu-vm-portal/gpu-count", "new": "gpu-vm-portal.io/gpu-count", "value": "2"},
        },
    ]
    both = {"gpu-vm-portal.io/gpu-model": "L40S", "gpu-vm-portal/gpu-model": "L40"}
    newer = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, both, _adv(("nvidia.com/26b5", 2)))
    assert (newer.model, newer.count, newer.flags) == ("L40S", 2, ())


def test_identify_vgpu_counts() -> None:
    # 8×T4 default config: 16 × T4-8Q, 2 per GPU → 8 GPUs.
    by_config = identify_gpus(
        WorkloadMode.VM_VGPU, {}, {}, _adv(("nvidia.com/GRID_T4-8Q", 16)), per_gpu_instances={"T4-8Q": 2}
    )
    assert (by_config.model, by_config.count, by_config.source) == ("Tesla T4", 8, ModelSource.VGPU_TYPE)
    # T4-custom mix: 16 + 2×8 + 12×8 = 128 GB of frame buffer on 16 GB T4s → 8 GPUs.
    mixed = identify_gpus(
        WorkloadMode.VM_VGPU,
        {},
        {},
        _adv(("nvidia.com/GRID_T4-16C", 1), ("nvidia.com/GRID_T4-8C", 2), ("nvidia.com/GRID_T4-8Q", 12)),
    )
    assert (mixed.model, mixed.count) == ("Tesla T4", 8)
    pending = identify_gpus(WorkloadMode.VM_VGPU, {}, {}, [], config_types=["A10-12Q"])
    assert (pending.model, pending.count, pending.source) == ("A10", None, ModelSource.VGPU_CONFIG)
    assert [f["code"] for f in pending.flags] == ["gpu_count_unknown"]


@pytest.mark.parametrize(
    ("product", "model"),
    [
        ("NVIDIA-A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("A100-SXM4-40GB", "A100 SXM4 40GB"),
        ("NVIDIA-A100-80GB-PCIe", "A100 PCIe 80GB"),
        ("Tesla-T4", "Tesla T4"),
        ("Tesla-V100-PCIE-16GB", "Tesla V100 PCIe 16GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100 SXM5 80GB"),
        ("NVIDIA-H100-PCIe", "H100 PCIe"),
        ("NVIDIA-H200", "H200 SXM 141GB"),
        ("NVIDIA-B200", "B200"),
        ("NVIDIA-L4", "L4"),
        ("NVIDIA-L40S", "L40S"),
        ("NVIDIA-A10", "A10"),
        ("NVIDIA-A30", "A30 PCIe"),
        ("NVIDIA-RTX-A2000-12GB", "RTX A2000 12GB"),
        ("NVIDIA-GeForce-RTX-4090", "NVIDIA-GeForce-RTX-4090"),  # unknown: unchanged
        ("", ""),
    ],
)
def test_gfd_product_maps_to_the_pci_table_name(product: str, model: str) -> None:
    assert naming.display_model_for_gfd(product) == model


def test_container_node_model_is_the_pci_table_name() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-PCIE-40GB-SHARED", "nvidia.com/gpu.count": "2"}
    ident = identify_gpus(WorkloadMode.CONTAINER, labels, {}, ())
    assert (ident.model, ident.count, ident.memory_mib, ident.source) == ("A100 PCIe 40GB", 2, 40536, "gfd")
    with_label = identify_gpus(WorkloadMode.CONTAINER, {**labels, "nvidia.com/gpu.memory": "40960"}, {}, ())
    assert with_label.memory_mib == 40960  # GFD's own number wins over the table


@pytest.mark.parametrize(
    ("model", "mib"),
    [
        ("Tesla T4", 15360),
        ("A100 PCIe 40GB", 40536),
        ("A100 SXM4 40GB", 40536),
        ("A100 PCIe 80GB", 81920),
        ("A10", 23028),
        ("L4", 23034),
        ("L40S", 46068),
        ("H100 SXM5 80GB", 81559),
        ("H100 PCIe", 81559),
        ("H200 SXM 141GB", 143771),
        ("B200", 183359),
        ("A40", None),
        ("RTX A2000 12GB", None),
        ("Tesla T4 + A10", None),
        ("", None),
    ],
)
def test_memory_mib_for_model(model: str, mib: int | None) -> None:
    assert naming.memory_mib_for_model(model) == mib


def test_vm_nodes_get_memory_from_the_pci_table() -> None:
    pt = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, {}, _adv(("nvidia.com/GA100_A100_PCIE_40GB", 4)))
    assert (pt.model, pt.count, pt.memory_mib) == ("A100 PCIe 40GB", 4, 40536)
    vgpu = identify_gpus(WorkloadMode.VM_VGPU, {}, {}, _adv(("nvidia.com/GRID_T4-8Q", 4)))
    assert (vgpu.model, vgpu.count, vgpu.memory_mib) == ("Tesla T4", 2, 15360)
    unknown = identify_gpus(WorkloadMode.VM_PASSTHROUGH, {}, {}, _adv(("nvidia.com/GA102GL_A40", 1)))
    assert (unknown.model, unknown.memory_mib) == ("A40", None)
