"""A real Celery worker process and a cuttable TCP proxy for the provisioning integration tests.

- :func:`worker_database_url`: the ``DATABASE_URL`` under which a separate worker process reaches
  the database the test is using (PostgreSQL: pytest-django's ``test_<name>``; SQLite: the file
  copy the ``worker_db`` fixture switched to).
- :class:`WorkerProcess` / :func:`start_worker`: ``celery -A portal worker --pool=solo`` in its own
  process group, consuming one queue of its own (so a developer's worker, another test session or
  stale messages in the shared file broker can never take or feed our tasks), logging to a file.
- :class:`TcpProxy`: a thread forwarding ``127.0.0.1:<port>`` to the dev cluster's API server,
  which a test can cut (listener closed, live connections reset) and restore on the same port.
- :func:`write_proxy_kubeconfig`: a copy of a kubeconfig whose server is the proxy. The dev
  cluster's serving certificate names ``127.0.0.1`` and ``localhost`` and the identity is a bearer
  token, so only the port changes: no ``tls-server-name`` is needed.
- The embedded file broker's writes are atomic in the product itself (``portal/kombu_fs.py``),
  which this harness relies on.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import yaml
from django.db import connection

ROOT = Path(__file__).resolve().parents[3]

#: Runs the worker with ``task_default_queue`` set to ``argv[1]``: tasks the worker enqueues itself
#: (``self.retry``, the reconcile task's ``provision.delay``) then stay on that queue too.
_WORKER_MAIN = (
    "import sys; from portal.celery import app; "
    "app.conf.task_default_queue = sys.argv[1]; app.worker_main(sys.argv[2:])"
)


def worker_database_url() -> str:
    """``DATABASE_URL`` for a worker process: the database ``connections['default']`` uses now.

    Raises:
        RuntimeError: for a database vendor other than SQLite or PostgreSQL, or an in-memory SQLite.
    """
    cfg = connection.settings_dict
    if connection.vendor == "sqlite":
        name = str(cfg["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            raise RuntimeError("an in-memory SQLite database cannot be shared with a worker process")
        return f"sqlite:///{Path(name).resolve()}"
    if connection.vendor == "postgresql":
        user = quote(str(cfg.get("USER") or ""), safe="")
        password = quote(str(cfg.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = str(cfg.get("HOST") or "")
        port = f":{cfg['PORT']}" if cfg.get("PORT") else ""
        return f"postgres://{auth}{host}{port}/{quote(str(cfg['NAME']), safe='')}"
    raise RuntimeError(f"no worker database URL for vendor {connection.vendor!r}")


@dataclass
class WorkerProcess:
    """One ``celery worker`` process; its output goes to ``log_path``."""

    process: subprocess.Popen[bytes]
    log_path: Path
    queue: str

    @property
    def pid(self) -> int:
        """The worker's process ID (also its process group ID)."""
        return self.process.pid

    def log(self) -> str:
        """Everything the worker printed so far."""
        return self.log_path.read_text(errors="replace")

    def count(self, pattern: str) -> int:
        """How many lines of the log match the regular expression ``pattern``."""
        regex = re.compile(pattern)
        return sum(1 for line in self.log().splitlines() if regex.search(line))

    def assert_alive(self) -> None:
        """Fail with the worker's log if it has exited (a dead worker ends the test at once
        instead of a long wait)."""
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the worker logs ``ready.`` (it consumes from then on).

        Raises:
            AssertionError: the worker exited or was not ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode}:\n{self.log()}")
            if " ready." in self.log():
                return
            time.sleep(0.1)
        raise AssertionError(f"worker not ready after {timeout} s:\n{self.log()}")

    def freeze(self) -> None:
        """SIGSTOP the worker: it does nothing (and logs nothing) until :meth:`thaw`."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT a frozen worker."""
        os.killpg(self.process.pid, signal.SIGCONT)

    def kill(self) -> int:
        """SIGKILL the worker's process group (no shutdown, no acknowledgements); its exit code."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait()

    def stop(self) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it has not exited within 30 s."""
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def start_worker(log_path: Path, queue: str, env: dict[str, str]) -> WorkerProcess:
    """Start ``celery -A portal worker --pool=solo`` consuming only ``queue``.

    Args:
        log_path: file receiving the worker's stdout and stderr.
        queue: the queue to consume and to use as the worker's default queue.
        env: the complete environment of the worker process.
    """
    log_file = log_path.open("wb")
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WORKER_MAIN,
                queue,
                "worker",
                "--pool=solo",
                "--loglevel=INFO",
                "--queues",
                queue,
                "--hostname",
                f"provision-test-{secrets.token_hex(3)}@%h",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log_file.close()
    return WorkerProcess(process, log_path, queue)


@dataclass
class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target`` (host, port), byte for byte, in threads.

    :meth:`cut` closes the listening socket (new connections are refused) and resets every
    forwarded connection (a pooled keep-alive connection must not survive the outage);
    :meth:`restore` listens on the same port again.
    """

    target: tuple[str, int]
    port: int = 0
    accepted: int = 0
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conns: set[socket.socket] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> TcpProxy:
        """Listen (on a free port the first time, on the same port afterwards) and forward."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, args=(listener, self._stop), daemon=True)
        self._thread.start()
        return self

    @property
    def server(self) -> str:
        """``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self.port}"

    def cut(self) -> None:
        """Refuse new connections and reset the live ones."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for sock in conns:
            _close(sock)

    def restore(self) -> None:
        """Listen on the same port again."""
        self.start()

    def close(self) -> None:
        """Stop for good."""
        self.cut()

    def _accept_loop(self, listener: socket.socket, stop: threading.Event) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ)
            while not stop.is_set():
                if not sel.select(timeout=0.1):
                    continue
                try:
                    client, _addr = listener.accept()
                except OSError:
                    return
                try:
                    upstream = socket.create_connection(self.target, timeout=10)
                except OSError:
                    _close(client)
                    continue
                upstream.settimeout(None)
                with self._lock:
                    self.accepted += 1
                    self._conns.update((client, upstream))
                for src, dst in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                _close(sock)
                with self._lock:
                    self._conns.discard(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def api_server_address(kubeconfig: Path) -> tuple[str, int]:
    """(host, port) of the current context's cluster server in ``kubeconfig``."""
    doc: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    server = urlsplit(doc["clusters"][0]["cluster"]["server"])
    assert server.hostname is not None and server.port is not None
    return server.hostname, server.port


def write_proxy_kubeconfig(src: Path, dst: Path, server: str) -> Path:
    """Copy kubeconfig ``src`` to ``dst`` with every cluster's ``server`` set to ``server``."""
    doc: dict[str, Any] = yaml.safe_load(src.read_text())
    for cluster in doc["clusters"]:
        old = urlsplit(cluster["cluster"]["server"])
        new = urlsplit(server)
        cluster["cluster"]["server"] = urlunsplit((new.scheme, new.netloc, old.path, "", ""))
    dst.write_text(yaml.safe_dump(doc))
    return dst
