"""Diagnostics ("flags") the inventory attaches to nodes and sync runs, in plain words.

A flag is stored as a JSON-serialisable dict ``{"code": str, "params": {str: str | int}}`` in
``GpuNode.flags`` and ``SyncRun.warnings`` (gpuinventory/models.py). Its meaning lives in
``FLAG_TYPES`` (``gpuinventory/flag_catalog.py``): a severity, a translated title and detail (``gettext_lazy`` with ``%(param)s``
placeholders) and the commands an admin would run. Pages and the API call ``describe(flag)``.

Params hold only language-neutral data (resource names, label values, counts), never English
prose, so a stored flag renders in whatever language the reader uses.

The troubleshooting commands follow the seed article's "常见问题排查" section
(/work/shared/seeds/000_270fbceb6e66659b.txt: ``ls /sys/kernel/iommu_groups/*/devices`` and
``lspci -nnk -d 10de:`` for "VFIO device not found"; vGPU manager logs and
``kubectl describe node | grep nvidia.com`` for "vGPU devices not created"), corrected where the
article is wrong against DOMAIN.md (the vGPU *Device* Manager pods carry
``app=nvidia-vgpu-device-manager``, the host driver pods ``app=nvidia-vgpu-manager-daemonset``;
[GO] ``assets/state-vgpu-device-manager``, ``assets/state-vgpu-manager``).

Placeholders every command may use besides the flag's own params: ``%(node)s`` (node name),
``%(namespace)s`` (GPU Operator namespace, setting ``PORTAL_GPU_OPERATOR_NAMESPACE``, default
``gpu-operator``; DOMAIN.md pitfall 14: it varies), ``%(kv_namespace)s``/``%(kv_name)s`` (the
KubeVirt CR, default ``kubevirt``/``kubevirt``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from django.conf import settings

from gpuinventory.flag_catalog import FLAG_TYPES, FLAG_VARIANTS, SEVERITY_ORDER, UNKNOWN_FLAG_TYPE, Severity


class Flag(TypedDict):
    """A stored diagnostic: ``{"code": "stale_resource", "params": {"resource": "nvidia.com/gpu"}}``."""

    code: str
    params: dict[str, str | int]


@dataclass(frozen=True)
class DescribedFlag:
    """A flag rendered for a reader: translated strings with params filled in."""

    code: str
    severity: Severity
    title: str
    detail: str
    commands: tuple[str, ...]
    params: Mapping[str, str | int]


def flag(code: str, **params: str | int) -> Flag:
    """Build a stored flag.

    Args:
        code: a key of ``FLAG_TYPES``.
        **params: language-neutral values referenced by the title/detail/commands.

    Returns:
        ``{"code": code, "params": {...}}`` (JSON-serialisable).

    Raises:
        KeyError: ``code`` is not registered (a programming error, caught by the unit tests).
    """
    if code not in FLAG_TYPES:
        raise KeyError(f"unknown flag code {code!r}")
    return {"code": code, "params": dict(params)}


class _Params(dict[str, Any]):
    """Format mapping that renders a missing placeholder as ``<name>`` instead of failing."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def describe(
    item: Mapping[str, Any],
    *,
    node: str = "",
    operator_namespace: str | None = None,
    kubevirt: tuple[str, str] = ("kubevirt", "kubevirt"),
) -> DescribedFlag:
    """Render a stored flag for a reader, in the active language.

    Args:
        item: ``{"code": str, "params": {...}}`` as stored (unknown codes render a generic text).
        node: node name for ``%(node)s`` in commands (``<node>`` when empty).
        operator_namespace: GPU Operator namespace; default: setting
            ``PORTAL_GPU_OPERATOR_NAMESPACE`` or ``gpu-operator``.
        kubevirt: ``(namespace, name)`` of the KubeVirt CR for ``kubectl edit kubevirt`` commands.

    Returns:
        A ``DescribedFlag`` with translated title/detail and filled-in commands. Never raises for
        bad params: a missing placeholder renders as ``<name>``.
    """
    code = str(item.get("code", ""))
    raw_params = item.get("params") or {}
    ftype = FLAG_VARIANTS.get((code, str(raw_params.get("cause", "")))) or FLAG_TYPES.get(
        code, UNKNOWN_FLAG_TYPE
    )
    namespace = operator_namespace or getattr(settings, "PORTAL_GPU_OPERATOR_NAMESPACE", "gpu-operator")
    params = _Params(
        {"namespace": namespace, "kv_namespace": kubevirt[0], "kv_name": kubevirt[1], "code": code}
    )
    if node:
        params["node"] = node
    params.update(raw_params)
    return DescribedFlag(
        code=code,
        severity=ftype.severity,
        title=str(ftype.title) % params,
        detail=str(ftype.detail) % params,
        commands=tuple(cmd % params for cmd in ftype.commands),
        params=dict(raw_params),
    )


def sort_flags(flags: list[Flag]) -> list[Flag]:
    """Order flags errors first, then warnings, then info; stable otherwise."""
    return sorted(flags, key=lambda f: SEVERITY_ORDER[FLAG_TYPES.get(f["code"], UNKNOWN_FLAG_TYPE).severity])
