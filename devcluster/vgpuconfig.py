"""The vGPU Device Manager's config file and apply algorithm, as pure functions.

Config format: vgpu-device-manager ``api/spec/v1/spec.go`` (DOMAIN.md §3): ``version: v1`` and
``vgpu-configs: {name: [ {device-filter?, devices, vgpu-devices} ]}``. The walk, "already applied"
check and per-GPU apply follow ``cmd/nvidia-vgpu-dm/assert/assert.go``
(``WalkSelectedVGPUConfigForEachGPU``), ``assert/config.go`` (``VGPUConfig``: *every* GPU of the
node must be visited and match) and ``pkg/vgpu/config.go`` (``SetVGPUConfig``: check all types are
supported, then delete every mdev of that GPU, then create the new ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from devcluster.naming import NVIDIA_VENDOR_ID, GpuModel, vgpu_family

_ENTRY_KEYS = {"device-filter", "devices", "vgpu-devices"}


class VgpuConfigError(ValueError):
    """The config file is malformed (the real manager's ``assert --valid-config`` would fail)."""


@dataclass(frozen=True)
class VgpuConfigEntry:
    """One item of a named vGPU config.

    Attributes:
        device_filter: Accepted PCI IDs as integers ``(device << 16) | vendor``; ``None`` matches every GPU.
        devices: ``"all"`` or the tuple of GPU indices (PCI order) the entry applies to.
        vgpu_devices: vGPU type → count per matching GPU, e.g. ``{"T4-8Q": 2}``.
    """

    device_filter: tuple[int, ...] | None
    devices: str | tuple[int, ...]
    vgpu_devices: dict[str, int] = field(hash=False)

    def matches_device_filter(self, device_id: int) -> bool:
        """``VGPUConfigSpec.MatchesDeviceFilter``: no filter, or the GPU's ID is in it."""
        return self.device_filter is None or device_id in self.device_filter

    def matches_devices(self, index: int) -> bool:
        """``VGPUConfigSpec.MatchesDevices``: ``all`` or the index is listed."""
        return self.devices == "all" or (isinstance(self.devices, tuple) and index in self.devices)


def pci_id_value(device_hex: str, vendor_hex: str = NVIDIA_VENDOR_ID) -> int:
    """``types.NewDeviceID(device, vendor)``: ``0x<device><vendor>`` as an integer (``1eb8`` → ``0x1EB810DE``)."""
    return (int(device_hex, 16) << 16) | int(vendor_hex, 16)


def _parse_filter(raw: Any) -> tuple[int, ...] | None:
    if raw is None:
        return None
    items = raw if isinstance(raw, list) else [raw]
    out: list[int] = []
    for item in items:
        if not isinstance(item, str):
            raise VgpuConfigError(f"device-filter must be a string or list of strings, got {item!r}")
        try:
            out.append(int(item, 16))
        except ValueError:
            raise VgpuConfigError(f"invalid device-filter {item!r}") from None
    return tuple(out)


def _parse_devices(raw: Any) -> str | tuple[int, ...]:
    if raw == "all":
        return "all"
    if isinstance(raw, list) and all(isinstance(i, int) and i >= 0 for i in raw):
        return tuple(raw)
    raise VgpuConfigError(f"invalid devices {raw!r}: must be 'all' or a list of GPU indices")


def parse_config_file(text: str) -> dict[str, list[VgpuConfigEntry]]:
    """Parse a ``config.yaml`` of the vGPU Device Manager.

    Args:
        text: YAML text (the ConfigMap's ``config.yaml`` key).

    Returns:
        Config name → entries, in file order.

    Raises:
        VgpuConfigError: version other than ``v1``, no configs, unknown keys, bad ``devices`` or counts.
    """
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe loader
    if not isinstance(data, dict) or data.get("version") != "v1":
        raise VgpuConfigError("config must have version: v1")
    configs = data.get("vgpu-configs")
    if not isinstance(configs, dict) or not configs:
        raise VgpuConfigError("vgpu-configs must be a non-empty map")
    out: dict[str, list[VgpuConfigEntry]] = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise VgpuConfigError(f"config {name!r} must be a non-empty list")
        parsed: list[VgpuConfigEntry] = []
        for entry in entries:
            if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS:
                raise VgpuConfigError(f"config {name!r}: unknown keys in {entry!r}")
            devices = entry.get("vgpu-devices")
            if not isinstance(devices, dict) or not all(
                isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in devices.items()
            ):
                raise VgpuConfigError(f"config {name!r}: vgpu-devices must map type -> count")
            parsed.append(
                VgpuConfigEntry(
                    device_filter=_parse_filter(entry.get("device-filter")),
                    devices=_parse_devices(entry.get("devices")),
                    vgpu_devices=dict(devices),
                )
            )
        out[str(name)] = parsed
    return out


def max_instances(configs: dict[str, list[VgpuConfigEntry]]) -> dict[str, int]:
    """Max instances per GPU of each vGPU type, read from the per-type configs of a config file.

    The operator's default config has one config per type named after it, e.g. ``T4-8Q: [{devices: all,
    vgpu-devices: {T4-8Q: 2}}]`` = that type x max count (DOMAIN.md §3 "Shipped configs"). The simulator
    uses it as the list of types a board supports and their instance limit.
    """
    out: dict[str, int] = {}
    for name, entries in configs.items():
        if len(entries) == 1 and entries[0].devices == "all" and set(entries[0].vgpu_devices) == {name}:
            out[name] = entries[0].vgpu_devices[name]
    return out


@dataclass
class ApplyResult:
    """Outcome of :func:`apply_config`.

    Attributes:
        mdevs: Per GPU index, vGPU type → count after the run (unchanged GPUs keep their old dict).
        cleared: GPU indices whose mdevs were deleted and recreated (their users lose the device).
        error: ``None`` on success, else the manager's error text; GPUs changed before the error stay changed.
    """

    mdevs: list[dict[str, int]]
    cleared: list[int]
    error: str | None


def walk(entries: list[VgpuConfigEntry], gpu_ids: list[int]) -> list[tuple[VgpuConfigEntry, int]]:
    """``WalkSelectedVGPUConfigForEachGPU``: for each entry in order, each GPU index it matches.

    Args:
        entries: The selected config.
        gpu_ids: PCI ID value (:func:`pci_id_value`) of each GPU, by index.
    """
    return [
        (entry, i)
        for entry in entries
        for i, dev in enumerate(gpu_ids)
        if entry.matches_device_filter(dev) and entry.matches_devices(i)
    ]


def _normal(mdevs: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in mdevs.items() if v}


def is_applied(entries: list[VgpuConfigEntry], gpu_ids: list[int], mdevs: list[dict[str, int]]) -> bool:
    """``assert`` semantics: True only if every GPU is visited and its last visit matches exactly.

    A config that leaves some GPUs untouched (like ``T4-custom`` on an 8-GPU node) therefore never counts
    as applied, and the manager goes through pending/apply again (apply then skips matching GPUs).
    """
    matched = [False] * len(gpu_ids)
    for entry, i in walk(entries, gpu_ids):
        matched[i] = _normal(mdevs[i]) == _normal(entry.vgpu_devices)
    return all(matched)


def apply_config(
    entries: list[VgpuConfigEntry],
    models: list[GpuModel],
    mdevs: list[dict[str, int]],
    limits: dict[str, int],
) -> ApplyResult:
    """Apply a selected config GPU by GPU, like ``apply.VGPUConfig`` + ``SetVGPUConfig``.

    For each (entry, GPU) of the walk: skip if the GPU already has exactly these mdevs; else check every
    requested type is supported by the board (family of the type name == the board's vGPU family and the
    type is known in ``limits``) and the count fits the per-GPU limit, then delete every mdev of that GPU
    and create the requested ones. The first error stops the walk (nothing more changes).

    Args:
        entries: The selected config.
        models: Board of each GPU index.
        mdevs: Current mdevs per GPU index (not modified).
        limits: Type → max instances per GPU (:func:`max_instances` of the operator's default config).

    Returns:
        The new per-GPU mdevs, the cleared GPU indices and the error (``None`` on success).
    """
    current = [dict(m) for m in mdevs]
    cleared: list[int] = []
    gpu_ids = [pci_id_value(m.device_id) for m in models]
    for entry, i in walk(entries, gpu_ids):
        desired = _normal(entry.vgpu_devices)
        if _normal(current[i]) == desired:
            continue
        model = models[i]
        for vtype in desired:
            if model.vgpu_family is None or vgpu_family(vtype) != model.vgpu_family or vtype not in limits:
                return ApplyResult(
                    current,
                    cleared,
                    f"error setting VGPU config: vGPU type {vtype} is not supported on GPU (index={i})",
                )
        # SetVGPUConfig clears the GPU before creating, so a count over the limit leaves it cleared
        # with as many instances as fitted.
        over = [(vtype, count) for vtype, count in desired.items() if count > limits[vtype]]
        if over:
            vtype, count = over[0]
            current[i] = {t: min(c, limits[t]) for t, c in desired.items()}
            cleared.append(i)
            return ApplyResult(
                current,
                cleared,
                f"error setting VGPU config: failed to create {count} {vtype} vGPU devices on the GPU. "
                f"ensure '{count}' does not exceed the maximum supported instances for '{vtype}'",
            )
        current[i] = desired
        cleared.append(i)
    return ApplyResult(current, cleared, None)
