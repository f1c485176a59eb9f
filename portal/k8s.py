# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
# (the flags of mypy --strict, inline: CONVENTIONS asks for strict typing of the adapter)
"""The Kubernetes adapter: the ONLY module of the portal that imports ``kubernetes``.

Callers get plain dataclasses and typed errors, never client model objects or
``ApiException``. Every call carries a timeout (``PORTAL_KUBE_TIMEOUT`` seconds): the
generated client defaults to none, and a half-open connection would hang a worker forever
(CONVENTIONS.md, "The Kubernetes adapter").

Configuration: ``PORTAL_KUBECONFIG`` (+ optional ``PORTAL_KUBE_CONTEXT``), else the
in-cluster service-account config, else "not configured".

Reads (docs/inventory.md §1) are raw paginated LISTs: ``limit=500`` + ``_continue``,
``_preload_content=False`` and ``json.loads``. The generated client's model deserialisation is
the slow part on big clusters, and the ``parse_*`` functions below turn each raw item dict into
a dataclass page by page, so a 10,000-pod LIST never holds more than one page of raw JSON.
The ``parse_*`` functions are public so unit tests can feed them the real samples.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from portal.quantity import parse_count as parse_int_quantity


class K8sError(Exception):
    """Base class of every error raised by this adapter; the original is chained."""


class K8sNotConfigured(K8sError):
    """Neither ``PORTAL_KUBECONFIG`` nor an in-cluster service account is available."""


class K8sNotFound(K8sError):
    """HTTP 404."""


class K8sConflict(K8sError):
    """HTTP 409: already exists, or a stale ``resourceVersion``."""


class K8sForbidden(K8sError):
    """HTTP 401/403: the portal's identity may not do this (RBAC)."""


class K8sInvalid(K8sError):
    """HTTP 400/415/422: the object or patch was rejected; retrying will not help."""


class K8sTransientError(K8sError):
    """HTTP 429, 5xx, time-outs and connection errors: safe to retry with backoff."""


@dataclass(frozen=True)
class ServerVersion:
    """What ``GET /version`` reports, e.g. ``git_version="v1.37.2"``."""

    git_version: str
    platform: str


@dataclass(frozen=True)
class NodeInfo:
    """A Node as the inventory needs it. Quantities are the raw strings of ``status``."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool | None = None  # the Ready condition; None when the node reports none


@dataclass(frozen=True)
class PodInfo:
    """A non-terminal Pod. ``requests`` holds only ``nvidia.com/*`` resources, as integers.

    Effective request per resource = max(Σ app containers, max of init containers), the rule the
    scheduler uses (Kubernetes "Resource sharing within containers").
    """

    namespace: str
    name: str
    uid: str = ""
    node_name: str | None = None
    phase: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, int] = field(default_factory=dict)
    deleting: bool = False
    # nvidia.com/* requests whose quantity is not a whole number ("0.5", "1500m"): left out of
    # ``requests`` and reported by the sync as a warning (raw quantity strings).
    bad_quantities: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class VmiInfo:
    """A VirtualMachineInstance (kubevirt.io/v1) with its GPU device names (DOMAIN.md §5.3, §5.4)."""

    namespace: str
    name: str
    uid: str = ""
    phase: str = ""
    node_name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    gpu_device_names: tuple[str, ...] = ()
    conditions: tuple[VmiCondition, ...] = ()
    ip_address: str | None = None
    created: str = ""
    deleting: bool = False
    resource_version: str = ""

    def condition(self, type_: str) -> VmiCondition | None:
        """The status condition of ``type_`` (e.g. ``"PodScheduled"``, ``"Synchronized"``), if any."""
        return next((c for c in self.conditions if c.type == type_), None)


@dataclass(frozen=True)
class VmiCondition:
    """One ``status.conditions[]`` entry of a VMI (DOMAIN.md §5.4)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class ClusterPolicyInfo:
    """The GPU Operator ClusterPolicy fields the portal reads (DOMAIN.md §1, §3), with their defaults."""

    name: str
    sandbox_enabled: bool = False
    default_workload: str = "container"
    sandbox_mode: str = "kubevirt"
    vgpu_config_name: str = "default-vgpu-devices-config"
    vgpu_default_config: str = "default"


@dataclass(frozen=True)
class PermittedPci:
    """``permittedHostDevices.pciHostDevices[]`` (or HyperConverged ``pciDeviceSelector``), DOMAIN.md §5.1."""

    selector: str
    resource_name: str
    external_resource_provider: bool = False


@dataclass(frozen=True)
class PermittedMdev:
    """``permittedHostDevices.mediatedDevices[]``, DOMAIN.md §5.1."""

    selector: str
    resource_name: str
    external_resource_provider: bool = False


@dataclass(frozen=True)
class KubeVirtInfo:
    """A KubeVirt CR's permitted host devices. ``permitted_configured`` is False when the CR has no
    ``permittedHostDevices`` at all (KubeVirt then skips the check, DOMAIN.md §5.1)."""

    namespace: str
    name: str
    permitted_configured: bool = False
    pci_host_devices: tuple[PermittedPci, ...] = ()
    mediated_devices: tuple[PermittedMdev, ...] = ()


def translate(exc: Exception) -> K8sError:
    """Map a client exception to the adapter's typed error (status code → class).

    Args:
        exc: an ``ApiException``, a urllib3 error, or any other exception.

    Returns:
        The typed error, with a short message; raise it ``from exc``.
    """
    if isinstance(exc, ApiException):
        status = exc.status or 0
        message = f"Kubernetes API {status} {exc.reason or ''}".strip()
        detail = _status_message(exc.body)
        if detail:
            message = f"{message}: {detail}"
        if status == 404:
            return K8sNotFound(message)
        if status == 409:
            return K8sConflict(message)
        if status in (401, 403):
            return K8sForbidden(message)
        if status in (400, 415, 422):
            return K8sInvalid(message)
        return K8sTransientError(message)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return K8sTransientError(f"Kubernetes API unreachable: {exc.__class__.__name__}: {exc}")
    return K8sError(f"{exc.__class__.__name__}: {exc}")


def _status_message(body: Any) -> str:
    """The ``message`` of a ``metav1.Status`` response body (e.g. ``nodes "n1" is forbidden: User
    "system:serviceaccount:..." cannot delete resource "nodes"``), at most 300 characters; ``""``
    when the body is not a Status."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.startswith("{"):
        return ""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    message = parsed.get("message") if isinstance(parsed, dict) else None
    return str(message)[:300] if message else ""


def is_configured() -> bool:
    """Return True when a kubeconfig is set or the process runs inside a cluster."""
    return bool(settings.PORTAL_KUBECONFIG) or "KUBERNETES_SERVICE_HOST" in os.environ


@functools.cache
def api_client() -> client.ApiClient:
    """Return the process-wide ``ApiClient`` (built once, then cached).

    Raises:
        K8sNotConfigured: when no configuration source is available.
        K8sError: when the kubeconfig cannot be loaded.
    """
    try:
        if settings.PORTAL_KUBECONFIG:
            built: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=settings.PORTAL_KUBECONFIG, context=settings.PORTAL_KUBE_CONTEXT
            )
            return built
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise K8sError(f"cannot load the Kubernetes configuration: {exc}") from exc
    raise K8sNotConfigured(
        "Kubernetes is not configured: set PORTAL_KUBECONFIG (and optionally PORTAL_KUBE_CONTEXT), "
        "or run the portal inside the cluster with a service account"
    )


def server_version() -> ServerVersion:
    """Return the API server's version (``GET /version``).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    try:
        info = client.VersionApi(api_client()).get_code(_request_timeout=settings.PORTAL_KUBE_TIMEOUT)
    except K8sError:
        raise
    except Exception as exc:
        raise translate(exc) from exc
    return ServerVersion(git_version=str(info.git_version), platform=str(info.platform))


# --- parsing raw objects (JSON dicts as the API server sends them) ----------------------------

GPU_RESOURCE_PREFIX = "nvidia.com/"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str_map(value: Any) -> dict[str, str]:
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
    meta = _dict(obj.get("metadata"))
    status = _dict(obj.get("status"))
    ready: bool | None = None
    for condition in _list(status.get("conditions")):
        cond = _dict(condition)
        if cond.get("type") == "Ready":
            ready = {"True": True, "False": False}.get(str(cond.get("status")))
    return NodeInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=_str_map(meta.get("labels")),
        annotations=_str_map(meta.get("annotations")),
        capacity=_str_map(status.get("capacity")),
        allocatable=_str_map(status.get("allocatable")),
        unschedulable=bool(_dict(obj.get("spec")).get("unschedulable", False)),
        ready=ready,
    )


TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


def _container_gpu_requests(container: Mapping[str, Any]) -> dict[str, str]:
    """``nvidia.com/*`` requests of one container; a limit stands in for a missing request
    (the API server defaults requests to limits; raw objects from elsewhere may not have it)."""
    resources = _dict(container.get("resources"))
    merged = {**_str_map(resources.get("limits")), **_str_map(resources.get("requests"))}
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
                out[name] = parse_int_quantity(raw)
            except ValueError:
                bad[name] = raw
        return out

    app: dict[str, int] = {}
    for container in _list(spec.get("containers")):
        for name, n in amounts(_dict(container)).items():
            app[name] = app.get(name, 0) + n
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in _list(spec.get("initContainers")):
        c = _dict(container)
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
    status = _dict(obj.get("status"))
    phase = str(status.get("phase") or "")
    if phase in TERMINAL_POD_PHASES:
        return None
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    requests, bad = pod_gpu_requests(spec)
    return PodInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node_name=str(spec["nodeName"]) if spec.get("nodeName") else None,
        phase=phase,
        labels=_str_map(meta.get("labels")),
        requests=requests,
        deleting=bool(meta.get("deletionTimestamp")),
        bad_quantities=bad,
    )


def parse_vmi(obj: Mapping[str, Any]) -> VmiInfo:
    """Turn a raw VirtualMachineInstance (``kubevirt.io/v1``) into a :class:`VmiInfo`.

    ``node_name`` is ``status.nodeName``, else the ``kubevirt.io/nodeName`` label (DOMAIN.md §5.4);
    ``gpu_device_names`` are ``spec.domain.devices.gpus[].deviceName`` in order (DOMAIN.md §5.3).
    """
    meta = _dict(obj.get("metadata"))
    status = _dict(obj.get("status"))
    labels = _str_map(meta.get("labels"))
    devices = _dict(_dict(_dict(obj.get("spec")).get("domain")).get("devices"))
    node_name = status.get("nodeName") or labels.get("kubevirt.io/nodeName") or None
    conditions = tuple(
        VmiCondition(
            type=str(_dict(c).get("type", "")),
            status=str(_dict(c).get("status", "")),
            reason=str(_dict(c).get("reason") or ""),
            message=str(_dict(c).get("message") or ""),
        )
        for c in _list(status.get("conditions"))
    )
    ips = [
        str(_dict(i).get("ipAddress")) for i in _list(status.get("interfaces")) if _dict(i).get("ipAddress")
    ]
    return VmiInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase") or ""),
        node_name=str(node_name) if node_name else None,
        labels=labels,
        annotations=_str_map(meta.get("annotations")),
        gpu_device_names=tuple(
            str(_dict(g).get("deviceName")) for g in _list(devices.get("gpus")) if _dict(g).get("deviceName")
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
    spec = _dict(obj.get("spec"))
    sandbox = _dict(spec.get("sandboxWorkloads"))
    vgpu_config = _dict(_dict(spec.get("vgpuDeviceManager")).get("config"))
    return ClusterPolicyInfo(
        name=str(_dict(obj.get("metadata")).get("name", "")),
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
    meta = _dict(obj.get("metadata"))
    configuration = _dict(_dict(obj.get("spec")).get("configuration"))
    raw = configuration.get("permittedHostDevices")
    permitted = _dict(raw)
    pci = tuple(
        PermittedPci(
            selector=str(d.get("pciVendorSelector") or d.get("pciDeviceSelector") or ""),
            resource_name=str(d.get("resourceName") or ""),
            external_resource_provider=d.get("externalResourceProvider") is True,
        )
        for d in map(_dict, _list(permitted.get("pciHostDevices")))
    )
    mdev = tuple(
        PermittedMdev(
            selector=str(d.get("mdevNameSelector") or ""),
            resource_name=str(d.get("resourceName") or ""),
            external_resource_provider=d.get("externalResourceProvider") is True,
        )
        for d in map(_dict, _list(permitted.get("mediatedDevices")))
    )
    return KubeVirtInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        permitted_configured=raw is not None,
        pci_host_devices=pci,
        mediated_devices=mdev,
    )


# --- calls -------------------------------------------------------------------------------------

LIST_PAGE_SIZE = 500

RawKind = Literal["nodes", "pods", "vmis", "clusterpolicies", "kubevirts"]

# Server-side filter for pods: terminal pods hold no devices (parse_pod drops them too).
NON_TERMINAL_POD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


def _timeout() -> int:
    return int(settings.PORTAL_KUBE_TIMEOUT)


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a client method with the timeout; client exceptions become typed ``K8s*`` errors."""
    try:
        return fn(*args, _request_timeout=_timeout(), **kwargs)
    except K8sError:
        raise
    except Exception as exc:
        raise translate(exc) from exc


def _decode(response: Any) -> dict[str, Any]:
    """``json.loads`` of a ``_preload_content=False`` response; non-JSON is a transient error."""
    try:
        data = json.loads(response.data)
    except (ValueError, TypeError) as exc:
        raise K8sTransientError(f"Kubernetes API sent a response that is not JSON: {exc}") from exc
    finally:
        release = getattr(response, "release_conn", None)
        if callable(release):
            release()
    return data if isinstance(data, dict) else {}


def _lister(kind: RawKind) -> Callable[..., Any]:
    api = api_client()
    if kind == "nodes":
        return functools.partial(client.CoreV1Api(api).list_node)
    if kind == "pods":
        return functools.partial(
            client.CoreV1Api(api).list_pod_for_all_namespaces, field_selector=NON_TERMINAL_POD_SELECTOR
        )
    custom = client.CustomObjectsApi(api)
    group, version, plural = {
        "vmis": ("kubevirt.io", "v1", "virtualmachineinstances"),
        "kubevirts": ("kubevirt.io", "v1", "kubevirts"),
        "clusterpolicies": ("nvidia.com", "v1", "clusterpolicies"),
    }[kind]
    return functools.partial(custom.list_cluster_custom_object, group, version, plural)


def iter_raw_pages(kind: RawKind) -> Iterator[list[dict[str, Any]]]:
    """Yield the raw items of a paginated LIST, one page (≤ 500 items) at a time.

    VMIs and KubeVirt CRs are listed across all namespaces (``/apis/kubevirt.io/v1/<plural>``),
    pods with the non-terminal field selector.

    Args:
        kind: ``nodes``, ``pods``, ``vmis``, ``clusterpolicies`` or ``kubevirts``.

    Yields:
        Lists of item dicts as the API server sent them.

    Raises:
        K8sNotConfigured, K8sNotFound (CRD not installed), K8sForbidden, K8sTransientError
        (including 410 Gone for an expired continue token): see :func:`translate`.
    """
    lister = _lister(kind)
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, "_preload_content": False}
        if token:
            kwargs["_continue"] = token
        page = _decode(_call(lister, **kwargs))
        yield [_dict(item) for item in _list(page.get("items"))]
        token = _dict(page.get("metadata")).get("continue") or None
        if not token:
            return


def list_raw(kind: RawKind) -> list[dict[str, Any]]:
    """All raw items of a LIST (every page). Used by the benchmark as the "raw fetch" baseline.

    Raises:
        See :func:`iter_raw_pages`.
    """
    return [item for page in iter_raw_pages(kind) for item in page]


def list_nodes() -> list[NodeInfo]:
    """Every Node of the cluster.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    return [parse_node(item) for page in iter_raw_pages("nodes") for item in page]


def list_pods() -> list[PodInfo]:
    """Every non-terminal Pod of every namespace (phase not Succeeded/Failed).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    pods: list[PodInfo] = []
    for page in iter_raw_pages("pods"):
        for item in page:
            pod = parse_pod(item)
            if pod is not None:
                pods.append(pod)
    return pods


def list_vmis() -> list[VmiInfo]:
    """Every VirtualMachineInstance of every namespace; [] when KubeVirt's CRDs are not installed.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    try:
        return [parse_vmi(item) for page in iter_raw_pages("vmis") for item in page]
    except K8sNotFound:
        return []


def get_cluster_policy() -> ClusterPolicyInfo | None:
    """The GPU Operator's ClusterPolicy: listed, the first by name (DOMAIN.md §1, pitfall 14).

    Returns:
        The policy, or None when there is none (or the CRD is not installed).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    try:
        items = list_raw("clusterpolicies")
    except K8sNotFound:
        return None
    if not items:
        return None
    items.sort(key=lambda item: str(_dict(item.get("metadata")).get("name", "")))
    return parse_cluster_policy(items[0])


def list_kubevirts() -> list[KubeVirtInfo]:
    """Every KubeVirt CR of every namespace (normally one, ``kubevirt/kubevirt``).

    Returns:
        The CRs sorted by namespace/name; [] when the KubeVirt CRD is not installed (404).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    try:
        items = [parse_kubevirt(item) for item in list_raw("kubevirts")]
    except K8sNotFound:
        return []
    return sorted(items, key=lambda kv: (kv.namespace, kv.name))


def read_config_map_data(namespace: str, name: str) -> dict[str, str] | None:
    """The ``data`` of a ConfigMap.

    Args:
        namespace: e.g. ``settings.PORTAL_GPU_OPERATOR_NAMESPACE``.
        name: e.g. ``ClusterPolicyInfo.vgpu_config_name``.

    Returns:
        ``data`` as a dict (``{}`` when the ConfigMap has none), or None when it does not exist.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    core = client.CoreV1Api(api_client())
    try:
        obj = _decode(_call(core.read_namespaced_config_map, name, namespace, _preload_content=False))
    except K8sNotFound:
        return None
    return _str_map(obj.get("data"))


def patch_node_labels(name: str, labels: Mapping[str, str | None]) -> NodeInfo:
    """Set or remove Node labels with a strategic merge patch on ``metadata.labels``.

    A small patch (never a whole-object update) so concurrent writers such as the vGPU Device
    Manager are not overwritten (DOMAIN.md pitfall 13); ``None`` removes a label (DEVCLUSTER.md §5.5).

    Args:
        name: the Node.
        labels: ``{key: value}``; value None removes the key.

    Returns:
        The Node after the patch.

    Raises:
        K8sNotFound: no such Node. K8sInvalid: a bad label key or value (422).
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    core = client.CoreV1Api(api_client())
    body = {"metadata": {"labels": dict(labels)}}
    response = _call(core.patch_node, name, body, field_validation="Strict", _preload_content=False)
    return parse_node(_decode(response))


# --- provisioning (vmrequests/provisioning.py) ----------------------------------------------

VMI_GROUP, VMI_VERSION, VMI_PLURAL = "kubevirt.io", "v1", "virtualmachineinstances"


def get_node(name: str) -> NodeInfo:
    """One Node, read live.

    Raises:
        K8sNotFound: no such Node. K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    core = client.CoreV1Api(api_client())
    return parse_node(_decode(_call(core.read_node, name, _preload_content=False)))


def list_pods_on_node(node_name: str) -> list[PodInfo]:
    """Every non-terminal Pod bound to ``node_name`` (all namespaces), read live.

    Used before a vGPU re-profile to verify against the cluster, not the stored inventory, that
    no pod uses the node's vGPUs (DOMAIN.md pitfall 2).

    Raises:
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    core = client.CoreV1Api(api_client())
    selector = f"spec.nodeName={node_name},{NON_TERMINAL_POD_SELECTOR}"
    pods: list[PodInfo] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {
            "limit": LIST_PAGE_SIZE,
            "_preload_content": False,
            "field_selector": selector,
        }
        if token:
            kwargs["_continue"] = token
        page = _decode(_call(core.list_pod_for_all_namespaces, **kwargs))
        for item in _list(page.get("items")):
            pod = parse_pod(_dict(item))
            if pod is not None:
                pods.append(pod)
        token = _dict(page.get("metadata")).get("continue") or None
        if not token:
            return pods


def create_vmi(namespace: str, body: Mapping[str, Any]) -> VmiInfo:
    """Create a VirtualMachineInstance with server-side strict field validation.

    Raises:
        K8sConflict: a VMI of that name exists (409; the caller decides whether to adopt it).
        K8sInvalid: the schema or a KubeVirt admission webhook refused it (422, DOMAIN.md §5.4).
        K8sNotFound: the namespace (or the KubeVirt CRD) does not exist.
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    custom = client.CustomObjectsApi(api_client())
    response = _call(
        custom.create_namespaced_custom_object,
        VMI_GROUP,
        VMI_VERSION,
        namespace,
        VMI_PLURAL,
        dict(body),
        field_validation="Strict",
        _preload_content=False,
    )
    return parse_vmi(_decode(response))


def get_vmi(namespace: str, name: str) -> VmiInfo | None:
    """One VirtualMachineInstance, or None when it does not exist.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    custom = client.CustomObjectsApi(api_client())
    try:
        response = _call(
            custom.get_namespaced_custom_object,
            VMI_GROUP,
            VMI_VERSION,
            namespace,
            VMI_PLURAL,
            name,
            _preload_content=False,
        )
    except K8sNotFound:
        return None
    return parse_vmi(_decode(response))


def delete_vmi(namespace: str, name: str) -> bool:
    """Delete a VirtualMachineInstance (KubeVirt then deletes its virt-launcher pod).

    Returns:
        True when a delete was accepted, False when it was already gone.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    custom = client.CustomObjectsApi(api_client())
    try:
        _call(
            custom.delete_namespaced_custom_object,
            VMI_GROUP,
            VMI_VERSION,
            namespace,
            VMI_PLURAL,
            name,
            _preload_content=False,
        )
    except K8sNotFound:
        return False
    return True


def list_vmis_labelled(selector: str) -> list[VmiInfo]:
    """VirtualMachineInstances of every namespace matching a label ``selector``
    (e.g. ``"app.kubernetes.io/managed-by=gpu-vm-portal"``); [] without KubeVirt's CRDs.

    Raises:
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    return list_vmis_labelled_with_version(selector)[0]


@dataclass(frozen=True)
class VmiEvent:
    """One watch event of a VMI: ``type`` is ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    type: str
    vmi: VmiInfo


def watch_vmis(
    selector: str, resource_version: str | None = None, timeout_seconds: int = 60
) -> Iterator[VmiEvent]:
    """Watch VirtualMachineInstances of every namespace matching a label ``selector``.

    A server-side watch bounded by ``timeout_seconds`` (the stream then ends and the caller
    starts a new one; pass the last seen ``resource_version`` to continue without a gap).
    ``BOOKMARK`` events are skipped.

    Yields:
        ``VmiEvent`` per change.

    Raises:
        K8sTransientError: the stream broke, or 410 Gone (the resource version is too old: list
            again and restart from the list's version). K8sForbidden: see :func:`translate`.
    """
    from kubernetes import watch

    custom = client.CustomObjectsApi(api_client())
    kwargs: dict[str, Any] = {
        "label_selector": selector,
        "timeout_seconds": timeout_seconds,
        "allow_watch_bookmarks": True,
        "_request_timeout": timeout_seconds + _timeout(),
    }
    if resource_version:
        kwargs["resource_version"] = resource_version
    w = watch.Watch()  # type: ignore[no-untyped-call]
    try:
        stream: Iterator[dict[str, Any]] = w.stream(  # type: ignore[no-untyped-call]
            custom.list_cluster_custom_object, VMI_GROUP, VMI_VERSION, VMI_PLURAL, **kwargs
        )
        for event in stream:
            kind = str(event.get("type", ""))
            obj = event.get("raw_object") or event.get("object")
            if kind == "ERROR":
                status = _dict(obj)
                if status.get("code") == 410:
                    raise K8sTransientError(f"watch expired: {status.get('message', '')}")
                raise K8sTransientError(f"watch error: {status.get('message', status)}")
            if kind not in {"ADDED", "MODIFIED", "DELETED"} or not isinstance(obj, dict):
                continue
            yield VmiEvent(kind, parse_vmi(obj))
    except K8sError:
        raise
    except Exception as exc:
        raise translate(exc) from exc
    finally:
        w.stop()  # type: ignore[no-untyped-call]


def list_vmis_labelled_with_version(selector: str) -> tuple[list[VmiInfo], str]:
    """``list_vmis_labelled`` plus the list's ``resourceVersion`` (to start a watch from).

    Raises:
        K8sForbidden, K8sTransientError: see :func:`translate`.
    """
    custom = client.CustomObjectsApi(api_client())
    out: list[VmiInfo] = []
    token: str | None = None
    version = ""
    try:
        while True:
            kwargs: dict[str, Any] = {
                "limit": LIST_PAGE_SIZE,
                "_preload_content": False,
                "label_selector": selector,
            }
            if token:
                kwargs["_continue"] = token
            page = _decode(
                _call(custom.list_cluster_custom_object, VMI_GROUP, VMI_VERSION, VMI_PLURAL, **kwargs)
            )
            out.extend(parse_vmi(_dict(item)) for item in _list(page.get("items")))
            meta = _dict(page.get("metadata"))
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue") or None
            if not token:
                return out, version
    except K8sNotFound:
        return [], ""
