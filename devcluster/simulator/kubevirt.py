"""KubeVirt's virt-controller and virt-handler for VirtualMachineInstances (DOMAIN.md §5.3, §5.4).

Per VMI (``kubevirt.io/v1``; status written through the main resource with merge-patch, the VMI CRD
has no status subresource, DEVCLUSTER.md §5.3):

- A ``gpus[].deviceName`` missing from the KubeVirt CR's ``permittedHostDevices`` (checked only when
  that field exists): no pod; phase ``Pending`` with condition ``Synchronized=False``, reason
  ``FailedCreate``, message ``failed to render launch manifest: GPU <name> is not permitted in
  permittedHostDevices configuration`` and a Warning event ``FailedCreate`` ([KV]
  ``renderresources.go validatePermittedHostDevices``, ``watch/vmi/lifecycle.go``).
- Else a virt-launcher pod ``virt-launcher-<vmi>-<5 random>`` with the labels of
  ``services/template.go`` (``kubevirt.io=virt-launcher``, ``kubevirt.io/created-by=<vmi uid>``,
  ``vm.kubevirt.io/name``, ``vmi.kubevirt.io/id`` plus the VMI's own labels), requests/limits of 1 per
  ``gpus[]`` entry (``WithGPUsDevicePlugins``), memory = the VMI's memory request, cpu = vCPUs / 10
  (KubeVirt's default ``cpuAllocationRatio``); phase ``Scheduling``.
- The :mod:`scheduler` places the pod; while it cannot, the VMI mirrors the pod's
  ``PodScheduled=False/Unschedulable`` condition and stays ``Scheduling`` (no timeout).
- Pod bound and running → ``Scheduled`` with ``status.nodeName`` and label ``kubevirt.io/nodeName``;
  after ``Delays.vmi_start`` → ``Running`` with the pod IP in ``status.interfaces`` and ``Ready=True``.
- Launcher pod failed or gone → VMI ``Failed``. VMI deleted → its launcher pods are deleted.

Simplifications: no virt-launcher memory overhead, no ``devices.kubevirt.io/*`` requests, no
``kubevirt.io/schedulable`` node selector.
"""

from __future__ import annotations

import logging
import threading
import time
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devcluster import labels as dlabels
from devcluster.simulator.scheduler import is_terminal
from devcluster.simulator.watch import Informer, Obj, call_json, obj_key
from devcluster.simulator.workqueue import WorkQueue
from devcluster.spec import KUBEVIRT_NAMESPACE, random_suffix

log = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubevirt.io", "v1", "virtualmachineinstances"
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.9.0"
CPU_ALLOCATION_RATIO = 10


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def not_permitted(vmi: Obj, kubevirt_cr: Obj | None) -> str | None:
    """First GPU ``deviceName`` of the VMI that the KubeVirt CR does not permit, or ``None``.

    The check is skipped when ``permittedHostDevices`` is absent altogether (DOMAIN.md §5.1).
    """
    cfg = (((kubevirt_cr or {}).get("spec") or {}).get("configuration") or {}).get("permittedHostDevices")
    if cfg is None:
        return None
    allowed = {d.get("resourceName") for d in (cfg.get("pciHostDevices") or [])}
    allowed |= {d.get("resourceName") for d in (cfg.get("mediatedDevices") or [])}
    for gpu in ((((vmi.get("spec") or {}).get("domain") or {}).get("devices") or {}).get("gpus")) or []:
        if gpu.get("deviceName") not in allowed:
            return str(gpu.get("deviceName"))
    return None


def launcher_pod(vmi: Obj) -> Obj:
    """The virt-launcher pod KubeVirt renders for ``vmi`` (see module docstring for the sources)."""
    meta = vmi["metadata"]
    spec = vmi.get("spec") or {}
    domain = spec.get("domain") or {}
    name = meta["name"]
    hostname = spec.get("hostname") or name
    labels = dict(meta.get("labels") or {})
    labels.update(
        {
            dlabels.KUBEVIRT_APP: dlabels.VIRT_LAUNCHER,
            "kubevirt.io/created-by": meta["uid"],
            dlabels.KUBEVIRT_VM_NAME: hostname,
            "vmi.kubevirt.io/id": name,
        }
    )
    cpu = domain.get("cpu") or {}
    vcpus = int(cpu.get("cores", 1)) * int(cpu.get("sockets", 1)) * int(cpu.get("threads", 1))
    res = domain.get("resources") or {}
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    memory = (res.get("requests") or {}).get("memory") or (domain.get("memory") or {}).get("guest")
    if memory:
        requests["memory"] = str(memory)
    cpu_req = (res.get("requests") or {}).get("cpu")
    requests["cpu"] = str(cpu_req) if cpu_req else f"{int(Decimal(vcpus * 1000) / CPU_ALLOCATION_RATIO)}m"
    gpus: dict[str, int] = {}
    for gpu in (domain.get("devices") or {}).get("gpus") or []:
        gpus[gpu["deviceName"]] = gpus.get(gpu["deviceName"], 0) + 1
    for dev, n in gpus.items():
        requests[dev] = limits[dev] = str(n)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "hostname": hostname,
        "terminationGracePeriodSeconds": int(spec.get("terminationGracePeriodSeconds", 30)) + 15,
        "containers": [
            {
                "name": "compute",
                "image": LAUNCHER_IMAGE,
                "command": ["/usr/bin/virt-launcher-monitor"],
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    for key in ("nodeSelector", "affinity", "tolerations", "schedulerName", "priorityClassName"):
        if spec.get(key):
            pod_spec[key] = spec[key]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{name}-{random_suffix()}",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": {"kubevirt.io/domain": name, "kubectl.kubernetes.io/default-container": "compute"},
            "ownerReferences": [
                {
                    "apiVersion": "kubevirt.io/v1",
                    "kind": "VirtualMachineInstance",
                    "name": name,
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def _mac(ip: str) -> str:
    parts = [int(p) for p in ip.split(".")]
    return "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}".format(0x42, *parts)


class KubeVirtController:
    """See module docstring.

    Args:
        api: Admin ApiClient. vmis/pods: Shared informers. start_delay: ``Delays.vmi_start`` seconds
        between ``Scheduled`` and ``Running``. stop: Stop event.
    """

    def __init__(
        self, api: k8s.ApiClient, vmis: Informer, pods: Informer, start_delay: float, stop: threading.Event
    ):
        self._core = k8s.CoreV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)
        self._vmis = vmis
        self._pods = pods
        self._start_delay = start_delay
        self._scheduled_at: dict[str, float] = {}
        self._created: dict[str, str] = {}  # vmi uid -> launcher pod name (before the watch shows it)
        self._lock = threading.Lock()
        self._by_uid: dict[str, dict[str, None]] = {}  # vmi uid -> launcher pod keys, in arrival order
        self.queue = WorkQueue("kubevirt", self._reconcile, stop)

    # -- events
    def on_vmi(self, kind: str, vmi: Obj) -> None:
        """Queue the VMI; on deletion remove its launcher pods right away."""
        if kind == "DELETED":
            self._delete_launchers(vmi["metadata"]["namespace"], vmi["metadata"]["uid"])
            self._scheduled_at.pop(obj_key(vmi), None)
            self._created.pop(vmi["metadata"]["uid"], None)
        else:
            self.queue.add(obj_key(vmi))

    def on_pod(self, kind: str, pod: Obj) -> None:
        """Launcher pod changes drive their VMI; an orphaned launcher (VMI gone) is deleted on resync."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("kubevirt.io") != "virt-launcher":
            return
        self._index(kind, pod)
        ns_ = pod["metadata"]["namespace"]
        vmi_name = labels.get("vmi.kubevirt.io/id")
        vmi = self._vmis.get(f"{ns_}/{vmi_name}")
        if vmi is None or vmi["metadata"]["uid"] != labels.get("kubevirt.io/created-by"):
            if kind == "SYNC" and self._vmis.synced.is_set():
                self._delete_pod(ns_, pod["metadata"]["name"])
            return
        self.queue.add(obj_key(vmi))

    # -- helpers
    def _index(self, kind: str, pod: Obj) -> None:
        """Track launcher pod keys per owning VMI uid, so finding a VMI's pods is O(1), not O(all pods)."""
        uid = str(((pod.get("metadata") or {}).get("labels") or {}).get("kubevirt.io/created-by"))
        key = obj_key(pod)
        with self._lock:
            if kind == "DELETED":
                keys = self._by_uid.get(uid)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del self._by_uid[uid]
            else:
                self._by_uid.setdefault(uid, {})[key] = None

    def _launchers(self, vmi: Obj) -> list[Obj]:
        """The VMI's launcher pods as the pod store holds them now."""
        uid = vmi["metadata"]["uid"]
        ns_ = vmi["metadata"]["namespace"]
        with self._lock:
            keys = list(self._by_uid.get(uid) or ())
        out = []
        for key in keys:
            p = self._pods.get(key)
            if (
                p is not None
                and p["metadata"].get("namespace") == ns_
                and ((p["metadata"].get("labels") or {}).get("kubevirt.io/created-by")) == uid
            ):
                out.append(p)
        return out

    def _delete_pod(self, ns_: str, name: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, ns_, grace_period_seconds=0, _preload_content=False)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _delete_launchers(self, ns_: str, uid: str) -> None:
        body = call_json(
            self._core.list_namespaced_pod,
            ns_,
            label_selector=f"kubevirt.io=virt-launcher,kubevirt.io/created-by={uid}",
        )
        for pod in body.get("items") or []:
            self._delete_pod(ns_, pod["metadata"]["name"])

    def _kubevirt_cr(self) -> Obj | None:
        body = call_json(
            self._custom.list_namespaced_custom_object, GROUP, VERSION, KUBEVIRT_NAMESPACE, "kubevirts"
        )
        items = body.get("items") or []
        return items[0] if items else None

    def _patch_vmi(self, vmi: Obj, status: dict[str, Any], labels: dict[str, str] | None = None) -> None:
        phase = status.get("phase")
        old = vmi.get("status") or {}
        if phase and phase != old.get("phase"):
            stamps = list(old.get("phaseTransitionTimestamps") or [])
            stamps.append({"phase": phase, "phaseTransitionTimestamp": _now()})
            status = {**status, "phaseTransitionTimestamps": stamps}
        body: dict[str, Any] = {"status": status}
        if labels:
            body["metadata"] = {"labels": labels}
        try:
            updated = call_json(
                self._custom.patch_namespaced_custom_object,
                GROUP,
                VERSION,
                vmi["metadata"]["namespace"],
                PLURAL,
                vmi["metadata"]["name"],
                body,
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        self._vmis.put(updated)

    def _event(self, vmi: Obj, reason: str, message: str) -> None:
        meta = vmi["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{random_suffix(10)}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "source": {"component": "virtualmachine-controller"},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        try:
            call_json(self._core.create_namespaced_event, meta["namespace"], body)
        except ApiException as exc:  # events are best effort
            log.debug("event for %s not written: %s", meta["name"], exc)

    # -- reconcile
    def _reconcile(self, key: str) -> float | None:
        vmi = self._vmis.get(key)
        if vmi is None or (vmi.get("metadata") or {}).get("deletionTimestamp"):
            return None
        status = vmi.get("status") or {}
        phase = status.get("phase") or ""
        if phase in ("Succeeded", "Failed"):
            return None
        uid = vmi["metadata"]["uid"]
        pods = [p for p in self._launchers(vmi) if not (p["metadata"].get("deletionTimestamp"))]
        if not pods:
            if phase in ("", "Pending"):
                if uid in self._created:
                    return 0.2  # created, the watch has not shown it yet
                return self._admit(vmi)
            self._patch_vmi(vmi, {"phase": "Failed", "reason": "PodDeleted"})
            return None
        pod = pods[0]
        pstatus = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if pstatus.get("phase") == "Failed" or (node and is_terminal(pod)):
            self._fail(vmi, pod)
            return None
        if not node:
            cond = next((c for c in pstatus.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            conds = []
            if cond and cond.get("status") == "False":
                conds = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": cond.get("reason"),
                        "message": cond.get("message"),
                        "lastProbeTime": None,
                        "lastTransitionTime": cond.get("lastTransitionTime") or _now(),
                    }
                ]
            if phase != "Scheduling" or (status.get("conditions") or []) != conds:
                self._patch_vmi(vmi, {"phase": "Scheduling", "conditions": conds})
            return None
        if pstatus.get("phase") != "Running":
            return None
        if phase in ("", "Pending", "Scheduling"):
            self._patch_vmi(
                vmi,
                {
                    "phase": "Scheduled",
                    "nodeName": node,
                    "conditions": [],
                    "activePods": {pod["metadata"]["uid"]: node},
                },
                labels={dlabels.KUBEVIRT_NODE_NAME: node},
            )
            self._scheduled_at[key] = time.monotonic()
            return self._start_delay
        if phase == "Scheduled":
            remaining = self._scheduled_at.get(key, 0.0) + self._start_delay - time.monotonic()
            if remaining > 0:
                return remaining
            ip = str(pstatus.get("podIP") or "")
            iface = {
                "name": "default",
                "interfaceName": "eth0",
                "infoSource": "domain, guest-agent",
                "ipAddress": ip,
                "ipAddresses": [ip],
                "mac": _mac(ip) if ip else "02:42:00:00:00:01",
                "linkState": "up",
                "podInterfaceName": "eth0",
                "queueCount": 1,
            }
            ready = {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": _now()}
            self._patch_vmi(
                vmi,
                {
                    "phase": "Running",
                    "nodeName": node,
                    "interfaces": [iface],
                    "conditions": [ready],
                    "launcherContainerImageVersion": LAUNCHER_IMAGE,
                    "qosClass": "Burstable",
                    "guestOSInfo": {},
                },
            )
            self._scheduled_at.pop(key, None)
        return None

    def _admit(self, vmi: Obj) -> float | None:
        denied = not_permitted(vmi, self._kubevirt_cr())
        if denied:
            message = f"failed to render launch manifest: GPU {denied} is not permitted in permittedHostDevices configuration"
            cond = {
                "type": "Synchronized",
                "status": "False",
                "reason": "FailedCreate",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": _now(),
            }
            old = [
                c
                for c in (vmi.get("status") or {}).get("conditions") or []
                if c.get("type") == "Synchronized"
            ]
            if (
                (vmi.get("status") or {}).get("phase") != "Pending"
                or not old
                or old[0].get("message") != message
            ):
                self._patch_vmi(vmi, {"phase": "Pending", "conditions": [cond]})
                self._event(vmi, "FailedCreate", message)
            return None
        pod = launcher_pod(vmi)
        created = call_json(self._core.create_namespaced_pod, vmi["metadata"]["namespace"], pod)
        self._created[vmi["metadata"]["uid"]] = created["metadata"]["name"]
        self._pods.put(created)
        self._index("ADDED", created)
        self._patch_vmi(vmi, {"phase": "Scheduling", "conditions": []})
        return None

    def _fail(self, vmi: Obj, pod: Obj) -> None:
        pstatus = pod.get("status") or {}
        message = str(pstatus.get("message") or "virt-launcher pod failed")
        cond = {
            "type": "Ready",
            "status": "False",
            "reason": "PodFailed",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
        }
        self._patch_vmi(
            vmi,
            {"phase": "Failed", "reason": str(pstatus.get("reason") or "PodFailed"), "conditions": [cond]},
        )
