"""Health endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics``.

``/healthz`` touches nothing: it answers while the process can serve. ``/readyz`` checks
the database, the Celery broker and the Kubernetes API, each with a short time-out, and
answers 503 when one of them fails (JSON: ``{"status": "ok"|"fail", "checks": {...}}``).
Kubernetes not being configured is reported as ``"not_configured"`` and does not fail the
probe: the portal still serves its pages and queue without a cluster.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.views.decorators.cache import never_cache
from django_prometheus.exports import ExportToDjangoView
from kombu import Connection

from portal import k8s

logger = logging.getLogger(__name__)
CheckResult = dict[str, Any]


def check_database() -> CheckResult:
    """Run ``SELECT 1`` on the default database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"status": "ok", "backend": connection.vendor}


def check_broker() -> CheckResult:
    """Open (and close) a connection to the Celery broker, giving up after 3 seconds.

    Reads ``settings.CELERY_BROKER_URL`` rather than the Celery app's view of it, which
    gives the ``CELERY_BROKER_URL`` environment variable precedence over settings.
    """
    with Connection(
        settings.CELERY_BROKER_URL, transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS
    ) as conn:
        conn.ensure_connection(max_retries=1, timeout=3)
        transport = conn.transport_cls
    return {"status": "ok", "transport": str(transport)}


def check_kubernetes() -> CheckResult:
    """Call ``GET /version`` on the configured API server."""
    if not k8s.is_configured():
        return {
            "status": "not_configured",
            "message": "Kubernetes is not configured: set PORTAL_KUBECONFIG or run inside the cluster",
        }
    version = k8s.server_version()
    return {"status": "ok", "version": version.git_version}


CHECKS: dict[str, Callable[[], CheckResult]] = {
    "database": check_database,
    "broker": check_broker,
    "kubernetes": check_kubernetes,
}


@login_not_required
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` whenever the process serves requests."""
    return JsonResponse({"status": "ok"})


@login_not_required
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: every check's result and duration; 503 when any check fails."""
    results: dict[str, CheckResult] = {}
    healthy = True
    for name, check in CHECKS.items():
        started = time.monotonic()
        try:
            result = check()
        except Exception as exc:
            logger.warning("readiness check %s failed: %s", name, exc)
            result = {"status": "fail", "error": f"{exc.__class__.__name__}: {exc}"}
            healthy = False
        result["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
        results[name] = result
    return JsonResponse(
        {"status": "ok" if healthy else "fail", "checks": results}, status=200 if healthy else 503
    )


@login_not_required
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics, only for clients in ``PORTAL_METRICS_ALLOWED_CIDRS`` (default loopback)."""
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return HttpResponseForbidden("metrics are not available to this address\n")
    allowed: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = settings.PORTAL_METRICS_ALLOWED_NETWORKS
    if not any(client in network for network in allowed):
        return HttpResponseForbidden("metrics are not available to this address\n")
    return ExportToDjangoView(request)
