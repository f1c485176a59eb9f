"""permittedHostDevices rules (DOMAIN.md §5.1) on both KubeVirt CR samples."""

from __future__ import annotations

from gpuinventory.naming import ResourceInfo, classify_resource
from gpuinventory.permitted import kubevirt_flags, permitted_state, resource_flags
from portal.k8s import KubeVirtInfo, PermittedMdev, PermittedPci
from tests.factories import sample_kubevirt

NVIDIA_DOCS_CR = "kubevirt-cr-nvidia-docs-gpu-operator.yaml"
KUBEVIRT_4950_CR = "kubevirt-cr-pcihostdevices-kubevirt-4950.yaml"


def info(name: str) -> ResourceInfo:
    r = classify_resource(name)
    assert r is not None
    return r


def test_nvidia_docs_cr_parsed() -> None:
    kv = sample_kubevirt(NVIDIA_DOCS_CR)
    assert kv == KubeVirtInfo(
        namespace="kubevirt",
        name="kubevirt",
        permitted_configured=True,
        pci_host_devices=(PermittedPci("10DE:2236", "nvidia.com/GA102GL_A10", True),),
        mediated_devices=(PermittedMdev("NVIDIA A10-12Q", "nvidia.com/NVIDIA_A10-12Q", True),),
    )
    assert kubevirt_flags(kv) == []


def test_nvidia_docs_cr_permits_a10_only() -> None:
    kv = sample_kubevirt(NVIDIA_DOCS_CR)
    assert permitted_state(info("nvidia.com/GA102GL_A10"), kv) is True
    assert permitted_state(info("nvidia.com/NVIDIA_A10-12Q"), kv) is True
    assert permitted_state(info("nvidia.com/GRID_T4-8Q"), kv) is False
    assert permitted_state(info("nvidia.com/GA106_RTX_A2000_12GB"), kv) is False
    assert permitted_state(info("nvidia.com/gpu"), kv) is None  # container resources: not KubeVirt's
    assert resource_flags(info("nvidia.com/GA102GL_A10"), kv) == []
    assert resource_flags(info("nvidia.com/NVIDIA_A10-12Q"), kv) == []
    assert resource_flags(info("nvidia.com/GRID_T4-8Q"), kv) == [
        {
            "code": "not_permitted",
            "params": {"resource": "nvidia.com/GRID_T4-8Q", "section": "mediatedDevices"},
        }
    ]
    assert resource_flags(info("nvidia.com/GA106_RTX_A2000_12GB"), kv) == [
        {
            "code": "not_permitted",
            "params": {"resource": "nvidia.com/GA106_RTX_A2000_12GB", "section": "pciHostDevices"},
        }
    ]


def test_kubevirt_4950_cr_external_provider_missing() -> None:
    kv = sample_kubevirt(KUBEVIRT_4950_CR)
    assert kv.pci_host_devices == (PermittedPci("10DE:1E02", "nvidia.com/TU102_TITAN_RTX", False),)
    assert kv.mediated_devices == ()
    titan = info("nvidia.com/TU102_TITAN_RTX")
    assert permitted_state(titan, kv) is True
    expected = [{"code": "external_provider_missing", "params": {"resource": "nvidia.com/TU102_TITAN_RTX"}}]
    assert resource_flags(titan, kv) == expected
    assert kubevirt_flags(kv) == expected


def test_absent_permitted_host_devices_means_no_check() -> None:
    kv = KubeVirtInfo("kubevirt", "kubevirt", permitted_configured=False)
    assert permitted_state(info("nvidia.com/GRID_T4-8Q"), kv) is None
    assert resource_flags(info("nvidia.com/GRID_T4-8Q"), kv) == []
    assert permitted_state(info("nvidia.com/GRID_T4-8Q"), None) is None


def test_wrong_lists_and_selectors() -> None:
    kv = KubeVirtInfo(
        "kubevirt",
        "kubevirt",
        True,
        pci_host_devices=(
            PermittedPci("10DE:1EB8", "nvidia.com/GRID_T4-8Q", True),  # a vGPU under pciHostDevices
            PermittedPci("10DE:2235", "nvidia.com/GA102GL_A10", True),  # A40's ID for the A10 name
        ),
        mediated_devices=(
            PermittedMdev("NVIDIA_A10-12Q", "nvidia.com/NVIDIA_A10-12Q", True),  # underscores
            PermittedMdev("GA106", "nvidia.com/GA106_RTX_A2000_12GB", True),
        ),
    )
    assert resource_flags(info("nvidia.com/GRID_T4-8Q"), kv) == [
        {
            "code": "vgpu_listed_as_pci",
            "params": {"resource": "nvidia.com/GRID_T4-8Q", "mdev_name": "GRID T4-8Q"},
        }
    ]
    assert resource_flags(info("nvidia.com/GA102GL_A10"), kv) == [
        {
            "code": "pci_selector_mismatch",
            "params": {
                "resource": "nvidia.com/GA102GL_A10",
                "selector": "10DE:2235",
                "expected": "10DE:2236",
            },
        }
    ]
    assert resource_flags(info("nvidia.com/NVIDIA_A10-12Q"), kv) == [
        {
            "code": "mdev_selector_mismatch",
            "params": {
                "resource": "nvidia.com/NVIDIA_A10-12Q",
                "selector": "NVIDIA_A10-12Q",
                "expected": "NVIDIA A10-12Q",
            },
        }
    ]
    assert [f["code"] for f in resource_flags(info("nvidia.com/GA106_RTX_A2000_12GB"), kv)] == [
        "passthrough_listed_as_mdev"
    ]
    assert [f["code"] for f in kubevirt_flags(kv)] == [
        "vgpu_listed_as_pci",
        "pci_selector_mismatch",
        "mdev_selector_mismatch",
        "passthrough_listed_as_mdev",
    ]
