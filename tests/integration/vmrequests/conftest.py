"""Fixtures and builders of the VM-request integration tests.

``demo`` and ``portal_cluster`` are the inventory tier's (``tests/integration/inventory``): the
session dev cluster with ``devcluster/specs/demo.yaml`` applied on top of ``specs/test.yaml``,
and the portal's Kubernetes adapter pointed at it. The builders below write a team, an image
and submitted requests through the real service (``vmrequests.approval.submit``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections

from devcluster.server import DevCluster
from tests.integration.inventory.conftest import demo, portal_cluster
from tests.integration.vmrequests.worker_harness import (
    WorkerProcess,
    start_worker,
    worker_database_url,
)
from vmrequests.approval import RequestSpec, submit
from vmrequests.choices import VMMode
from vmrequests.models import GpuQuota, Team, VmImage, VMRequest
from vmrequests.roles import ANALYSTS_GROUP, APPROVERS_GROUP

__all__ = ["demo", "portal_cluster"]

#: An Ed25519 public key (format only; never used to log in).
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGz5oq0Z1gkQ0v7mB0nqVtK1mXoQ7F6b8v9cS2pL4dQe analyst@laptop"


def create_roles() -> None:
    """Re-create the groups and permission of migration ``vmrequests.0001_roles`` (idempotent).

    A transactional test empties every table afterwards, data-migration rows included, so the
    groups may be gone when a test runs after one.
    """
    from django.apps import apps

    importlib.import_module("vmrequests.migrations.0001_roles").create_roles(apps, None)


def make_team(
    namespace: str, slug: str = "quant", *, quotas: dict[tuple[str, str], int] | None = None
) -> Team:
    """A team whose VMs go to ``namespace``, with ``quotas`` ``{(mode, gpu): max devices}``."""
    team = Team.objects.create(name=f"Team {slug}", slug=slug, namespace=namespace)
    for (mode, gpu), limit in (quotas or {}).items():
        GpuQuota.objects.create(team=team, mode=mode, gpu=gpu, max_devices=limit)
    return team


def make_image() -> VmImage:
    """An enabled Ubuntu containerDisk image."""
    return VmImage.objects.create(
        name="Ubuntu 22.04", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu 22.04"
    )


def make_user(username: str, groups: list[str]) -> Any:
    """A user in ``groups`` with no usable password (tests log in with ``force_login``; hashing
    a password costs most of a second per user)."""
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username)
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


def make_approver(team: Team, username: str = "approver") -> Any:
    """A user in the analysts and approvers groups who approves ``team``'s requests."""
    user = make_user(username, [ANALYSTS_GROUP, APPROVERS_GROUP])
    team.approvers.add(user)
    return user


def make_analyst(team: Team, username: str) -> Any:
    """A member of ``team`` in the analysts group."""
    user = make_user(username, [ANALYSTS_GROUP])
    team.members.add(user)
    return user


def submit_request(
    team: Team,
    requester: Any,
    image: VmImage,
    *,
    mode: str = VMMode.PASSTHROUGH,
    resource_name: str = "",
    vgpu_type: str = "",
    gpu_model: str = "",
    count: int = 1,
    name: str = "",
) -> VMRequest:
    """A submitted request (4 cores, 16 GiB, 7-day lease) through ``vmrequests.approval.submit``."""
    spec = RequestSpec(
        team=team,
        mode=mode,
        resource_name=resource_name,
        vgpu_type=vgpu_type,
        gpu_model=gpu_model,
        device_count=count,
        cpu_cores=4,
        memory_gib=16,
        image=image,
        ssh_public_key=SSH_KEY,
        lease_days=7,
        justification="Backtest of the risk model.",
        name=name,
    )
    return submit(spec, requester)


@contextlib.contextmanager
def file_database(tmp_path: Path) -> Iterator[None]:
    """On SQLite, point ``connections['default']`` at a file copy of the in-memory test database
    for the duration (``sqlite3`` backup API, same options: ``transaction_mode=IMMEDIATE``,
    ``timeout``), then put the in-memory connection back, untouched, for pytest-django's flush.
    Other threads' and processes' connections can then wait for locks as in production (the
    in-memory shared-cache database answers "database table is locked" at once, and another
    process cannot open it). On PostgreSQL: nothing to do.
    """
    if connection.vendor != "sqlite":
        yield
        return
    path = tmp_path / "portal.sqlite3"
    memory = connections["default"]
    memory.ensure_connection()
    target = sqlite3.connect(path)
    try:
        memory.connection.backup(target)
    finally:
        target.close()
    settings_dict = memory.settings_dict
    name = settings_dict["NAME"]
    settings_dict["NAME"] = str(path)
    file_db = connections.create_connection("default")
    connections["default"] = file_db
    try:
        yield
    finally:
        file_db.close()
        settings_dict["NAME"] = name
        connections["default"] = memory


# --- a real Celery worker process (tests/integration/vmrequests/test_vmrequest_provisioning_worker.py) ---


@pytest.fixture
def worker_db(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """The test database, shared with worker processes; yields their ``DATABASE_URL``.

    PostgreSQL: pytest-django's ``test_<name>`` database as it is (``transactional_db`` commits,
    so a worker sees the test's rows). SQLite: the in-memory test database cannot be opened by
    another process, so for the duration of the test ``connections['default']`` points at a file
    copy of it (``sqlite3`` backup API, same options) and the worker opens that file; afterwards
    the in-memory connection is put back, untouched, for pytest-django's flush (the pattern of
    ``threaded_db`` in ``test_vmrequest_concurrency.py``).
    """
    with file_database(tmp_path):
        yield worker_database_url()


@pytest.fixture
def celery_queue() -> Iterator[str]:
    """A Celery queue of this test's own: tasks the test process sends (``approve`` enqueues
    ``vmrequests.provision`` on commit) go to it, and the workers of ``celery_worker`` consume
    only it. A developer's running worker, another test session or stale messages left in the
    shared file broker can then neither take nor feed this test's tasks. Messages still in it at
    the end (e.g. a retry a stopped worker gave back) are purged."""
    from portal.celery import app

    name = f"provision-test-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = name
    try:
        yield name
    finally:
        app.conf.task_default_queue = previous
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(name)


@pytest.fixture
def celery_worker(
    worker_db: str, celery_queue: str, devcluster: DevCluster, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start real ``celery worker --pool=solo`` processes: ``celery_worker(**env)`` → a ready
    :class:`WorkerProcess`.

    Each worker gets this process's environment (so ``CELERY_BROKER_URL``: Redis in CI, else the
    file broker under the same ``PORTAL_VAR_DIR``), ``DATABASE_URL`` of ``worker_db``,
    ``PORTAL_KUBECONFIG`` of the session dev cluster, and ``env`` on top (e.g.
    ``PORTAL_KUBECONFIG=<proxy kubeconfig>``, ``PORTAL_REQUEUE_AFTER="2"``). Workers still running
    at the end are shut down (SIGTERM, then SIGKILL); their logs are printed (shown on failure).
    """
    started: list[WorkerProcess] = []

    def start(**env: str) -> WorkerProcess:
        full = os.environ.copy()
        full.pop("PORTAL_KUBE_CONTEXT", None)
        full.update(
            {
                "DJANGO_SETTINGS_MODULE": "portal.settings",
                "DATABASE_URL": worker_db,
                "PORTAL_VAR_DIR": str(django_settings.VAR_DIR),
                "PORTAL_KUBECONFIG": str(devcluster.kubeconfig),
                "PORTAL_LOG_FORMAT": "text",
                "EMAIL_URL": "memorymail://",
            }
        )
        full.update(env)
        worker = start_worker(tmp_path / f"worker-{len(started) + 1}.log", celery_queue, full)
        started.append(worker)
        worker.wait_ready()
        return worker

    try:
        yield start
    finally:
        for worker in started:
            worker.stop()
            print(f"--- {worker.log_path.name} (exit {worker.process.returncode}) ---\n{worker.log()}")
