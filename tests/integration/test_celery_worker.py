"""A task goes through the real broker (Redis in CI, the file broker locally) to a real worker."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from portal.tasks import ping

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture
def queue_name() -> str:
    """A queue of this test's own: messages other tests left on the shared default queue (e.g.
    provisioning tasks of requests that no longer exist) never delay or block this worker."""
    return f"ping-test-{secrets.token_hex(4)}"


@pytest.fixture
def worker(queue_name: str, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    log = (tmp_path / "worker.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "--pool=solo",
            "--loglevel=INFO",
            "--hostname",
            f"test-{secrets.token_hex(3)}@%h",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "--queues",
            queue_name,
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        # A file, not a pipe nobody reads: a full pipe would block the worker.
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def test_ping_runs_on_a_real_worker(worker: subprocess.Popen[str], queue_name: str, tmp_path: Path) -> None:
    nonce = secrets.token_hex(8)
    marker = Path(settings.VAR_DIR) / "ping" / nonce
    ping.apply_async((nonce,), queue=queue_name)
    deadline = time.monotonic() + 90
    while not marker.exists() and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.2)
    output = (tmp_path / "worker.log").read_text()
    assert marker.exists(), f"worker did not run portal.ping; worker output:\n{output}"
    assert marker.read_text() == "pong\n"
