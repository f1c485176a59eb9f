"""The Kubernetes adapter: the ONLY module of the portal that imports ``kubernetes``.

Callers get plain dataclasses and typed errors, never client model objects or
``ApiException``. Every call carries a timeout (``PORTAL_KUBE_TIMEOUT`` seconds): the
generated client defaults to none, and a half-open connection would hang a worker forever
(CONVENTIONS.md, "The Kubernetes adapter").

Configuration: ``PORTAL_KUBECONFIG`` (+ optional ``PORTAL_KUBE_CONTEXT``), else the
in-cluster service-account config, else "not configured".
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import urllib3
from django.conf import settings
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


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
            return config.new_client_from_config(
                config_file=settings.PORTAL_KUBECONFIG, context=settings.PORTAL_KUBE_CONTEXT
            )
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
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
