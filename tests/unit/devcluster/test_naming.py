"""Name derivation rules of the simulated device plugins and GFD (no cluster)."""

from pathlib import Path

import pytest
import yaml

from devcluster.naming import (
    GPU_MODELS,
    gfd_family,
    gfd_product,
    mdev_type_name,
    passthrough_device_name,
    passthrough_resource_name,
    vgpu_family,
    vgpu_resource_name,
)
from devcluster.server import default_shared_dir


@pytest.mark.parametrize(
    ("text", "device", "expected"),
    [
        ("TU104GL [Tesla T4]", "1eb8", "TU104GL_TESLA_T4"),
        ("GV100GL [Tesla V100 PCIe 16GB]", "1db4", "GV100GL_TESLA_V100_PCIE_16GB"),
        ("GA100 [A100-SXM-64GB]", "20b3", "GA100_A100SXM64GB"),
        ("GA107GL [A2 / A16]", "25b6", "GA107GL_A2___A16"),
        ("GA106 [RTX A2000 12GB]", "2571", "GA106_RTX_A2000_12GB"),
        (
            "GB202GL [RTX PRO 6000 Blackwell Server Edition]",
            "2bb5",
            "GB202GL_RTX_PRO_6000_BLACKWELL_SERVER_EDITION",
        ),
        (None, "26B5", "26b5"),
    ],
)
def test_passthrough_names_follow_get_device_name(text: str | None, device: str, expected: str) -> None:
    """DOMAIN.md §2 worked examples (kubevirt-gpu-device-plugin getDeviceName)."""
    assert passthrough_device_name(text, device) == expected


def test_catalogue_passthrough_names() -> None:
    assert passthrough_resource_name(GPU_MODELS["A100-PCIE-40GB"]) == "nvidia.com/GA100_A100_PCIE_40GB"
    assert passthrough_resource_name(GPU_MODELS["B200"]) == "nvidia.com/GB100_B200"
    assert passthrough_resource_name(GPU_MODELS["L40"]) == "nvidia.com/26b5"


def test_h200_sample_derived_names() -> None:
    """The H200 raw-inputs sample's derived values (read from ../shared at run time)."""
    sample = yaml.safe_load(
        (default_shared_dir() / "samples" / "h200-raw-inputs-and-derived-names.yaml").read_text()
    )
    h200 = GPU_MODELS["H200"]
    assert (
        "nvidia.com/" + passthrough_device_name(h200.pci_ids_text, h200.device_id)
        == sample["derived"]["vm_passthrough_resource"]
    )
    assert h200.pci_vendor_selector == sample["derived"]["kubevirt_pci_vendor_selector"]
    assert h200.pci_device_filter == sample["derived"]["vgpu_device_manager_device_filter"]
    gfd = sample["derived"]["container_mode_gfd_labels"]
    assert gfd_product(sample["raw"]["nvidia_smi"]["name"]) == gfd["nvidia.com/gpu.product"]
    assert gfd_family(h200.compute_capability) == gfd["nvidia.com/gpu.family"]
    assert str(h200.memory_mib) == gfd["nvidia.com/gpu.memory"]
    assert Path(default_shared_dir()).is_dir()


@pytest.mark.parametrize(
    ("model", "vtype", "mdev", "resource"),
    [
        ("T4", "T4-8Q", "GRID T4-8Q", "nvidia.com/GRID_T4-8Q"),
        ("A10", "A10-12Q", "NVIDIA A10-12Q", "nvidia.com/NVIDIA_A10-12Q"),
        ("L40S", "L40S-24Q", "NVIDIA L40S-24Q", "nvidia.com/NVIDIA_L40S-24Q"),
        ("A100-PCIE-40GB", "A100-20C", "NVIDIA A100-20C", "nvidia.com/NVIDIA_A100-20C"),
    ],
)
def test_vgpu_names(model: str, vtype: str, mdev: str, resource: str) -> None:
    """mdev type name prefix by generation; resource keeps case and dashes (readVgpuIDFromFileFunc)."""
    assert mdev_type_name(GPU_MODELS[model], vtype) == mdev
    assert vgpu_resource_name(mdev + "\n") == resource


def test_vgpu_resource_name_whitespace_runs() -> None:
    assert (
        vgpu_resource_name("NVIDIA RTX Pro 6000 Blackwell DC-48C")
        == "nvidia.com/NVIDIA_RTX_Pro_6000_Blackwell_DC-48C"
    )
    assert vgpu_resource_name("GRID  P40-1B") == "nvidia.com/GRID_P40-1B"


@pytest.mark.parametrize(
    ("vtype", "family"),
    [
        ("A10-12Q", "A10"),
        ("A100-1-5C", "A100"),
        ("A100-1-5CME", "A100"),
        ("RTX6000-Ada-24Q", "RTX6000-Ada"),
        ("M60-0Q", "M60"),
    ],
)
def test_vgpu_family(vtype: str, family: str) -> None:
    assert vgpu_family(vtype) == family


def test_gfd_values_match_samples() -> None:
    assert gfd_product("NVIDIA B200") == "NVIDIA-B200"
    assert gfd_family(GPU_MODELS["B200"].compute_capability) == "blackwell"
    assert gfd_family(GPU_MODELS["T4"].compute_capability) == "turing"
    assert gfd_family(GPU_MODELS["L4"].compute_capability) == "ada-lovelace"
