"""The cluster-side controllers a real GPU Operator + KubeVirt cluster runs, simulated against the real
API server (DEVCLUSTER.md §2.7: the dev cluster has no controllers, kubelets or KubeVirt).

One module per controller played:

- :mod:`.nodes` — GPU Operator node labelling, NFD, GFD, device plugins' resources, kubelet Ready,
  node lifecycle taints;
- :mod:`.vgpu_device_manager` — NVIDIA vGPU Device Manager;
- :mod:`.scheduler` — kube-scheduler and the kubelet's device allocation / Running status;
- :mod:`.kubevirt` — virt-controller + virt-handler for VMIs;
- :mod:`.watch` — the shared informers (list + watch, resync, 410 recovery); :mod:`.workqueue`.

Never imports portal code.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from typing import Any

from kubernetes import client as k8s

from devcluster.simulator.kubevirt import KubeVirtController
from devcluster.simulator.nodes import NodeController
from devcluster.simulator.scheduler import Scheduler
from devcluster.simulator.vgpu_device_manager import VgpuDeviceManager
from devcluster.simulator.watch import Informer, Obj
from devcluster.spec import DEFAULT_VGPU_CONFIGMAP, ClusterSpec

log = logging.getLogger(__name__)

__all__ = ["Delays", "Simulator"]


@dataclasses.dataclass(frozen=True)
class Delays:
    """Timings of the simulated controllers, in seconds.

    Attributes:
        vgpu_reconfigure: ``pending`` → new mdevs on a ``nvidia.com/vgpu.config`` change (real: tens of seconds).
        vmi_schedule: A launcher pod's appearance → first scheduling attempt.
        vmi_start: VMI ``Scheduled`` → ``Running`` (real: image pull and boot).
        resync: Informer relist period.
        watch_timeout: Server-side watch timeout; bounds :meth:`Simulator.stop`.
    """

    vgpu_reconfigure: float = 5.0
    vmi_schedule: float = 1.0
    vmi_start: float = 3.0
    resync: float = 60.0
    watch_timeout: int = 5

    @classmethod
    def tests(cls) -> Delays:
        """Near-zero delays for the integration tests (a small vGPU delay keeps ``pending`` observable)."""
        return cls(vgpu_reconfigure=0.3, vmi_schedule=0.0, vmi_start=0.05, resync=30.0, watch_timeout=3)

    @classmethod
    def demo(cls) -> Delays:
        """A few seconds per step so progress is visible in the portal."""
        return cls()


class Simulator:
    """Runs the controllers as daemon threads over shared informers.

    Args:
        api: Admin ApiClient of the dev cluster.
        spec: The applied spec (operator version and namespace, default vGPU config text).
        delays: Controller timings.
    """

    def __init__(self, api: k8s.ApiClient, spec: ClusterSpec, delays: Delays) -> None:
        self._api = api
        self._spec = spec
        self._delays = delays
        self._stop = threading.Event()
        core = k8s.CoreV1Api(api)
        custom = k8s.CustomObjectsApi(api)
        inf = functools.partial(
            Informer, stop=self._stop, resync_seconds=delays.resync, watch_timeout=delays.watch_timeout
        )
        self.nodes = inf("nodes", core.list_node, self._on_node)
        self.pods = inf("pods", core.list_pod_for_all_namespaces, self._on_pod)
        self.vmis = inf(
            "vmis",
            functools.partial(
                custom.list_cluster_custom_object, "kubevirt.io", "v1", "virtualmachineinstances"
            ),
            self._on_vmi,
        )
        self.policies = inf(
            "clusterpolicies",
            functools.partial(custom.list_cluster_custom_object, "nvidia.com", "v1", "clusterpolicies"),
            self._on_policy,
        )
        self.node_controller = NodeController(
            api, self.nodes, self.cluster_policy, spec.operator_version, self._stop
        )
        self.vgpu_manager = VgpuDeviceManager(
            api,
            self.nodes,
            self.pods,
            self.cluster_policy,
            spec.operator_namespace,
            spec.configmap_text(DEFAULT_VGPU_CONFIGMAP) or "",
            delays.vgpu_reconfigure,
            self._stop,
        )
        self.scheduler = Scheduler(api, self.nodes, self.pods, delays.vmi_schedule, self._stop)
        self.kubevirt = KubeVirtController(api, self.vmis, self.pods, delays.vmi_start, self._stop)
        self._started = False

    def cluster_policy(self) -> dict[str, Any] | None:
        """The ClusterPolicy (there is normally exactly one; the first by name is used)."""
        items = sorted(self.policies.items(), key=lambda o: o["metadata"]["name"])
        return items[0] if items else None

    # -- dispatch
    def _on_node(self, kind: str, node: Obj) -> None:
        self.node_controller.on_node(kind, node)
        self.vgpu_manager.on_node(kind, node)
        self.scheduler.on_node(kind, node)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        self.scheduler.on_pod(kind, pod)
        self.kubevirt.on_pod(kind, pod)

    def _on_vmi(self, kind: str, vmi: Obj) -> None:
        self.kubevirt.on_vmi(kind, vmi)

    def _on_policy(self, kind: str, policy: Obj) -> None:
        if kind != "SYNC":
            self.node_controller.requeue_all()
            self.vgpu_manager.requeue_all()

    # -- lifecycle
    def start(self, sync_timeout: float = 120.0) -> None:
        """Start informers, wait (bounded) for their first list, then start the controllers.

        Args:
            sync_timeout: Max seconds to wait for each informer's first list.
        """
        if self._started:
            return
        self._started = True
        informers = (self.policies, self.nodes, self.pods, self.vmis)
        for informer in informers:
            informer.start()
        for informer in informers:
            if not informer.synced.wait(sync_timeout):
                log.warning(
                    "informer %s not synced after %.0fs; starting anyway", informer.name, sync_timeout
                )
        for queue in self._queues():
            queue.start()
        # Items listed before the queues ran were queued already; make sure nothing waits for a resync.
        self.node_controller.requeue_all()
        self.vgpu_manager.requeue_all()
        self.scheduler.requeue_all()
        for vmi in self.vmis.items():
            self.kubevirt.on_vmi("SYNC", vmi)

    def _queues(self) -> list[Any]:
        return [
            self.node_controller.queue,
            self.vgpu_manager.queue,
            self.scheduler.queue,
            self.kubevirt.queue,
        ]

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every thread; each join is bounded (watch timeout + a margin)."""
        self._stop.set()
        per = max(1.0, min(timeout, self._delays.watch_timeout + 2.0))
        for queue in self._queues():
            queue.join(per)
        for informer in (self.policies, self.nodes, self.pods, self.vmis):
            informer.join(per)
