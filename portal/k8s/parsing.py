# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""Raw API objects (JSON dicts as the API server sends them) → the adapter's dataclasses.

Pure functions, no I/O: the listing functions feed them page by page, so a 10,000-pod LIST never
holds more than one page of raw JSON, and unit tests feed them the real samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portal.k8s.quantity import parse_count
from portal.k8s.types import (
    ClusterPolicyInfo,
    KubeVirtInfo,
    NodeInfo,
    PermittedMdev,
    PermittedPci,
    PodInfo,
    VmiCondition,
    VmiInfo,
)
from portal.labels import KUBEVIRT_NODE_NAME

GPU_RESOURCE_PREFIX = "nvidia.com/"


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a dict, else ``{}`` (raw JSON may carry null or a wrong type)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else ``[]``."""
    return value if isinstance(value, list) else []


def str_map(value: Any) -> dict[str, str]:
    """A JSON object as ``{str: str}`` (None → ``""``); ``{}`` for anything else."""
    if not isinstance(value, dict):
        return {}
    if all(type(v) is str for v in value.values()):  # the normal case, straight from JSON
        return dict(value)
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """Turn a raw Node (``v1``) into a :class:`NodeInfo`.

    Args:
        obj: the Node as JSON (``metadata``, ``spec``, ``status``); missing parts are tolerated.

    Returns:
        The node; ``ready`` is the ``Ready`` condition (``"True"`` → True, ``"False"`` → False,
        ``"Unknown"`` or absent → None). Quantities stay raw strings.
    """
    meta = as_dict(obj.get("metadata"))
    status = as_dict(obj.get("status"))
    ready: bool | None = None
    for condition in as_list(status.get("conditions")):
        cond = as_dict(condition)
        if cond.get("type") == "Ready":
            ready = {"True": True, "False": False}.get(str(cond.get("status")))
    return NodeInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=str_map(meta.get("labels")),
        annotations=str_map(meta.get("annotations")),
        capacity=str_map(status.get("capacity")),
        allocatable=str_map(status.get("allocatable")),
        unschedulable=bool(as_dict(obj.get("spec")).get("unschedulable", False)),
        ready=ready,
    )


TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def _container_gpu_requests(container: Mapping[str, Any]) -> dict[str, str]:
    """``nvidia.com/*`` requests of one container; a limit stands in for a missing request
    (the API server defaults requests to limits; raw objects from elsewhere may not have it)."""
    resources = as_dict(container.get("resources"))
    merged = {**str_map(resources.get("limits")), **str_map(resources.get("requests"))}
    return {k: v for k, v in merged.items() if k.startswith(GPU_RESOURCE_PREFIX)}


def pod_gpu_requests(spec: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """Effective ``nvidia.com/*`` requests of a pod spec, the way the scheduler counts them.

    Per resource: ``max(Σ app containers + Σ sidecars, max over init containers of (its request +
    the sidecars started before it))`` (Kubernetes "Resource sharing within containers" and
    "Sidecar containers": init containers with ``restartPolicy: Always`` keep running).

    Args:
        spec: the pod's ``spec``.

    Returns:
        ``(requests, bad)``: whole-number requests per resource (zero entries dropped), and the raw
        strings of fractional or malformed quantities, which are left out of ``requests``.
    """
    bad: dict[str, str] = {}

    def amounts(container: Mapping[str, Any]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, raw in _container_gpu_requests(container).items():
            try:
                out[name] = parse_count(raw)
            except ValueError:
                bad[name] = raw
        return out

    app: dict[str, int] = {}
    for container in as_list(spec.get("containers")):
        for name, n in amounts(as_dict(container)).items():
            app[name] = app.get(name, 0) + n
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in as_list(spec.get("initContainers")):
        c = as_dict(container)
        mine = amounts(c)
        if c.get("restartPolicy") == "Always":
            for name, n in mine.items():
                sidecars[name] = sidecars.get(name, 0) + n
            candidates = dict(sidecars)
        else:
            candidates = {name: n + sidecars.get(name, 0) for name, n in mine.items()}
        for name, n in candidates.items():
            init_peak[name] = max(init_peak.get(name, 0), n)
    names = set(app) | set(sidecars) | set(init_peak)
    requests = {
        name: max(app.get(name, 0) + sidecars.get(name, 0), init_peak.get(name, 0)) for name in sorted(names)
    }
    return {k: v for k, v in requests.items() if v > 0}, bad


def parse_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """Turn a raw Pod into a :class:`PodInfo`; None for a terminal pod (Succeeded/Failed).

    Args:
        obj: the Pod as JSON.

    Returns:
        The pod with its effective ``nvidia.com/*`` requests (see :func:`pod_gpu_requests`), or None.
    """
    status = as_dict(obj.get("status"))
    phase = str(status.get("phase") or "")
    if phase in TERMINAL_POD_PHASES:
        return None
    meta = as_dict(obj.get("metadata"))
    spec = as_dict(obj.get("spec"))
    requests, bad = pod_gpu_requests(spec)
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        phase=phase,
        labels=str_map(meta.get("labels")),
        requests=requests,
        deleting=bool(meta.get("deletionTimestamp")),
        bad_quantities=bad,
    )


def parse_vmi(obj: Mapping[str, Any]) -> VmiInfo:
    """Turn a raw VirtualMachineInstance (``kubevirt.io/v1``) into a :class:`VmiInfo`.

    ``node_name`` is ``status.nodeName``, else the ``kubevirt.io/nodeName`` label (DOMAIN.md §5.4);
    ``gpu_device_names`` are ``spec.domain.devices.gpus[].deviceName`` in order (DOMAIN.md §5.3).
    """
    meta = as_dict(obj.get("metadata"))
    status = as_dict(obj.get("status"))
    labels = str_map(meta.get("labels"))
    devices = as_dict(as_dict(as_dict(obj.get("spec")).get("domain")).get("devices"))
    node_name = status.get("nodeName") or labels.get(KUBEVIRT_NODE_NAME) or None
    conditions = tuple(
        VmiCondition(
            type=str(as_dict(c).get("type", "")),
            status=str(as_dict(c).get("status", "")),
            reason=str(as_dict(c).get("reason") or ""),
            message=str(as_dict(c).get("message") or ""),
        )
        for c in as_list(status.get("conditions"))
    )
    ips = [
        str(as_dict(i).get("ipAddress"))
        for i in as_list(status.get("interfaces"))
        if as_dict(i).get("ipAddress")
    ]
    return VmiInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase") or ""),
        node_name=str(node_name) if node_name else None,
        labels=labels,
        annotations=str_map(meta.get("annotations")),
        gpu_device_names=tuple(
            str(as_dict(g).get("deviceName"))
            for g in as_list(devices.get("gpus"))
            if as_dict(g).get("deviceName")
        ),
        conditions=conditions,
        ip_address=ips[0] if ips else None,
        created=str(meta.get("creationTimestamp") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def parse_cluster_policy(obj: Mapping[str, Any]) -> ClusterPolicyInfo:
    """Turn a raw ClusterPolicy (``nvidia.com/v1``) into a :class:`ClusterPolicyInfo`.

    Defaults as in the GPU Operator's values.yaml (DOMAIN.md §1, §3): sandbox disabled,
    ``defaultWorkload`` ``container``, ``mode`` ``kubevirt``; an empty or missing
    ``vgpuDeviceManager.config.name`` means ``default-vgpu-devices-config``, an empty ``default``
    means ``default``.
    """
    spec = as_dict(obj.get("spec"))
    sandbox = as_dict(spec.get("sandboxWorkloads"))
    vgpu_config = as_dict(as_dict(spec.get("vgpuDeviceManager")).get("config"))
    return ClusterPolicyInfo(
        name=str(as_dict(obj.get("metadata")).get("name", "")),
        sandbox_enabled=sandbox.get("enabled") is True or str(sandbox.get("enabled")).lower() == "true",
        default_workload=str(sandbox.get("defaultWorkload") or "container"),
        sandbox_mode=str(sandbox.get("mode") or "kubevirt"),
        vgpu_config_name=str(vgpu_config.get("name") or "default-vgpu-devices-config"),
        vgpu_default_config=str(vgpu_config.get("default") or "default"),
    )


def parse_kubevirt(obj: Mapping[str, Any]) -> KubeVirtInfo:
    """Turn a raw KubeVirt CR into a :class:`KubeVirtInfo` (DOMAIN.md §5.1).

    Reads ``spec.configuration.permittedHostDevices``; the PCI selector is ``pciVendorSelector``,
    or ``pciDeviceSelector`` (the OpenShift HyperConverged spelling, accepted here too).
    ``permitted_configured`` is False only when ``permittedHostDevices`` is absent or null
    (KubeVirt then skips the check); an empty ``{}`` permits nothing.
    """
    meta = as_dict(obj.get("metadata"))
    configuration = as_dict(as_dict(obj.get("spec")).get("configuration"))
    raw = configuration.get("permittedHostDevices")
    permitted = as_dict(raw)
    pci = tuple(
        PermittedPci(
            selector=str(d.get("pciVendorSelector") or d.get("pciDeviceSelector") or ""),
            resource_name=str(d.get("resourceName") or ""),
            external_resource_provider=d.get("externalResourceProvider") is True,
        )
        for d in map(as_dict, as_list(permitted.get("pciHostDevices")))
    )
    mdev = tuple(
        PermittedMdev(
            selector=str(d.get("mdevNameSelector") or ""),
            resource_name=str(d.get("resourceName") or ""),
            external_resource_provider=d.get("externalResourceProvider") is True,
        )
        for d in map(as_dict, as_list(permitted.get("mediatedDevices")))
    )
    return KubeVirtInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        permitted_configured=raw is not None,
        pci_host_devices=pci,
        mediated_devices=mdev,
    )
