"""Scale benchmark of the dev cluster: apply a generated spec, run the simulator, time VMI placement.

Usage (from the repository root; a script, not a test)::

    .venv/bin/python -m benchmarks.devcluster_scale --nodes 2000 --pods 10000 --vmis 200

Steps, each timed: start a :class:`~devcluster.server.DevCluster` in a temporary state directory;
generate a spec with :func:`devcluster.scalegen.generate`, write and load it; apply it; start the
simulator with the test delays (``Delays.tests()``) and wait until every informer has listed (the
"watches in sync" point); then poll the VMIs until none is still undecided (every VMI is ``Running``,
``Failed`` or ``Scheduling`` with ``PodScheduled=False/Unschedulable`` and the counts have been stable
for ``--settle`` seconds) or ``--deadline`` seconds pass.

Afterwards the cluster is read afresh (nodes and pods straight from the API server, not the simulator's
caches) to check every VMI that did not run: for its launcher pod, the free devices of the requested
resource on the nodes matching its selector, and whether any node passes the scheduler's filters now.
A VMI is *genuinely* unschedulable only if no node does. On the same fresh state it times one
scheduling attempt's filter pass both ways: recounting every node's usage from all pods (the scheduler
before running totals) and with :class:`~devcluster.simulator.scheduler.NodeUsage` totals. ``--profile``
samples where each simulator thread spends its time (idle, waiting for the API server, or which function).

Everything started is stopped in ``finally`` (simulator, apiserver, etcd, temporary directories); a
``SIGALRM`` watchdog (``--budget``) bounds the whole run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client as k8s

from benchmarks.budget import BudgetExceeded, watchdog
from devcluster.build import ensure_binaries
from devcluster.scalegen import expected_placement, generate
from devcluster.server import DevCluster, default_shared_dir, temp_state_dir
from devcluster.simulator import Delays, Simulator
from devcluster.simulator.scheduler import (
    NodeUsage,
    filter_node,
    is_terminal,
    node_allocatable,
    parse_quantity,
    pod_requests,
)
from devcluster.simulator.watch import Obj, call_json
from devcluster.spec import apply_spec, load_spec

UNDECIDED = "undecided"
"""Category of a VMI the simulator has not decided on yet (no phase, Pending, Scheduling without an
Unschedulable condition, Scheduled)."""


@dataclasses.dataclass
class AttemptStats:
    """Scheduling attempts counted by wrapping the scheduler's reconcile function.

    Attributes:
        count: Attempts run. seconds: Wall time spent in them.
    """

    count: int = 0
    seconds: float = 0.0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def wrap(self, fn: Callable[[str], float | None]) -> Callable[[str], float | None]:
        """Return ``fn`` timed into this object."""

        @functools.wraps(fn)
        def timed(key: str) -> float | None:
            t = time.perf_counter()
            try:
                return fn(key)
            finally:
                with self.lock:
                    self.count += 1
                    self.seconds += time.perf_counter() - t

        return timed


class Sampler:
    """Statistical profile of the simulator threads (``sim-*``): every ``interval`` s, where each one is.

    A sample is ``idle`` (waiting on its queue or a timer), ``I/O`` (in socket/SSL/HTTP code, i.e. waiting
    for the API server) or counted under the innermost ``devcluster`` function on its stack.
    """

    IO_MODULES = ("socket.py", "ssl.py", "http/client.py", "urllib3/", "selectors.py")

    def __init__(self, interval: float = 0.01) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self.samples: dict[str, Counter[str]] = {}
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        """Start sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        self._thread.join(5)

    def _classify(self, frame: FrameType | None) -> str:
        inner = frame.f_code.co_filename if frame is not None else ""
        if inner.endswith("threading.py") or inner.endswith("workqueue.py"):
            return "idle"
        if any(m in inner for m in self.IO_MODULES) or "kubernetes/client" in inner:
            return "I/O"
        while frame is not None:
            name = frame.f_code.co_filename
            if "/devcluster/" in name:
                return f"{Path(name).stem}.{frame.f_code.co_name}"
            frame = frame.f_back
        return "other"

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, "")
                if name.startswith("sim-"):
                    self.samples.setdefault(name, Counter())[self._classify(frame)] += 1

    def report(self, top: int = 4) -> str:
        """Per thread: share of samples per place, the ``top`` busiest first."""
        lines = ["thread profile (share of samples)"]
        for name, counts in sorted(self.samples.items()):
            total = sum(counts.values())
            parts = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in counts.most_common(top))
            lines.append(f"  {name:<22} {parts}")
        return "\n".join(lines)


@dataclasses.dataclass
class Figures:
    """Measured durations (seconds) and counts; ``None`` = not reached."""

    cluster_start: float = 0.0
    generate_load: float = 0.0
    apply: float = 0.0
    sync: float = 0.0
    first_running: float | None = None
    all_running: float | None = None
    settled: float | None = None
    waited: float = 0.0
    cpu_sync: float = 0.0
    cpu_wait: float = 0.0
    categories: Counter[str] = dataclasses.field(default_factory=Counter)


# ----------------------------------------------------------------------------------------- helpers


def _list_all(fn: Callable[..., Any], **kw: Any) -> list[Obj]:
    """All items of a paginated list call (raw JSON, no model deserialisation)."""
    items: list[Obj] = []
    cont: str | None = None
    while True:
        extra: dict[str, Any] = {"limit": 500, **kw}
        if cont:
            extra["_continue"] = cont
        body = call_json(fn, **extra)
        items.extend(body.get("items") or [])
        cont = (body.get("metadata") or {}).get("continue") or None
        if not cont:
            return items


def _list_vmis(custom: k8s.CustomObjectsApi) -> list[Obj]:
    return _list_all(
        functools.partial(custom.list_cluster_custom_object, "kubevirt.io", "v1", "virtualmachineinstances")
    )


def _unschedulable_condition(vmi: Obj) -> dict[str, Any] | None:
    for cond in (vmi.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            return dict(cond)
    return None


def category(vmi: Obj) -> str:
    """``Running``, ``Failed``, ``Succeeded``, ``Scheduling-unschedulable``, ``Pending-not-permitted`` or
    :data:`UNDECIDED`."""
    phase = (vmi.get("status") or {}).get("phase") or ""
    if phase in ("Running", "Failed", "Succeeded"):
        return str(phase)
    if phase == "Scheduling" and _unschedulable_condition(vmi):
        return "Scheduling-unschedulable"
    conds = (vmi.get("status") or {}).get("conditions") or []
    if phase == "Pending" and any(c.get("reason") == "FailedCreate" for c in conds):
        return "Pending-not-permitted"
    return UNDECIDED


def device_requests(pod: Obj) -> dict[str, Decimal]:
    """The ``nvidia.com/*`` requests of a pod."""
    return {k: v for k, v in pod_requests(pod).items() if k.startswith("nvidia.com/")}


def usage_by_node(pods: list[Obj]) -> dict[str, dict[str, Decimal]]:
    """Summed requests of the non-terminal bound pods, per node."""
    used: dict[str, dict[str, Decimal]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or is_terminal(pod):
            continue
        acc = used.setdefault(node, {})
        for r, q in pod_requests(pod).items():
            acc[r] = acc.get(r, Decimal(0)) + q
    return used


def free_devices(nodes: list[Obj], used: dict[str, dict[str, Decimal]]) -> Counter[str]:
    """Free units per ``nvidia.com/*`` resource on schedulable nodes (allocatable minus requests)."""
    free: Counter[str] = Counter()
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        name = node["metadata"]["name"]
        for r, q in ((node.get("status") or {}).get("allocatable") or {}).items():
            if r.startswith("nvidia.com/"):
                left = parse_quantity(q) - used.get(name, {}).get(r, Decimal(0))
                free[r] += max(0, int(left))
    return free


@dataclasses.dataclass
class Verdict:
    """Fresh-state check of one launcher pod.

    Attributes:
        vmi: ``namespace/name``. resource: Device requested. matching_nodes: Nodes passing the
        NodeUnschedulable/taint/affinity filters. free_on_matching: Free units of ``resource`` on them.
        fitting_nodes: Nodes passing every filter now. message: The VMI's scheduler message.
    """

    vmi: str
    resource: str
    matching_nodes: int
    free_on_matching: int
    fitting_nodes: int
    message: str

    @property
    def genuine(self) -> bool:
        """True when no node could take the pod."""
        return self.fitting_nodes == 0


def check_pod(vmi: Obj, pod: Obj, nodes: list[Obj], used: dict[str, dict[str, Decimal]]) -> Verdict:
    """Run the scheduler's filters for ``pod`` against the fresh cluster state."""
    devices = device_requests(pod)
    resource = next(iter(devices), "-")
    matching = fitting = free = 0
    for node in nodes:
        name = node["metadata"]["name"]
        reasons, _ = filter_node(pod, node, used.get(name, {}))
        structural = not reasons or all(r.startswith("Insufficient") or r == "Too many pods" for r in reasons)
        if not structural:
            continue
        matching += 1
        alloc = (node.get("status") or {}).get("allocatable") or {}
        if resource in alloc:
            free += max(
                0, int(parse_quantity(alloc[resource]) - used.get(name, {}).get(resource, Decimal(0)))
            )
        if not reasons:
            fitting += 1
    cond = _unschedulable_condition(vmi) or {}
    meta = vmi["metadata"]
    return Verdict(
        f"{meta['namespace']}/{meta['name']}",
        resource,
        matching,
        free,
        fitting,
        str(cond.get("message") or ""),
    )


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "-"
    return f"{value:,.2f} {unit}".strip()


def table(rows: list[tuple[str, str]], title: str) -> str:
    """Two-column text table."""
    width = max(len(k) for k, _ in rows)
    vwidth = max(len(v) for _, v in rows)
    line = "+" + "-" * (width + 2) + "+" + "-" * (vwidth + 2) + "+"
    out = [title, line]
    out += [f"| {k.ljust(width)} | {v.rjust(vwidth)} |" for k, v in rows]
    out.append(line)
    return "\n".join(out)


# ------------------------------------------------------------------------------------------- phases


def wait_for_vmis(
    custom: k8s.CustomObjectsApi, total: int, deadline: float, settle: float, poll: float, figs: Figures
) -> list[Obj]:
    """Poll the VMIs until all are decided and stable for ``settle`` s, or ``deadline`` s pass.

    Returns:
        The last VMI list.
    """
    t0 = time.monotonic()
    cpu0 = time.process_time()
    last: Counter[str] = Counter()
    stable_since = t0
    vmis: list[Obj] = []
    next_report = t0 + 10
    while True:
        vmis = _list_vmis(custom)
        now = time.monotonic()
        cats = Counter(category(v) for v in vmis)
        if cats != last:
            last, stable_since = cats, now
        if cats["Running"] and figs.first_running is None:
            figs.first_running = now - t0
        if total and cats["Running"] == total and figs.all_running is None:
            figs.all_running = now - t0
        if now >= next_report:
            print(f"  t+{now - t0:5.0f} s  {dict(sorted(cats.items()))}", flush=True)
            next_report = now + 10
        decided = len(vmis) >= total and cats[UNDECIDED] == 0
        if decided and (cats["Running"] == total or now - stable_since >= settle):
            figs.settled = (stable_since if cats["Running"] != total else now) - t0
            break
        if now - t0 >= deadline:
            break
        time.sleep(poll)
    figs.waited = time.monotonic() - t0
    figs.cpu_wait = time.process_time() - cpu0
    figs.categories = Counter(category(v) for v in vmis)
    return vmis


def filter_pass_times(pod: Obj, nodes: list[Obj], pods: list[Obj], repeat: int = 3) -> tuple[float, float]:
    """CPU cost of one scheduling attempt's filter pass over all nodes, on the fresh cluster state.

    Returns:
        (seconds recounting every node's usage from all pods, as the scheduler did before running
        totals; seconds with :class:`NodeUsage` totals and pre-parsed allocatable), best of ``repeat``.
    """
    by_node: dict[str, list[Obj]] = {}
    usage = NodeUsage()
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        if node and not is_terminal(p):
            by_node.setdefault(node, []).append(p)
            usage.update("SYNC", p)
    allocs = {n["metadata"]["name"]: node_allocatable(n) for n in nodes}
    old = new = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        snapshot = {n: list(ps) for n, ps in by_node.items()}
        for node in nodes:
            used: dict[str, Decimal] = {}
            for other in snapshot.get(node["metadata"]["name"], []):
                for r, q in pod_requests(other).items():
                    used[r] = used.get(r, Decimal(0)) + q
            filter_node(pod, node, used)
        old = min(old, time.perf_counter() - t)
        t = time.perf_counter()
        totals = usage.snapshot()
        requests = pod_requests(pod)
        for node in nodes:
            name = node["metadata"]["name"]
            filter_node(pod, node, totals.get(name) or {}, requests=requests, allocatable=allocs[name])
        new = min(new, time.perf_counter() - t)
    return old, new


def analyse(
    core: k8s.CoreV1Api, vmis: list[Obj]
) -> tuple[list[Verdict], Counter[str], tuple[float, float] | None]:
    """Check every VMI that is not Running against a fresh read of nodes and pods.

    Returns:
        (verdicts, free devices per resource now, :func:`filter_pass_times` for a launcher pod).
    """
    nodes = _list_all(core.list_node)
    pods = _list_all(core.list_pod_for_all_namespaces)
    used = usage_by_node(pods)
    launchers: dict[str, Obj] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get("kubevirt.io") == "virt-launcher" and not is_terminal(pod):
            launchers[str(labels.get("kubevirt.io/created-by"))] = pod
    verdicts = []
    for vmi in vmis:
        if category(vmi) == "Running":
            continue
        launcher = launchers.get(vmi["metadata"]["uid"])
        if launcher is None or (launcher.get("spec") or {}).get("nodeName"):
            continue
        verdicts.append(check_pod(vmi, launcher, nodes, used))
    sample = next(iter(launchers.values()), None)
    passes = filter_pass_times(sample, nodes, pods) if sample is not None else None
    return verdicts, free_devices(nodes, used), passes


def demand(spec_vmis: list[dict[str, Any]]) -> Counter[str]:
    """VMIs per requested device resource (from the generated spec)."""
    return Counter(str(v["deviceName"]) for v in spec_vmis)


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; returns the exit code (0 = finished, 1 = deadline hit or VMIs wrongly waiting)."""
    figs = Figures()
    state_dir = temp_state_dir("devcluster-bench-")
    work = Path(tempfile.mkdtemp(prefix="devcluster-bench-spec-"))
    cluster = DevCluster(state_dir=state_dir, shared_dir=default_shared_dir())
    sim: Simulator | None = None
    stats = AttemptStats()
    sampler = Sampler() if args.profile else None
    try:
        with watchdog(args.budget):
            t = time.monotonic()
            cluster.binaries = ensure_binaries()
            cluster.start()
            figs.cluster_start = time.monotonic() - t
            api = cluster.api_client()
            core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)

            t = time.monotonic()
            raw = generate(args.nodes, args.pods, args.vmis, args.seed)
            spec_path = work / "scale.yaml"
            spec_path.write_text(yaml.safe_dump(raw, sort_keys=False))
            spec = load_spec(spec_path, cluster.shared_dir)
            figs.generate_load = time.monotonic() - t
            n_pods = sum(len(n.get("pods") or []) for n in raw["nodes"])
            print(
                f"spec: {len(raw['nodes'])} nodes, {n_pods} pods, {len(raw['vmis'])} VMIs "
                f"(generated+loaded in {figs.generate_load:.1f} s); applying...",
                flush=True,
            )

            t = time.monotonic()
            apply_spec(api, spec)
            figs.apply = time.monotonic() - t
            free_before = free_devices(
                _list_all(core.list_node), usage_by_node(_list_all(core.list_pod_for_all_namespaces))
            )
            print(f"applied in {figs.apply:.1f} s; starting the simulator (test delays)...", flush=True)

            sim = Simulator(api, spec, Delays.tests())
            sim.scheduler.queue._reconcile = stats.wrap(sim.scheduler.queue._reconcile)
            if sampler is not None:
                sampler.start()
            t, cpu = time.monotonic(), time.process_time()
            sim.start(sync_timeout=args.deadline)
            figs.sync = time.monotonic() - t
            figs.cpu_sync = time.process_time() - cpu
            synced = all(i.synced.is_set() for i in (sim.nodes, sim.pods, sim.vmis, sim.policies))
            print(f"watches in sync after {figs.sync:.1f} s (all synced: {synced}); waiting for VMIs...")

            total = len(raw["vmis"])
            vmis = wait_for_vmis(custom, total, args.deadline, args.settle, args.poll, figs)
            attempts_at_end = (stats.count, stats.seconds)
            verdicts, free_after, passes = analyse(core, vmis)
    except BudgetExceeded as exc:
        print(f"ABORTED: {exc}", file=sys.stderr)
        return 2
    finally:
        if sampler is not None:
            sampler.stop()
        if sim is not None:
            sim.stop()
        cluster.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    wanted = demand(raw["vmis"])
    expected = sum(min(n, free_before[r]) for r, n in wanted.items())
    expected_gen = sum(p for _, p in expected_placement(raw).values())
    cats = figs.categories
    running = cats["Running"]
    unsched = cats["Scheduling-unschedulable"]
    genuine = sum(1 for v in verdicts if v.genuine)
    placed_window = figs.all_running or figs.settled or figs.waited
    rows = [
        ("nodes / pods / VMIs", f"{len(raw['nodes'])} / {n_pods} / {total}"),
        ("cluster start", _fmt(figs.cluster_start)),
        ("generate + load spec", _fmt(figs.generate_load)),
        ("apply spec", _fmt(figs.apply)),
        ("apply rate", _fmt((len(raw["nodes"]) + n_pods + total) / figs.apply, "objects/s")),
        ("watches in sync (simulator start)", _fmt(figs.sync)),
        ("sync ÷ apply", _fmt(figs.sync / figs.apply, "x")),
        ("CPU during sync (this process)", _fmt(figs.cpu_sync)),
        ("first VMI Running (after sync)", _fmt(figs.first_running)),
        ("all VMIs Running (after sync)", _fmt(figs.all_running)),
        ("all VMIs decided+stable (after sync)", _fmt(figs.settled)),
        (f"waited (deadline {args.deadline:.0f} s)", _fmt(figs.waited)),
        ("CPU while waiting (this process)", _fmt(figs.cpu_wait)),
        ("VMIs placed per second", _fmt(running / placed_window if placed_window else None, "VMI/s")),
        ("scheduling attempts", str(attempts_at_end[0])),
        (
            "mean time per attempt",
            _fmt(1000 * attempts_at_end[1] / attempts_at_end[0] if attempts_at_end[0] else None, "ms"),
        ),
        ("filter pass, recount all pods (old)", _fmt(1000 * passes[0] if passes else None, "ms")),
        ("filter pass, running totals (new)", _fmt(1000 * passes[1] if passes else None, "ms")),
        ("  old ÷ new", _fmt(passes[0] / passes[1] if passes and passes[1] else None, "x")),
        ("expected placeable (scalegen)", f"{expected_gen} of {total}"),
        ("expected placeable (free devices at start)", f"{expected} of {total}"),
        ("Running", str(running)),
        ("Scheduling-unschedulable", str(unsched)),
        ("  genuinely unschedulable (fresh check)", str(genuine)),
        ("  falsely unschedulable (a node fits)", str(unsched - genuine if unsched else 0)),
        ("still undecided", str(cats[UNDECIDED])),
        ("other (Failed/Pending-not-permitted)", str(total - running - unsched - cats[UNDECIDED])),
    ]
    print()
    print(table(rows, f"devcluster scale benchmark (seed {args.seed})"))
    res_rows = [
        (r, f"{n} VMIs / {free_before[r]} free before / {free_after[r]} free after")
        for r, n in sorted(wanted.items())
    ]
    if res_rows:
        print(table(res_rows, "per requested resource"))
    for v in [v for v in verdicts if v.message][: args.show]:
        print(
            f"\n{v.vmi} ({v.resource}): {'genuinely unschedulable' if v.genuine else 'FITS NOW'}; "
            f"{v.matching_nodes} matching nodes, {v.free_on_matching} free {v.resource} on them, "
            f"{v.fitting_nodes} nodes pass all filters\n  scheduler: {v.message}"
        )
    if sampler is not None:
        print(sampler.report())
    if args.json:
        print(json.dumps(dict(rows)))
    ok = cats[UNDECIDED] == 0 and genuine == unsched and running + unsched <= total
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.devcluster_scale", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--vmis", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=300.0, help="max seconds to wait for VMIs")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds of unchanged VMI states")
    parser.add_argument("--poll", type=float, default=1.0, help="VMI poll interval")
    parser.add_argument("--budget", type=int, default=1200, help="hard limit for the whole run (s)")
    parser.add_argument("--show", type=int, default=2, help="scheduler messages to print")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    parser.add_argument(
        "--profile", action="store_true", help="sample where the simulator threads spend time"
    )
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
