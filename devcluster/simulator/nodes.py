"""Node controller: plays the GPU Operator's node labelling, NFD, GFD, the device plugins' resource
advertising, kubelet's Ready condition and the node lifecycle controller's taints.

Reconciles every Node that carries the simulator-only inventory annotation
(:data:`devcluster.nodestate.ANN_GPUS`) towards :func:`devcluster.nodestate.desired_labels` and
:func:`devcluster.nodestate.advertised_resources`; taints follow ``spec.unschedulable`` and the Ready
condition on every node. Only ``nvidia.com/*`` entries of capacity/allocatable are managed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import nodestate as ns
from devcluster.simulator.watch import Informer, Obj, call_json
from devcluster.simulator.workqueue import WorkQueue

log = logging.getLogger(__name__)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class NodeController:
    """See module docstring.

    Args:
        api: Admin ApiClient. nodes: Node informer. cluster_policy: Returns the current ClusterPolicy dict
        (or ``None``). operator_version: GPU Operator version whose label set is played. stop: Stop event.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        nodes: Informer,
        cluster_policy: Callable[[], dict[str, Any] | None],
        operator_version: str,
        stop: threading.Event,
    ) -> None:
        self._core = k8s.CoreV1Api(api)
        self._nodes = nodes
        self._cp = cluster_policy
        self._version = operator_version
        self.queue = WorkQueue("nodes", self._reconcile, stop)

    def on_node(self, kind: str, node: Obj) -> None:
        """Queue the node on every event but deletion."""
        if kind != "DELETED":
            self.queue.add(node["metadata"]["name"])

    def requeue_all(self) -> None:
        """Queue every cached node (ClusterPolicy changed)."""
        for node in self._nodes.items():
            self.queue.add(node["metadata"]["name"])

    def _reconcile(self, name: str) -> float | None:
        node = self._nodes.get(name)
        if node is None:
            return None
        meta = node.get("metadata") or {}
        labels: dict[str, str] = dict(meta.get("labels") or {})
        status = node.get("status") or {}
        status_patch: dict[str, Any] = {}
        inv = ns.read_inventory(node)
        if inv is not None:
            cp = self._cp()
            label_patch = ns.desired_labels(labels, inv, cp, self._version)
            if label_patch:
                self._patch(name, {"metadata": {"labels": label_patch}})
                labels = ns.apply_label_patch(labels, label_patch)
            advertised = ns.advertised_resources(labels, inv, cp)
            stale = ns.stale_resources(node)
            for part in ("capacity", "allocatable"):
                patch = ns.resource_patch(status.get(part) or {}, advertised, stale)
                if patch:
                    status_patch[part] = patch
        if ns.ready_status(node) is None:
            status_patch["conditions"] = [ns.ready_condition(True, _now())]
        if status_patch:
            try:
                node = call_json(self._core.patch_node_status, name, {"status": status_patch})
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            self._nodes.put(node)
        taints = ns.desired_taints(node)
        if not ns.same_taints(taints, (node.get("spec") or {}).get("taints") or []):
            # JSON patch: replaces the list whole (no strategic-merge semantics to reason about).
            op = (
                {"op": "add", "path": "/spec/taints", "value": taints}
                if taints
                else {"op": "remove", "path": "/spec/taints"}
            )
            self._patch(name, [op])
        return None

    def _patch(self, name: str, body: dict[str, Any] | list[dict[str, Any]]) -> None:
        try:
            self._core.patch_node(name, body, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise
