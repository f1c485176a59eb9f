"""Health endpoints, request IDs and metrics, through Django's test client (real DB and broker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.test.utils import override_settings

from portal import k8s

pytestmark = pytest.mark.django_db

#: The backend /readyz names for the test database: SQLite locally, PostgreSQL in CI (.ci/run).
EXPECTED_BACKEND = {
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.postgresql": "postgresql",
}[settings.DATABASES["default"]["ENGINE"]]


@pytest.fixture
def client() -> Client:
    return Client()


def test_healthz_is_open_and_touches_nothing(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


#: A caller that is neither loopback nor staff (the test client's default is 127.0.0.1).
OUTSIDE = "203.0.113.9"


def test_readyz_reports_each_check(client: Client) -> None:
    """Loopback callers (the kubelet's exec probes, an operator on the pod) get the details."""
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    checks = body["checks"]
    assert set(checks) == {"database", "broker", "kubernetes"}
    assert checks["database"]["status"] == "ok"
    assert checks["database"]["backend"] == EXPECTED_BACKEND
    assert checks["broker"]["status"] == "ok"
    assert checks["kubernetes"] == {
        "status": "not_configured",
        "message": "Kubernetes is not configured: set PORTAL_KUBECONFIG or run inside the cluster",
        "duration_ms": checks["kubernetes"]["duration_ms"],
    }


def test_readyz_anonymous_gets_ok_or_fail_only(client: Client) -> None:
    """#14 finding 7: no backend names, versions, errors or timings for an anonymous remote caller."""
    response = client.get("/readyz", REMOTE_ADDR=OUTSIDE)
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "checks": {
            "database": {"status": "ok"},
            "broker": {"status": "ok"},
            "kubernetes": {"status": "not_configured"},
        },
    }


def test_readyz_staff_gets_the_details_from_anywhere(client: Client) -> None:
    from tests.factories import portal_user

    client.force_login(portal_user("staff"))
    checks = client.get("/readyz", REMOTE_ADDR=OUTSIDE).json()["checks"]
    assert checks["database"]["backend"] == EXPECTED_BACKEND
    assert isinstance(checks["broker"]["duration_ms"], float)
    client.force_login(portal_user("analyst"))
    assert client.get("/readyz", REMOTE_ADDR=OUTSIDE).json()["checks"]["database"] == {"status": "ok"}


@pytest.fixture
def unreachable_broker() -> Iterator[None]:
    # Nothing listens on port 1.
    with override_settings(CELERY_BROKER_URL="redis://127.0.0.1:1/0", CELERY_BROKER_TRANSPORT_OPTIONS={}):
        yield


def test_readyz_is_503_when_the_broker_is_down(client: Client, unreachable_broker: None) -> None:
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail"
    assert body["checks"]["broker"]["status"] == "fail"
    assert "Error" in body["checks"]["broker"]["error"]
    assert body["checks"]["database"]["status"] == "ok"


def test_readyz_hides_the_broker_error_from_anonymous(client: Client, unreachable_broker: None) -> None:
    response = client.get("/readyz", REMOTE_ADDR=OUTSIDE)
    assert response.status_code == 503
    assert response.json()["checks"]["broker"] == {"status": "fail"}
    assert b"127.0.0.1" not in response.content and b"Error" not in response.content


@pytest.fixture
def unreachable_cluster(tmp_path: Path) -> Iterator[None]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    k8s.api_client.cache_clear()
    with override_settings(PORTAL_KUBECONFIG=str(kubeconfig), PORTAL_KUBE_TIMEOUT=2):
        yield
    k8s.api_client.cache_clear()


def _metric_lines(client: Client, prefix: str) -> dict[str, float]:
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_readyz_stays_ready_when_the_kubernetes_api_is_unreachable(
    client: Client, unreachable_cluster: None
) -> None:
    """#14 finding 7: a blink of the API server must not take every web pod out of the Service;
    the cluster's state is reported in the body and in /metrics instead."""
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    kube = body["checks"]["kubernetes"]
    assert kube["status"] == "fail"
    assert kube["error"].startswith("K8sTransientError: Kubernetes API unreachable")
    lines = _metric_lines(client, "gpu_portal_kubernetes_api")
    assert lines['gpu_portal_kubernetes_api_state{state="fail"}'] == 1.0
    assert lines['gpu_portal_kubernetes_api_state{state="ok"}'] == 0.0
    assert lines['gpu_portal_kubernetes_api_state{state="not_configured"}'] == 0.0


def test_kubernetes_state_metric_follows_the_last_check(client: Client) -> None:
    client.get("/readyz", REMOTE_ADDR=OUTSIDE)
    lines = _metric_lines(client, "gpu_portal_kubernetes_api")
    assert lines['gpu_portal_kubernetes_api_state{state="not_configured"}'] == 1.0
    assert lines['gpu_portal_kubernetes_api_state{state="fail"}'] == 0.0
    assert lines["gpu_portal_kubernetes_api_last_check_timestamp_seconds"] > 0


def test_readyz_answers_within_its_time_budget(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that does not answer within ``PORTAL_READYZ_BUDGET`` counts as failed; the others
    still report (the hung one is abandoned in its thread, released at the end of the test)."""
    import threading

    from portal import health

    release = threading.Event()

    def hung_broker() -> dict[str, str]:
        release.wait(30)
        return {"status": "ok"}

    monkeypatch.setitem(health.CHECKS, "broker", hung_broker)
    try:
        with override_settings(PORTAL_READYZ_BUDGET=0.2):
            detailed = client.get("/readyz").json()
            anonymous = client.get("/readyz", REMOTE_ADDR=OUTSIDE)
    finally:
        release.set()
    assert detailed["status"] == "fail"
    assert detailed["checks"]["broker"] == {
        "status": "fail",
        "error": "no answer within the readiness budget of 0.2 s",
        "duration_ms": 200.0,
    }
    assert detailed["checks"]["database"]["status"] == "ok"
    assert anonymous.status_code == 503
    assert anonymous.json()["checks"]["broker"] == {"status": "fail"}


def test_request_id_is_echoed_or_generated(client: Client) -> None:
    echoed = client.get("/healthz", headers={"X-Request-ID": "ticket-42.abc_DEF"})
    assert echoed["X-Request-ID"] == "ticket-42.abc_DEF"
    generated = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert len(generated["X-Request-ID"]) == 32
    assert generated["X-Request-ID"] != "bad id with spaces"
    assert int(generated["X-Request-ID"], 16) >= 0


def test_metrics_served_to_loopback(client: Client) -> None:
    client.get("/healthz")
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    text = response.content.decode()
    assert "django_http_requests_total_by_method_total" in text


def test_metrics_refused_to_other_addresses(client: Client) -> None:
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403


def test_csp_header_forbids_inline_script(client: Client) -> None:
    response = client.get("/login/")
    policy = response["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy


def test_django_log_lines_are_printed_once() -> None:
    import logging

    django_logger = logging.getLogger("django")
    assert django_logger.propagate is False
    # pytest adds its own capture handlers; ours is the one console StreamHandler.
    streams = [h for h in django_logger.handlers if type(h) is logging.StreamHandler]
    assert len(streams) == 1
    assert [f.__class__.__name__ for f in streams[0].filters] == ["RequestIDLogFilter"]


def test_domain_metrics(client: Client) -> None:
    from tests.factories import portal_user, stored_sync_run
    from tests.vmrequest_factories import stored_image, stored_request, stored_team

    ok = stored_sync_run("success", age_seconds=120)
    stored_sync_run("failed", age_seconds=30)
    ana = portal_user("analyst", "ana")
    team, image = stored_team("quant", members=(ana,)), stored_image()
    stored_request(team, ana, image)
    stored_request(team, ana, image, status="running")
    stored_request(team, ana, image, status="running")
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    lines = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpu_portal_")
    }
    assert lines['gpu_portal_vm_requests{status="submitted"}'] == 1.0
    assert lines['gpu_portal_vm_requests{status="running"}'] == 2.0
    assert lines['gpu_portal_vm_requests{status="failed"}'] == 0.0
    assert lines['gpu_portal_webhook_deliveries{status="failed"}'] == 0.0
    assert (
        lines['gpu_portal_inventory_last_sync_timestamp_seconds{status="success"}'] == ok.finished.timestamp()
    )
    assert 'gpu_portal_inventory_last_sync_timestamp_seconds{status="failed"}' in lines
