"""Start and stop a real etcd + kube-apiserver on loopback, with credentials and CRDs.

This is the envtest model (no kubelets, controller-manager or scheduler): two processes, each in
its own process group, flags after DEVCLUSTER.md section 2.5 (modelled on controller-runtime's
``pkg/internal/testing/controlplane``). On start it:

1. picks free 127.0.0.1 ports (etcd client, etcd peer, apiserver), retrying on a bind race;
2. generates a CA, a serving certificate for ``127.0.0.1``/``localhost``, a service-account
   key pair and ``tokens.csv`` (admin in ``system:masters``; ``portal-limited`` with no group);
3. starts etcd and waits for its ``/readyz``, starts kube-apiserver and waits for ``/readyz``
   and for namespace ``default`` (section 2.5 step 5);
4. grants ``portal-limited`` a ClusterRole that allows only get/list/watch on nodes;
5. installs the KubeVirt and GPU Operator CRDs from the shared directory, waits for
   ``Established`` and ``NamesAccepted`` and rides out the short 404 window after that
   (section 2.5 step 7, pitfall 5.9);
6. writes ``kubeconfig`` (admin) and ``kubeconfig-limited`` into the state directory.

``stop()`` SIGTERMs the apiserver, then etcd (whole process groups), SIGKILLs after a grace
period, and is registered with :mod:`atexit`. For what atexit cannot cover (the Python process
SIGKILLed or OOM-killed), each component is started with ``PR_SET_PDEATHSIG`` so the kernel
kills it with its parent, and a ``pids.json`` in the state directory lets the next start in the
same directory reap anything left over.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import datetime as dt
import errno
import fcntl
import functools
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TextIO

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from devcluster.build import Binaries, ensure_binaries

REPO_ROOT = Path(__file__).resolve().parent.parent

ADMIN_USER = "admin"
ADMIN_GROUP = "system:masters"
LIMITED_USER = "portal-limited"
LIMITED_CLUSTER_ROLE = "devcluster:portal-limited"

#: Seconds to wait for each readiness step before giving up.
DEFAULT_START_TIMEOUT = 120.0
#: Seconds between SIGTERM and SIGKILL on stop.
STOP_GRACE = 10.0
#: kube-apiserver keeps no state of its own (etcd does), and with watches open its graceful
#: shutdown takes several seconds, past the 5 s a process manager (honcho) waits before SIGKILL;
#: so it gets a short grace, etcd the full one.
APISERVER_STOP_GRACE = 1.0
#: Attempts at picking free ports when another process grabs one between our probe and the bind.
PORT_ATTEMPTS = 4
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class DevClusterError(RuntimeError):
    """The dev cluster could not be started or used."""


class PortInUseError(DevClusterError):
    """A requested loopback port is already taken by another process."""


class StartupError(DevClusterError):
    """etcd or kube-apiserver did not become ready (the message holds the log tail)."""


class _PortRace(Exception):
    """A component exited because its port was taken after we picked it (internal)."""


def default_state_dir() -> Path:
    """Return the default state directory, ``.devcluster/`` at the repository root (git-ignored)."""
    return REPO_ROOT / ".devcluster"


def default_shared_dir(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """Return the read-only shared material directory.

    Args:
        env: environment to read (default ``os.environ``); ``PORTAL_SHARED_DIR`` wins.

    Returns:
        ``$PORTAL_SHARED_DIR``, else ``../shared`` relative to the repository root, resolved.
    """
    env = os.environ if env is None else env
    if env.get("PORTAL_SHARED_DIR"):
        return Path(env["PORTAL_SHARED_DIR"]).expanduser().resolve()
    return (REPO_ROOT.parent / "shared").resolve()


def temp_state_dir(prefix: str = "devcluster-") -> Path:
    """Create a fresh temporary state directory, on ``/dev/shm`` when it is usable (section 2.5 step 1).

    Returns:
        The new directory; the caller removes it.
    """
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def crd_files(shared_dir: Path) -> list[Path]:
    """List the CRD manifests to install: ``kubevirt-crds/*.yaml`` then ``gpu-operator-crds/*.yaml``.

    Args:
        shared_dir: the shared material directory (see :func:`default_shared_dir`).

    Returns:
        Sorted YAML paths (README files are Markdown and therefore not matched).

    Raises:
        DevClusterError: when a directory is missing or holds no YAML.
    """
    files: list[Path] = []
    for sub in ("kubevirt-crds", "gpu-operator-crds"):
        found = sorted((shared_dir / sub).glob("*.yaml"))
        if not found:
            raise DevClusterError(
                f"no CRD manifests in {shared_dir / sub}; set --shared-dir or PORTAL_SHARED_DIR to the "
                "directory that holds kubevirt-crds/ and gpu-operator-crds/"
            )
        files.extend(found)
    return files


def load_crds(paths: list[Path]) -> list[dict[str, Any]]:
    """Parse CRD manifests (multi-document YAML; empty documents skipped).

    Returns:
        One dict per ``CustomResourceDefinition`` document.
    """
    # libyaml's loader parses the 1.8 MB of CRDs in ~1 s; the pure-Python one takes ~9 s.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crds: list[dict[str, Any]] = []
    for path in paths:
        with path.open() as handle:
            for doc in yaml.load_all(handle, Loader=loader):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    return crds


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int) -> None:
    """Raise :class:`PortInUseError` if ``127.0.0.1:port`` cannot be bound.

    Raises:
        PortInUseError: with a message naming the port and how to find its owner.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise PortInUseError(port_in_use_message(port)) from exc


def port_in_use_message(port: int) -> str:
    """Return the user-facing message for a taken port.

    Args:
        port: the TCP port on 127.0.0.1.

    Returns:
        A sentence naming ``127.0.0.1:<port>``, how to find the owner and how to avoid it.
    """
    return (
        f"port 127.0.0.1:{port} is already in use (another dev cluster?). "
        f"Find the owner with: ss -ltnp 'sport = :{port}'. "
        "Stop it, or choose another port with --port, or omit --port to pick a free one."
    )


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    """Files and secrets generated for one cluster (section 2.5 step 2).

    Attributes:
        pki_dir: directory holding the PEM files below.
        ca_cert: CA certificate (PEM) that signs the serving certificate.
        serving_cert: kube-apiserver serving certificate for 127.0.0.1 and localhost.
        serving_key: its private key.
        sa_key: service-account signing key (RSA 2048, PEM PKCS#8).
        sa_pub: its public key (PEM SubjectPublicKeyInfo).
        tokens_csv: static token file, ``token,user,uid,"groups"``
            (``k8s.io/apiserver/pkg/authentication/token/tokenfile``).
        admin_token: bearer token of ``admin`` (group ``system:masters``).
        limited_token: bearer token of ``portal-limited`` (no group).
    """

    pki_dir: Path
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    tokens_csv: Path
    admin_token: str
    limited_token: str


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def generate_credentials(pki_dir: Path, valid_days: int = 365) -> Credentials:
    """Generate a CA, a serving certificate, an SA key pair and a token file in ``pki_dir``.

    The certificates carry the extensions strict verifiers (Python 3.13's
    ``VERIFY_X509_STRICT``) expect: CA basic constraints and key usage, subject/authority
    key identifiers, ``serverAuth`` and SANs ``127.0.0.1``, ``localhost``.

    Args:
        pki_dir: directory to write to (created, private files mode 0600).
        valid_days: certificate lifetime in days.

    Returns:
        Paths and tokens; tokens are 32 random hex digits, fresh each call.
    """
    pki_dir.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=valid_days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "devcluster-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(srv_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(srv_key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    creds = Credentials(
        pki_dir=pki_dir,
        ca_cert=pki_dir / "ca.crt",
        serving_cert=pki_dir / "apiserver.crt",
        serving_key=pki_dir / "apiserver.key",
        sa_key=pki_dir / "sa.key",
        sa_pub=pki_dir / "sa.pub",
        tokens_csv=pki_dir / "tokens.csv",
        admin_token=secrets.token_hex(16),
        limited_token=secrets.token_hex(16),
    )
    creds.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(pki_dir / "ca.key", _pem_key(ca_key))
    creds.serving_cert.write_bytes(srv_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(creds.serving_key, _pem_key(srv_key))
    _write_private(creds.sa_key, _pem_key(sa_key))
    creds.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    _write_private(
        creds.tokens_csv,
        (
            f'{creds.admin_token},{ADMIN_USER},{ADMIN_USER}-uid,"{ADMIN_GROUP}"\n'
            f"{creds.limited_token},{LIMITED_USER},{LIMITED_USER}-uid\n"
        ).encode(),
    )
    return creds


def kubeconfig_dict(server: str, ca_pem: bytes, user: str, token: str) -> dict[str, Any]:
    """Build a kubeconfig for one token user (section 2.5 step 6).

    Args:
        server: e.g. ``"https://127.0.0.1:41234"``.
        ca_pem: CA certificate, embedded as ``certificate-authority-data`` so the file is
            self-contained.
        user: user name used for the ``users``/``contexts`` entries.
        token: bearer token.

    Returns:
        A kubeconfig mapping with one cluster ``devcluster`` and current context ``devcluster-<user>``.
    """
    context = f"devcluster-{user}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "devcluster",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": "devcluster", "user": user}}],
        "current-context": context,
        "preferences": {},
    }


# --------------------------------------------------------------------------- processes


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    stopped: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = 40) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float) -> None:
        """SIGTERM the process group, wait ``grace`` seconds, then SIGKILL it (once only).

        The flag matters: after the leader is reaped its pid may be reused, so a second
        ``killpg`` on it later could hit an unrelated process group.
        """
        if self.stopped:
            return
        self.stopped = True
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        # Children that outlived the leader (none expected): kill what is left of the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.log_file.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL this child when the thread that started it dies (PR_SET_PDEATHSIG).

    This covers what atexit cannot: the Python process being SIGKILLed or OOM-killed. Caveat
    (prctl(2)): the signal fires when the *thread* that forked exits, so start clusters from a
    long-lived thread (the main thread, as pytest and ``python -m devcluster up`` do).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _spawn(name: str, argv: list[str], log_path: Path) -> _Proc:
    log_file = log_path.open("ab")
    popen = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # own process group: stop() signals the whole group
        close_fds=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    return _Proc(name=name, popen=popen, log_path=log_path, log_file=log_file)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def reap_stale(state_dir: Path) -> list[int]:
    """Kill processes recorded in ``state_dir/pids.json`` by an earlier run that died.

    Only processes whose command line still mentions ``state_dir`` are killed, so a recycled
    pid that now belongs to something else is left alone.

    Returns:
        The pids that were signalled.
    """
    pids_file = state_dir / "pids.json"
    try:
        recorded = json.loads(pids_file.read_text())
    except (OSError, ValueError):
        return []
    killed: list[int] = []
    for pid in recorded.values():
        if isinstance(pid, int) and str(state_dir) in _cmdline(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
    pids_file.unlink(missing_ok=True)
    return killed


# --------------------------------------------------------------------------- the cluster


@dataclass
class StartTimings:
    """Seconds from the start of :meth:`DevCluster.start` to each milestone.

    Attributes:
        prepared: CRD files parsed, binaries found, state dir and credentials ready.
        etcd_ready: etcd ``/readyz`` answered 200.
        apiserver_ready: kube-apiserver ``/readyz`` answered 200.
        default_namespace: namespace ``default`` readable.
        crds_ready: all CRDs Established, NamesAccepted and served.
        total: ``start()`` returned.
    """

    prepared: float = 0.0
    etcd_ready: float = 0.0
    apiserver_ready: float = 0.0
    default_namespace: float = 0.0
    crds_ready: float = 0.0
    total: float = 0.0


@dataclass
class Ports:
    """The three loopback TCP ports of one cluster (etcd client, etcd peer, kube-apiserver)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclass
class DevCluster:
    """A real etcd + kube-apiserver on loopback; a context manager.

    Example::

        with DevCluster(state_dir=temp_state_dir()) as cluster:
            core = kubernetes.client.CoreV1Api(cluster.api_client())

    Attributes:
        state_dir: holds ``kubeconfig``, ``kubeconfig-limited``, ``pki/``, ``etcd/`` (data),
            ``logs/etcd.log``, ``logs/kube-apiserver.log``, ``pids.json``. Default
            ``.devcluster/`` at the repository root. Its etcd data and PKI are wiped on start.
        shared_dir: where ``kubevirt-crds/`` and ``gpu-operator-crds/`` are read
            (default :func:`default_shared_dir`).
        binaries: executables to run (default: :func:`devcluster.build.ensure_binaries`).
        apiserver_port: fixed apiserver port (default: a free one).
        start_timeout: seconds allowed for each readiness wait.
        install_crds: install the shared CRDs on start.
        log: where progress lines go (default stderr).
    """

    state_dir: Path = field(default_factory=default_state_dir)
    shared_dir: Path = field(default_factory=default_shared_dir)
    binaries: Binaries | None = None
    apiserver_port: int | None = None
    start_timeout: float = DEFAULT_START_TIMEOUT
    install_crds: bool = True
    log: TextIO = field(default_factory=lambda: sys.stderr)

    timings: StartTimings = field(default_factory=StartTimings, init=False)
    _procs: dict[str, _Proc] = field(default_factory=dict, init=False, repr=False)
    _ports: Ports | None = field(default=None, init=False, repr=False)
    _creds: Credentials | None = field(default=None, init=False, repr=False)
    _lock_file: IO[str] | None = field(default=None, init=False, repr=False)
    _clients: list[k8s.ApiClient] = field(default_factory=list, init=False, repr=False)
    _started: bool = field(default=False, init=False, repr=False)

    # ------------------------------------------------------------------ public API

    @property
    def server(self) -> str:
        """The apiserver URL, ``https://127.0.0.1:<port>``."""
        return f"https://127.0.0.1:{self._require_ports().apiserver}"

    @property
    def kubeconfig(self) -> Path:
        """Admin kubeconfig (user ``admin``, group ``system:masters``)."""
        return self.state_dir / "kubeconfig"

    @property
    def kubeconfig_limited(self) -> Path:
        """Kubeconfig of ``portal-limited`` (may only get/list/watch nodes)."""
        return self.state_dir / "kubeconfig-limited"

    @property
    def ca_cert(self) -> Path:
        """The CA certificate (PEM) that verifies the apiserver."""
        return self._require_creds().ca_cert

    @property
    def pids(self) -> dict[str, int]:
        """Pids of the running components, e.g. ``{"etcd": 1234, "kube-apiserver": 1240}``."""
        return {name: proc.pid for name, proc in self._procs.items()}

    @property
    def log_paths(self) -> dict[str, Path]:
        """Log file of each component."""
        return {name: proc.log_path for name, proc in self._procs.items()}

    def start(self) -> Self:
        """Start etcd and kube-apiserver, install CRDs and RBAC, write the kubeconfigs.

        Returns:
            ``self``, ready for requests.

        Raises:
            GoMissingError, BuildError: binaries absent and cannot be built.
            PortInUseError: ``apiserver_port`` was given and is taken.
            StartupError: a component exited or missed ``start_timeout``; the message holds the
                tail of its log.
            DevClusterError: the state directory is used by another running cluster, or the
                CRD directories are missing.
        """
        if self._started:
            return self
        t0 = time.monotonic()
        crds = load_crds(crd_files(self.shared_dir)) if self.install_crds else []
        if self.apiserver_port is not None:
            check_port_free(self.apiserver_port)
        binaries = self.binaries or ensure_binaries(log=self.log)
        self._prepare_state_dir()
        self._started = True
        atexit.register(self.stop)
        try:
            self._creds = generate_credentials(self.state_dir / "pki")
            self.timings.prepared = time.monotonic() - t0
            self._start_processes(binaries, t0)
            self._write_kubeconfigs()
            self._wait_default_namespace(t0)
            self._grant_limited_rbac()
            if crds:
                self._install_crds(crds)
            self.timings.crds_ready = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        self.timings.total = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop kube-apiserver, then etcd; idempotent, safe from atexit.

        Each process group gets SIGTERM, then SIGKILL after :data:`APISERVER_STOP_GRACE` /
        :data:`STOP_GRACE` seconds.
        """
        for api in self._clients:
            with contextlib.suppress(Exception):
                api.close()
        self._clients.clear()
        for name, grace in (("kube-apiserver", APISERVER_STOP_GRACE), ("etcd", STOP_GRACE)):
            proc = self._procs.get(name)
            if proc is not None:
                proc.stop(grace)
        with contextlib.suppress(OSError):
            (self.state_dir / "pids.json").unlink(missing_ok=True)
        if self._lock_file is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        self._started = False

    def check_alive(self) -> None:
        """Raise if etcd or kube-apiserver has exited since start.

        Raises:
            StartupError: naming the component, its exit code and the tail of its log.
        """
        for name, proc in self._procs.items():
            if proc.popen.poll() is not None:
                code = proc.popen.returncode
                raise StartupError(f"{name} exited with code {code}; log {proc.log_path}:\n{proc.log_tail()}")

    def api_client(self, limited: bool = False) -> k8s.ApiClient:
        """Return a new ``kubernetes`` ApiClient loaded from the (admin or limited) kubeconfig.

        Args:
            limited: use ``portal-limited`` instead of the admin.

        Returns:
            An ApiClient; it is closed by :meth:`stop`.
        """
        path = self.kubeconfig_limited if limited else self.kubeconfig
        api = k8s_config.new_client_from_config(config_file=str(path), persist_config=False)
        self._clients.append(api)
        return api

    def api_client_for_token(self, token: str) -> k8s.ApiClient:
        """Return an ApiClient that authenticates with ``token`` (e.g. a ServiceAccount token).

        Args:
            token: a bearer token, e.g. from ``CoreV1Api.create_namespaced_service_account_token``.

        Returns:
            An ApiClient verifying the server with this cluster's CA; closed by :meth:`stop`.
        """
        conf = k8s.Configuration(host=self.server, ssl_ca_cert=str(self.ca_cert))
        conf.api_key = {"BearerToken": token}
        conf.api_key_prefix = {"BearerToken": "Bearer"}
        api = k8s.ApiClient(conf)
        self._clients.append(api)
        return api

    def server_version(self) -> str:
        """Return the apiserver's ``/version`` gitVersion, e.g. ``"v1.37.2"``."""
        with k8s_config.new_client_from_config(config_file=str(self.kubeconfig), persist_config=False) as api:
            return str(k8s.VersionApi(api).get_code().git_version)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ internals

    def _say(self, message: str) -> None:
        print(f"devcluster: {message}", file=self.log, flush=True)

    def _require_ports(self) -> Ports:
        if self._ports is None:
            raise DevClusterError("the dev cluster is not started")
        return self._ports

    def _require_creds(self) -> Credentials:
        if self._creds is None:
            raise DevClusterError("the dev cluster is not started")
        return self._creds

    def _prepare_state_dir(self) -> None:
        """Lock the state dir for this cluster's lifetime, reap leftovers, wipe old data."""
        self.state_dir = self.state_dir.resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        lock = (self.state_dir / "lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DevClusterError(
                f"state directory {self.state_dir} is in use by another running dev cluster; "
                "stop it (Ctrl-C in its terminal) or use --state-dir DIR"
            ) from None
        self._lock_file = lock
        killed = reap_stale(self.state_dir)
        if killed:
            self._say(f"killed leftover processes of an earlier run: {killed}")
        for sub in ("etcd", "pki", "logs"):
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        for name in ("kubeconfig", "kubeconfig-limited"):
            (self.state_dir / name).unlink(missing_ok=True)
        (self.state_dir / "logs").mkdir()

    def _pick_ports(self) -> Ports:
        chosen: set[int] = set()
        while len(chosen) < 3:
            chosen.add(free_port())
        etcd_client, etcd_peer, apiserver = sorted(chosen)
        if self.apiserver_port is not None:
            apiserver = self.apiserver_port
            if apiserver in (etcd_client, etcd_peer):
                return self._pick_ports()
        return Ports(etcd_client, etcd_peer, apiserver)

    def _start_processes(self, binaries: Binaries, t0: float) -> None:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._ports = self._pick_ports()
            try:
                self._start_etcd(binaries.etcd)
                self.timings.etcd_ready = time.monotonic() - t0
                self._start_apiserver(binaries.kube_apiserver)
                self.timings.apiserver_ready = time.monotonic() - t0
                return
            except _PortRace as race:
                for name in ("kube-apiserver", "etcd"):
                    proc = self._procs.pop(name, None)
                    if proc is not None:
                        proc.stop(STOP_GRACE)
                if self.apiserver_port is not None and race.args[0] == self.apiserver_port:
                    raise PortInUseError(port_in_use_message(self.apiserver_port)) from None
                self._say(f"port {race.args[0]} was taken while starting (attempt {attempt}); retrying")
                shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
        raise StartupError(f"could not bind free loopback ports after {PORT_ATTEMPTS} attempts")

    def _record_pids(self) -> None:
        (self.state_dir / "pids.json").write_text(json.dumps(self.pids))

    def _launch(self, name: str, argv: list[str]) -> _Proc:
        proc = _spawn(name, argv, self.state_dir / "logs" / f"{name}.log")
        self._procs[name] = proc
        self._record_pids()
        return proc

    def _start_etcd(self, etcd: Path) -> None:
        """Start etcd (flags: DEVCLUSTER.md section 2.5 step 3) and wait for ``/readyz``."""
        ports = self._require_ports()
        client_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        proc = self._launch(
            "etcd",
            [
                str(etcd),
                "--name=default",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._poll(
            proc, lambda: _http_ok(opener, f"{client_url}/readyz"), "etcd /readyz", (ports.etcd_client,)
        )

    def _apiserver_args(self, kube_apiserver: Path) -> list[str]:
        """The kube-apiserver command line (DEVCLUSTER.md section 2.5 step 4, envtest's ``defaultArgs``)."""
        ports = self._require_ports()
        creds = self._require_creds()
        return [
            str(kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--cert-dir={creds.pki_dir}",
            f"--tls-cert-file={creds.serving_cert}",
            f"--tls-private-key-file={creds.serving_key}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
            f"--service-account-signing-key-file={creds.sa_key}",
            f"--service-account-key-file={creds.sa_pub}",
            "--authorization-mode=RBAC",
            f"--token-auth-file={creds.tokens_csv}",
            # No token controller runs, and TaintNodesByCondition would add a not-ready taint to
            # every Node that nothing removes (section 5 pitfall 6).
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            # 1.37 refuses a loopback advertise address for the endpoint reconciler of the
            # "kubernetes" Service ("cannot use public IP 127.0.0.1 with endpoint reconciler ...
            # may not be in the loopback range", seen at start-up). Nothing here routes to it.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--v=1",
        ]

    def _start_apiserver(self, kube_apiserver: Path) -> None:
        """Start kube-apiserver and wait for ``/readyz`` (anonymous, allowed by RBAC's public-info-viewer)."""
        ports = self._require_ports()
        proc = self._launch("kube-apiserver", self._apiserver_args(kube_apiserver))
        opener = self._https_opener()
        self._poll(
            proc,
            lambda: _http_ok(opener, f"{self.server}/readyz"),
            "kube-apiserver /readyz",
            (ports.apiserver,),
        )

    def _https_opener(self, token: str | None = None) -> urllib.request.OpenerDirector:
        context = ssl.create_default_context(cafile=str(self._require_creds().ca_cert))
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
        if token is not None:
            opener.addheaders = [("Authorization", f"Bearer {token}")]
        return opener

    def _poll(self, proc: _Proc, ready: Callable[[], bool], what: str, ports: tuple[int, ...]) -> None:
        """Poll ``ready`` every 0.1 s until true; fail fast if ``proc`` exits, else at the deadline."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.popen.poll() is not None:
                tail = proc.log_tail()
                if "address already in use" in tail:
                    taken = next((p for p in ports if f":{p}" in tail), ports[0])
                    raise _PortRace(taken)
                raise StartupError(
                    f"{proc.name} exited with code {proc.popen.returncode} while waiting for {what}; "
                    f"log {proc.log_path}:\n{tail}"
                )
            if ready():
                return
            if time.monotonic() > deadline:
                raise StartupError(
                    f"{what} not ready after {self.start_timeout:.0f} s; "
                    f"log {proc.log_path}:\n{proc.log_tail()}"
                )
            time.sleep(0.1)

    def _wait_default_namespace(self, t0: float) -> None:
        opener = self._https_opener(self._require_creds().admin_token)
        url = f"{self.server}/api/v1/namespaces/default"
        self._poll(self._procs["kube-apiserver"], lambda: _http_ok(opener, url), "namespace default", ())
        self.timings.default_namespace = time.monotonic() - t0

    def _write_kubeconfigs(self) -> None:
        creds = self._require_creds()
        ca_pem = creds.ca_cert.read_bytes()
        for path, user, token in (
            (self.kubeconfig, ADMIN_USER, creds.admin_token),
            (self.kubeconfig_limited, LIMITED_USER, creds.limited_token),
        ):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                yaml.safe_dump(kubeconfig_dict(self.server, ca_pem, user, token), handle, sort_keys=False)

    def _grant_limited_rbac(self) -> None:
        """Let ``portal-limited`` get/list/watch nodes and nothing else, and wait until RBAC sees it."""
        rbac = k8s.RbacAuthorizationV1Api(self.api_client())
        meta = k8s.V1ObjectMeta(name=LIMITED_CLUSTER_ROLE)
        rbac.create_cluster_role(
            body=k8s.V1ClusterRole(
                metadata=meta,
                rules=[
                    k8s.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"])
                ],
            )
        )
        group = "rbac.authorization.k8s.io"
        rbac.create_cluster_role_binding(
            body=k8s.V1ClusterRoleBinding(
                metadata=meta,
                role_ref=k8s.V1RoleRef(api_group=group, kind="ClusterRole", name=LIMITED_CLUSTER_ROLE),
                subjects=[k8s.RbacV1Subject(api_group=group, kind="User", name=LIMITED_USER)],
            )
        )
        # The RBAC authorizer reads bindings from an informer: wait until the grant is visible.
        opener = self._https_opener(self._require_creds().limited_token)
        url = f"{self.server}/api/v1/nodes?limit=1"
        self._poll(
            self._procs["kube-apiserver"], lambda: _http_ok(opener, url), "RBAC grant for portal-limited", ()
        )

    def _install_crds(self, crds: list[dict[str, Any]]) -> None:
        """Create the CRDs, wait for Established + NamesAccepted, then until each version is served."""
        ext = k8s.ApiextensionsV1Api(self.api_client())
        custom = k8s.CustomObjectsApi(self.api_client())
        for crd in crds:
            try:
                # Lossless: model_validate + the client's serialisation round-trips these CRDs exactly.
                ext.create_custom_resource_definition(body=k8s.V1CustomResourceDefinition.model_validate(crd))
            except ApiException as exc:
                if exc.status != 409:
                    raise
        apiserver = self._procs["kube-apiserver"]
        for crd in crds:
            name: str = crd["metadata"]["name"]
            spec: dict[str, Any] = crd["spec"]
            self._poll(
                apiserver, functools.partial(_crd_established, ext, name), f"CRD {name} Established", ()
            )
            for version in (v["name"] for v in spec["versions"] if v.get("served", True)):
                served = functools.partial(_crd_served, custom, spec, version)
                self._poll(apiserver, served, f"{name} {version} served", ())


def crd_conditions(crd: Any) -> dict[str, str]:
    """Return ``{type: status}`` of a CRD's conditions, e.g. ``{"Established": "True"}``."""
    status = getattr(crd, "status", None)
    conditions = getattr(status, "conditions", None) or []
    return {str(c.type): str(c.status) for c in conditions}


def _crd_established(ext: k8s.ApiextensionsV1Api, name: str) -> bool:
    conds = crd_conditions(ext.read_custom_resource_definition(name))
    return conds.get("Established") == "True" and conds.get("NamesAccepted") == "True"


def _crd_served(custom: k8s.CustomObjectsApi, spec: dict[str, Any], version: str) -> bool:
    """True once listing the CR answers 200 (it may 404 for ~1 s after Established, pitfall 5.9)."""
    try:
        if spec["scope"] == "Namespaced":
            custom.list_namespaced_custom_object(
                spec["group"], version, "default", spec["names"]["plural"], limit=1
            )
        else:
            custom.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _http_ok(opener: urllib.request.OpenerDirector, url: str) -> bool:
    try:
        with opener.open(url, timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError, OSError):
        return False


@contextlib.contextmanager
def running_cluster(**kwargs: Any) -> Iterator[DevCluster]:
    """Start a :class:`DevCluster` with ``kwargs`` and always stop it (a ``with`` helper)."""
    cluster = DevCluster(**kwargs)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
