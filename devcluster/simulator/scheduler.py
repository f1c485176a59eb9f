"""kube-scheduler (filters, FitError message, binding) plus the kubelet's part (device allocation, Running).

Filters run in the default plugin order and stop at the first failure per node, as the framework does
(``pkg/scheduler/framework/runtime/framework.go`` ``RunFilterPlugins``): NodeUnschedulable,
TaintToleration, NodeAffinity (nodeSelector + required node affinity), NodeResourcesFit. The message is
``FitError.Error()`` (``pkg/scheduler/framework/types.go``): ``0/N nodes are available: <sorted
histogram>.`` followed by the PostFilter messages of a v1.34+ scheduler (DRA's ``no new claims to
deallocate`` and DefaultPreemption's own histogram), as seen on real clusters, e.g. ``0/5 nodes are
available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector. no new
claims to deallocate, preemption: 0/5 nodes are available: 1 No preemption victims found for incoming
pod, 4 Preemption is not helpful for scheduling.`` DOMAIN.md §5.4 quotes the older, shorter form.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import nodestate as ns
from devcluster.naming import RESOURCE_PREFIX, mdev_type_name, passthrough_resource_name, vgpu_resource_name
from devcluster.simulator.watch import Informer, Obj, call_json, obj_key
from devcluster.simulator.workqueue import WorkQueue

log = logging.getLogger(__name__)

ANN_ALLOCATED = ns.SIM_PREFIX + "allocated-gpus"
"""Simulator-only pod annotation: JSON ``[{"resource": "nvidia.com/GRID_T4-8Q", "gpu": 0}, ...]``, the GPU
each device-plugin unit was allocated from (what kubelet's device manager checkpoint records)."""

REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_TAINT = "node(s) had untolerated taint(s)"
REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_TOO_MANY_PODS = "Too many pods"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QTY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_ZERO = Decimal(0)


def parse_quantity(value: Any) -> Decimal:
    """Parse a Kubernetes quantity (``"500m"``, ``"16Gi"``, ``"1k"``, ``2``) into base units.

    Raises:
        ValueError: not a quantity.
    """
    text = str(value).strip()
    m = _QTY.match(text)
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {value!r}")
    return Decimal(m.group(1)) * _SUFFIX[m.group(2)]


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """Summed container requests (limits stand in for missing requests), plus ``pods: 1``."""
    total: dict[str, Decimal] = {"pods": Decimal(1)}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        req = dict(res.get("limits") or {})
        req.update(res.get("requests") or {})
        for k, v in req.items():
            total[k] = total.get(k, Decimal(0)) + parse_quantity(v)
    return total


def is_terminal(pod: Obj) -> bool:
    """Pod phase Succeeded/Failed (no longer counted against the node)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """``v1helper.TolerationsTolerateTaint``."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _match_expr(labels: dict[str, str], expr: dict[str, Any]) -> bool:
    key, op, values = str(expr.get("key")), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        try:
            a, b = int(labels[key]), int(values[0])
        except (ValueError, IndexError):
            return False
        return a > b if op == "Gt" else a < b
    return False


def matches_affinity(pod: Obj, node: Obj) -> bool:
    """NodeAffinity filter: ``spec.nodeSelector`` and the required node-affinity terms (ORed terms, ANDed
    ``matchExpressions``; ``matchFields`` only for ``metadata.name``)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    spec = pod.get("spec") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms")
    if not required:
        return True
    name = (node.get("metadata") or {}).get("name")
    for term in required:
        exprs_ok = all(_match_expr(labels, e) for e in term.get("matchExpressions") or [])
        fields_ok = all(_match_expr({"metadata.name": str(name)}, f) for f in term.get("matchFields") or [])
        if (term.get("matchExpressions") or term.get("matchFields")) and exprs_ok and fields_ok:
            return True
    return False


def node_allocatable(node: Obj) -> dict[str, Decimal]:
    """``status.allocatable`` parsed into base units."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {name: parse_quantity(q) for name, q in alloc.items()}


def filter_node(
    pod: Obj,
    node: Obj,
    used: dict[str, Decimal],
    *,
    requests: dict[str, Decimal] | None = None,
    allocatable: dict[str, Decimal] | None = None,
) -> tuple[list[str], bool]:
    """Run the filters on one node.

    Args:
        pod: The pod to place. node: Candidate node. used: Summed requests of its non-terminal pods.
        requests: ``pod_requests(pod)`` when the caller has it already (one parse per attempt, not per node).
        allocatable: ``node_allocatable(node)`` when the caller has it cached.

    Returns:
        (reasons, resolvable): empty reasons = fits; ``resolvable`` is False for
        UnschedulableAndUnresolvable statuses (preemption cannot help).
    """
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    nspec = node.get("spec") or {}
    if nspec.get("unschedulable") and not _tolerates(
        tolerations, {"key": ns.TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}
    ):
        return [REASON_UNSCHEDULABLE], False
    for taint in nspec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, taint):
            return [REASON_TAINT], False
    if not matches_affinity(pod, node):
        return [REASON_AFFINITY], False
    alloc = node_allocatable(node) if allocatable is None else allocatable
    reasons: list[str] = []
    for name, want in (pod_requests(pod) if requests is None else requests).items():
        if want <= 0:
            continue
        have = alloc.get(name, _ZERO)
        if used.get(name, _ZERO) + want > have:
            reasons.append(REASON_TOO_MANY_PODS if name == "pods" else f"Insufficient {name}")
    return reasons, True


def _histogram(counts: dict[str, int]) -> str:
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def fit_error_message(num_nodes: int, results: list[tuple[list[str], bool]]) -> str:
    """``FitError.Error()`` plus the v1.34+ PostFilter messages (see module doc).

    Args:
        num_nodes: All nodes in the cluster. results: :func:`filter_node` output per failed node.
    """
    if num_nodes == 0:
        return "no nodes available to schedule pods"
    reasons: dict[str, int] = {}
    preempt: dict[str, int] = {}
    for node_reasons, resolvable in results:
        for r in node_reasons:
            reasons[r] = reasons.get(r, 0) + 1
        key = NO_VICTIMS if resolvable else NOT_HELPFUL
        preempt[key] = preempt.get(key, 0) + 1
    head = f"0/{num_nodes} nodes are available"
    msg = f"{head}: {_histogram(reasons)}."
    return f"{msg} no new claims to deallocate, preemption: {head}: {_histogram(preempt)}."


def gpu_slots(node: Obj) -> dict[str, list[int]]:
    """Per GPU resource, the units each GPU index provides (for device allocation).

    Container: 1 ``nvidia.com/gpu`` per GPU; passthrough: 1 per GPU; vGPU: the mdev counts per GPU.
    """
    inv = ns.read_inventory(node)
    if inv is None:
        return {}
    alloc = (node.get("status") or {}).get("allocatable") or {}
    out: dict[str, list[int]] = {}
    if "nvidia.com/gpu" in alloc:
        out["nvidia.com/gpu"] = [1] * inv.count
    pt = passthrough_resource_name(inv.model)
    if pt in alloc:
        out[pt] = [1] * inv.count
    for i, mdevs in enumerate(inv.mdevs):
        for vtype, n in mdevs.items():
            name = vgpu_resource_name(mdev_type_name(inv.model, vtype))
            out.setdefault(name, [0] * inv.count)[i] += n
    return out


def allocate(pod: Obj, node: Obj, others: list[Obj]) -> list[dict[str, Any]]:
    """Pick the GPU index for every GPU unit the pod requests (lowest free index first).

    Args:
        pod: The pod being bound. node: Its node. others: Non-terminal pods already on the node.
    """
    slots = gpu_slots(node)
    used: dict[tuple[str, int], int] = {}
    for other in others:
        raw = ((other.get("metadata") or {}).get("annotations") or {}).get(ANN_ALLOCATED)
        for a in json.loads(raw) if raw else []:
            used[(a["resource"], a["gpu"])] = used.get((a["resource"], a["gpu"]), 0) + 1
    out: list[dict[str, Any]] = []
    for name, qty in sorted(pod_requests(pod).items()):
        if not name.startswith(RESOURCE_PREFIX) or name not in slots:
            continue
        for _ in range(int(qty)):
            for gpu, cap in enumerate(slots[name]):
                if used.get((name, gpu), 0) < cap:
                    used[(name, gpu)] = used.get((name, gpu), 0) + 1
                    out.append({"resource": name, "gpu": gpu})
                    break
    return out


def _score(
    requests: dict[str, Decimal], name: str, alloc: dict[str, Decimal], used: dict[str, Decimal]
) -> tuple[Decimal, str]:
    """LeastAllocated-like score (lower is better): mean used fraction of the requested resources after placing."""
    fracs = []
    for res, want in requests.items():
        have = alloc.get(res, _ZERO)
        if have > 0:
            fracs.append((used.get(res, _ZERO) + want) / have)
    return (sum(fracs, _ZERO) / len(fracs) if fracs else _ZERO, name)


class NodeUsage:
    """Running totals of the requests of bound, non-terminal pods per node (kube-scheduler's cache keeps
    the same sums in ``NodeInfo.Requested``, ``pkg/scheduler/backend/cache``), fed by pod events.

    A pod is added when an event shows it bound (``spec.nodeName`` set, phase not terminal) and
    subtracted when it is deleted or reaches ``Succeeded``/``Failed``; every event costs O(1), so a
    scheduling attempt reads the totals in O(nodes) instead of summing all pods. ``nodeName`` is
    immutable once set, so an event without it for a pod already counted is an older version arriving
    after our own write-through (the assumed pod stays counted). Not thread-safe: the caller locks.
    """

    def __init__(self) -> None:
        self._node_of: dict[str, str] = {}
        self._requests: dict[str, dict[str, Decimal]] = {}
        self._used: dict[str, dict[str, Decimal]] = {}
        self._pods: dict[str, dict[str, Obj]] = {}

    def update(self, kind: str, pod: Obj) -> bool:
        """Apply one pod event (``ADDED``/``MODIFIED``/``DELETED``/``SYNC``).

        Returns:
            True when the event released capacity (a counted pod was deleted or finished).
        """
        key = obj_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        gone = kind == "DELETED" or is_terminal(pod)
        old = self._node_of.get(key)
        if gone:
            return self._remove(key)
        if not node:
            return False  # unbound, or a stale pre-binding version of a pod we already count
        requests = pod_requests(pod)
        if old == node:
            if requests != self._requests[key]:  # in-place resize: replace the old requests
                self._add_to(node, self._requests[key], -1)
                self._add_to(node, requests, 1)
                self._requests[key] = requests
        else:
            self._remove(key)
            self._node_of[key] = node
            self._requests[key] = requests
            self._add_to(node, requests, 1)
        self._pods.setdefault(node, {})[key] = pod
        return False

    def _remove(self, key: str) -> bool:
        node = self._node_of.pop(key, None)
        if node is None:
            return False
        self._add_to(node, self._requests.pop(key), -1)
        pods = self._pods.get(node) or {}
        pods.pop(key, None)
        if not pods:
            self._pods.pop(node, None)
            self._used.pop(node, None)
        return True

    def _add_to(self, node: str, requests: dict[str, Decimal], sign: int) -> None:
        used = self._used.setdefault(node, {})
        for res, q in requests.items():
            used[res] = used.get(res, _ZERO) + sign * q

    def used(self, node: str) -> dict[str, Decimal]:
        """A copy of the summed requests on ``node`` (empty when nothing runs there)."""
        return dict(self._used.get(node) or {})

    def snapshot(self) -> dict[str, dict[str, Decimal]]:
        """A copy of all totals (O(nodes x resources))."""
        return {node: dict(used) for node, used in self._used.items()}

    def pods_on(self, node: str) -> list[Obj]:
        """The counted pods on ``node`` (for device allocation)."""
        return list((self._pods.get(node) or {}).values())

    def node_of(self, key: str) -> str | None:
        """The node a pod is counted on, or ``None``."""
        return self._node_of.get(key)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Scheduler:
    """Schedules every unbound, non-terminal pod of ``default-scheduler`` and plays its kubelet.

    Args:
        api: Admin ApiClient. nodes/pods: Shared informers. delay: Seconds between a pod appearing and
        the first scheduling attempt (``Delays.vmi_schedule``). stop: Stop event.
    """

    def __init__(
        self, api: k8s.ApiClient, nodes: Informer, pods: Informer, delay: float, stop: threading.Event
    ):
        self._core = k8s.CoreV1Api(api)
        self._nodes = nodes
        self._pods = pods
        self._delay = delay
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self.usage = NodeUsage()
        self._alloc_cache: dict[str, tuple[str, dict[str, Decimal]]] = {}
        self._ips: set[str] = set()
        self._ip_seq = 0
        self.queue = WorkQueue("scheduler", self._reconcile, stop)

    # -- events
    def on_pod(self, kind: str, pod: Obj) -> None:
        """Keep the per-node running totals and the unscheduled set; requeue waiting pods when capacity
        frees up. O(1) per event."""
        key = obj_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        with self._lock:
            freed = self.usage.update(kind, pod)
            ip = (pod.get("status") or {}).get("podIP")
            if ip:
                self._ips.add(ip)
            if (
                kind == "DELETED"
                or node
                or self.usage.node_of(key) is not None
                or is_terminal(pod)
                or (pod.get("metadata") or {}).get("deletionTimestamp")
            ):
                self._pending.discard(key)
            elif (pod.get("spec") or {}).get("schedulerName", "default-scheduler") == "default-scheduler":
                new = key not in self._pending
                self._pending.add(key)
                if new:
                    self.queue.add(key, self._delay)
        if freed:
            self.requeue_all()

    def on_node(self, kind: str, node: Obj) -> None:
        """A node change may make room (or a new node may fit): retry every waiting pod."""
        if kind == "DELETED":
            self._alloc_cache.pop(str((node.get("metadata") or {}).get("name")), None)
        self.requeue_all()

    def requeue_all(self) -> None:
        """Queue every unscheduled pod."""
        with self._lock:
            keys = list(self._pending)
        for key in keys:
            self.queue.add(key)

    # -- work
    def _allocatable(self, node: Obj) -> dict[str, Decimal]:
        """Parsed ``status.allocatable``, cached per node name and resourceVersion."""
        meta = node.get("metadata") or {}
        name, rv = str(meta.get("name")), meta.get("resourceVersion")
        hit = self._alloc_cache.get(name)
        if rv and hit is not None and hit[0] == rv:
            return hit[1]
        alloc = node_allocatable(node)
        if rv:
            self._alloc_cache[name] = (str(rv), alloc)
        return alloc

    def _next_ip(self) -> str:
        with self._lock:
            while True:
                n = self._ip_seq
                self._ip_seq += 1
                ip = f"10.244.{(n // 250) % 250}.{n % 250 + 2}"
                if ip not in self._ips:
                    self._ips.add(ip)
                    return ip

    def _reconcile(self, key: str) -> float | None:
        pod = self._pods.get(key)
        if pod is None or (pod.get("spec") or {}).get("nodeName") or is_terminal(pod):
            return None
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            return None
        with self._lock:
            if self.usage.node_of(key) is not None:
                return None  # bound by us; the informer has not caught up yet
        nodes = self._nodes.items()
        with self._lock:
            totals = self.usage.snapshot()
        requests = pod_requests(pod)
        feasible: list[tuple[tuple[Decimal, str], Obj]] = []
        failed: list[tuple[list[str], bool]] = []
        for node in nodes:
            name = node["metadata"]["name"]
            used = totals.get(name) or {}
            alloc = self._allocatable(node)
            reasons, resolvable = filter_node(pod, node, used, requests=requests, allocatable=alloc)
            if reasons:
                failed.append((reasons, resolvable))
            else:
                feasible.append((_score(requests, name, alloc, used), node))
        ns_, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if not feasible:
            self._mark_unschedulable(pod, fit_error_message(len(nodes), failed))
            return None
        node = min(feasible, key=lambda t: t[0])[1]
        node_name = node["metadata"]["name"]
        with self._lock:
            others = self.usage.pods_on(node_name)
        allocation = allocate(pod, node, others)
        try:
            self._core.patch_namespaced_pod(
                name,
                ns_,
                {"metadata": {"annotations": {ANN_ALLOCATED: json.dumps(allocation)}}},
                _preload_content=False,
            )
            call_json(
                self._core.create_namespaced_pod_binding,
                name,
                ns_,
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": ns_},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
                },
            )
        except ApiException as exc:
            if exc.status in (404, 409):
                return None  # pod deleted or already bound
            raise
        ip = self._next_ip()
        status = {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": _now(),
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _now()}
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
        }
        updated = call_json(self._core.patch_namespaced_pod_status, name, ns_, {"status": status})
        self._pods.put(updated)
        self.on_pod("MODIFIED", updated)
        return None

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        for cond in (pod.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("message") == message:
                return
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
        }
        try:
            updated = call_json(
                self._core.patch_namespaced_pod_status,
                pod["metadata"]["name"],
                pod["metadata"]["namespace"],
                {"status": {"phase": "Pending", "conditions": [cond]}},
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        self._pods.put(updated)
