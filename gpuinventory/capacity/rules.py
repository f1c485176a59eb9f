"""The per-row rules of capacity: when free devices are requestable, and what one device is worth.

Pure functions over one ``GpuResource`` and its ``GpuNode`` (no queries), plus their SQL twin
``requestable_q`` for the node list's sort key. Sources: DOMAIN.md §2 "Allocatable is not free",
§3 (vGPU reconfiguration), §5.1 (permittedHostDevices), pitfalls 2, 5 and 6.
"""

from __future__ import annotations

import functools
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q

from gpuinventory.choices import ResourceKind, WorkloadMode
from gpuinventory.models import GpuNode, GpuResource
from gpuinventory.naming import KIND_MODE, memory_gb_for_vgpu_family, parse_vgpu_type

#: Why free devices are not requestable, in the order :func:`unusable_reason` checks them;
#: ``reprofile_promised`` (a node promised to a re-profile that has not finished: its current
#: vGPUs are about to be deleted, DOMAIN.md §3) is decided by the snapshot from reservations.
UNUSABLE_REASONS = (
    "node_absent",
    "node_not_ready",
    "node_cordoned",
    "vgpu_reconfiguring",
    "reprofile_promised",
    "transitioning",
    "other_mode",
    "not_permitted",
)


def usable_q(prefix: str = "") -> Q:
    """Q for usable nodes; ``prefix`` = ``"node__"`` when filtering resources."""
    return (
        Q(**{f"{prefix}present": True, f"{prefix}unschedulable": False, f"{prefix}transitioning": False})
        & ~Q(**{f"{prefix}ready": False})
        & ~Q(**{f"{prefix}workload_mode": WorkloadMode.VM_VGPU, f"{prefix}vgpu_config_state": "pending"})
    )


def kind_matches_mode(kind: str, mode: str) -> bool:
    """True when a resource of ``kind`` belongs to a node in workload ``mode`` (``naming.KIND_MODE``)."""
    try:
        return KIND_MODE[ResourceKind(kind)] == mode
    except ValueError:
        return False


def requestable_q(prefix: str = "", node_prefix: str = "node__") -> Q:
    """``requestable()`` as a Q: over ``GpuResource`` by default; from ``GpuNode`` use
    ``prefix="resources__", node_prefix=""``. Reservations are not part of it (the snapshot and
    ``sorting.annotate_free`` subtract them)."""
    same_mode = Q()
    for kind, mode in KIND_MODE.items():
        same_mode |= Q(**{f"{prefix}kind": str(kind), f"{node_prefix}workload_mode": str(mode)})
    return (
        Q(**{f"{prefix}stale": False})
        & same_mode
        & ~Q(**{f"{prefix}permitted": False})
        & usable_q(node_prefix)
    )


def unusable_reason(resource: GpuResource, node: GpuNode) -> str:
    """Why the free devices of ``resource`` on ``node`` cannot be requested, ``""`` when they can.

    Reasons, first match wins: ``node_absent``, ``node_not_ready`` (Ready=False; unknown counts
    as ready), ``node_cordoned``, ``vgpu_reconfiguring`` (vm-vgpu and
    ``nvidia.com/vgpu.config.state=pending``), ``transitioning`` (deploy labels disagree with the
    mode), ``other_mode`` (e.g. a leftover ``nvidia.com/gpu`` on a VM node), ``not_permitted``
    (the KubeVirt CR does not permit it, DOMAIN.md §5.1). A stale resource returns ``""``: it
    has no devices at all and is never counted. (``reprofile_promised`` comes from reservations:
    the snapshot decides it.)
    """
    return reason_for(
        node.present,
        node.ready,
        node.unschedulable,
        node.workload_mode,
        node.vgpu_config_state,
        node.transitioning,
        resource.kind,
        resource.permitted,
    )


def reason_for(
    present: bool,
    ready: bool | None,
    unschedulable: bool,
    mode: str,
    vgpu_config_state: str,
    transitioning: bool,
    kind: str,
    permitted: bool | None,
) -> str:
    """:func:`unusable_reason` over the plain field values (the snapshot reads rows as tuples)."""
    if not present:
        return "node_absent"
    if ready is False:
        return "node_not_ready"
    if unschedulable:
        return "node_cordoned"
    if mode == WorkloadMode.VM_VGPU and vgpu_config_state == "pending":
        return "vgpu_reconfiguring"
    if transitioning:
        return "transitioning"
    if not kind_matches_mode(kind, mode):
        return "other_mode"
    if permitted is False:
        return "not_permitted"
    return ""


def requestable(resource: GpuResource, node: GpuNode) -> bool:
    """True when the free devices of ``resource`` on ``node`` can be requested (reservations aside)."""
    return not resource.stale and unusable_reason(resource, node) == ""


def requestable_free(resource: GpuResource, node: GpuNode) -> int:
    """``resource.free`` when ``requestable``, else 0 (reservations not subtracted)."""
    return resource.free if requestable(resource, node) else 0


@functools.lru_cache(maxsize=1024)
def gpu_equivalent(
    kind: str, vgpu_type: str, framebuffer_gb: Decimal | None, board_memory_mib: int | None
) -> Fraction | None:
    """What one device of a resource is worth in whole GPUs, None when the data does not say.

    - ``gpu`` (container) and ``passthrough``: 1 (a whole GPU).
    - ``vgpu``: the type's frame buffer ÷ the board's memory (``T4-8Q`` on a 16 GB T4 = 1/2),
      board memory from the vGPU family (``naming.memory_gb_for_vgpu_family``, DOMAIN.md §2
      "vGPU type grammar": GB = frame buffer), else from the node's ``gpu_memory_mib``.
    - ``mig``: the profile's memory ÷ the node's GPU memory (``mig-1g.5gb`` on a 40 GB A100 =
      1/8, the memory-slice fraction), None when the node's memory is unknown.
    - ``gpu_shared`` (time-slicing/MPS replicas): None, the replica count is not stored.

    Results are capped at 1. Cached: the answer depends only on the arguments.

    Args:
        kind: ``ResourceKind`` value. vgpu_type: bare type (``"T4-8Q"``) or ``""``.
        framebuffer_gb: ``GpuResource.framebuffer_gb`` (MIG profiles and vGPU types).
        board_memory_mib: ``GpuNode.gpu_memory_mib`` or None.
    """
    if kind in (ResourceKind.GPU, ResourceKind.PASSTHROUGH):
        return Fraction(1)
    board_gb: Fraction | None = Fraction(board_memory_mib, 1024) if board_memory_mib else None
    if kind == ResourceKind.VGPU:
        parsed = parse_vgpu_type(vgpu_type) if vgpu_type else None
        if parsed is None:
            return None
        family_gb = memory_gb_for_vgpu_family(parsed.gpu)
        board_gb = Fraction(family_gb) if family_gb else board_gb
        framebuffer_gb = parsed.framebuffer_gb
    elif kind != ResourceKind.MIG:
        return None
    if framebuffer_gb is None or not board_gb:
        return None
    return min(Fraction(1), Fraction(framebuffer_gb) / board_gb)
