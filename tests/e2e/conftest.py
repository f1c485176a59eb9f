"""Browser tests: Playwright for Python driving Debian's Chromium against pytest-django's live server.

The live server listens on 127.0.0.1 only. Chromium comes from the Debian package
(``/usr/bin/chromium``; ``make test`` installs it), never from Playwright's own download,
which this network cannot reach. Screenshots go to ``test-artifacts/screenshots/``.

The main journey (``test_main_journey.py``) runs the whole product: a live server on the
database a real Celery worker and the VMI watcher (``manage.py watch_vmis``) share, the session
dev cluster with ``devcluster/specs/demo.yaml`` and its simulator, and the demo users, teams and
images ``make run`` seeds. Its fixtures are the ``*_server``, ``vmi_watcher``, ``demo_portal``
and ``demo_cluster_guard`` below, with the worker fixtures of ``tests/integration/vmrequests``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException
from playwright.sync_api import Browser, Page, sync_playwright

from devcluster.server import DevCluster
from tests.integration.inventory.conftest import demo, gpu_allocatable, portal_cluster, wait_for
from tests.integration.vmrequests.conftest import celery_queue, celery_worker, worker_db
from tests.integration.vmrequests.worker_harness import ROOT, WorkerProcess

__all__ = ["celery_queue", "celery_worker", "demo", "portal_cluster", "worker_db"]

# Playwright's sync API runs an event loop in the test thread; Django's ORM refuses to run
# "inside" it unless told that this thread is a plain synchronous one.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    """Return Debian's Chromium, or fail with the package to install."""
    for candidate in (os.environ.get("PORTAL_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    raise pytest.UsageError("Chromium not found: apt-get install chromium (or set PORTAL_CHROMIUM)")


@pytest.fixture(autouse=True)
def roles(transactional_db: None) -> None:
    """Re-create the groups and permission of migration ``vmrequests.0001_roles``.

    Live-server tests run in transactional mode, which empties every table after each test,
    data-migration rows included; the next test would find no ``analysts`` group.
    """
    from django.apps import apps

    migration = importlib.import_module("vmrequests.migrations.0001_roles")
    migration.create_roles(apps, None)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def screenshot(page: Page, request: pytest.FixtureRequest) -> Iterator[object]:
    """Call ``screenshot("step-name")`` to keep a PNG of the page under test-artifacts/screenshots/
    (``<test name>-<step-name>.png``, the whole page).

    Keyword arguments: ``of`` another page to shoot (e.g. a second user's browser context);
    ``prefix=False`` names the file ``<step-name>.png``; ``full_page=False`` keeps the viewport only.
    Returns the file's path.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def take(name: str, *, of: Page | None = None, prefix: bool = True, full_page: bool = True) -> Path:
        path = ARTIFACTS / (f"{request.node.name}-{name}.png" if prefix else f"{name}.png")
        (of or page).screenshot(path=str(path), full_page=full_page)
        return path

    yield take


# --- the main journey: the whole product on the shared test database ------------------------------


@pytest.fixture
def shared_db_server(worker_db: str) -> Iterator[str]:
    """A live server (``http://127.0.0.1:<port>``) on the database the worker processes use.

    pytest-django's session-wide ``live_server`` holds on to the in-memory SQLite connection it
    started with, which other processes cannot open; this one starts after ``worker_db`` switched
    the test to a file copy (SQLite) and opens its own connections per request, so the browser,
    the worker and the watcher see the same rows. On PostgreSQL it is an ordinary live server.
    Static files are served as pytest-django's live server serves them.
    """
    from django.contrib.staticfiles.handlers import StaticFilesHandler
    from django.test.testcases import LiveServerThread
    from django.test.utils import modify_settings

    with modify_settings(ALLOWED_HOSTS={"append": "127.0.0.1"}):
        thread = LiveServerThread("127.0.0.1", StaticFilesHandler, port=0)
        thread.daemon = True
        thread.start()
        thread.is_ready.wait()
        if thread.error:
            raise thread.error
        try:
            yield f"http://127.0.0.1:{thread.port}"
        finally:
            thread.terminate()


#: Runs ``manage.py watch_vmis`` with ``task_default_queue`` set to ``argv[1]`` (a provision task
#: the watcher's reconcile enqueues again then goes to the test's worker, as from the worker harness).
_WATCHER_MAIN = (
    "import sys; from portal.celery import app; app.conf.task_default_queue = sys.argv[1]; "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['manage.py', 'watch_vmis', *sys.argv[2:]])"
)


def process_env(database_url: str, kubeconfig: Path, **extra: str) -> dict[str, str]:
    """The environment of a portal process beside the test (as ``celery_worker`` builds it): this
    process's environment (so ``CELERY_BROKER_URL``: Redis in CI, else the file broker under the
    same ``PORTAL_VAR_DIR``), the shared database, the dev cluster's admin kubeconfig, ``extra``."""
    env = os.environ.copy()
    env.pop("PORTAL_KUBE_CONTEXT", None)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": database_url,
            "PORTAL_VAR_DIR": str(django_settings.VAR_DIR),
            "PORTAL_KUBECONFIG": str(kubeconfig),
            "PORTAL_LOG_FORMAT": "text",
            "EMAIL_URL": "memorymail://",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


@pytest.fixture
def vmi_watcher(
    worker_db: str, celery_queue: str, devcluster: DevCluster, tmp_path: Path
) -> Iterator[WorkerProcess]:
    """A running ``manage.py watch_vmis`` process (what ``make run`` starts beside the worker): it
    moves a request to running as soon as its VMI runs with an IP. Stopped with SIGTERM at the end
    (it returns within its 5 s watch timeout; SIGKILL after 30 s); its log is printed."""
    log_path = tmp_path / "watcher.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-c", _WATCHER_MAIN, celery_queue, "--watch-seconds", "5"],
            cwd=ROOT,
            env=process_env(worker_db, devcluster.kubeconfig),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    watcher = WorkerProcess(process, log_path, celery_queue)
    try:
        deadline = time.monotonic() + 120
        while "watching VirtualMachineInstances" not in watcher.log():
            watcher.assert_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"the VMI watcher did not start:\n{watcher.log()}")
            time.sleep(0.1)
        yield watcher
    finally:
        watcher.stop()
        print(f"--- watcher.log (exit {process.returncode}) ---\n{watcher.log()}")


@dataclass(frozen=True)
class DemoPortal:
    """The demo as ``make run`` seeds it: users ``analyst``, ``approver``, ``admin`` (all with
    ``password``), teams Quant (``team-quant``) and Research (``team-research``), images, quotas."""

    password: str
    catalog_output: str


#: The one password of the demo users in the journey (``create_demo_users --password``).
DEMO_PASSWORD = "Demo-Journey-Password-42"


@pytest.fixture
def demo_portal(worker_db: str, portal_cluster: DevCluster) -> DemoPortal:
    """Seed the shared database as ``make run`` does (``manage.py create_demo_users`` and
    ``create_demo_catalog``) and run one inventory sync of the demo cluster (beat's job; the test
    syncs again itself where it needs fresh counts)."""
    from io import StringIO

    from django.core.management import call_command

    from gpuinventory.choices import SyncStatus
    from gpuinventory.sync import run_sync

    call_command("create_demo_users", password=DEMO_PASSWORD, stdout=StringIO())
    out = StringIO()
    call_command("create_demo_catalog", stdout=out)
    run = run_sync("command")
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")
    return DemoPortal(DEMO_PASSWORD, out.getvalue())


#: Label the portal puts on every VMI it creates (``vmrequests.provisioning``).
MANAGED_BY_SELECTOR = "app.kubernetes.io/managed-by=gpu-vm-portal"
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"
VGPU_STATE_LABEL = "nvidia.com/vgpu.config.state"
VMI_API = ("kubevirt.io", "v1")


@dataclass
class DemoClusterGuard:
    """Puts the shared dev cluster back after the journey: first every VMI the portal made in the
    demo's team namespaces (and their launcher pods) is gone, then each node whose vGPU config
    label changed gets its old value back, waiting until its vGPU state is ``success`` and its
    ``nvidia.com/*`` allocatable is as before. The demo's own VMI (``quant-analyst-01``) is left
    alone: only VMIs labelled ``app.kubernetes.io/managed-by=gpu-vm-portal`` are deleted."""

    api: k8s_client.ApiClient
    namespaces: tuple[str, ...]
    nodes: dict[str, tuple[str | None, dict[str, str]]] = field(default_factory=dict)

    def record(self) -> None:
        """Remember every node's vGPU config label and GPU allocatable."""
        for node in k8s_client.CoreV1Api(self.api).list_node().items:
            labels = node.metadata.labels or {}
            allocatable = {
                k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")
            }
            self.nodes[node.metadata.name] = (labels.get(VGPU_CONFIG_LABEL), allocatable)

    def portal_vmis(self) -> list[tuple[str, str]]:
        """``(namespace, name)`` of the portal's VMIs in the guarded namespaces."""
        custom = k8s_client.CustomObjectsApi(self.api)
        return [
            (ns, vmi["metadata"]["name"])
            for ns in self.namespaces
            for vmi in custom.list_namespaced_custom_object(
                *VMI_API, ns, "virtualmachineinstances", label_selector=MANAGED_BY_SELECTOR
            )["items"]
        ]

    def restore(self, timeout: float = 180.0) -> None:
        """Delete the portal's VMIs, then put node labels back (see the class docstring)."""
        custom = k8s_client.CustomObjectsApi(self.api)
        core = k8s_client.CoreV1Api(self.api)
        deleted = self.portal_vmis()
        for ns, name in deleted:
            try:
                custom.delete_namespaced_custom_object(*VMI_API, ns, "virtualmachineinstances", name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

        def gone() -> bool:
            return not self.portal_vmis() and not any(
                core.list_namespaced_pod(ns, label_selector=f"vm.kubevirt.io/name={name}").items
                for ns, name in deleted
            )

        wait_for(gone, f"the portal's VMIs {deleted} and their launcher pods gone", timeout=timeout)
        for name, (config, allocatable) in self.nodes.items():
            try:
                labels = core.read_node(name).metadata.labels or {}
            except ApiException as exc:
                if exc.status == 404:  # a node another test made and removed
                    continue
                raise
            if labels.get(VGPU_CONFIG_LABEL) == config:
                continue
            core.patch_node(name, {"metadata": {"labels": {VGPU_CONFIG_LABEL: config}}})

            def back(
                name: str = name, config: str | None = config, allocatable: dict[str, str] = allocatable
            ) -> bool:
                labels = core.read_node(name).metadata.labels or {}
                return (
                    labels.get(VGPU_CONFIG_LABEL) == config
                    and labels.get(VGPU_STATE_LABEL) in (None, "success")
                    and gpu_allocatable(self.api, name) == allocatable
                )

            wait_for(back, f"node {name} back to {VGPU_CONFIG_LABEL}={config}", timeout=timeout)


@pytest.fixture
def demo_cluster_guard(k8s_api: k8s_client.ApiClient, demo: Any) -> Iterator[DemoClusterGuard]:
    """A :class:`DemoClusterGuard` of the demo namespaces ``team-quant`` and ``team-research``,
    restored after the test. Request it before the worker and watcher fixtures so that they are
    stopped before it restores (a worker still retrying must not create a VMI afterwards)."""
    guard = DemoClusterGuard(k8s_api, ("team-quant", "team-research"))
    assert guard.portal_vmis() == [], "portal VMIs left in the demo namespaces by an earlier test"
    guard.record()
    try:
        yield guard
    finally:
        guard.restore()
