"""The NVIDIA vGPU Device Manager (``nvidia-k8s-vgpu-dm``) on every vm-vgpu node, DOMAIN.md §3.

Per node, following vgpu-device-manager ``cmd/nvidia-k8s-vgpu-dm/main.go`` ``updateConfig()``:

1. Selected config = label ``nvidia.com/vgpu.config``, else ClusterPolicy
   ``vgpuDeviceManager.config.default`` (``DEFAULT_VGPU_CONFIG``, default ``default``).
2. Not in the ConfigMap's ``config.yaml`` → ``nvidia.com/vgpu.config.state=failed``, nothing changes.
3. Already applied (``assert``: every GPU visited and matching) → ``success`` (paused labels restored).
4. Else ``pending``; ``gpu.deploy.sandbox-device-plugin`` and ``gpu.deploy.sandbox-validator`` →
   ``paused-for-vgpu-change`` (the node controller then drops the node's vGPU resources, the plugin is
   gone); after ``Delays.vgpu_reconfigure`` the config is applied GPU by GPU
   (:func:`devcluster.vgpuconfig.apply_config`: unmatched GPUs keep their mdevs, an unsupported type
   fails before touching that GPU), the paused labels go back to ``true`` (also on failure, the
   manager's deferred restore) and the state becomes ``success`` or ``failed``.
5. Launcher pods holding a vGPU on a GPU whose mdevs were deleted fail (their VMI then fails): nothing
   protects running VMs (DOMAIN.md §3 "Consequences", Pitfall 2).

The ConfigMap is the one ``vgpuDeviceManager.config.name`` names (``""`` → ``default-vgpu-devices-config``)
in the operator namespace, read when a change starts, as the real pod reads its mounted file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import nodestate as ns
from devcluster.naming import mdev_type_name, vgpu_resource_name
from devcluster.simulator.scheduler import ANN_ALLOCATED, is_terminal
from devcluster.simulator.watch import Informer, Obj, call_json
from devcluster.spec import DEFAULT_VGPU_CONFIGMAP
from devcluster.vgpuconfig import (
    VgpuConfigEntry,
    VgpuConfigError,
    apply_config,
    is_applied,
    max_instances,
    parse_config_file,
    pci_id_value,
)

log = logging.getLogger(__name__)

PAUSABLE = ("sandbox-device-plugin", "sandbox-validator")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class VgpuDeviceManager:
    """See module docstring.

    Args:
        api: Admin ApiClient. nodes/pods: Shared informers. cluster_policy: Returns the ClusterPolicy.
        operator_namespace: Where the vGPU ConfigMaps live. default_config_text: Fallback ``config.yaml``
        of the operator's default ConfigMap (type limits). delay: ``Delays.vgpu_reconfigure``. stop: Stop event.
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        nodes: Informer,
        pods: Informer,
        cluster_policy: Callable[[], dict[str, Any] | None],
        operator_namespace: str,
        default_config_text: str,
        delay: float,
        stop: threading.Event,
    ) -> None:
        from devcluster.simulator.workqueue import WorkQueue

        self._core = k8s.CoreV1Api(api)
        self._nodes = nodes
        self._pods = pods
        self._cp = cluster_policy
        self._ns = operator_namespace
        self._limits = max_instances(parse_config_file(default_config_text))
        self._delay = delay
        self._pending: dict[str, float] = {}
        self.queue = WorkQueue("vgpu-device-manager", self._reconcile, stop)

    def on_node(self, kind: str, node: Obj) -> None:
        """Queue the node on every event but deletion."""
        if kind == "DELETED":
            self._pending.pop(node["metadata"]["name"], None)
        else:
            self.queue.add(node["metadata"]["name"])

    def requeue_all(self) -> None:
        """Queue every cached node."""
        for node in self._nodes.items():
            self.queue.add(node["metadata"]["name"])

    # -- helpers
    def _vdm_config(self) -> tuple[str, str]:
        cfg = (((self._cp() or {}).get("spec") or {}).get("vgpuDeviceManager") or {}).get("config") or {}
        return str(cfg.get("name") or DEFAULT_VGPU_CONFIGMAP), str(cfg.get("default") or "default")

    def _read_configs(self) -> dict[str, list[VgpuConfigEntry]] | None:
        name, _ = self._vdm_config()
        try:
            cm = call_json(self._core.read_namespaced_config_map, name, self._ns)
            return parse_config_file(str((cm.get("data") or {}).get("config.yaml") or ""))
        except ApiException as exc:
            if exc.status == 404:
                log.warning("vGPU ConfigMap %s/%s not found", self._ns, name)
                return None
            raise
        except VgpuConfigError as exc:
            log.warning("vGPU ConfigMap %s/%s invalid: %s", self._ns, name, exc)
            return None

    def _patch(self, name: str, labels: dict[str, str | None], inv: ns.Inventory | None = None) -> None:
        meta: dict[str, Any] = {"labels": labels}
        if inv is not None:
            meta["annotations"] = {ns.ANN_GPUS: inv.to_json()}
        self._nodes.put(call_json(self._core.patch_node, name, {"metadata": meta}))

    # -- reconcile
    def _reconcile(self, name: str) -> float | None:
        node = self._nodes.get(name)
        if node is None:
            return None
        inv = ns.read_inventory(node)
        labels: dict[str, str] = dict((node.get("metadata") or {}).get("labels") or {})
        if (
            inv is None
            or ns.effective_mode(labels, self._cp()) != "vm-vgpu"
            or labels.get(ns.DEPLOY + "vgpu-device-manager") != "true"
        ):
            self._pending.pop(name, None)
            return None
        _, default = self._vdm_config()
        selected = labels.get(ns.LABEL_VGPU_CONFIG) or default
        if name in self._pending:
            remaining = self._pending[name] - time.monotonic()
            if remaining > 0:
                return remaining
            del self._pending[name]
            self._finish(name, node, inv, selected)
            return None
        if inv.vgpu_config == selected:
            return None
        configs = self._read_configs()
        inv.vgpu_config = selected
        if configs is None or selected not in configs:
            log.info("node %s: vGPU config %r not found -> failed", name, selected)
            self._patch(name, {ns.LABEL_VGPU_STATE: "failed"}, inv)
            return None
        gpu_ids = [pci_id_value(inv.model.device_id)] * inv.count
        if is_applied(configs[selected], gpu_ids, inv.mdevs):
            restore: dict[str, str | None] = {
                ns.DEPLOY + k: "true" for k in PAUSABLE if labels.get(ns.DEPLOY + k) == ns.PAUSED
            }
            self._patch(name, {ns.LABEL_VGPU_STATE: "success", **restore}, inv)
            return None
        # Keep vgpuConfig unchanged until done so a restart of the simulator redoes the change.
        pause: dict[str, str | None] = {ns.LABEL_VGPU_STATE: "pending"}
        pause.update({ns.DEPLOY + k: ns.PAUSED for k in PAUSABLE})
        self._patch(name, pause)
        self._pending[name] = time.monotonic() + self._delay
        return self._delay

    def _finish(self, name: str, node: Obj, inv: ns.Inventory, selected: str) -> None:
        configs = self._read_configs()
        labels: dict[str, str | None] = {ns.DEPLOY + k: "true" for k in PAUSABLE}
        inv.vgpu_config = selected
        if configs is None or selected not in configs:
            self._patch(name, {**labels, ns.LABEL_VGPU_STATE: "failed"}, inv)
            return
        result = apply_config(configs[selected], [inv.model] * inv.count, inv.mdevs, self._limits)
        old = [dict(m) for m in inv.mdevs]
        inv.mdevs = result.mdevs
        if result.error:
            log.info("node %s: applying %r failed: %s", name, selected, result.error)
        self._patch(name, {**labels, ns.LABEL_VGPU_STATE: "failed" if result.error else "success"}, inv)
        if result.cleared:
            self._fail_users(name, inv, old, result.cleared)

    def _fail_users(
        self, node_name: str, inv: ns.Inventory, old: list[dict[str, int]], cleared: list[int]
    ) -> None:
        """Fail the pods whose allocated vGPU lived on a GPU whose mdevs were deleted."""
        vgpu_names = {vgpu_resource_name(mdev_type_name(inv.model, t)): t for mdevs in old for t in mdevs}
        for pod in self._pods.items():
            if (pod.get("spec") or {}).get("nodeName") != node_name or is_terminal(pod):
                continue
            raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANN_ALLOCATED)
            lost = [
                a
                for a in (json.loads(raw) if raw else [])
                if a["gpu"] in cleared and a["resource"] in vgpu_names
            ]
            if not lost:
                continue
            message = (
                f"mediated device {lost[0]['resource']} on GPU {lost[0]['gpu']} was deleted by the vGPU Device "
                f"Manager while in use (nvidia.com/vgpu.config changed on {node_name})"
            )
            body = {
                "status": {
                    "phase": "Failed",
                    "reason": "VGPUDeviceRemoved",
                    "message": message,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "False",
                            "reason": "PodFailed",
                            "lastTransitionTime": _now(),
                        },
                        {
                            "type": "ContainersReady",
                            "status": "False",
                            "reason": "PodFailed",
                            "lastTransitionTime": _now(),
                        },
                    ],
                }
            }
            try:
                self._pods.put(
                    call_json(
                        self._core.patch_namespaced_pod_status,
                        pod["metadata"]["name"],
                        pod["metadata"]["namespace"],
                        body,
                    )
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
