"""The simulated scheduler's running per-node totals (no cluster): add on bind, subtract on deletion or a
terminal phase, ignore stale pre-binding events, and agree with a full recount."""

import random
from decimal import Decimal

from devcluster.simulator.scheduler import NodeUsage, filter_node, is_terminal, pod_requests


def _pod(name: str, gpus: int, node: str | None = None, phase: str | None = None) -> dict:
    spec: dict = {
        "containers": [
            {
                "name": "c",
                "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "500m"}, "limits": {}},
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
        "status": {"phase": phase or "Pending"},
    }


def _node(name: str, gpus: int) -> dict:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "8", "pods": "110"}},
    }


def test_bind_adds_and_deletion_frees_capacity_for_a_waiting_pod() -> None:
    usage = NodeUsage()
    node = _node("n1", 1)
    waiting = _pod("second", 1)
    assert usage.update("ADDED", _pod("first", 1)) is False  # unbound: not counted
    assert usage.used("n1") == {}
    assert usage.update("MODIFIED", _pod("first", 1, "n1", "Running")) is False
    assert usage.used("n1") == {"pods": Decimal(1), "nvidia.com/gpu": Decimal(1), "cpu": Decimal("0.5")}
    assert filter_node(waiting, node, usage.used("n1")) == (["Insufficient nvidia.com/gpu"], True)
    assert usage.update("DELETED", _pod("first", 1, "n1", "Running")) is True
    assert usage.used("n1") == {}
    assert filter_node(waiting, node, usage.used("n1")) == ([], True)
    assert usage.update("DELETED", _pod("first", 1, "n1", "Running")) is False  # already gone


def test_terminal_phase_frees_and_stale_unbound_event_keeps_the_pod_counted() -> None:
    usage = NodeUsage()
    usage.update("MODIFIED", _pod("p", 2, "n1", "Running"))
    assert usage.update("MODIFIED", _pod("p", 2)) is False  # older version without nodeName
    assert usage.used("n1")["nvidia.com/gpu"] == 2
    assert usage.node_of("ns/p") == "n1"
    assert [p["metadata"]["name"] for p in usage.pods_on("n1")] == ["p"]
    assert usage.update("MODIFIED", _pod("p", 2, "n1", "Succeeded")) is True
    assert usage.used("n1") == {} and usage.pods_on("n1") == [] and usage.node_of("ns/p") is None


def test_running_totals_match_a_full_recount_after_random_events() -> None:
    rng = random.Random(7)  # noqa: S311 - reproducible test data
    usage = NodeUsage()
    live: dict[str, dict] = {}
    for step in range(2000):
        name = f"p{rng.randrange(60)}"
        kind = rng.choice(("ADDED", "MODIFIED", "MODIFIED", "DELETED", "SYNC"))
        node = rng.choice((None, "n1", "n2", "n3"))
        prev = live.get(name)
        if prev is not None and prev["spec"].get("nodeName"):
            node = prev["spec"]["nodeName"]  # nodeName is immutable once set
        pod = _pod(name, rng.randrange(3), node, rng.choice(("Running", "Running", "Failed")))
        if prev is not None and prev["spec"].get("nodeName") and is_terminal(prev):
            continue  # a finished pod stays finished
        usage.update(kind, pod)
        if kind == "DELETED":
            live.pop(name, None)
        else:
            live[name] = pod
        if step % 100 == 0:
            for n in ("n1", "n2", "n3"):
                expect: dict[str, Decimal] = {}
                for p in live.values():
                    if p["spec"].get("nodeName") == n and not is_terminal(p):
                        for r, q in pod_requests(p).items():
                            expect[r] = expect.get(r, Decimal(0)) + q
                assert usage.used(n) == expect
