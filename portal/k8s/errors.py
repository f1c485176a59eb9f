# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""The adapter's typed errors and the one mapping from client exceptions to them.

Callers catch these, never ``ApiException`` or urllib3 errors (CONVENTIONS.md, "The Kubernetes
adapter"). The original exception is always chained (``raise translate(exc) from exc``).
"""

from __future__ import annotations

import json
from typing import Any

import urllib3
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


def translate(exc: Exception) -> K8sError:
    """Map a client exception to the adapter's typed error (status code → class).

    Args:
        exc: an ``ApiException``, a urllib3 error, or any other exception.

    Returns:
        The typed error, with a short message that keeps the API server's ``Status`` message
        (e.g. which object was forbidden); raise it ``from exc``.
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
