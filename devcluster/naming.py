"""GPU catalogue and the resource/label naming rules the simulator plays.

This module is the simulator's own copy of the rules (the portal keeps a separate implementation on
purpose: here we *play* the device plugins and GFD, there they are *read*). Every rule cites
``../shared/docs/DOMAIN.md`` and the upstream source it was checked against.

Nothing here talks to Kubernetes; it is pure and unit-tested in ``tests/unit/devcluster``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVIDIA_VENDOR_ID = "10de"
RESOURCE_PREFIX = "nvidia.com/"


@dataclass(frozen=True)
class GpuModel:
    """One NVIDIA board the simulator can put into a node.

    Attributes:
        key: Catalogue key used in spec files (e.g. ``"T4"``).
        device_id: PCI device ID, 4 lower-case hex digits (e.g. ``"1eb8"``).
        pci_ids_text: The text after the ID on the device's line in the ``pci.ids`` bundled with
            kubevirt-gpu-device-plugin v1.6.0 (pci.ids 2025.07.11), or ``None`` when the bundled file
            does not know the ID (the plugin then uses the bare hex ID, DOMAIN.md §2).
        nvml_name: NVML device name (``nvidia-smi --query-gpu=name``), input of GFD ``gpu.product``.
        memory_mib: Frame buffer in MiB as GFD reports it in ``nvidia.com/gpu.memory``.
        compute_capability: CUDA compute capability ``(major, minor)``.
        vgpu_family: GPU part of the vGPU type names this board supports (``"T4"`` for ``T4-8Q``),
            or ``None`` when the board has no vGPU support.
        mig_capable: Whether GFD reports ``nvidia.com/mig.capable=true`` (and the operator adds the
            ``mig-manager`` deploy label in container mode, DOMAIN.md §1).
    """

    key: str
    device_id: str
    pci_ids_text: str | None
    nvml_name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    vgpu_family: str | None
    mig_capable: bool

    @property
    def pci_device_filter(self) -> str:
        """The vGPU Device Manager ``device-filter`` form ``0x<DEVICE><VENDOR>``, e.g. ``0x1EB810DE``.

        Source: vgpu-device-manager ``pkg/types/device.go`` (``NewDeviceID``), DOMAIN.md §3.
        """
        return f"0x{self.device_id.upper()}{NVIDIA_VENDOR_ID.upper()}"

    @property
    def pci_vendor_selector(self) -> str:
        """The KubeVirt ``pciVendorSelector`` form ``10DE:<DEVICE>``, e.g. ``10DE:1EB8`` (DOMAIN.md §2, §5.1)."""
        return f"{NVIDIA_VENDOR_ID.upper()}:{self.device_id.upper()}"

    @property
    def mdev_type_prefix(self) -> str:
        """Prefix of ``mdev_type/name`` for this board: ``GRID`` before Ampere, ``NVIDIA`` from Ampere on.

        Source: DOMAIN.md §2 "vm-vgpu" (``GRID T4-8Q`` real on a T4, ``NVIDIA A10-12Q`` in NVIDIA's docs).
        """
        return "GRID" if self.compute_capability[0] < 8 else "NVIDIA"


# Values from ../shared/samples where a sample exists (B200 and A100-PCIE-40GB GFD labels, H200 raw
# inputs, the A2000 device ID); the pci.ids texts are the DOMAIN.md §2 table (pci.ids 2025.07.11).
# memory_mib of boards without a sample is an approximation of what NVML reports.
GPU_MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in (
        GpuModel("T4", "1eb8", "TU104GL [Tesla T4]", "Tesla T4", 15360, (7, 5), "T4", False),
        GpuModel(
            "A100-PCIE-40GB",
            "20f1",
            "GA100 [A100 PCIe 40GB]",
            "NVIDIA A100-PCIE-40GB",
            40536,
            (8, 0),
            "A100",
            True,
        ),
        GpuModel(
            "A100-SXM4-40GB",
            "20b0",
            "GA100 [A100 SXM4 40GB]",
            "NVIDIA A100-SXM4-40GB",
            40536,
            (8, 0),
            "A100X",
            True,
        ),
        GpuModel("A10", "2236", "GA102GL [A10]", "NVIDIA A10", 23028, (8, 6), "A10", False),
        GpuModel("A40", "2235", "GA102GL [A40]", "NVIDIA A40", 46068, (8, 6), "A40", False),
        GpuModel(
            "RTX-A2000-12GB",
            "2571",
            "GA106 [RTX A2000 12GB]",
            "NVIDIA RTX A2000 12GB",
            12282,
            (8, 6),
            None,
            False,
        ),
        GpuModel("L4", "27b8", "AD104GL [L4]", "NVIDIA L4", 23034, (8, 9), "L4", False),
        GpuModel("L40S", "26b9", "AD102GL [L40S]", "NVIDIA L40S", 46068, (8, 9), "L40S", False),
        GpuModel("H100-PCIE", "2331", "GH100 [H100 PCIe]", "NVIDIA H100 PCIe", 81559, (9, 0), "H100", True),
        GpuModel("H200", "2335", "GH100 [H200 SXM 141GB]", "NVIDIA H200", 143771, (9, 0), "H200X", True),
        GpuModel("B200", "2901", "GB100 [B200]", "NVIDIA B200", 183359, (10, 0), None, True),
        # A board newer than the plugin's pci.ids: the resource is the bare hex ID (DOMAIN.md §2, gpu-operator#548).
        GpuModel("L40", "26b5", None, "NVIDIA L40", 46068, (8, 9), "L40", False),
    )
}


def gpu_model(key: str) -> GpuModel:
    """Look a board up in :data:`GPU_MODELS`.

    Raises:
        KeyError: with the known keys when ``key`` is unknown.
    """
    try:
        return GPU_MODELS[key]
    except KeyError:
        raise KeyError(f"unknown GPU model {key!r}; known: {sorted(GPU_MODELS)}") from None


_WS_RUN = re.compile(r"\s+")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_.]")


def passthrough_device_name(pci_ids_text: str | None, device_id: str) -> str:
    """Name part of a passthrough resource, as kubevirt-gpu-device-plugin ``getDeviceName()`` builds it.

    Steps (DOMAIN.md §2 "vm-passthrough"; [KGDP] ``pkg/device_plugin/device_plugin.go``): trim,
    upper-case, ``/`` → ``_``, ``.`` → ``_``, whitespace runs → ``_``, drop every char not in
    ``[A-Za-z0-9_.]``. An ID missing from the bundled pci.ids gives the bare lower-case hex ID.

    Args:
        pci_ids_text: Text after the ID on the pci.ids line, e.g. ``"GA102GL [A10]"``; ``None`` if absent.
        device_id: 4-hex-digit PCI device ID, any case.

    Returns:
        e.g. ``"GA102GL_A10"``, ``"GA107GL_A2___A16"`` or ``"26b5"`` (no ``nvidia.com/`` prefix).
    """
    if pci_ids_text is None or not pci_ids_text.strip():
        return device_id.lower()
    name = pci_ids_text.strip().upper()
    name = name.replace("/", "_").replace(".", "_")
    name = _WS_RUN.sub("_", name)
    return _NOT_NAME_CHAR.sub("", name)


def passthrough_resource_name(model: GpuModel) -> str:
    """Full extended-resource name a vm-passthrough node advertises for ``model``, e.g. ``nvidia.com/GA102GL_A10``."""
    return RESOURCE_PREFIX + passthrough_device_name(model.pci_ids_text, model.device_id)


def mdev_type_name(model: GpuModel, vgpu_type: str) -> str:
    """The ``mdev_type/name`` sysfs text of ``vgpu_type`` on ``model``, e.g. ``"GRID T4-8Q"``, ``"NVIDIA A10-12Q"``.

    Source: DOMAIN.md §2 "vm-vgpu" (prefix by generation; go-nvlib ``parseMdevTypeName`` takes the last token).
    """
    return f"{model.mdev_type_prefix} {vgpu_type}"


def vgpu_resource_name(mdev_name: str) -> str:
    """Resource name the sandbox device plugin advertises for an mdev type name.

    kubevirt-gpu-device-plugin ``readVgpuIDFromFileFunc()``: trim the newline, replace every whitespace
    run with ``_``, keep case, dashes and every other character (DOMAIN.md §2; plugin unit test
    ``GRID P40-1B`` → ``GRID_P40-1B``).

    Args:
        mdev_name: ``mdev_type/name`` content, e.g. ``"GRID T4-8Q\\n"``.

    Returns:
        e.g. ``"nvidia.com/GRID_T4-8Q"``.
    """
    return RESOURCE_PREFIX + _WS_RUN.sub("_", mdev_name.strip())


def vgpu_family(vgpu_type: str) -> str:
    """GPU part of a vGPU type name: ``A10-12Q`` → ``A10``, ``A100-1-5C`` → ``A100``, ``RTX6000-Ada-24Q`` → ``RTX6000-Ada``.

    Grammar from vgpu-device-manager ``pkg/types/vgpu_type.go`` (DOMAIN.md §2): time-sliced
    ``<GPU>-<GB><S>``, MIG-backed ``<GPU>-<G>-<GB><S>[suffix]`` where ``<G>`` is all digits.
    """
    parts = vgpu_type.split("-")
    if len(parts) >= 3 and parts[-2].isdigit():
        return "-".join(parts[:-2])
    return "-".join(parts[:-1])


_GFD_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")


def gfd_product(nvml_name: str) -> str:
    """GFD ``nvidia.com/gpu.product`` value: drop chars outside ``[A-Za-z0-9-_. ]``, spaces → ``-``.

    Source: k8s-device-plugin ``internal/lm/resource.go`` ``sanitise()`` (DOMAIN.md §4);
    ``NVIDIA H200`` → ``NVIDIA-H200`` as in the H200 sample.
    """
    return _GFD_DROP.sub("", nvml_name).strip().replace(" ", "-")


def gfd_family(compute_capability: tuple[int, int]) -> str:
    """GFD ``nvidia.com/gpu.family`` from the compute capability (k8s-device-plugin ``getArchFamily()``, DOMAIN.md §4)."""
    major, minor = compute_capability
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    return {5: "maxwell", 6: "pascal", 9: "hopper", 10: "blackwell", 12: "blackwell", 13: "rubin"}.get(
        major, "undefined"
    )
