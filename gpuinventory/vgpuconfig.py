"""The NVIDIA vGPU Device Manager config file: parse it, and say what a config does to a node.

Format (DOMAIN.md §3; [VDM] ``api/spec/v1/spec.go``, ``api/spec/v1/helpers.go``,
``pkg/types/vgpu_config.go``; the GPU Operator mounts ConfigMap key ``config.yaml``)::

    version: v1                      # required; only "v1"
    vgpu-configs:                    # required, >= 1 config; name -> list of >= 1 entries
      <name>:
        - device-filter: "0x1EB810DE"  # optional; string or list; PCI <device><vendor> hex
          devices: all                 # required; "all" or a list of GPU indices
          vgpu-devices: {"T4-8Q": 2}   # required; vGPU type -> count per matching GPU

How the manager applies a config ([VDM] ``cmd/nvidia-vgpu-dm/assert/assert.go
WalkSelectedVGPUConfigForEachGPU``, ``pkg/vgpu/config.go SetVGPUConfig``): for each entry in
order, for each GPU (index = position in the PCI enumeration) the entry matches by device
filter and index, it deletes every vGPU on that GPU and creates the entry's set. So the *last*
matching entry decides a GPU's set, GPUs no entry matches keep what they had (DOMAIN.md §3, the
``T4-custom`` sample), and a type the GPU does not support makes the whole apply fail.

This module is written independently of ``devcluster/vgpuconfig.py`` (the simulator's copy);
the portal never imports ``devcluster``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from gpuinventory.naming import NVIDIA_VENDOR, parse_vgpu_type

CONFIG_KEY = "config.yaml"
VERSION = "v1"
_SPEC_KEYS = frozenset({"version", "vgpu-configs"})
_ENTRY_KEYS = frozenset({"device-filter", "devices", "vgpu-devices"})


class VgpuConfigError(ValueError):
    """The file is not a valid vGPU Device Manager config; the message says where and why."""


@dataclass(frozen=True)
class ConfigEntry:
    """One entry of a named config.

    Attributes:
        device_filter: normalised filters (``"0x1EB810DE"``: device then vendor, upper-case hex),
            or None when the entry has none (matches every GPU).
        devices: ``"all"`` or the GPU indices the entry applies to.
        vgpu_devices: vGPU type → instances per matching GPU (may be empty: clears the GPU).
    """

    device_filter: tuple[str, ...] | None
    devices: Literal["all"] | tuple[int, ...]
    vgpu_devices: Mapping[str, int]

    def matches_device(self, pci_device_id: str) -> bool:
        """Whether the device filter lets a GPU with this NVIDIA device ID (``"1eb8"``) through."""
        if not self.device_filter:
            return True
        return device_filter_for(pci_device_id) in self.device_filter

    def matches_index(self, index: int) -> bool:
        """Whether the entry applies to the GPU at ``index`` (``devices: all`` or listed)."""
        return self.devices == "all" or index in self.devices

    def as_json(self) -> dict[str, Any]:
        """The JSON shape stored in ``VgpuConfig.entries`` (gpuinventory/models.py)."""
        return {
            "device_filter": list(self.device_filter) if self.device_filter is not None else None,
            "devices": self.devices if self.devices == "all" else list(self.devices),
            "vgpu_devices": dict(self.vgpu_devices),
        }


def device_filter_for(pci_device_id: str, vendor: str = NVIDIA_VENDOR) -> str:
    """``device-filter`` value for a PCI device: ``"2335"`` → ``"0x233510DE"`` (DOMAIN.md §3)."""
    return f"0x{int(pci_device_id, 16):04X}{int(vendor, 16):04X}"


def _normalise_filter(value: str, where: str) -> str:
    """Parse a filter like Go's ``strconv.ParseUint(s, 0, 32)`` ([VDM] ``NewDeviceIDFromString``)."""
    text = value.strip().replace("_", "")
    try:
        number = int(text, 0)
    except ValueError:
        number = -1
    if not 0 <= number <= 0xFFFFFFFF:
        raise VgpuConfigError(f"{where}: device-filter {value!r} is not a 32-bit PCI ID like '0x1EB810DE'")
    return f"0x{number:08X}"


def _parse_entry(raw: Any, where: str) -> ConfigEntry:
    if not isinstance(raw, dict):
        raise VgpuConfigError(f"{where}: an entry must be a mapping, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _ENTRY_KEYS)
    if unknown:
        raise VgpuConfigError(f"{where}: unexpected field {unknown[0]!r}")
    for required in ("devices", "vgpu-devices"):
        if required not in raw:
            raise VgpuConfigError(f"{where}: missing required field {required!r}")

    device_filter: tuple[str, ...] | None = None
    if "device-filter" in raw:
        df = raw["device-filter"]
        if isinstance(df, str):
            device_filter = (_normalise_filter(df, where),) if df else ()
        elif isinstance(df, list) and all(isinstance(x, str) for x in df):
            device_filter = tuple(_normalise_filter(x, where) for x in df)
        else:
            raise VgpuConfigError(f"{where}: device-filter must be a string or a list of strings")

    devices_raw = raw["devices"]
    devices: Literal["all"] | tuple[int, ...]
    if isinstance(devices_raw, str):
        if devices_raw != "all":
            raise VgpuConfigError(
                f"{where}: invalid string input for 'devices': {devices_raw!r} (only 'all')"
            )
        devices = "all"
    elif isinstance(devices_raw, list) and all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in devices_raw
    ):
        devices = tuple(devices_raw)
    else:
        raise VgpuConfigError(f"{where}: devices must be 'all' or a list of GPU indices")

    vd = raw["vgpu-devices"]
    if vd is None:
        vd = {}
    if not isinstance(vd, dict):
        raise VgpuConfigError(f"{where}: vgpu-devices must be a mapping of vGPU type to count")
    vgpu_devices: dict[str, int] = {}
    mig_backed: set[bool] = set()
    for key, count in vd.items():
        vtype = str(key)
        parsed = parse_vgpu_type(vtype)
        if parsed is None:
            raise VgpuConfigError(f"{where}: invalid format for vGPU type {vtype!r}")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise VgpuConfigError(
                f"{where}: invalid count for {vtype!r}: {count!r} (must be a positive integer)"
            )
        mig_backed.add(parsed.mig_backed)
        vgpu_devices[vtype] = count
    if len(mig_backed) > 1:
        raise VgpuConfigError(f"{where}: cannot mix time-sliced and MIG-backed vGPU devices on the same GPU")
    return ConfigEntry(device_filter=device_filter, devices=devices, vgpu_devices=vgpu_devices)


def parse_config_file(text: str) -> dict[str, list[ConfigEntry]]:
    """Parse and validate a vGPU Device Manager config file (DOMAIN.md §3).

    Validation follows [VDM] ``api/spec/v1/spec.go`` and ``VGPUConfig.AssertValid``: ``version``
    must be ``v1``; ``vgpu-configs`` needs at least one config, each with at least one entry;
    unknown keys are rejected at both levels; ``devices`` is ``all`` or a list of indices;
    ``device-filter`` a string or list of strings; every vGPU type must follow the type grammar
    with a count > 0, and time-sliced and MIG-backed types cannot be mixed in one entry.
    Stricter than upstream in one point: a ``device-filter`` that is not a number is an error
    here (upstream silently never matches it).

    Args:
        text: the YAML text (ConfigMap key ``config.yaml``).

    Returns:
        Config name → entries, in file order.

    Raises:
        VgpuConfigError: with a message naming the config/entry and the problem.
    """
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise VgpuConfigError(f"not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise VgpuConfigError("the file must be a mapping with 'version' and 'vgpu-configs'")
    unknown = sorted(str(k) for k in doc if k not in _SPEC_KEYS)
    if unknown:
        raise VgpuConfigError(f"unexpected field {unknown[0]!r}")
    if "version" not in doc:
        raise VgpuConfigError("missing 'version' field")
    if doc["version"] != VERSION:
        raise VgpuConfigError(f"unknown version: {doc['version']!r} (only 'v1')")
    configs_raw = doc.get("vgpu-configs")
    if not isinstance(configs_raw, dict) or not configs_raw:
        raise VgpuConfigError("at least one entry in 'vgpu-configs' is required")
    configs: dict[str, list[ConfigEntry]] = {}
    for name, entries in configs_raw.items():
        cname = str(name)
        if not isinstance(entries, list) or not entries:
            raise VgpuConfigError(f"config {cname!r}: at least one entry is required")
        configs[cname] = [_parse_entry(e, f"config {cname!r} entry {i}") for i, e in enumerate(entries)]
    return configs


def parse_config_map_data(data: Mapping[str, str]) -> dict[str, list[ConfigEntry]]:
    """Parse a ConfigMap's ``data`` (key ``config.yaml``, DOMAIN.md §3).

    Raises:
        VgpuConfigError: the key is missing or its content is invalid.
    """
    if CONFIG_KEY not in data:
        raise VgpuConfigError(f"the ConfigMap has no key {CONFIG_KEY!r}")
    return parse_config_file(data[CONFIG_KEY])


_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


def is_label_safe(name: str) -> bool:
    """Whether a config name can be a node-label value (≤ 63 chars, alphanumerics and ``-_.``,
    alphanumeric at both ends), so ``nvidia.com/vgpu.config`` can select it (DOMAIN.md §3)."""
    return bool(name) and _LABEL_VALUE.fullmatch(name) is not None


def config_types(entries: Sequence[ConfigEntry]) -> list[str]:
    """Every vGPU type a config mentions, in order of first appearance."""
    return list(dict.fromkeys(t for e in entries for t in e.vgpu_devices))


def effective_entry(entries: Sequence[ConfigEntry], pci_device_id: str, index: int) -> ConfigEntry | None:
    """The entry that decides GPU ``index`` (device ``pci_device_id``): the last matching one,
    as the manager applies matching entries in order and each replaces the GPU's set."""
    found = None
    for entry in entries:
        if entry.matches_device(pci_device_id) and entry.matches_index(index):
            found = entry
    return found


def configs_for_model(
    configs: Mapping[str, Sequence[ConfigEntry]], gpu_model_pci_id: str, vgpu_family: str
) -> list[str]:
    """Configs a node with this GPU could take (DOMAIN.md §3).

    A config qualifies when at least one entry matches the device (device filter; any index) and
    every type of every matching entry belongs to the GPU's vGPU family: the manager checks each
    type is supported before touching a GPU and fails otherwise ([VDM] ``SetVGPUConfig``). So
    ``default`` qualifies for a T4 (its ``0x1EB810DE`` entry is ``T4-8Q``) but ``A10-12Q`` does not.

    Args:
        configs: parsed file.
        gpu_model_pci_id: NVIDIA PCI device ID, e.g. ``"1eb8"``.
        vgpu_family: ``<GPU>`` part of the types the GPU supports, e.g. ``"T4"``.

    Returns:
        Config names in file order.
    """
    result = []
    for name, entries in configs.items():
        matching = [e for e in entries if e.matches_device(gpu_model_pci_id)]
        types = [t for e in matching for t in e.vgpu_devices]
        if not types:
            continue
        parsed = [parse_vgpu_type(t) for t in types]
        if all(p is not None and p.gpu == vgpu_family for p in parsed):
            result.append(name)
    return result


def instances_offered(entries: Sequence[ConfigEntry], gpu_pci_ids: Sequence[str]) -> dict[str, int]:
    """vGPU instances a node would advertise under a config, freshly applied.

    Args:
        entries: one config's entries.
        gpu_pci_ids: the node's GPUs in index order, as PCI device IDs (``["1eb8"] * 8``).

    Returns:
        vGPU type → instances on the node; GPUs no entry matches contribute nothing (in reality
        they keep their previous vGPUs, DOMAIN.md §3). ``default`` on 8×T4 → ``{"T4-8Q": 16}``.
    """
    total: dict[str, int] = {}
    for index, pci_id in enumerate(gpu_pci_ids):
        entry = effective_entry(entries, pci_id, index)
        if entry is None:
            continue
        for vtype, count in entry.vgpu_devices.items():
            total[vtype] = total.get(vtype, 0) + count
    return total


def uniform_instances(entries: Sequence[ConfigEntry], pci_device_id: str) -> dict[str, int] | None:
    """Instances per GPU when the config gives every GPU of this device ID the same set.

    Returns:
        vGPU type → count per GPU (``default`` + ``"1eb8"`` → ``{"T4-8Q": 2}``), or None when a
        matching entry is index-specific (then GPUs differ) or no entry matches.
    """
    matching = [e for e in entries if e.matches_device(pci_device_id)]
    if not matching or any(e.devices != "all" for e in matching):
        return None
    return dict(matching[-1].vgpu_devices)


def uniform_instances_for_family(entries: Sequence[ConfigEntry], vgpu_family: str) -> dict[str, int] | None:
    """Like ``uniform_instances`` without knowing the PCI ID: the set per GPU when every
    ``devices: all`` entry with types of ``vgpu_family`` agrees and no entry is index-specific."""
    if any(e.devices != "all" for e in entries):
        return None
    sets = []
    for e in entries:
        parsed = [parse_vgpu_type(t) for t in e.vgpu_devices]
        if parsed and all(p is not None and p.gpu == vgpu_family for p in parsed):
            sets.append(dict(e.vgpu_devices))
    if not sets or any(s != sets[0] for s in sets):
        return None
    return sets[0]
