"""Provisioning latency: approval → VMI Running through the portal, against creating the same VMI
directly with the client, on the dev cluster with the simulator's delays at zero.

Usage (from the repository root; a script, not a test)::

    .venv/bin/python -m benchmarks.provision_latency --requests 20
    .venv/bin/python -m benchmarks.provision_latency --requests 20 --broker redis   # needs redis-server

For each of ``--requests`` rounds, one after the other on the same passthrough GPU:

- **portal**: a submitted request is approved (``vmrequests.approval.approve``: capacity check,
  reservation, enqueue on commit); a real Celery worker process runs ``vmrequests.provision``
  (creates the VMI); the ``watch_vmis`` process sees it Running and marks the request running.
  Timed from just before the approval call until the request row says ``running``.
- **direct**: the same manifest (another name) created with ``CustomObjectsApi`` and read back
  until ``status.phase`` is ``Running`` with an IP. Timed from just before the create call.

Both sides poll at the same interval (``--poll``, default 10 ms). Between rounds the VMI is
deleted, the cluster is allowed to free the GPU, and the inventory is re-synced (not timed).
Prints the medians and the ratio portal ÷ direct (target ≤ 1.5). Broker ``file`` is the embedded
kombu file-system broker of ``make run``; ``redis`` starts a throw-away ``redis-server`` on a
free loopback port. Everything started is stopped in ``finally``; a SIGALRM watchdog
(``--budget``) bounds the run.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client as k8s_client

from benchmarks.budget import BudgetExceeded, watchdog
from devcluster.build import ensure_binaries
from devcluster.server import DevCluster, default_shared_dir, temp_state_dir
from devcluster.simulator import Delays, Simulator
from devcluster.spec import apply_spec, load_spec

ROOT = Path(__file__).resolve().parents[1]
DEMO_SPEC = ROOT / "devcluster" / "specs" / "demo.yaml"
#: The demo spec's single-GPU passthrough node (RTX A2000, idle).
RESOURCE = "nvidia.com/GA106_RTX_A2000_12GB"
NAMESPACE = "team-research"


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(fn: Callable[[], Any], what: str, timeout: float, poll: float) -> Any:
    """Poll ``fn`` until truthy; raise TimeoutError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"timed out waiting for {what}")


def spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in its own process group, output to ``log``."""
    return subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
        argv, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM the child's group, SIGKILL after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; returns 0 when the median ratio is ≤ 1.5, else 1."""
    state_dir = temp_state_dir("provision-bench-")
    work = Path(tempfile.mkdtemp(prefix="provision-bench-"))
    cluster = DevCluster(state_dir=state_dir, shared_dir=default_shared_dir())
    sim: Simulator | None = None
    procs: list[subprocess.Popen[bytes] | None] = []
    try:
        with watchdog(args.budget):
            cluster.binaries = ensure_binaries()
            cluster.start()
            api = cluster.api_client()
            spec = load_spec(DEMO_SPEC, cluster.shared_dir)
            apply_spec(api, spec)
            sim = Simulator(
                api, spec, Delays(vgpu_reconfigure=0.0, vmi_schedule=0.0, vmi_start=0.0, watch_timeout=3)
            )
            sim.start()

            env = dict(os.environ)
            env.update(
                {
                    "DJANGO_SETTINGS_MODULE": "portal.settings",
                    "PORTAL_VAR_DIR": str(work / "var"),
                    "PORTAL_KUBECONFIG": str(cluster.kubeconfig),
                    "DEBUG": "false",
                    "LOG_LEVEL": "WARNING",
                    "PORTAL_RECONCILE_INTERVAL": "5",
                }
            )
            env.pop("DATABASE_URL", None)  # always a throw-away SQLite file
            env.pop("CELERY_BROKER_URL", None)
            if args.broker == "redis":
                redis_port = free_port()
                procs.append(
                    spawn(
                        [
                            "redis-server",
                            "--bind",
                            "127.0.0.1",
                            "--port",
                            str(redis_port),
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                        ],
                        env,
                        work / "redis.log",
                    )
                )
                env["CELERY_BROKER_URL"] = f"redis://127.0.0.1:{redis_port}/0"
            os.environ.update(env)
            import django

            django.setup()
            from django.core.management import call_command

            call_command("migrate", "--noinput", verbosity=0)
            if args.broker == "redis":
                import redis

                wait_until(lambda: redis.Redis(port=redis_port).ping(), "redis", 20, 0.1)

            from django.contrib.auth import get_user_model

            from gpuinventory.sync import run_sync
            from vmrequests import approval
            from vmrequests.approval import RequestSpec
            from vmrequests.models import Team, VmImage, VMRequest
            from vmrequests.provisioning import vmi_manifest

            run_sync("command")
            users = get_user_model().objects
            analyst = users.create_user("bench-analyst", email="")
            boss = users.create_superuser("bench-approver", email="", password=None)
            team = Team.objects.create(name="Bench", slug="bench", namespace=NAMESPACE, max_lease_days=30)
            team.members.add(analyst)
            team.approvers.add(boss)
            image = VmImage.objects.create(
                name="Ubuntu", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu"
            )

            py = sys.executable
            worker_argv = [
                py,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "--pool=threads",
                "--concurrency=2",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
                "--loglevel=WARNING",
            ]
            procs.append(spawn(worker_argv, env, work / "worker.log"))
            procs.append(
                spawn([py, "manage.py", "watch_vmis", "--watch-seconds", "10"], env, work / "watcher.log")
            )
            custom = k8s_client.CustomObjectsApi(api)

            def has_status(pk: int, status: str) -> bool:
                return VMRequest.objects.filter(pk=pk, status=status).exists()

            def vmi(name: str) -> dict[str, Any] | None:
                try:
                    return custom.get_namespaced_custom_object(  # type: ignore[return-value]
                        "kubevirt.io", "v1", NAMESPACE, "virtualmachineinstances", name
                    )
                except k8s_client.ApiException as exc:
                    if exc.status == 404:
                        return None
                    raise

            def running(name: str) -> bool:
                obj = vmi(name) or {}
                status = obj.get("status") or {}
                return status.get("phase") == "Running" and any(
                    i.get("ipAddress") for i in status.get("interfaces") or []
                )

            def delete_and_wait(name: str) -> None:
                try:
                    custom.delete_namespaced_custom_object(
                        "kubevirt.io", "v1", NAMESPACE, "virtualmachineinstances", name
                    )
                except k8s_client.ApiException as exc:
                    if exc.status != 404:
                        raise
                wait_until(lambda: vmi(name) is None, f"{name} deleted", 60, 0.05)
                # Launcher pods go with their VMI; wait until none holds the GPU any more.
                core = k8s_client.CoreV1Api(api)

                def launcher_gone() -> bool:
                    pods = core.list_namespaced_pod(
                        NAMESPACE, label_selector=f"vm.kubevirt.io/name={name}"
                    ).items
                    return not pods

                wait_until(launcher_gone, f"{name} launcher pod gone", 60, 0.05)

            portal_s: list[float] = []
            direct_s: list[float] = []
            # Warm-up round (not counted): imports, connections, the worker's first task.
            for i in range(args.requests + 1):
                spec_ = RequestSpec(
                    team,
                    "passthrough",
                    RESOURCE,
                    "",
                    "RTX A2000 12GB",
                    1,
                    2,
                    4,
                    image,
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchBenchBenchBenchBenchBenchBenchBench bench",
                    1,
                    "benchmark round",
                )
                req = approval.submit(spec_, analyst)
                t0 = time.monotonic()
                approval.approve(req, boss, "bench")
                wait_until(
                    functools.partial(has_status, req.pk, "running"),
                    f"request {req.pk} running",
                    args.timeout,
                    args.poll,
                )
                took = time.monotonic() - t0
                req.refresh_from_db()
                body = vmi_manifest(req, RESOURCE)
                approval.release(req, analyst, "bench round done")
                delete_and_wait(req.vmi_name)
                wait_until(
                    functools.partial(has_status, req.pk, "deleted"),
                    f"request {req.pk} deleted",
                    args.timeout,
                    args.poll,
                )
                run_sync("command")

                name = f"direct-{i}"
                body["metadata"] = {"name": name, "namespace": NAMESPACE}
                t1 = time.monotonic()
                custom.create_namespaced_custom_object(
                    "kubevirt.io", "v1", NAMESPACE, "virtualmachineinstances", body
                )
                wait_until(functools.partial(running, name), f"{name} Running", args.timeout, args.poll)
                took_direct = time.monotonic() - t1
                delete_and_wait(name)
                run_sync("command")
                if i == 0:
                    continue
                portal_s.append(took)
                direct_s.append(took_direct)
                print(
                    f"round {i:2d}: portal {took * 1000:6.0f} ms   direct {took_direct * 1000:6.0f} ms",
                    flush=True,
                )

            p, d = statistics.median(portal_s), statistics.median(direct_s)
            ratio = p / d
            print(f"broker: {args.broker}; {len(portal_s)} rounds; poll {args.poll * 1000:.0f} ms")
            print(f"median approval → running through the portal: {p * 1000:.0f} ms")
            print(f"median create → Running directly:             {d * 1000:.0f} ms")
            print(f"ratio portal / direct: {ratio:.2f} (target ≤ 1.5)")
            return 0 if ratio <= 1.5 else 1
    except BudgetExceeded as exc:
        print(f"stopped: {exc}", file=sys.stderr)
        return 2
    finally:
        for proc in reversed(procs):
            stop(proc)
        if sim is not None:
            sim.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20, help="measured rounds (default 20)")
    parser.add_argument("--broker", choices=["file", "redis"], default="file")
    parser.add_argument("--poll", type=float, default=0.01, help="poll interval of both sides (s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per-step timeout (s)")
    parser.add_argument("--budget", type=int, default=900, help="watchdog for the whole run (s)")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
