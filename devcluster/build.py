"""Build (once) and cache the ``kube-apiserver`` and ``etcd`` binaries.

Both binaries are compiled from the upstream Go modules pinned in ``devcluster/gotools``
(``k8s.io/kubernetes`` with every staging module replaced, and ``go.etcd.io/etcd/server/v3``
at the version that Kubernetes release selects), exactly as DEVCLUSTER.md section 2.3
describes. They land in a cache directory *outside* the repository, keyed by the tools
module's ``go.sum`` + ``go.mod`` and the ``go version`` output, so fresh clones on the same
machine (CI) reuse them and a version bump rebuilds them.

Cache layout::

    $DEVCLUSTER_CACHE (default: $XDG_CACHE_HOME or ~/.cache, + /gpu-vm-portal/devcluster)
      <key>/bin/kube-apiserver
      <key>/bin/etcd
      <key>/build.lock          flock(2) so that concurrent callers build only once
      <key>/build-<name>.log    output of the last ``go build`` of that binary

``DEVCLUSTER_BIN_DIR`` short-circuits all of this: when set, the two binaries are taken from
that directory as they are (no Go toolchain needed), like envtest's ``KUBEBUILDER_ASSETS``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"

#: Minimum Go version: the tools module declares ``go 1.26.0`` (DEVCLUSTER.md section 2.2).
MIN_GO = (1, 26)

#: Seconds between "still building" progress lines.
PROGRESS_INTERVAL = 30.0

#: Measured cold build of kube-apiserver on 2 cores (see the issue note), used in the
#: progress message only.
COLD_BUILD_MINUTES_2_CORES = 10

_GO_MISSING_HELP = (
    "The Go toolchain ('go') was not found on PATH. It is needed once, to build kube-apiserver "
    "and etcd for the dev cluster.\n"
    "Install Go >= {need} from https://go.dev/dl/ (for example: download go1.26.x.linux-amd64.tar.gz, "
    "'tar -C /usr/local -xzf go1.26.x.linux-amd64.tar.gz', then add /usr/local/go/bin to PATH).\n"
    "Do NOT use the Debian/Ubuntu package 'golang-go': it is too old for Kubernetes v1.37.\n"
    "Alternatively set DEVCLUSTER_BIN_DIR to a directory that already holds kube-apiserver and etcd."
)


class BuildError(RuntimeError):
    """The binaries could not be built (Go missing or too old, or ``go build`` failed)."""


class GoMissingError(BuildError):
    """No usable Go toolchain (absent, or older than :data:`MIN_GO`)."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the two executables the dev cluster runs.

    Attributes:
        kube_apiserver: absolute path of the ``kube-apiserver`` executable.
        etcd: absolute path of the ``etcd`` executable.
    """

    kube_apiserver: Path
    etcd: Path


@dataclass(frozen=True)
class ToolVersions:
    """Versions pinned in the Go tools module.

    Attributes:
        kubernetes: e.g. ``"v1.37.2"`` (the ``k8s.io/kubernetes`` requirement).
        etcd: e.g. ``"v3.7.0"`` (the ``go.etcd.io/etcd/server/v3`` requirement).
    """

    kubernetes: str
    etcd: str


def tool_versions(gomod_text: str) -> ToolVersions:
    """Read the Kubernetes and etcd server versions from the tools module's go.mod.

    Args:
        gomod_text: the text of ``devcluster/gotools/go.mod``.

    Returns:
        The pinned versions.

    Raises:
        BuildError: when either requirement is missing.
    """
    found: dict[str, str] = {}
    for module in ("k8s.io/kubernetes", "go.etcd.io/etcd/server/v3"):
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", gomod_text, re.M)
        if match is None:
            raise BuildError(f"{module} is not required in {GOTOOLS_DIR / 'go.mod'}")
        found[module] = match.group(1)
    return ToolVersions(kubernetes=found["k8s.io/kubernetes"], etcd=found["go.etcd.io/etcd/server/v3"])


def parse_go_version(output: str) -> tuple[int, int, int]:
    """Parse ``go version`` output such as ``go version go1.26.8 linux/amd64``.

    Args:
        output: stdout of ``go version``.

    Returns:
        ``(major, minor, patch)``, e.g. ``(1, 26, 8)``; a missing patch is 0
        (``go1.26rc1`` gives ``(1, 26, 0)``).

    Raises:
        GoMissingError: when the text does not contain a Go version.
    """
    match = re.search(r"\bgo(\d+)\.(\d+)(?:\.(\d+))?", output)
    if match is None:
        raise GoMissingError(f"cannot parse the output of 'go version': {output.strip()!r}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def cache_key(go_sum: bytes, go_mod: bytes, go_version_output: str) -> str:
    """Return the cache key of a set of binaries.

    Args:
        go_sum: bytes of ``gotools/go.sum``.
        go_mod: bytes of ``gotools/go.mod``.
        go_version_output: stdout of ``go version`` (stripped before hashing).

    Returns:
        The first 16 hex digits of sha256(go.sum + go.mod + go version), e.g. ``"3f0c9a1e5b7d2c44"``.
        Any change to the pinned modules or the toolchain gives a new key (a rebuild).
    """
    digest = hashlib.sha256()
    for part in (go_sum, b"\0", go_mod, b"\0", go_version_output.strip().encode()):
        digest.update(part)
    return digest.hexdigest()[:16]


def cache_root(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """Return the directory that holds one sub-directory per cache key.

    Args:
        env: environment to read (default ``os.environ``): ``DEVCLUSTER_CACHE`` wins, else
            ``$XDG_CACHE_HOME/gpu-vm-portal/devcluster``, else ``~/.cache/gpu-vm-portal/devcluster``.

    Returns:
        An absolute path (not created here).
    """
    env = os.environ if env is None else env
    if env.get("DEVCLUSTER_CACHE"):
        return Path(env["DEVCLUSTER_CACHE"]).expanduser().resolve()
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return (base / "gpu-vm-portal" / "devcluster").expanduser().resolve()


def go_version_output() -> str:
    """Run ``go version`` and check that it is recent enough.

    Returns:
        The stdout of ``go version``.

    Raises:
        GoMissingError: Go is not on PATH or is older than :data:`MIN_GO`; the message says what
            to install.
    """
    go = shutil.which("go")
    need = f"{MIN_GO[0]}.{MIN_GO[1]}"
    if go is None:
        raise GoMissingError(_GO_MISSING_HELP.format(need=need))
    # GOTOOLCHAIN=local: never try to download another toolchain (offline machine).
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    proc = subprocess.run([go, "version"], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise GoMissingError(
            f"'{go} version' failed: {proc.stderr.strip()}\n" + _GO_MISSING_HELP.format(need=need)
        )
    if parse_go_version(proc.stdout)[:2] < MIN_GO:
        raise GoMissingError(
            f"{go} is {proc.stdout.strip()!r}, too old.\n" + _GO_MISSING_HELP.format(need=need)
        )
    return proc.stdout


def binary_dir(gotools: Path = GOTOOLS_DIR, go_version: str | None = None) -> Path:
    """Return the cache ``bin`` directory for the current tools module and Go toolchain.

    Args:
        gotools: the Go tools module directory (holds go.mod and go.sum).
        go_version: ``go version`` output; computed (which needs Go) when omitted.

    Returns:
        ``<cache_root>/<cache_key>/bin`` (not created here).

    Raises:
        GoMissingError: when ``go_version`` is omitted and Go is unusable.
    """
    version = go_version_output() if go_version is None else go_version
    key = cache_key((gotools / "go.sum").read_bytes(), (gotools / "go.mod").read_bytes(), version)
    return cache_root() / key / "bin"


@contextlib.contextmanager
def _file_lock(path: Path, log: TextIO) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"devcluster: waiting for another build to finish (lock {path})...", file=log, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def build_command(package: str, output: Path, ldflags: str) -> list[str]:
    """Return the ``go build`` command line for one binary (run inside the tools module).

    Args:
        package: Go package path, e.g. ``"k8s.io/kubernetes/cmd/kube-apiserver"``.
        output: file to write.
        ldflags: linker flags, e.g. ``"-s -w -X ..."``.

    Returns:
        The argv list (DEVCLUSTER.md section 2.3).
    """
    return ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(output), package]


def apiserver_ldflags(kubernetes_version: str) -> str:
    """Return the linker flags that stamp the version reported by ``/version``.

    Without them the binary reports ``v0.0.0-master+$Format:%H$`` (DEVCLUSTER.md section 2.3).

    Args:
        kubernetes_version: e.g. ``"v1.37.2"``.

    Returns:
        e.g. ``"-s -w -X k8s.io/component-base/version.gitVersion=v1.37.2 -X ...gitMajor=1 ..."``.
    """
    major, minor = kubernetes_version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        f"-s -w -X {pkg}.gitVersion={kubernetes_version} -X {pkg}.gitMajor={major} "
        f"-X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
    )


def _go_build(name: str, package: str, ldflags: str, dest: Path, version: str, log: TextIO) -> None:
    """Build ``package`` into ``dest`` atomically (temp file + rename), with progress lines."""
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    logfile = dest.parent.parent / f"build-{name}.log"
    cores = os.cpu_count() or 1
    if name == "kube-apiserver":
        hint = (
            f" (first build takes ~{COLD_BUILD_MINUTES_2_CORES} minutes on 2 cores; this machine has {cores})"
        )
    else:
        hint = " (first build takes a few minutes)"
    print(f"devcluster: building {name} {version}{hint}...", file=log, flush=True)
    # -buildvcs=false: the tools module sits inside the project's git checkout; stamping VCS
    # data would make the binary depend on (and fail without) git.
    goflags = f"{os.environ.get('GOFLAGS', '')} -mod=readonly -buildvcs=false".strip()
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": goflags}
    started = time.monotonic()
    try:
        with logfile.open("w") as out:
            proc = subprocess.Popen(
                build_command(package, tmp, ldflags),
                cwd=GOTOOLS_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                while True:
                    try:
                        returncode = proc.wait(timeout=PROGRESS_INTERVAL)
                        break
                    except subprocess.TimeoutExpired:
                        elapsed = time.monotonic() - started
                        print(
                            f"devcluster: still building {name}... {elapsed / 60:.1f} min elapsed",
                            file=log,
                            flush=True,
                        )
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        if returncode != 0:
            tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-30:])
            raise BuildError(f"go build of {name} failed (exit {returncode}); full log: {logfile}\n{tail}")
        tmp.chmod(0o755)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    elapsed = time.monotonic() - started
    size_mb = dest.stat().st_size / 1e6
    print(f"devcluster: built {dest} ({size_mb:.0f} MB) in {elapsed / 60:.1f} min", file=log, flush=True)


def ensure_binaries(force: bool = False, log: TextIO | None = None) -> Binaries:
    """Return the cached ``kube-apiserver`` and ``etcd``, building whichever is missing.

    Builds take minutes the first time (cold module and build caches) and never run twice
    concurrently: a file lock in the cache directory serialises callers (pytest and
    ``python -m devcluster up`` at the same time). Each binary is written to a temporary
    file and renamed, so an interrupted build never leaves a truncated executable.

    Args:
        force: rebuild even when the binaries are cached.
        log: where progress lines go (default ``sys.stderr``).

    Returns:
        Absolute paths of both executables.

    Raises:
        GoMissingError: Go is absent or older than 1.26 (the message says what to install).
        BuildError: ``go build`` failed (the message holds the log tail and the log path).
    """
    log = sys.stderr if log is None else log
    override = os.environ.get("DEVCLUSTER_BIN_DIR")
    if override:
        bins = Binaries(Path(override) / "kube-apiserver", Path(override) / "etcd")
        missing = [str(p) for p in (bins.kube_apiserver, bins.etcd) if not _is_executable(p)]
        if missing:
            raise BuildError(f"DEVCLUSTER_BIN_DIR={override} lacks executable(s): {', '.join(missing)}")
        return Binaries(bins.kube_apiserver.resolve(), bins.etcd.resolve())

    bin_dir = binary_dir()
    bins = Binaries(bin_dir / "kube-apiserver", bin_dir / "etcd")
    if not force and _is_executable(bins.kube_apiserver) and _is_executable(bins.etcd):
        return bins
    versions = tool_versions((GOTOOLS_DIR / "go.mod").read_text())
    bin_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(bin_dir.parent / "build.lock", log):
        if force or not _is_executable(bins.kube_apiserver):
            _go_build(
                "kube-apiserver",
                "k8s.io/kubernetes/cmd/kube-apiserver",
                apiserver_ldflags(versions.kubernetes),
                bins.kube_apiserver,
                versions.kubernetes,
                log,
            )
        if force or not _is_executable(bins.etcd):
            _go_build("etcd", "go.etcd.io/etcd/server/v3", "-s -w", bins.etcd, versions.etcd, log)
    return bins
