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
def worker() -> Iterator[subprocess.Popen[str]]:
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
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
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


def test_ping_runs_on_a_real_worker(worker: subprocess.Popen[str]) -> None:
    nonce = secrets.token_hex(8)
    marker = Path(settings.VAR_DIR) / "ping" / nonce
    ping.delay(nonce)
    deadline = time.monotonic() + 90
    while not marker.exists() and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.2)
    output = "" if worker.poll() is None else (worker.stdout.read() if worker.stdout else "")
    assert marker.exists(), f"worker did not run portal.ping; worker output:\n{output}"
    assert marker.read_text() == "pong\n"
