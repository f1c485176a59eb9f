"""Command line: ``python -m devcluster {build,up,gomod}``.

- ``build [--force]``: build (or reuse) kube-apiserver and etcd in the cache, print their paths.
- ``up [--spec FILE] [--state-dir DIR] [--shared-dir DIR] [--port N] [--ready-file FILE]``: build
  if needed, start etcd + kube-apiserver, install the CRDs, apply the spec, run the simulator,
  print the kubeconfig path, and stay in the foreground until Ctrl-C/SIGTERM; then stop
  everything it started. ``--ready-file`` is written (with the kubeconfig path) once the spec is
  applied and removed at stop, so other processes can wait for the cluster (``make run`` does).
- ``gomod VERSION``: regenerate ``devcluster/gotools`` for another Kubernetes version
  (e.g. ``1.37.2``; DEVCLUSTER.md section 2.2).

Exit codes: 0 on success or a clean stop, 1 on an error (message on stderr), 130 on Ctrl-C
during start-up.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from devcluster.build import GOTOOLS_DIR, BuildError, ensure_binaries, go_version_output
from devcluster.server import DevCluster, DevClusterError, default_shared_dir, default_state_dir
from devcluster.session import SimulatorLike, apply_and_simulate, load_cluster_spec
from devcluster.spec import SpecError

DEFAULT_SPEC = Path(__file__).resolve().parent / "specs" / "demo.yaml"


def _err(message: str) -> None:
    print(f"devcluster: error: {message}", file=sys.stderr, flush=True)


def cmd_build(args: argparse.Namespace) -> int:
    """Build or reuse the binaries; print their paths. Returns the exit code."""
    bins = ensure_binaries(force=args.force)
    print(f"kube-apiserver: {bins.kube_apiserver}")
    print(f"etcd:           {bins.etcd}")
    return 0


def cmd_gomod(args: argparse.Namespace) -> int:
    """Regenerate the Go tools module for ``args.version``. Returns the exit code."""
    from devcluster import gomod

    go_version_output()  # clear message when Go is missing
    version = args.version.lstrip("v")
    try:
        mods = gomod.generate(version)
    except subprocess.CalledProcessError as exc:
        _err(f"{' '.join(map(str, exc.cmd))} failed:\n{exc.stderr}")
        return 1
    print(f"pinned k8s.io/kubernetes v{version} and {len(mods)} staging modules in {GOTOOLS_DIR}")
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Start the cluster with a spec and the simulator; block until SIGINT/SIGTERM."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            return
        stop.set()
        if not started.is_set():
            raise KeyboardInterrupt  # abort start-up (a build, a readiness wait); cleaned up below

    started = threading.Event()
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    spec_path: Path = args.spec.resolve()
    shared_dir: Path = (args.shared_dir or default_shared_dir()).resolve()
    if not spec_path.is_file():
        _err(f"spec file {spec_path} not found")
        return 1
    spec = load_cluster_spec(spec_path, shared_dir)

    ensure_binaries()
    print("devcluster: starting etcd and kube-apiserver, installing CRDs, applying the spec...", flush=True)
    cluster = DevCluster(
        state_dir=args.state_dir or default_state_dir(), shared_dir=shared_dir, apiserver_port=args.port
    )
    simulator: SimulatorLike | None = None
    ready_file: Path | None = args.ready_file.resolve() if args.ready_file else None
    if ready_file is not None:
        ready_file.unlink(missing_ok=True)
    try:
        cluster.start()
        simulator = apply_and_simulate(cluster.api_client(), spec, "demo")
        started.set()
        if ready_file is not None:
            ready_file.parent.mkdir(parents=True, exist_ok=True)
            ready_file.write_text(f"{cluster.kubeconfig}\n")
        t = cluster.timings
        print(
            f"\ndev cluster is up: kube-apiserver {cluster.server_version()} at {cluster.server}\n"
            f"  started in {t.total:.1f} s (etcd ready {t.etcd_ready:.1f} s, apiserver /readyz "
            f"{t.apiserver_ready:.1f} s, CRDs {t.crds_ready:.1f} s)\n"
            f"  spec:       {spec_path}\n"
            f"  kubeconfig: {cluster.kubeconfig}   (limited identity: {cluster.kubeconfig_limited})\n"
            f"  logs:       {cluster.state_dir / 'logs'}\n\n"
            f"  kubectl --kubeconfig {cluster.kubeconfig} get nodes -L nvidia.com/gpu.workload.config\n\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while not stop.wait(1.0):
            cluster.check_alive()
        print("devcluster: stopping...", file=sys.stderr, flush=True)
        return 0
    except KeyboardInterrupt:
        print("devcluster: interrupted during start-up; stopping...", file=sys.stderr, flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
        # Stop the simulator and the API server together: the server going away ends the
        # simulator's open watches at once, instead of each waiting out its watch timeout. Process
        # managers (honcho: 5 s) SIGKILL what is still running after a short grace.
        stopper = None
        if simulator is not None:
            stopper = threading.Thread(target=simulator.stop, name="simulator-stop", daemon=True)
            stopper.start()
        try:
            cluster.stop()
        finally:
            if stopper is not None:
                stopper.join(10.0)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of ``python -m devcluster``."""
    parser = argparse.ArgumentParser(prog="python -m devcluster", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    build = sub.add_parser("build", help="build (or reuse) kube-apiserver and etcd")
    build.add_argument("--force", action="store_true", help="rebuild even if cached")
    build.set_defaults(func=cmd_build)

    up = sub.add_parser("up", help="start the dev cluster in the foreground")
    up.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help=f"cluster spec (default {DEFAULT_SPEC})")
    up.add_argument(
        "--state-dir", type=Path, default=None, help=f"state directory (default {default_state_dir()})"
    )
    up.add_argument(
        "--shared-dir",
        type=Path,
        default=None,
        help="directory with kubevirt-crds/ and gpu-operator-crds/ (default $PORTAL_SHARED_DIR or ../shared)",
    )
    up.add_argument(
        "--port", type=int, default=None, help="kube-apiserver port on 127.0.0.1 (default: a free one)"
    )
    up.add_argument(
        "--ready-file",
        type=Path,
        default=None,
        help="write this file (containing the kubeconfig path) once the cluster is ready; removed at stop",
    )
    up.set_defaults(func=cmd_up)

    gomod = sub.add_parser("gomod", help="regenerate devcluster/gotools for a Kubernetes version")
    gomod.add_argument("version", help="Kubernetes version, e.g. 1.37.2")
    gomod.set_defaults(func=cmd_gomod)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line. Returns the process exit code."""
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    try:
        code: int = args.func(args)
    except (BuildError, DevClusterError, SpecError) as exc:
        _err(str(exc))
        return 1
    except KeyboardInterrupt:
        _err(f"interrupted after {time.monotonic() - started:.0f} s")
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
