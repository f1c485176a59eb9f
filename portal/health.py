"""Health endpoints: ``/healthz`` (liveness), ``/readyz`` (readiness) and ``/metrics``.

``/healthz`` touches nothing: it answers while the process can serve. ``/readyz`` runs the
checks of the database, the Celery broker and the Kubernetes API in parallel threads within
``PORTAL_READYZ_BUDGET`` seconds (a check without an answer by then counts as failed) and answers
503 when the database or the broker fails. The Kubernetes API is reported but never fails the
probe: the pages and the queue read the database only, and a blink of the API server must not
take every web pod out of the Service; its state goes to ``/metrics`` instead
(:mod:`portal.health_metrics`).

Body: ``{"status": "ok"|"fail", "checks": {name: {"status": "ok"|"fail"|"not_configured"}}}``.
Staff users and loopback callers (``REMOTE_ADDR`` 127.0.0.0/8 or ::1) also get each check's
details (backend, version, error text, ``duration_ms``); anyone else gets the statuses only, so
error strings, hosts and ports never reach an anonymous caller.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import connection, connections
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, JsonResponse
from django.views.decorators.cache import never_cache
from django_prometheus.exports import ExportToDjangoView
from kombu import Connection

from portal import k8s
from portal.health_metrics import record_kubernetes_state

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
#: Checks whose failure makes the pod unready (the others are reported only).
REQUIRED = frozenset({"database", "broker"})


def _run(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """Run one check in a worker thread: its result (``fail`` with the error on an exception)
    plus ``duration_ms``; the thread's database connection is closed afterwards."""
    started = time.monotonic()
    try:
        result = dict(check())
    except Exception as exc:
        logger.warning("readiness check %s failed: %s", name, exc)
        result = {"status": "fail", "error": f"{exc.__class__.__name__}: {exc}"}
    finally:
        connections.close_all()
    result["duration_ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def run_checks(budget: float) -> dict[str, CheckResult]:
    """Run every check of ``CHECKS`` in parallel and wait at most ``budget`` seconds.

    Returns:
        ``{name: result}`` in ``CHECKS`` order; a check still running at the deadline is
        ``{"status": "fail", "error": "no answer within ...", "duration_ms": budget × 1000}``
        (its thread is abandoned: every check has its own time-out, so it ends soon after).
    """
    pool = ThreadPoolExecutor(max_workers=len(CHECKS), thread_name_prefix="readyz")
    futures = {name: pool.submit(_run, name, check) for name, check in CHECKS.items()}
    done, _pending = wait(futures.values(), timeout=budget)
    pool.shutdown(wait=False, cancel_futures=True)
    results: dict[str, CheckResult] = {}
    for name, future in futures.items():
        if future in done:
            results[name] = future.result()
        else:
            logger.warning("readiness check %s gave no answer within %s s", name, budget)
            results[name] = {
                "status": "fail",
                "error": f"no answer within the readiness budget of {budget:g} s",
                "duration_ms": round(budget * 1000, 1),
            }
    return results


def may_see_details(request: HttpRequest) -> bool:
    """True for staff users and for loopback callers (``REMOTE_ADDR``, the direct peer)."""
    if getattr(request.user, "is_staff", False):
        return True
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


@login_not_required
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: 200 ``{"status": "ok"}`` whenever the process serves requests."""
    return JsonResponse({"status": "ok"})


@login_not_required
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 200, or 503 when a ``REQUIRED`` check fails (see the module docstring)."""
    results = run_checks(float(settings.PORTAL_READYZ_BUDGET))
    record_kubernetes_state(results["kubernetes"]["status"])
    healthy = all(results[name]["status"] == "ok" for name in REQUIRED)
    if not may_see_details(request):
        results = {name: {"status": result["status"]} for name, result in results.items()}
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
