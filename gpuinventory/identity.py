"""GPU identity: which GPU model, how many GPUs and how much memory a node has (DOMAIN.md §4;
pitfall 8), from GFD's labels, the advertised devices, the node's vGPU config or an admin's
annotations (``portal.labels.GPU_MODEL`` / ``GPU_COUNT``). Pure functions: no ORM, no Kubernetes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.flags import Flag, flag
from gpuinventory.naming import (
    _HEX_ID,
    PREFIX,
    ModelSource,
    ResourceInfo,
    display_model_for_gfd,
    memory_gb_for_vgpu_family,
    memory_mib_for_model,
    model_for_vgpu_family,
    parse_vgpu_type,
)
from portal.labels import GFD_COUNT, GFD_MEMORY, GFD_PRODUCT, GPU_COUNT, GPU_MODEL, read_annotation


@dataclass(frozen=True)
class GpuIdentity:
    """A node's GPU model, count and memory, and where they came from.

    Attributes:
        model: GPU model (``"NVIDIA-B200"``, ``"RTX A2000 12GB"``, ``"Tesla T4"``) or ``""``.
        count: physical GPUs, or None when unknown.
        memory_mib: memory per GPU in MiB: GFD ``nvidia.com/gpu.memory`` on container nodes, else
            ``PciModel.memory_mib`` of the model (``memory_mib_for_model``); None when unknown.
        source: a ``ModelSource`` value.
        flags: ``gpu_model_unknown`` / ``gpu_count_unknown`` / ``stale_gfd_labels``.
    """

    model: str
    count: int | None
    memory_mib: int | None
    source: str
    flags: tuple[Flag, ...] = ()


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def gfd_model(labels: Mapping[str, str]) -> str:
    """GPU model from GFD's ``nvidia.com/gpu.product`` (DOMAIN.md §4), with GFD's sharing suffix
    ``-SHARED`` and the MIG-single suffix ``-MIG-<profile>`` removed; ``""`` when absent."""
    product = labels.get(GFD_PRODUCT, "")
    product = product.removesuffix("-SHARED")
    return re.sub(r"-MIG-.*$", "", product)


def gfd_count(labels: Mapping[str, str]) -> int | None:
    """Physical GPUs from GFD's ``nvidia.com/gpu.count``; None when absent or when the product
    label says MIG ``single`` strategy (then the label counts MIG devices, DOMAIN.md §4)."""
    if "-MIG-" in labels.get(GFD_PRODUCT, ""):
        return None
    return _int_or_none(labels.get(GFD_COUNT))


def gfd_memory_mib(labels: Mapping[str, str]) -> int | None:
    """Memory per GPU in MiB from GFD's ``nvidia.com/gpu.memory`` (DOMAIN.md §4)."""
    return _int_or_none(labels.get(GFD_MEMORY))


def _join_models(models: Sequence[str]) -> str:
    return " + ".join(dict.fromkeys(m for m in models if m))


def identify_gpus(
    mode: WorkloadMode,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    advertised: Sequence[tuple[ResourceInfo, int]],
    *,
    config_types: Sequence[str] = (),
    per_gpu_instances: Mapping[str, int] | None = None,
) -> GpuIdentity:
    """A node's GPU model, count and memory (DOMAIN.md §4; pitfall 8).

    * container: GFD labels ``gpu.product`` / ``gpu.count`` / ``gpu.memory`` (MiB); the product is
      shown under the ``PCI_MODELS`` display name when it matches one (``display_model_for_gfd``).
    * vm-passthrough: model from the advertised passthrough names (``PCI_MODELS`` first, then
      the name without its chip code), count = Σ advertised devices. GFD labels are ignored
      (stale if present: GFD does not run there) and flagged.
    * vm-vgpu: model from the advertised vGPU types (board words, else the family's table model);
      count = advertised ÷ ``per_gpu_instances`` of the node's config when that config gives every
      GPU the same set, else ⌈Σ frame buffer ÷ GPU memory⌉ for a family of known memory (a lower
      bound: a config need not fill a GPU). With nothing advertised, the model comes from the
      types of the node's config (``config_types``).
    * otherwise the admin's annotations ``gpu-vm-portal.io/gpu-model`` / ``gpu-count``
      (``portal.labels.GPU_MODEL`` / ``GPU_COUNT``), and a flag saying how to set them; the
      deprecated ``gpu-vm-portal/`` keys are still read, with a ``deprecated_annotation`` flag.

    Args:
        mode: the node's decided workload mode.
        labels: node labels.
        annotations: node annotations.
        advertised: ``(resource, allocatable)`` pairs of the node's non-stale GPU resources.
        config_types: vGPU types of the node's effective vGPU config (vm-vgpu only).
        per_gpu_instances: vGPU type → instances per GPU under that config, when uniform.

    Returns:
        A ``GpuIdentity``.
    """
    flags: list[Flag] = []
    memory: int | None = None
    if mode == WorkloadMode.CONTAINER:
        model, count, memory, source = _identify_container(labels, advertised)
    else:
        if labels.get(GFD_PRODUCT):
            flags.append(flag("stale_gfd_labels", mode=str(mode), product=labels[GFD_PRODUCT]))
        model, count, source = _identify_vm(mode, advertised, config_types, per_gpu_instances)
    if not model or model.startswith("unknown model"):
        annotated = _admin_annotation(annotations, GPU_MODEL, flags)
        if annotated:
            model, source = annotated, ModelSource.ANNOTATION
        else:
            flags.append(flag("gpu_model_unknown", annotation=GPU_MODEL))
    if count is None:
        count = _int_or_none(_admin_annotation(annotations, GPU_COUNT, flags) or None)
        if count is None:
            flags.append(flag("gpu_count_unknown", annotation=GPU_COUNT))
    if memory is None and model:
        memory = memory_mib_for_model(model)
    return GpuIdentity(model=model, count=count, memory_mib=memory, source=source, flags=tuple(flags))


def _identify_container(
    labels: Mapping[str, str], advertised: Sequence[tuple[ResourceInfo, int]]
) -> tuple[str, int | None, int | None, str]:
    """``(model, count, memory_mib, source)`` of a container node from GFD's labels; the count
    falls back to the advertised ``nvidia.com/gpu`` devices."""
    model = display_model_for_gfd(gfd_model(labels))
    count = gfd_count(labels)
    if count is None:
        count = sum(n for info, n in advertised if info.kind == ResourceKind.GPU) or None
    return model, count, gfd_memory_mib(labels), ModelSource.GFD if model else ModelSource.UNKNOWN


def _identify_vm(
    mode: WorkloadMode,
    advertised: Sequence[tuple[ResourceInfo, int]],
    config_types: Sequence[str],
    per_gpu_instances: Mapping[str, int] | None,
) -> tuple[str, int | None, str]:
    """``(model, count, source)`` of a VM node from its advertised devices (passthrough names or
    vGPU types), else from the types of its vGPU config."""
    if mode == WorkloadMode.VM_PASSTHROUGH:
        mine = [(i, n) for i, n in advertised if i.kind == ResourceKind.PASSTHROUGH]
        model = _join_models([i.model for i, _ in mine])
        source = ModelSource.UNKNOWN
        if mine:
            named = any(not _HEX_ID.fullmatch(i.name.removeprefix(PREFIX)) for i, _ in mine)
            source = ModelSource.PASSTHROUGH_NAME if named else ModelSource.PCI_ID
        return model, sum(n for _, n in mine) or None, source
    mine = [(i, n) for i, n in advertised if i.kind == ResourceKind.VGPU]
    model = _join_models([i.model for i, _ in mine])
    source = ModelSource.VGPU_TYPE if model else ModelSource.UNKNOWN
    count = _vgpu_count(mine, per_gpu_instances)
    if not model and config_types:
        parsed = [p for p in (parse_vgpu_type(t) for t in config_types) if p]
        model = _join_models([model_for_vgpu_family(p.gpu) or p.gpu for p in parsed])
        source = ModelSource.VGPU_CONFIG if model else ModelSource.UNKNOWN
    return model, count, source


def _admin_annotation(annotations: Mapping[str, str], key: str, flags: list[Flag]) -> str:
    """The admin's annotation ``key`` (or the deprecated key it replaced, then flagged), ``""`` if unset."""
    value, found = read_annotation(annotations, key)
    if value and found != key:
        flags.append(flag("deprecated_annotation", old=found, new=key, value=value))
    return value


def _vgpu_count(
    advertised: Sequence[tuple[ResourceInfo, int]], per_gpu: Mapping[str, int] | None
) -> int | None:
    """Physical GPUs behind advertised vGPU devices (see ``identify_gpus``)."""
    if not advertised:
        return None
    if per_gpu:
        counts = {
            n // per_gpu[i.vgpu_type]
            for i, n in advertised
            if per_gpu.get(i.vgpu_type) and n % per_gpu[i.vgpu_type] == 0
        }
        if len(counts) == 1 and {i.vgpu_type for i, _ in advertised} <= set(per_gpu):
            return counts.pop()
    families = {i.vgpu_family for i, _ in advertised}
    if len(families) != 1 or any(i.framebuffer_gb is None for i, _ in advertised):
        return None
    memory = memory_gb_for_vgpu_family(families.pop())
    if not memory:
        return None
    total = sum((i.framebuffer_gb or Decimal(0)) * n for i, n in advertised)
    return math.ceil(total / memory)
