"""Resource-name rules: what an ``nvidia.com/*`` extended resource is, the PCI and vGPU tables
behind them. Which GPU model / how many GPUs a node has is ``gpuinventory/identity.py``.

Every rule cites DOMAIN.md (``../shared/docs/DOMAIN.md``) and the upstream source named there.
Pure functions: no ORM, no Kubernetes.

Resource grammars (DOMAIN.md §2) do not overlap, so a name is classified by its text alone:

* container (NVIDIA k8s-device-plugin, [K8DP]): ``nvidia.com/gpu``, ``nvidia.com/gpu.shared``,
  ``nvidia.com/mig-<profile>`` (lower case);
* passthrough (kubevirt-gpu-device-plugin ``getDeviceName()``, [KGDP]): ``[A-Za-z0-9_]`` only with
  at least one upper-case letter (upper-cased since Jan 2022; older plugins kept mixed case such
  as ``TU104GL_Tesla_T4``), or the bare lower-case 4-hex-digit PCI device ID (``2571``);
* vGPU (same plugin, ``mdev_type/name`` with whitespace → ``_``, [KGDP]
  ``readVgpuIDFromFileFunc()``): contains ``-`` (every vGPU type has one; passthrough names never do,
  the plugin deletes ``-``);
* everything else under ``nvidia.com/`` (``roce``, ``rdma_shared_device_a``, ``hostdev`` from
  NVIDIA's network operator, the Kata plugin's ``pgpu``/``nvswitch``) is not a KubeVirt GPU and
  classifies as ``None``. Kata's names are listed in ``KATA_RESOURCES`` so the node view can flag
  them (DOMAIN.md §2 "Kata mode", pitfall 15). Names outside ``nvidia.com/`` are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from decimal import Decimal

from gpuinventory.choices import ResourceKind, WorkloadMode
from portal.k8s import KubeVirtInfo

PREFIX = "nvidia.com/"
NVIDIA_VENDOR = "10de"

#: Resources of the Kata sandbox device plugin (NVIDIA/cloud-native-docs
#: ``confidential-containers/configure-workloads.rst``; DOMAIN.md §2 "Kata mode").
KATA_RESOURCES = frozenset({"nvidia.com/pgpu", "nvidia.com/nvswitch"})


class ModelSource:
    """Values of ``GpuNode.model_source``: where the node's GPU model came from."""

    GFD = "gfd"  # nvidia.com/gpu.product (container nodes)
    PASSTHROUGH_NAME = "passthrough_name"  # nvidia.com/<NAME> of the sandbox device plugin
    PCI_ID = "pci_id"  # bare hex resource name, model via PCI_MODELS or the KubeVirt CR
    VGPU_TYPE = "vgpu_type"  # advertised vGPU types
    VGPU_CONFIG = "vgpu_config"  # types of the node's vGPU Device Manager config
    ANNOTATION = "annotation"  # portal.labels.GPU_MODEL set by an admin
    UNKNOWN = ""


@dataclass(frozen=True)
class PciModel:
    """One row of the PCI device ID table.

    Attributes:
        device_id: lower-case 4-hex-digit PCI device ID (vendor 10de).
        pci_text: the device's text in pci.ids 2025.07.11 (bundled in kubevirt-gpu-device-plugin v1.6.0).
        model: the marketing name (text in brackets), e.g. ``"RTX A2000 12GB"``.
        vgpu_families: the ``<GPU>`` part of the vGPU types the GPU supports, as used by the
            operator's ``default`` vGPU config for this device ID (empty: no vGPU support there).
        vgpu_memory_gb: GPU memory the ``default`` config divides (GB × count of its entry,
            "half the GPU memory each", DOMAIN.md §3); None without vGPU support.
        memory_mib: per-GPU memory in MiB as GFD's ``nvidia.com/gpu.memory`` reports it (the
            NVML total; it varies slightly with the driver), None when no source gives it.
            Sources: DOMAIN.md §4 (A100 40GB 40536, H100 80GB 81559, H200 143771, B200 183359);
            nvidia-smi totals listed in modal-labs/modal-client PR #2797 (T4 15360, A10 23028,
            L4 23034, L40S 46068, A100 80GB 81920; its "H100: 81559" matches DOMAIN.md §4 and is
            used for H100 PCIe too).
    """

    device_id: str
    pci_text: str
    model: str
    vgpu_families: tuple[str, ...] = ()
    vgpu_memory_gb: int | None = None
    memory_mib: int | None = None


#: DOMAIN.md §2 worked-examples table (pci.ids 2025.07.11), plus 10de:1e02 from the KubeVirt CR
#: sample kubevirt-cr-pcihostdevices-kubevirt-4950.yaml. vGPU families and memory from the
#: ``default`` config of gpu-operator-default-vgpu-devices-config.yaml (tested against the sample).
PCI_MODELS: dict[str, PciModel] = {
    m.device_id: m
    for m in (
        PciModel("1eb8", "TU104GL [Tesla T4]", "Tesla T4", ("T4",), 16, 15360),
        PciModel("1db4", "GV100GL [Tesla V100 PCIe 16GB]", "Tesla V100 PCIe 16GB", ("V100",), 16),
        PciModel("1e02", "TU102 [TITAN RTX]", "TITAN RTX"),
        PciModel("20b0", "GA100 [A100 SXM4 40GB]", "A100 SXM4 40GB", ("A100X",), 40, 40536),
        PciModel("20b1", "GA100 [A100 PCIe 40GB]", "A100 PCIe 40GB", memory_mib=40536),
        PciModel("20f1", "GA100 [A100 PCIe 40GB]", "A100 PCIe 40GB", ("A100",), 40, 40536),
        PciModel("20b3", "GA100 [A100-SXM-64GB]", "A100-SXM-64GB"),
        PciModel("20b5", "GA100 [A100 PCIe 80GB]", "A100 PCIe 80GB", ("A100D",), 80, 81920),
        PciModel("20b7", "GA100GL [A30 PCIe]", "A30 PCIe", ("A30",), 24),
        PciModel("2236", "GA102GL [A10]", "A10", ("A10",), 24, 23028),
        PciModel("2235", "GA102GL [A40]", "A40", ("A40",), 48),
        PciModel("2571", "GA106 [RTX A2000 12GB]", "RTX A2000 12GB"),
        PciModel("25b6", "GA107GL [A2 / A16]", "A2 / A16", ("A16", "A2"), 16),
        PciModel("26b9", "AD102GL [L40S]", "L40S", ("L40S",), 48, 46068),
        PciModel("27b8", "AD104GL [L4]", "L4", ("L4",), 24, 23034),
        PciModel("2330", "GH100 [H100 SXM5 80GB]", "H100 SXM5 80GB", ("H100XM",), 80, 81559),
        PciModel("2331", "GH100 [H100 PCIe]", "H100 PCIe", ("H100",), 80, 81559),
        PciModel("2335", "GH100 [H200 SXM 141GB]", "H200 SXM 141GB", ("H200X",), 140, 143771),
        PciModel("2901", "GB100 [B200]", "B200", ("B200X",), 180, 183359),
        PciModel(
            "2bb5",
            "GB202GL [RTX PRO 6000 Blackwell Server Edition]",
            "RTX PRO 6000 Blackwell Server Edition",
            ("DC",),
            96,
        ),
    )
}


# --- name derivation (the device plugins' rules, used to build the table and in tests) -------


def passthrough_device_name(pci_text: str | None, device_id: str) -> str:
    """The NAME the sandbox device plugin derives for a PCI device (DOMAIN.md §2, pitfall 4).

    [KGDP] ``pkg/device_plugin/device_plugin.go getDeviceName()``: trim, upper-case, ``/`` and
    ``.`` → ``_``, whitespace runs → ``_``, drop everything outside ``[A-Za-z0-9_.]``; the bare
    lower-case device ID when pci.ids has no line for it.

    Args:
        pci_text: text after the ID on the device's pci.ids line, or None when not found.
        device_id: 4-hex-digit PCI device ID, any case.

    Returns:
        e.g. ``"GA106_RTX_A2000_12GB"``, ``"GA107GL_A2___A16"``, or ``"26b5"``.
    """
    if pci_text is None or not pci_text.strip():
        return device_id.lower()
    name = pci_text.strip().upper().replace("/", "_").replace(".", "_")
    name = re.sub(r"\s+", "_", name)
    return re.sub(r"[^A-Za-z0-9_.]", "", name)


def passthrough_resource_name(pci_text: str | None, device_id: str) -> str:
    """``nvidia.com/`` + ``passthrough_device_name()`` (DOMAIN.md §2)."""
    return PREFIX + passthrough_device_name(pci_text, device_id)


def vgpu_resource_name(mdev_type_name: str) -> str:
    """Resource name of an mdev type: trailing newline trimmed, whitespace runs → ``_``, case and
    dashes kept (DOMAIN.md §2, [KGDP] ``readVgpuIDFromFileFunc()``): ``GRID T4-8Q`` → ``nvidia.com/GRID_T4-8Q``.
    """
    return PREFIX + re.sub(r"\s+", "_", mdev_type_name.strip())


def mdev_type_name(resource_name: str) -> str:
    """Best inverse of ``vgpu_resource_name``: the ``mdevNameSelector`` KubeVirt needs
    (``nvidia.com/NVIDIA_A10-12Q`` → ``NVIDIA A10-12Q``; DOMAIN.md §5.1, pitfall 9)."""
    return resource_name.removeprefix(PREFIX).replace("_", " ")


def parse_pci_ids_line(line: str) -> tuple[str, str]:
    """Split a pci.ids device line ``"\\t2335  GH100 [H200 SXM 141GB]"`` into ``("2335", text)``.

    Raises:
        ValueError: the line is not a ``\\t<4 hex> <text>`` device line.
    """
    m = re.fullmatch(r"\t([0-9a-fA-F]{4})\s+(.*)", line.rstrip("\n"))
    if not m:
        raise ValueError(f"not a pci.ids device line: {line!r}")
    return m.group(1).lower(), m.group(2)


def kubevirt_pci_selector(device_id: str) -> str:
    """``pciVendorSelector`` for an NVIDIA device ID: ``"10DE:2335"`` (DOMAIN.md §2, §5.1)."""
    return f"10DE:{device_id.upper()}"


def gfd_product(nvml_name: str) -> str:
    """GFD's ``nvidia.com/gpu.product`` for an NVML device name: characters outside
    ``[A-Za-z0-9-_. ]`` removed, spaces → ``-`` (DOMAIN.md §4, [K8DP] ``internal/lm/resource.go``).
    ``"NVIDIA H200"`` → ``"NVIDIA-H200"``."""
    return re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name).replace(" ", "-")


def gfd_family(compute_capability: str) -> str:
    """GFD's ``nvidia.com/gpu.family`` from a compute capability ``"major.minor"`` (DOMAIN.md §4):
    7.0–7.4 volta, 7.5 turing, 8.0–8.8 ampere, 8.9 ada-lovelace, 9 hopper, 10/12 blackwell,
    13 rubin; ``"undefined"`` otherwise."""
    major_s, _, minor_s = compute_capability.partition(".")
    major, minor = int(major_s), int(minor_s or "0")
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if minor >= 9 else "ampere"
    return {9: "hopper", 10: "blackwell", 12: "blackwell", 13: "rubin"}.get(major, "undefined")


# --- vGPU types --------------------------------------------------------------------------------

# [VDM] pkg/types/vgpu_type.go (v0.5.0): time-sliced and MIG-backed grammars.
_TIME_SLICED = re.compile(r"(?P<gpu>[A-Z0-9]+(?:-[a-zA-Z]+)*)-(?P<gb>0|[1-9][0-9]*)(?P<s>[ABCQ])")
_MIG_BACKED = re.compile(
    r"(?P<gpu>[A-Z0-9]+)-(?P<g>[1-9])-(?P<gb>0|[1-9][0-9]*)(?P<s>[ABCQ])(?P<attr>ME|NOME|MEALL|GFX)?"
)


@dataclass(frozen=True)
class VgpuType:
    """A parsed vGPU type (DOMAIN.md §2 "vGPU type grammar", [VDM] ``pkg/types/vgpu_type.go``).

    Attributes:
        name: the type, e.g. ``"A100-1-5CME"``.
        gpu: the ``<GPU>`` part (the "vGPU family"), e.g. ``"A100"``, ``"RTX6000-Ada"``, ``"DC"``.
        gpu_instances: ``<G>`` of MIG-backed types, 0 for time-sliced ones.
        framebuffer_gb: frame buffer in GB; ``0`` in the name means 512 MB → ``Decimal("0.5")``.
        series: ``A``, ``B``, ``C`` or ``Q``.
        attribute: MIG attribute ``ME``/``NOME``/``MEALL``/``GFX`` or ``""``.
    """

    name: str
    gpu: str
    gpu_instances: int
    framebuffer_gb: Decimal
    series: str
    attribute: str = ""

    @property
    def mig_backed(self) -> bool:
        """True for ``<GPU>-<G>-<GB><S>[attr]`` types."""
        return self.gpu_instances > 0


def parse_vgpu_type(text: str) -> VgpuType | None:
    """Parse a vGPU type name; None when it follows neither grammar.

    ``"T4-8Q"`` → gpu T4, 8 GB, Q; ``"M60-0Q"`` → 0.5 GB; ``"A100-1-5CME"`` → MIG-backed, 1 GPU
    instance, 5 GB, C, ME; ``"DC-1-24CGFX"`` → gpu DC, 24 GB, C, GFX. Time-sliced is tried first,
    as upstream does (DOMAIN.md §2, [VDM] ``ParseVGPUType``).
    """
    m = _TIME_SLICED.fullmatch(text)
    g = 0
    attr = ""
    if m is None:
        m = _MIG_BACKED.fullmatch(text)
        if m is None:
            return None
        g = int(m.group("g"))
        attr = m.group("attr") or ""
    gb = int(m.group("gb"))
    return VgpuType(
        name=text,
        gpu=m.group("gpu"),
        gpu_instances=g,
        framebuffer_gb=Decimal("0.5") if gb == 0 else Decimal(gb),
        series=m.group("s"),
        attribute=attr,
    )


def model_for_pci_id(device_id: str) -> str | None:
    """Marketing name for an NVIDIA PCI device ID from ``PCI_MODELS`` (``"2571"`` → ``"RTX A2000 12GB"``)."""
    entry = PCI_MODELS.get(device_id.lower())
    return entry.model if entry else None


def memory_mib_for_model(model: str) -> int | None:
    """Per-GPU memory in MiB of a display model from ``PCI_MODELS`` (``"Tesla T4"`` → 15360);
    None when the table has no (or no single) value for it."""
    sizes = {m.memory_mib for m in PCI_MODELS.values() if m.model == model}
    return sizes.pop() if len(sizes) == 1 else None


#: GFD products whose squeezed text (below) differs from the table model's; observed/derived
#: names: DOMAIN.md §4 examples ``NVIDIA-H100-80GB-HBM3`` (SXM5), ``NVIDIA-A100-80GB-PCIe``,
#: ``NVIDIA-H200`` (the H200 read on a real node is 10de:2335, DOMAIN.md §2).
_GFD_ALIASES = {
    "H10080GBHBM3": "H100 SXM5 80GB",
    "A10080GBPCIE": "A100 PCIe 80GB",
    "H200": "H200 SXM 141GB",
    "A30": "A30 PCIe",
}


def _squeeze(text: str) -> str:
    """Upper-case, without a leading ``NVIDIA`` word and without spaces, ``-``, ``_``."""
    key = re.sub(r"[\s_-]+", "", text.upper())
    return key.removeprefix("NVIDIA")


_MODEL_KEYS = {_squeeze(m.model): m.model for m in PCI_MODELS.values()} | _GFD_ALIASES


def display_model_for_gfd(product: str) -> str:
    """Map a GFD product (``"NVIDIA-A100-PCIE-40GB"``, ``"A100-PCIE-40GB"``, ``"Tesla-T4"``) to the
    display name ``PCI_MODELS`` uses for the same GPU (``"A100 PCIe 40GB"``, ``"Tesla T4"``), so
    container and VM nodes group under one model. Unknown products are returned unchanged (the raw
    product also stays in ``GpuNode.labels``)."""
    return _MODEL_KEYS.get(_squeeze(product), product) if product else product


def pci_ids_for_family(vgpu_family: str) -> tuple[str, ...]:
    """PCI device IDs whose GPUs support vGPU family ``vgpu_family`` (``"T4"`` → ``("1eb8",)``)."""
    return tuple(m.device_id for m in PCI_MODELS.values() if vgpu_family in m.vgpu_families)


def model_for_vgpu_family(vgpu_family: str) -> str | None:
    """GPU model of a vGPU family when the table names exactly one (``"T4"`` → ``"Tesla T4"``)."""
    models = {PCI_MODELS[i].model for i in pci_ids_for_family(vgpu_family)}
    return models.pop() if len(models) == 1 else None


def memory_gb_for_vgpu_family(vgpu_family: str) -> int | None:
    """GPU memory in GB the vGPU family divides (``"T4"`` → 16), from ``PCI_MODELS``."""
    sizes = {PCI_MODELS[i].vgpu_memory_gb for i in pci_ids_for_family(vgpu_family)}
    return sizes.pop() if len(sizes) == 1 else None


# --- resource classification ---------------------------------------------------------------

_HEX_ID = re.compile(r"[0-9a-f]{4}")
_PASSTHROUGH = re.compile(r"[A-Za-z0-9_]*[A-Z][A-Za-z0-9_]*")
_MIG = re.compile(r"mig-(?P<g>[0-9]+)g\.(?P<gb>[0-9]+)gb(?P<rest>(?:\.[a-z0-9+]+)*)")
_CHIP_CODE = re.compile(r"[A-Z]{2}[0-9]{3}[A-Z]*")


@dataclass(frozen=True)
class ResourceInfo:
    """What an ``nvidia.com/*`` resource is (DOMAIN.md §2).

    Attributes:
        name: full resource name, e.g. ``"nvidia.com/GRID_T4-8Q"``.
        kind: ``ResourceKind``.
        model: GPU model; ``""`` for container kinds (the node's GFD product fills it later),
            ``"unknown model, PCI 10de:XXXX"`` for an unknown bare ID.
        pci_device_id: lower-case 4-hex-digit ID when known (passthrough), else ``""``.
        vgpu_type: bare vGPU type (text after the last ``_``), ``""`` for other kinds.
        framebuffer_gb: vGPU frame buffer (or MIG slice memory) in GB; None when unknown.
        series: vGPU series letter or ``""``.
        mig_backed: MIG-backed vGPU type, or a container MIG device.
    """

    name: str
    kind: ResourceKind
    model: str = ""
    pci_device_id: str = ""
    vgpu_type: str = ""
    framebuffer_gb: Decimal | None = None
    series: str = ""
    mig_backed: bool = False

    @property
    def vgpu_family(self) -> str:
        """``<GPU>`` part of the vGPU type (``"T4"``), ``""`` when not a parsed vGPU type."""
        parsed = parse_vgpu_type(self.vgpu_type) if self.vgpu_type else None
        return parsed.gpu if parsed else ""


#: The workload mode each resource kind belongs to (DOMAIN.md §2).
KIND_MODE: dict[ResourceKind, WorkloadMode] = {
    ResourceKind.GPU: WorkloadMode.CONTAINER,
    ResourceKind.GPU_SHARED: WorkloadMode.CONTAINER,
    ResourceKind.MIG: WorkloadMode.CONTAINER,
    ResourceKind.PASSTHROUGH: WorkloadMode.VM_PASSTHROUGH,
    ResourceKind.VGPU: WorkloadMode.VM_VGPU,
}


def unknown_pci_model(device_id: str) -> str:
    """Display model of a device ID nobody could name: ``"unknown model, PCI 10de:2571"``."""
    return f"unknown model, PCI {NVIDIA_VENDOR}:{device_id.lower()}"


def _passthrough_model(name: str) -> tuple[str, str]:
    """(model, pci_device_id) for a passthrough NAME (without prefix)."""
    matches = [m for m in PCI_MODELS.values() if passthrough_device_name(m.pci_text, m.device_id) == name]
    if matches:
        ids = {m.device_id for m in matches}
        # Two IDs can share one name (10de:20b1 and 10de:20f1), DOMAIN.md §2: then no single ID.
        return matches[0].model, ids.pop() if len(ids) == 1 else ""
    # Not in the table: drop the leading chip code ("GA106", "TU104GL") and turn "_" into spaces.
    parts = [p for p in name.split("_") if p]
    if len(parts) > 1 and _CHIP_CODE.fullmatch(parts[0]):
        parts = parts[1:]
    return " ".join(parts), ""


def _vgpu_model(name: str, vtype: VgpuType | None) -> str:
    """GPU model for a vGPU resource NAME (without prefix).

    The mdev name is ``<prefix> [<board words>] <type>`` (``GRID T4-8Q``, ``NVIDIA A10-12Q``,
    ``NVIDIA RTX Pro 6000 Blackwell DC-48C``; DOMAIN.md §2): board words when present, else the
    table model of the type's family, else the family itself.
    """
    words = name.split("_")[:-1]
    if words and words[0] in {"GRID", "NVIDIA"}:
        words = words[1:]
    if words:
        return " ".join(words)
    if vtype is None:
        return ""
    return model_for_vgpu_family(vtype.gpu) or vtype.gpu


def classify_resource(name: str) -> ResourceInfo | None:
    """Classify one extended resource by name (DOMAIN.md §2, pitfalls 4 and 15).

    Args:
        name: a key of ``status.capacity``/``allocatable``, e.g. ``"nvidia.com/GA106_RTX_A2000_12GB"``.

    Returns:
        A ``ResourceInfo``, or None for non-GPU resources: anything outside ``nvidia.com/``
        (``cpu``, ``devices.kubevirt.io/kvm``), lower-case NVIDIA names that are not GPUs
        (``nvidia.com/roce``), and the Kata plugin's ``nvidia.com/pgpu``/``nvswitch``.
        The kind does not depend on the node's mode (the grammars do not overlap); the node view
        flags a kind that does not belong to the node's mode.
    """
    if not name.startswith(PREFIX) or name in KATA_RESOURCES:
        return None
    rest = name.removeprefix(PREFIX)
    if rest == "gpu":
        return ResourceInfo(name, ResourceKind.GPU)
    if rest == "gpu.shared":
        return ResourceInfo(name, ResourceKind.GPU_SHARED)
    mig = _MIG.fullmatch(rest)
    if mig:
        return ResourceInfo(name, ResourceKind.MIG, framebuffer_gb=Decimal(mig.group("gb")), mig_backed=True)
    if _HEX_ID.fullmatch(rest):
        return ResourceInfo(
            name,
            ResourceKind.PASSTHROUGH,
            model=model_for_pci_id(rest) or unknown_pci_model(rest),
            pci_device_id=rest,
        )
    vgpu_type = rest.rsplit("_", 1)[-1]
    if "-" in vgpu_type and re.search(r"[A-Z]", vgpu_type):
        parsed = parse_vgpu_type(vgpu_type)
        return ResourceInfo(
            name,
            ResourceKind.VGPU,
            model=_vgpu_model(rest, parsed),
            vgpu_type=vgpu_type,
            framebuffer_gb=parsed.framebuffer_gb if parsed else None,
            series=parsed.series if parsed else "",
            mig_backed=parsed.mig_backed if parsed else False,
        )
    if _PASSTHROUGH.fullmatch(rest):
        model, pci_id = _passthrough_model(rest)
        return ResourceInfo(name, ResourceKind.PASSTHROUGH, model=model, pci_device_id=pci_id)
    return None


def _selector_device_id(selector: str) -> str | None:
    """Device ID of an NVIDIA ``pciVendorSelector`` (``"10DE:2236"`` → ``"2236"``), else None."""
    m = re.fullmatch(r"\s*([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\s*", selector)
    if not m or m.group(1).lower() != NVIDIA_VENDOR:
        return None
    return m.group(2).lower()


def resolve_bare_id(info: ResourceInfo, kubevirt: KubeVirtInfo | None) -> ResourceInfo:
    """Use the KubeVirt CR's ``pciHostDevices`` to fill in what the name does not tell.

    * A bare-ID resource (``nvidia.com/26b5``) whose ID is not in ``PCI_MODELS``: when the CR
      permits another, named resource with the same ``pciVendorSelector`` (``10DE:26B5`` →
      ``nvidia.com/AD102GL_L40``), the model comes from that name.
    * A named passthrough resource the table does not know: its PCI device ID comes from the
      selector of the CR entry that lists it (KubeVirt lower-cases selectors, DOMAIN.md §2).

    Args:
        info: a classified resource; non-passthrough kinds are returned unchanged.
        kubevirt: the KubeVirt CR, or None.

    Returns:
        ``info`` or an updated copy.
    """
    if info.kind != ResourceKind.PASSTHROUGH or kubevirt is None:
        return info
    entries = [(e, _selector_device_id(e.selector)) for e in kubevirt.pci_host_devices]
    if info.pci_device_id and info.model == unknown_pci_model(info.pci_device_id):
        for entry, dev in entries:
            named = classify_resource(entry.resource_name)
            if (
                dev == info.pci_device_id
                and entry.resource_name != info.name
                and named is not None
                and named.kind == ResourceKind.PASSTHROUGH
                and not _HEX_ID.fullmatch(entry.resource_name.removeprefix(PREFIX))
            ):
                return replace(info, model=named.model)
        return info
    if not info.pci_device_id:
        ids = {dev for entry, dev in entries if entry.resource_name == info.name and dev}
        if len(ids) == 1:
            return replace(info, pci_device_id=ids.pop())
    return info
