"""An in-memory fake of the Kubernetes adapter's provisioning functions (``portal/k8s/``).

Unit tests of ``vmrequests/provisioning/`` and ``vmrequests/tasks.py`` install it with
``FakeCluster.install(monkeypatch)``; it replaces ``get_node``, ``list_pods_on_node``,
``patch_node_labels``, ``create_vmi``, ``get_vmi``, ``delete_vmi``, ``list_vmis_labelled`` and
``get_cluster_policy`` on the ``portal.k8s`` module, so the code under test calls it through
``k8s.<function>`` exactly as it calls the real adapter. The adapter's error classes stay real.

State, kept small and explicit:

- ``nodes``: name → ``FakeNode`` (labels, allocatable), read back as ``k8s.NodeInfo``;
- ``pods``: ``k8s.PodInfo`` rows (``list_pods_on_node`` filters them by ``node_name``);
- ``vmis``: ``(namespace, name)`` → the raw VMI object, the manifest as sent plus whatever
  ``set_vmi_status`` adds; read back through the real ``k8s.parse_vmi``;
- ``calls``: every call in order, e.g. ``("patch_node_labels", "v2", {"nvidia.com/vgpu.config": "T4-16Q"})``;
- ``fail(function, error, times=1)``: the next ``times`` calls of ``function`` raise ``error``.

``delete_vmi`` behaves like the API server with KubeVirt's finalizer: the VMI stays, with
``metadata.deletionTimestamp`` set, until the test calls ``finish_deletion`` (or ``forget_vmi``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from django.utils import timezone

from portal import k8s

#: The adapter functions the fake replaces.
FAKED = (
    "get_node",
    "list_pods_on_node",
    "patch_node_labels",
    "create_vmi",
    "get_vmi",
    "delete_vmi",
    "list_vmis_labelled",
    "get_cluster_policy",
)

DELETION_TIMESTAMP = "2026-12-01T09:00:00Z"


@dataclass
class FakeNode:
    """A Node: ``labels`` and ``allocatable`` (raw quantity strings), both mutable by tests."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)

    def info(self) -> k8s.NodeInfo:
        """The node as the adapter returns it."""
        return k8s.NodeInfo(
            name=self.name,
            labels=dict(self.labels),
            capacity=dict(self.allocatable),
            allocatable=dict(self.allocatable),
            ready=True,
        )


@dataclass
class FakeCluster:
    """The fake cluster; see the module docstring."""

    nodes: dict[str, FakeNode] = field(default_factory=dict)
    pods: list[k8s.PodInfo] = field(default_factory=list)
    vmis: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    cluster_policy: k8s.ClusterPolicyInfo | None = None
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    errors: dict[str, list[k8s.K8sError]] = field(default_factory=dict)
    created: int = 0
    uids: dict[int, str] = field(default_factory=dict)

    # --- set-up -------------------------------------------------------------------------------

    @classmethod
    def install(cls, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
        """A fresh fake whose functions replace the adapter's for the current test."""
        fake = cls()
        for name in FAKED:
            monkeypatch.setattr(k8s, name, getattr(fake, name))
        return fake

    def add_node(
        self, name: str, labels: Mapping[str, str] | None = None, allocatable: Mapping[str, str] | None = None
    ) -> FakeNode:
        """Add (or replace) a node."""
        node = FakeNode(name, dict(labels or {}), dict(allocatable or {}))
        self.nodes[name] = node
        return node

    def add_pod(
        self, namespace: str, name: str, node_name: str, requests: Mapping[str, int] | None = None
    ) -> k8s.PodInfo:
        """Add a non-terminal pod bound to ``node_name`` with ``nvidia.com/*`` ``requests``."""
        pod = k8s.PodInfo(
            namespace=namespace,
            name=name,
            uid=f"uid-{namespace}-{name}",
            node_name=node_name,
            phase="Running",
            requests=dict(requests or {}),
        )
        self.pods.append(pod)
        return pod

    def add_vmi(self, namespace: str, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Put a VMI on the cluster (created by someone else, or by an earlier delivery)."""
        obj: dict[str, Any] = {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(labels or {}),
            },
            "spec": {},
        }
        self.vmis[(namespace, name)] = obj
        return obj

    def set_vmi_status(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        node: str | None = None,
        ip: str | None = None,
        conditions: list[dict[str, str]] | None = None,
    ) -> None:
        """Give a VMI the ``status`` KubeVirt would write (phase, nodeName, interfaces, conditions)."""
        status: dict[str, Any] = {"phase": phase}
        if node:
            status["nodeName"] = node
        if ip:
            status["interfaces"] = [{"name": "default", "ipAddress": ip, "ipAddresses": [ip]}]
        if conditions:
            status["conditions"] = conditions
        self.vmis[(namespace, name)]["status"] = status

    def finish_deletion(self, namespace: str, name: str) -> None:
        """KubeVirt's finalizer is done: a VMI being deleted disappears."""
        assert self.vmis[(namespace, name)]["metadata"].get("deletionTimestamp")
        del self.vmis[(namespace, name)]

    def forget_vmi(self, namespace: str, name: str) -> None:
        """The VMI vanishes at once (deleted outside the portal, e.g. ``kubectl delete --force``)."""
        del self.vmis[(namespace, name)]

    def fail(self, function: str, error: k8s.K8sError, times: int = 1) -> None:
        """The next ``times`` calls of ``function`` raise ``error`` (after being logged in ``calls``)."""
        assert function in FAKED, function
        self.errors.setdefault(function, []).extend([error] * times)

    def _next_uid(self) -> str:
        """A new object's ``metadata.uid``: ``"uid-1"``, ``"uid-2"``, ... in creation order."""
        self.created += 1
        return f"uid-{self.created}"

    def _parsed(self, obj: dict[str, Any]) -> k8s.VmiInfo:
        """``k8s.parse_vmi`` of a stored VMI with its uid (given at its first read, kept in ``uids``
        so the stored object stays exactly the manifest sent)."""
        uid = self.uids.setdefault(id(obj), self._next_uid())
        return dataclasses.replace(k8s.parse_vmi(obj), uid=uid)

    def names(self) -> list[str]:
        """The function names of ``calls``, in order."""
        return [call[0] for call in self.calls]

    # --- the adapter's functions ------------------------------------------------------------

    def _enter(self, *call: Any) -> None:
        self.calls.append(call)
        queued = self.errors.get(call[0])
        if queued:
            raise queued.pop(0)

    def get_node(self, name: str) -> k8s.NodeInfo:
        """``k8s.get_node``; K8sNotFound for an unknown node."""
        self._enter("get_node", name)
        if name not in self.nodes:
            raise k8s.K8sNotFound("Kubernetes API 404 Not Found")
        return self.nodes[name].info()

    def list_pods_on_node(self, node_name: str) -> list[k8s.PodInfo]:
        """``k8s.list_pods_on_node``: the pods bound to ``node_name``."""
        self._enter("list_pods_on_node", node_name)
        return [p for p in self.pods if p.node_name == node_name]

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None]) -> k8s.NodeInfo:
        """``k8s.patch_node_labels``: set the labels, remove those whose value is None."""
        self._enter("patch_node_labels", name, dict(labels))
        if name not in self.nodes:
            raise k8s.K8sNotFound("Kubernetes API 404 Not Found")
        node = self.nodes[name]
        for key, value in labels.items():
            if value is None:
                node.labels.pop(key, None)
            else:
                node.labels[key] = value
        return node.info()

    def create_vmi(self, namespace: str, body: Mapping[str, Any]) -> k8s.VmiInfo:
        """``k8s.create_vmi``: K8sConflict when the name is taken (409 AlreadyExists)."""
        self._enter("create_vmi", namespace, copy.deepcopy(dict(body)))
        name = str(body["metadata"]["name"])
        if (namespace, name) in self.vmis:
            raise k8s.K8sConflict("Kubernetes API 409 Conflict")
        obj = copy.deepcopy(dict(body))
        obj["metadata"]["namespace"] = namespace
        self.vmis[(namespace, name)] = obj
        return k8s.parse_vmi(obj)

    def get_vmi(self, namespace: str, name: str) -> k8s.VmiInfo | None:
        """``k8s.get_vmi``: None when there is no such VMI."""
        self._enter("get_vmi", namespace, name)
        obj = self.vmis.get((namespace, name))
        return self._parsed(obj) if obj is not None else None

    def delete_vmi(self, namespace: str, name: str, uid: str) -> bool:
        """``k8s.delete_vmi``: sets ``deletionTimestamp`` (the VMI stays until ``finish_deletion``);
        False when it does not exist; K8sConflict when its uid is not ``uid`` (the precondition);
        ValueError without a uid. ``calls`` records ``("delete_vmi", namespace, name)``."""
        if not uid:
            raise ValueError("delete_vmi needs the uid of the VMI the caller checked")
        self._enter("delete_vmi", namespace, name)
        obj = self.vmis.get((namespace, name))
        if obj is None:
            return False
        if self._parsed(obj).uid != uid:
            raise k8s.K8sConflict("Kubernetes API 409 Conflict: Precondition failed: UID in precondition")
        obj["metadata"].setdefault("deletionTimestamp", DELETION_TIMESTAMP)
        return True

    def list_vmis_labelled(self, selector: str) -> list[k8s.VmiInfo]:
        """``k8s.list_vmis_labelled`` with an equality selector (``k=v[,k=v]``), sorted by namespace/name."""
        self._enter("list_vmis_labelled", selector)
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        out = []
        for key in sorted(self.vmis):
            labels = self.vmis[key]["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                out.append(self._parsed(self.vmis[key]))
        return out

    def get_cluster_policy(self) -> k8s.ClusterPolicyInfo | None:
        """``k8s.get_cluster_policy``: ``cluster_policy`` (None: there is none)."""
        self._enter("get_cluster_policy")
        return self.cluster_policy


# --- the clock and the request-side world of the provisioning tests ------------------------------


class Clock:
    """A frozen ``django.utils.timezone.now`` that tests move by hand (``advance``).

    ``install`` patches the function on the module, so ``auto_now`` fields, the status
    transitions and ``vmrequests/provisioning/`` all read this clock.
    """

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> datetime:
        """Move the clock forward by ``timedelta(**delta)``; returns the new time."""
        self.now += timedelta(**delta)
        return self.now

    @classmethod
    def install(cls, monkeypatch: pytest.MonkeyPatch, now: datetime) -> Clock:
        """A clock standing at ``now`` that replaces ``timezone.now`` for the current test."""
        clock = cls(now)
        monkeypatch.setattr(timezone, "now", clock)
        return clock


#: 2026-12-01 09:00 UTC, the provisioning tests' "now".
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
A100 = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_16Q = "nvidia.com/GRID_T4-16Q"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPLACEHOLDERPLACEHOLDERPLACEHOLDERPLACEHOLD analyst"


def provisioning_world() -> SimpleNamespace:
    """Users, one team, one image and stored inventory nodes for the provisioning tests.

    Users (``tests.factories.portal_user``): ``alice`` analyst of team ``quant`` (requester,
    ``alice@example.com``), ``tim`` another quant analyst, ``bob`` approver of ``quant``,
    ``frank`` approver of team ``research`` only. Team ``quant``: namespace ``team-quant``,
    maximum lease 30 days. Image ``Ubuntu 22.04`` with login user ``analyst``.
    Stored nodes: ``p1`` vm-passthrough with 2 × A100 (none used, permitted), ``v2`` vm-vgpu
    Tesla T4 × 2 under config ``T4-8Q`` (4 × ``GRID_T4-8Q``, none used).
    """
    from tests.factories import portal_user, stored_node, stored_resource
    from tests.vmrequest_factories import stored_image, stored_team

    w = SimpleNamespace()
    w.alice = portal_user("analyst", "alice")
    w.alice.email = "alice@example.com"
    w.alice.save()
    w.tim = portal_user("analyst", "tim")
    w.bob = portal_user("approver", "bob")
    w.frank = portal_user("approver", "frank")
    w.quant = stored_team("quant", members=(w.alice, w.tim, w.bob), approvers=(w.bob,))
    w.research = stored_team("research", approvers=(w.frank,))
    w.image = stored_image(login_user="analyst")
    w.p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=2)
    stored_resource(w.p1, A100, 2, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    w.v2 = stored_node(
        "v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(w.v2, T4_8Q, 4, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    return w


def live_request(
    w: SimpleNamespace,
    status: str = "approved",
    *,
    node: Any = None,
    reserve: bool = True,
    reprofile_config: str = "",
    reprofile_from: str = "",
    **fields: Any,
) -> Any:
    """A request of alice in team quant with ``status`` (written directly, no events) and, when
    ``reserve``, its ``Reservation`` on ``node`` (default ``p1``) as approval writes it.

    Defaults: 1 passthrough A100, 8 cores, 32 GiB, ``SSH_KEY``, 7-day lease.
    """
    from gpuinventory.models import Reservation
    from tests.vmrequest_factories import stored_request

    values: dict[str, Any] = {"cpu_cores": 8, "memory_gib": 32, "ssh_public_key": SSH_KEY, "status": status}
    values.update(fields)
    req = stored_request(w.quant, w.alice, w.image, **values)
    if reserve:
        Reservation.objects.create(
            node=node or w.p1,
            resource_name=req.resource_name,
            vgpu_type=req.vgpu_type,
            count=req.device_count,
            reprofile_config=reprofile_config,
            reprofile_from=reprofile_from,
            holder=req.holder.key,
            vmi_namespace=req.vmi_namespace,
            vmi_name=req.vmi_name,
        )
    return req
