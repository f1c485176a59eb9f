# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""The client side of the adapter: configuration, the cached client factory, time-outs, the one
paginator and the watch stream. The only module of the package that builds ``kubernetes`` API
classes; the resource modules call these helpers.

Configuration: ``PORTAL_KUBECONFIG`` (+ optional ``PORTAL_KUBE_CONTEXT``), else the in-cluster
service-account config, else "not configured". Every call carries a timeout of
``PORTAL_KUBE_TIMEOUT`` seconds: the generated client defaults to none, and a half-open
connection would hang a worker forever (CONVENTIONS.md, "The Kubernetes adapter").

Reads are raw LISTs: ``limit=500`` + ``_continue``, ``_preload_content=False`` and
``json.loads``; the generated client's model deserialisation is the slow part on big clusters.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from kubernetes import client as kube
from kubernetes import config, watch

from portal.k8s.errors import K8sError, K8sNotConfigured, K8sTransientError, translate
from portal.k8s.parsing import as_dict
from portal.k8s.types import ServerVersion

#: Items per LIST page (``limit``).
LIST_PAGE_SIZE = 500


def is_configured() -> bool:
    """Return True when a kubeconfig is set or the process runs inside a cluster."""
    return bool(settings.PORTAL_KUBECONFIG) or "KUBERNETES_SERVICE_HOST" in os.environ


@functools.cache
def api_client() -> kube.ApiClient:
    """Return the process-wide ``ApiClient`` (built once, then cached; ``api_client.cache_clear()``
    forgets it).

    Raises:
        K8sNotConfigured: when no configuration source is available.
        K8sError: when the kubeconfig cannot be loaded.
    """
    try:
        if settings.PORTAL_KUBECONFIG:
            built: kube.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=settings.PORTAL_KUBECONFIG, context=settings.PORTAL_KUBE_CONTEXT
            )
            return built
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            configuration = kube.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return kube.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError) as exc:
        raise K8sError(f"cannot load the Kubernetes configuration: {exc}") from exc
    raise K8sNotConfigured(
        "Kubernetes is not configured: set PORTAL_KUBECONFIG (and optionally PORTAL_KUBE_CONTEXT), "
        "or run the portal inside the cluster with a service account"
    )


def core_v1() -> kube.CoreV1Api:
    """``CoreV1Api`` on the process-wide client. Raises: see :func:`api_client`."""
    return kube.CoreV1Api(api_client())


def custom_objects() -> kube.CustomObjectsApi:
    """``CustomObjectsApi`` on the process-wide client. Raises: see :func:`api_client`."""
    return kube.CustomObjectsApi(api_client())


def timeout() -> int:
    """The per-call time-out in seconds (``PORTAL_KUBE_TIMEOUT``)."""
    return int(settings.PORTAL_KUBE_TIMEOUT)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a client method with the time-out; client exceptions become typed ``K8s*`` errors.

    Raises:
        K8sError and subclasses: see :func:`portal.k8s.errors.translate`.
    """
    try:
        return fn(*args, _request_timeout=timeout(), **kwargs)
    except K8sError:
        raise
    except Exception as exc:
        raise translate(exc) from exc


def decode(response: Any) -> dict[str, Any]:
    """``json.loads`` of a ``_preload_content=False`` response (the connection is released).

    Returns:
        The body as a dict (``{}`` when the JSON is not an object).

    Raises:
        K8sTransientError: the body is not JSON.
    """
    try:
        data = json.loads(response.data)
    except (ValueError, TypeError) as exc:
        raise K8sTransientError(f"Kubernetes API sent a response that is not JSON: {exc}") from exc
    finally:
        release = getattr(response, "release_conn", None)
        if callable(release):
            release()
    return data if isinstance(data, dict) else {}


def fetch(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One raw call (``_preload_content=False``) decoded: :func:`call` then :func:`decode`.

    Raises:
        See :func:`call` and :func:`decode`.
    """
    return decode(call(fn, *args, _preload_content=False, **kwargs))


def paginate(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """The one paginator: yield each page of a LIST (``limit`` + ``_continue``) as its raw body.

    Every list call of the adapter goes through here. A page is the decoded body, ``items`` and
    ``metadata`` (``resourceVersion``, ``continue``) as the API server sent them.

    Args:
        fn: the client's list method, e.g. ``core_v1().list_node``.
        *args, **kwargs: passed on each call (selectors, group/version/plural).

    Yields:
        One dict per page, at most :data:`LIST_PAGE_SIZE` items each.

    Raises:
        K8sNotFound (e.g. a CRD not installed), K8sForbidden, K8sTransientError (including
        410 Gone for an expired continue token): see :func:`portal.k8s.errors.translate`.
    """
    token: str | None = None
    while True:
        page_kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE, **kwargs}
        if token:
            page_kwargs["_continue"] = token
        page = fetch(fn, *args, **page_kwargs)
        yield page
        token = as_dict(page.get("metadata")).get("continue") or None
        if not token:
            return


def watch_stream(
    fn: Callable[..., Any], *args: Any, timeout_seconds: int, **kwargs: Any
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A server-side watch on a list method, bounded by ``timeout_seconds``.

    Yields:
        ``(type, raw_object)`` per event (``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK``);
        events without an object dict are skipped.

    Raises:
        K8sTransientError: the stream broke, or an ``ERROR`` event (410 Gone: the resource
            version is too old; list again and restart from the list's version).
        K8sForbidden: see :func:`portal.k8s.errors.translate`.
    """
    w = watch.Watch()  # type: ignore[no-untyped-call]
    try:
        stream: Iterator[dict[str, Any]] = w.stream(  # type: ignore[no-untyped-call]
            fn, *args, timeout_seconds=timeout_seconds, _request_timeout=timeout_seconds + timeout(), **kwargs
        )
        for event in stream:
            kind = str(event.get("type", ""))
            obj = event.get("raw_object") or event.get("object")
            if kind == "ERROR":
                status = as_dict(obj)
                if status.get("code") == 410:
                    raise K8sTransientError(f"watch expired: {status.get('message', '')}")
                raise K8sTransientError(f"watch error: {status.get('message', status)}")
            if isinstance(obj, dict):
                yield kind, obj
    except K8sError:
        raise
    except Exception as exc:
        raise translate(exc) from exc
    finally:
        w.stop()  # type: ignore[no-untyped-call]


def server_version() -> ServerVersion:
    """Return the API server's version (``GET /version``), e.g. ``git_version="v1.37.2"``.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    info = call(kube.VersionApi(api_client()).get_code)
    return ServerVersion(git_version=str(info.git_version), platform=str(info.platform))
