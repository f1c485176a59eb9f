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
from dataclasses import dataclass

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
