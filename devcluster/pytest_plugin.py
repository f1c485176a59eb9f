"""pytest plugin: a session-wide real dev cluster for ``tests/integration`` and ``tests/e2e``.

Register it from the root ``tests/conftest.py`` with
``pytest_plugins = ["devcluster.pytest_plugin"]``. Nothing starts until a test requests
one of the fixtures, so unit tests are unaffected.

Fixtures:
    devcluster: (session) a started :class:`~devcluster.server.DevCluster` in a temporary state
        directory (on ``/dev/shm`` when available), with ``devcluster/specs/test.yaml`` applied
        and the simulator running with near-zero delays when those parts exist.
    k8s_api: (session) an admin ``kubernetes.client.ApiClient`` for that cluster.
    k8s_namespace: (function) the name of a fresh namespace ``t-<8 hex>``. Namespaces are never
        deleted: with no namespace controller a deleted namespace stays Terminating forever
        (DEVCLUSTER.md section 5 pitfall 7), and the whole cluster is thrown away at session end.

Environment:
    PORTAL_SHARED_DIR: shared material directory (CRDs), default ``../shared``.
    DEVCLUSTER_KEEP_STATE=1: keep the temporary state directory (logs, etcd data) after the session.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from devcluster.build import GOTOOLS_DIR, ensure_binaries, tool_versions
from devcluster.server import DevCluster, default_shared_dir, temp_state_dir
from devcluster.session import SimulatorLike, apply_and_simulate, load_cluster_spec, simulation_available

TEST_SPEC = Path(__file__).resolve().parent / "specs" / "test.yaml"


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line)


@pytest.fixture(scope="session")
def devcluster(request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """Start the dev cluster once per session (building the binaries first if needed).

    Yields:
        The running cluster; stopped (and its temp dir removed) at session end, also when
        start-up fails half-way.
    """
    config = request.config
    capture = config.pluginmanager.get_plugin("capturemanager")
    state_dir = temp_state_dir("devcluster-pytest-")
    cluster = DevCluster(state_dir=state_dir, shared_dir=default_shared_dir())
    simulator: SimulatorLike | None = None
    try:
        # Show build progress and start-up errors live rather than swallowed by capture.
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            cluster.binaries = ensure_binaries()
            cluster.start()
        versions = tool_versions((GOTOOLS_DIR / "go.mod").read_text())
        simulated = ""
        if simulation_available() and TEST_SPEC.is_file():
            spec = load_cluster_spec(TEST_SPEC, cluster.shared_dir)
            simulator = apply_and_simulate(cluster.api_client(), spec, "test")
            simulated = f", spec {TEST_SPEC.name} + simulator"
        _say(
            config,
            f"devcluster: real kube-apiserver {cluster.server_version()} + etcd {versions.etcd} at "
            f"{cluster.server} (started in {cluster.timings.total:.1f} s, state {state_dir}{simulated})",
        )
        yield cluster
    finally:
        try:
            if simulator is not None:
                simulator.stop()
        finally:
            cluster.stop()
            if os.environ.get("DEVCLUSTER_KEEP_STATE") != "1":
                shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def k8s_api(devcluster: DevCluster) -> k8s.ApiClient:
    """An admin ApiClient (group ``system:masters``) for the session's dev cluster."""
    return devcluster.api_client()


@pytest.fixture
def k8s_namespace(k8s_api: k8s.ApiClient) -> str:
    """Create and return a unique namespace ``t-<8 hex digits>`` for one test (never deleted)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    k8s.CoreV1Api(k8s_api).create_namespace(body=k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    return name
