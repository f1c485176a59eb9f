"""Provisioning with a REAL Celery worker process against the dev cluster (issue 6, "Done when").

Each test approves a request in this process; ``approve`` enqueues ``vmrequests.provision`` on
commit and a separate ``celery worker --pool=solo`` process (fixture ``celery_worker``: same
broker, the test's own queue, the test database via ``worker_db``, the dev cluster's kubeconfig)
provisions it: re-profiles a vGPU node, creates the VMI. The test then runs the reconcile task
(``vmrequests.tasks.reconcile``, beat's job) here, synchronously, pass by pass. Why not beat or
an enqueued reconcile: the test then knows which pass saw what (``Outcome`` per request), never
races a schedule, and can use a short ``PORTAL_SCHEDULING_TIMEOUT`` / ``PORTAL_REQUEUE_AFTER``
with ``override_settings``; ``requeue`` outcomes still go through the broker to the worker, as
from beat.

The database and broker are CI's (PostgreSQL + Redis) or a laptop's (SQLite file copy + the
file broker); both pass. A worker killed with SIGKILL loses the message it held on both: the
file broker deletes a message when it is fetched, Redis gives it back only after the one-hour
visibility timeout; so ``reconcile``'s requeue is what brings the request back.

Cluster facts (devcluster/specs/demo.yaml on top of specs/test.yaml): ``a2000-node-01`` holds the
only RTX A2000 (passthrough, free); ``gpu-node-02`` and ``spec-passthrough-01`` have free A100
PCIe 40GB passthrough GPUs; ``t4-node-01`` (8 × T4, no ``nvidia.com/vgpu.config`` label: the
default config, state ``success``) is the first node the placement re-profiles for ``T4-16Q``, a
type no node offers. The cluster is shared by the whole session: every test works in a fresh
namespace, and ``cluster`` deletes its VMIs and puts back node labels, the vGPU ConfigMap and the
KubeVirt CR it changed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from devcluster.server import DevCluster
from devcluster.spec import vmi_manifest as plain_vmi_manifest
from gpuinventory.choices import SyncStatus
from gpuinventory.models import Reservation
from gpuinventory.sync import run_sync
from portal import k8s
from tests.integration.inventory.conftest import gpu_allocatable, wait_for
from tests.integration.vmrequests.conftest import (
    create_roles,
    make_analyst,
    make_approver,
    make_image,
    make_team,
    submit_request,
)
from tests.integration.vmrequests.worker_harness import (
    TcpProxy,
    WorkerProcess,
    api_server_address,
    write_proxy_kubeconfig,
)
from vmrequests import provisioning, tasks
from vmrequests.approval import approve
from vmrequests.choices import DeletionReason, VMMode, VMRequestStatus
from vmrequests.models import Team, VmImage, VMRequest
from vmrequests.provisioning import REQUEST_LABEL, connect_instructions, vmi_manifest

pytestmark = [pytest.mark.integration]

A2000 = "nvidia.com/GA106_RTX_A2000_12GB"
A2000_NODE = "a2000-node-01"
T4_16Q = "nvidia.com/GRID_T4-16Q"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_NODE = "t4-node-01"
VGPU_CONFIG = "nvidia.com/vgpu.config"
VGPU_STATE = "nvidia.com/vgpu.config.state"
#: The GPU Operator runs the vGPU Device Manager on a node only while this label is "true"; the
#: operator leaves a "false" set by an admin alone (DOMAIN.md §1).
DM_DEPLOY = "nvidia.com/gpu.deploy.vgpu-device-manager"
VMI = ("kubevirt.io", "v1")
GPU_OPERATOR_NS = "gpu-operator"
VGPU_CONFIGMAP = "custom-vgpu-config"
KUBEVIRT_CR = ("kubevirt", "kubevirt")
#: Generous bound on waiting for the worker and the simulator (states are asserted, not times).
DEADLINE = 180.0
#: PORTAL_SCHEDULING_TIMEOUT of the unschedulable test (s); the message rounds it to 0.2 min.
SCHEDULING_TIMEOUT = 10
#: PORTAL_REQUEUE_AFTER of the SIGKILL test (s).
REQUEUE_AFTER = 2

S = VMRequestStatus


# --- the cluster guard --------------------------------------------------------------------------


class ClusterGuard:
    """Puts back what a test changed on the shared dev cluster, in a safe order: first every VMI
    of the test's namespace (and their launcher pods) is gone, then the vGPU ConfigMap and the
    KubeVirt CR are restored, then node labels, waiting until each node's vGPU state is
    ``success`` and its ``nvidia.com/*`` allocatable is what it was."""

    def __init__(self, api: k8s_client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.core = k8s_client.CoreV1Api(api)
        self.custom = k8s_client.CustomObjectsApi(api)
        self.nodes: dict[str, tuple[dict[str, str | None], dict[str, str]]] = {}
        self.configmap: dict[str, str] | None = None
        self.permitted: dict[str, Any] | None = None

    def keep_node(self, name: str) -> dict[str, str | None]:
        """Remember ``name``'s vGPU config labels, its vGPU Device Manager deploy label and GPU
        allocatable; returns the vGPU config labels."""
        labels = node_labels(self.api, name, VGPU_CONFIG, VGPU_STATE, DM_DEPLOY)
        self.nodes[name] = (labels, gpu_allocatable(self.api, name))
        return {VGPU_CONFIG: labels[VGPU_CONFIG], VGPU_STATE: labels[VGPU_STATE]}

    def keep_vgpu_configmap(self) -> dict[str, str]:
        """Remember the vGPU Device Manager's ConfigMap data; returns a copy."""
        cm = self.core.read_namespaced_config_map(VGPU_CONFIGMAP, GPU_OPERATOR_NS)
        self.configmap = dict(cm.data)
        return dict(cm.data)

    def keep_permitted_devices(self) -> dict[str, Any]:
        """Remember the KubeVirt CR's ``permittedHostDevices``; returns a deep copy."""
        cr = self.custom.get_namespaced_custom_object(*VMI, KUBEVIRT_CR[0], "kubevirts", KUBEVIRT_CR[1])
        self.permitted = copy.deepcopy(cr["spec"]["configuration"]["permittedHostDevices"])
        return copy.deepcopy(self.permitted)

    def restore(self) -> None:
        """Put everything back (see the class docstring). Every step is tried even when one
        fails (the rest of the session needs them); the first failure is raised at the end."""
        errors: list[Exception] = []
        for step in (self._delete_vmis, self._restore_objects, self._restore_nodes):
            try:
                step()
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _delete_vmis(self) -> None:
        for vmi in self.custom.list_namespaced_custom_object(*VMI, self.namespace, "virtualmachineinstances")[
            "items"
        ]:
            try:
                self.custom.delete_namespaced_custom_object(
                    *VMI, self.namespace, "virtualmachineinstances", vmi["metadata"]["name"]
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
        wait_for(
            lambda: (
                not self.custom.list_namespaced_custom_object(
                    *VMI, self.namespace, "virtualmachineinstances"
                )["items"]
                and not self.core.list_namespaced_pod(self.namespace).items
            ),
            f"the VMIs and pods of {self.namespace} gone",
            timeout=DEADLINE,
        )

    def _restore_objects(self) -> None:
        if self.configmap is not None:
            self.core.patch_namespaced_config_map(VGPU_CONFIGMAP, GPU_OPERATOR_NS, {"data": self.configmap})
        if self.permitted is not None:
            self.custom.patch_namespaced_custom_object(
                *VMI,
                KUBEVIRT_CR[0],
                "kubevirts",
                KUBEVIRT_CR[1],
                {"spec": {"configuration": {"permittedHostDevices": self.permitted}}},
            )

    def _restore_nodes(self) -> None:
        for name, (labels, allocatable) in self.nodes.items():
            self.core.patch_node(
                name, {"metadata": {"labels": {key: labels[key] for key in (VGPU_CONFIG, DM_DEPLOY)}}}
            )

            def back(
                name: str = name,
                labels: dict[str, str | None] = labels,
                allocatable: dict[str, str] = allocatable,
            ) -> bool:
                return (
                    node_labels(self.api, name, *labels) == labels
                    and gpu_allocatable(self.api, name) == allocatable
                )

            wait_for(back, f"node {name} back to {labels} with allocatable {allocatable}", timeout=DEADLINE)


@pytest.fixture
def cluster(k8s_api: k8s_client.ApiClient, k8s_namespace: str) -> Iterator[ClusterGuard]:
    """A :class:`ClusterGuard` for the test's namespace, restored after the test."""
    guard = ClusterGuard(k8s_api, k8s_namespace)
    try:
        yield guard
    finally:
        guard.restore()


# --- the portal side ------------------------------------------------------------------------


@dataclass
class World:
    """One team in the test's namespace, its approver and analyst, an image."""

    team: Team
    approver: User
    analyst: User
    image: VmImage


@pytest.fixture
def world(worker_db: str, portal_cluster: DevCluster, cluster: ClusterGuard) -> World:
    """Team ``quant`` (namespace: the test's, at most 4 GPUs, 2 × ``T4-16Q``) with the dev
    cluster's inventory synced into the shared test database."""
    create_roles()
    run = run_sync("command")
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")
    team = make_team(cluster.namespace, quotas={("", ""): 4, (VMMode.VGPU, "T4-16Q"): 2})
    return World(team, make_approver(team), make_analyst(team, "alice"), make_image())


@pytest.fixture
def start_worker(
    celery_worker: Callable[..., WorkerProcess], cluster: ClusterGuard
) -> Callable[..., WorkerProcess]:
    """``celery_worker``, stopped before ``cluster`` restores the cluster (a worker still retrying
    must not create a VMI after the clean-up)."""
    return celery_worker


def submit_a2000(world: World) -> VMRequest:
    """Alice's request for the RTX A2000 (passthrough, 1 device)."""
    return submit_request(
        world.team, world.analyst, world.image, resource_name=A2000, gpu_model="RTX A2000 12GB"
    )


def submit_t4_16q(world: World) -> VMRequest:
    """Alice's request for one ``T4-16Q`` vGPU (needs a re-profile)."""
    return submit_request(
        world.team, world.analyst, world.image, mode=VMMode.VGPU, vgpu_type="T4-16Q", gpu_model="Tesla T4"
    )


def reconcile_pass() -> list[provisioning.Outcome]:
    """One run of the reconcile task body (``vmrequests.tasks.reconcile``) in this process; the
    outcomes ``provisioning.reconcile`` returned to it."""
    seen: list[provisioning.Outcome] = []
    real = provisioning.reconcile

    def spy() -> list[provisioning.Outcome]:
        out = real()
        seen.extend(out)
        return out

    with mock.patch.object(provisioning, "reconcile", spy):
        tasks.reconcile()
    return seen


def reconcile_until(req: VMRequest, statuses: set[str], worker: WorkerProcess) -> list[str]:
    """Reconcile pass after pass until ``req`` is in one of ``statuses``; the actions of its
    outcomes in order."""
    actions: list[str] = []
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        worker.assert_alive()
        actions += [o.action for o in reconcile_pass() if o.request_id == req.pk]
        req.refresh_from_db()
        if req.status in statuses:
            return actions
        time.sleep(0.2)
    raise AssertionError(
        f"request {req.pk} is {req.status}, not {statuses}; reconcile said {actions[-20:]}; "
        f"worker log:\n{worker.log()}"
    )


def wait_status(req: VMRequest, statuses: set[str], worker: WorkerProcess) -> None:
    """Poll the database (no reconcile) until the worker moved ``req`` to one of ``statuses``."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        worker.assert_alive()
        req.refresh_from_db()
        if req.status in statuses:
            return
        time.sleep(0.1)
    raise AssertionError(f"request {req.pk} is {req.status}, not {statuses}; worker log:\n{worker.log()}")


def timeline(req: VMRequest) -> list[tuple[str, str, str, str, str]]:
    """``(action, from, to, actor, message)`` of every event, oldest first."""
    return [
        (e.action, e.from_status, e.to_status, e.actor.username if e.actor else e.actor_label, e.message)
        for e in req.events.select_related("actor")
    ]


def head(note: str = "") -> list[tuple[str, str, str, str, str]]:
    """The first three events of every provisioned request: submit, approve, start_provisioning."""
    return [
        ("submit", "", S.SUBMITTED, "alice", "Backtest of the risk model."),
        ("approve", S.SUBMITTED, S.APPROVED, "approver", note),
        ("start_provisioning", S.APPROVED, S.PROVISIONING, "worker", ""),
    ]


def created(req: VMRequest) -> tuple[str, str, str, str, str]:
    """The event of the worker creating ``req``'s VMI."""
    return (
        "progress",
        S.PROVISIONING,
        S.PROVISIONING,
        "worker",
        f"Created VirtualMachineInstance {req.vmi_namespace}/{req.vmi_name}.",
    )


def running(req: VMRequest) -> tuple[str, str, str, str, str]:
    """The event of reconcile seeing ``req``'s VMI running (message: how to connect)."""
    return ("mark_running", S.PROVISIONING, S.RUNNING, "worker", connect_instructions(req))


def reprofile_events(req: VMRequest) -> list[tuple[str, str, str, str, str]]:
    """The two events of re-profiling t4-node-01 from the default config to T4-16Q."""
    return [
        (
            "progress",
            S.PROVISIONING,
            S.PROVISIONING,
            "worker",
            f"Set nvidia.com/vgpu.config on node {T4_NODE} from (default) to T4-16Q; waiting for the "
            "vGPU Device Manager.",
        ),
        ("progress", S.PROVISIONING, S.PROVISIONING, "worker", f"Node {T4_NODE} now offers 8 × {T4_16Q}."),
    ]


# --- cluster reads -------------------------------------------------------------------------------


def node_labels(api: k8s_client.ApiClient, name: str, *keys: str) -> dict[str, str | None]:
    """The labels ``keys`` of a node (None: absent)."""
    labels = k8s_client.CoreV1Api(api).read_node(name).metadata.labels or {}
    return {key: labels.get(key) for key in keys}


def vgpu_labels(api: k8s_client.ApiClient, name: str) -> dict[str, str | None]:
    """A node's ``nvidia.com/vgpu.config`` and ``.state`` labels (None: absent)."""
    return node_labels(api, name, VGPU_CONFIG, VGPU_STATE)


def vmis_of(api: k8s_client.ApiClient, req: VMRequest) -> list[dict[str, Any]]:
    """Every VMI of the cluster carrying ``req``'s request-ID label."""
    return k8s_client.CustomObjectsApi(api).list_cluster_custom_object(
        *VMI, "virtualmachineinstances", label_selector=f"{REQUEST_LABEL}={req.pk}"
    )["items"]


def read_vmi(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """A VMI as stored, or None."""
    try:
        return k8s_client.CustomObjectsApi(api).get_namespaced_custom_object(
            *VMI, namespace, "virtualmachineinstances", name
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def launcher_pods(api: k8s_client.ApiClient, namespace: str, vmi_name: str) -> list[Any]:
    """The virt-launcher pods of a VMI."""
    return (
        k8s_client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"vm.kubevirt.io/name={vmi_name}")
        .items
    )


def run_blocker(api: k8s_client.ApiClient, namespace: str, device: str, node: str) -> dict[str, Any]:
    """A VMI made outside the portal using one ``device`` on ``node``, once it runs there."""
    custom = k8s_client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        *VMI,
        namespace,
        "virtualmachineinstances",
        plain_vmi_manifest("blocker", namespace, [device], node_selector={"kubernetes.io/hostname": node}),
    )

    def is_running() -> dict[str, Any] | None:
        vmi = read_vmi(api, namespace, "blocker")
        return vmi if vmi and (vmi.get("status") or {}).get("phase") == "Running" else None

    vmi = wait_for(is_running, "the blocker VMI Running", timeout=DEADLINE)
    assert vmi["status"]["nodeName"] == node
    return vmi


def assert_manifest(vmi: dict[str, Any], expected: dict[str, Any], node: str) -> None:
    """The stored VMI is exactly ``expected`` (what ``vmi_manifest`` built), plus only what
    KubeVirt adds: the ``kubevirt.io/nodeName`` label."""
    assert vmi["spec"] == expected["spec"]
    assert vmi["metadata"]["labels"] == {**expected["metadata"]["labels"], "kubevirt.io/nodeName": node}
    assert vmi["metadata"]["annotations"] == expected["metadata"]["annotations"]
    assert (vmi["metadata"]["name"], vmi["metadata"]["namespace"]) == (
        expected["metadata"]["name"],
        expected["metadata"]["namespace"],
    )


def assert_running_on(api: k8s_client.ApiClient, req: VMRequest, node: str, resource: str) -> dict[str, Any]:
    """``req`` is running on ``node`` with the IP of its one VMI, which is exactly the manifest,
    pinned to ``node`` (provisioning pins every VMI to the node its devices were reserved on)."""
    (vmi,) = vmis_of(api, req)
    ip = vmi["status"]["interfaces"][0]["ipAddress"]
    assert (vmi["status"]["phase"], vmi["status"]["nodeName"]) == ("Running", node)
    assert (req.status, req.node_name, req.ip_address, req.resource_name, req.failure_reason) == (
        S.RUNNING,
        node,
        ip,
        resource,
        "",
    )
    # The lease starts when the VM runs: 7 days from the mark_running transition.
    running_at = req.events.get(action="mark_running").created
    assert req.lease_end is not None
    assert timedelta(days=7) - timedelta(minutes=1) < req.lease_end - running_at <= timedelta(days=7)
    assert vmi["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
    assert_manifest(vmi, vmi_manifest(req, resource, node), node)
    return vmi


# --- the scenarios --------------------------------------------------------------------------------


def test_passthrough_request_runs_with_node_and_ip(
    world: World, start_worker: Callable[..., WorkerProcess], k8s_api: k8s_client.ApiClient
) -> None:
    worker = start_worker()
    req = submit_a2000(world)
    approve(req, world.approver, "For the Q4 backtest.")

    actions = reconcile_until(req, {S.RUNNING}, worker)
    assert actions[-1] == "running"
    vmi = assert_running_on(k8s_api, req, A2000_NODE, A2000)
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [{"name": "gpu1", "deviceName": A2000}]
    assert timeline(req) == [
        *head("For the Q4 backtest."),
        created(req),
        running(req),
    ]
    assert req.events.get(action="progress").data == {
        "vmi": f"{req.vmi_namespace}/{req.vmi_name}",
        "resource": A2000,
        "pinned_to": A2000_NODE,
    }
    assert req.events.get(action="mark_running").data == {"node": A2000_NODE, "ip": req.ip_address}
    # The VMI was created with fieldValidation=Strict against the real KubeVirt CRD schema; that the
    # check is live: the same manifest with one unknown field is refused (422) and nothing is made.
    bogus = vmi_manifest(req, A2000)
    bogus["metadata"]["name"] = "strict-check"
    bogus["spec"]["domain"]["devices"]["gpus"][0]["displayOff"] = True
    with pytest.raises(k8s.K8sInvalid):
        k8s.create_vmi(req.vmi_namespace, bogus)
    assert read_vmi(k8s_api, req.vmi_namespace, "strict-check") is None
    # Further passes change nothing.
    assert [o.action for o in reconcile_pass() if o.request_id == req.pk] == ["ok"]


def test_vgpu_request_reprofiles_an_idle_node(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    assert cluster.keep_node(T4_NODE) == {VGPU_CONFIG: None, VGPU_STATE: "success"}
    assert T4_16Q not in gpu_allocatable(k8s_api, T4_NODE)
    worker = start_worker()
    req = submit_t4_16q(world)
    approve(req, world.approver)
    assert Reservation.objects.get(holder=req.holder.key).node.name == T4_NODE

    actions = reconcile_until(req, {S.RUNNING}, worker)
    assert actions[-1] == "running"
    assert vgpu_labels(k8s_api, T4_NODE) == {VGPU_CONFIG: "T4-16Q", VGPU_STATE: "success"}
    assert gpu_allocatable(k8s_api, T4_NODE)[T4_16Q] == "8"
    vmi = assert_running_on(k8s_api, req, T4_NODE, T4_16Q)
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "vgpu1", "deviceName": T4_16Q, "virtualGPUOptions": {"display": {"enabled": False}}}
    ]
    assert timeline(req) == [*head(), *reprofile_events(req), created(req), running(req)]
    assert [e.data for e in req.events.filter(action="progress")] == [
        {"node": T4_NODE, "from": "", "to": "T4-16Q"},
        {"node": T4_NODE, "resource": T4_16Q, "allocatable": 8},
        {"vmi": f"{req.vmi_namespace}/{req.vmi_name}", "resource": T4_16Q, "pinned_to": T4_NODE},
    ]
    res = Reservation.objects.get(holder=req.holder.key)
    assert (
        res.node.name,
        res.resource_name,
        res.reprofile_config,
        res.reprofile_from,
        res.reprofile_done,
    ) == (
        T4_NODE,
        T4_16Q,
        "T4-16Q",
        "",
        True,
    )


def test_reprofile_refused_while_a_vmi_uses_the_nodes_vgpus(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    labels = cluster.keep_node(T4_NODE)
    allocatable = gpu_allocatable(k8s_api, T4_NODE)
    # A VM started outside the portal after the last inventory sync: the stored inventory still
    # shows t4-node-01 idle, so approval plans to re-profile it; the live check must refuse.
    blocker = run_blocker(k8s_api, cluster.namespace, T4_8Q, T4_NODE)
    (pod,) = launcher_pods(k8s_api, cluster.namespace, "blocker")
    worker = start_worker()
    req = submit_t4_16q(world)
    approve(req, world.approver)
    assert Reservation.objects.get(holder=req.holder.key).node.name == T4_NODE

    wait_status(req, {S.FAILED, S.RUNNING}, worker)
    reason = (
        f"Node {T4_NODE} was not re-profiled: its vGPUs are in use ({cluster.namespace}/{pod.metadata.name}), and "
        "changing the vGPU config would destroy them. Ask an approver to approve the request again once "
        "another node is idle."
    )
    assert (req.status, req.failure_reason, req.vmi_created_at) == (S.FAILED, reason, None)
    assert timeline(req) == [*head(), ("mark_failed", S.PROVISIONING, S.FAILED, "worker", reason)]
    assert req.events.get(action="mark_failed").data == {
        "node": T4_NODE,
        "pods": [f"{cluster.namespace}/{pod.metadata.name}"],
    }
    assert not Reservation.objects.filter(holder=req.holder.key).exists()
    # Nothing changed on the cluster: the label, the vGPUs, the running VM and its pod.
    assert vgpu_labels(k8s_api, T4_NODE) == labels
    assert gpu_allocatable(k8s_api, T4_NODE) == allocatable
    assert vmis_of(k8s_api, req) == []
    after = read_vmi(k8s_api, cluster.namespace, "blocker")
    assert (after["metadata"]["uid"], after["status"]["phase"], after["status"]["nodeName"]) == (
        blocker["metadata"]["uid"],
        "Running",
        T4_NODE,
    )
    (pod_after,) = launcher_pods(k8s_api, cluster.namespace, "blocker")
    assert (pod_after.metadata.uid, pod_after.status.phase) == (pod.metadata.uid, "Running")


def test_failed_vgpu_config_puts_the_label_back(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    cluster.keep_node(T4_NODE)
    allocatable = gpu_allocatable(k8s_api, T4_NODE)
    data = cluster.keep_vgpu_configmap()
    req = submit_t4_16q(world)
    approve(req, world.approver)
    # After approval an admin drops T4-16Q from the vGPU ConfigMap: the vGPU Device Manager then
    # reports state "failed" for the label the worker sets.
    config = yaml.safe_load(data["config.yaml"])
    del config["vgpu-configs"]["T4-16Q"]
    k8s_client.CoreV1Api(k8s_api).patch_namespaced_config_map(
        VGPU_CONFIGMAP, GPU_OPERATOR_NS, {"data": {"config.yaml": yaml.safe_dump(config)}}
    )
    worker = start_worker()

    wait_status(req, {S.FAILED, S.RUNNING}, worker)
    reason = (
        f"Re-profiling node {T4_NODE} to vGPU config T4-16Q failed: the vGPU Device Manager reported state "
        "failed. The previous config default was put back. An admin should check the vGPU Device Manager "
        "on that node."
    )
    assert (req.status, req.failure_reason) == (S.FAILED, reason)
    assert timeline(req) == [
        *head(),
        reprofile_events(req)[0],
        ("mark_failed", S.PROVISIONING, S.FAILED, "worker", reason),
    ]
    assert req.events.get(action="mark_failed").data == {
        "node": T4_NODE,
        "state": "failed",
        "restored": True,
        "restore": "default",
    }
    assert not Reservation.objects.filter(holder=req.holder.key).exists()
    assert vmis_of(k8s_api, req) == []
    # The label went back to the config the node ran (absent = the ClusterPolicy default, which
    # the portal writes explicitly: removing the label would not revert a real node, DOMAIN.md §3);
    # the device manager then reports success and the node offers what it offered before.
    wait_for(
        lambda: vgpu_labels(k8s_api, T4_NODE) == {VGPU_CONFIG: "default", VGPU_STATE: "success"},
        "t4-node-01 labelled default/success",
        timeout=DEADLINE,
    )
    assert gpu_allocatable(k8s_api, T4_NODE) == allocatable


def test_gpu_not_permitted_in_kubevirt_fails_with_the_message(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    permitted = cluster.keep_permitted_devices()
    req = submit_a2000(world)
    approve(req, world.approver)
    # The stored inventory (synced before) says the A2000 is permitted; an admin then removes it
    # from the KubeVirt CR's permittedHostDevices.
    pci = [d for d in permitted["pciHostDevices"] if d["resourceName"] != A2000]
    assert len(pci) == len(permitted["pciHostDevices"]) - 1
    k8s_client.CustomObjectsApi(k8s_api).patch_namespaced_custom_object(
        *VMI,
        KUBEVIRT_CR[0],
        "kubevirts",
        KUBEVIRT_CR[1],
        {"spec": {"configuration": {"permittedHostDevices": {**permitted, "pciHostDevices": pci}}}},
    )
    worker = start_worker()

    actions = reconcile_until(req, {S.FAILED, S.RUNNING}, worker)
    assert actions[-1] == "failed"
    kubevirt_says = f"failed to render launch manifest: GPU {A2000} is not permitted in permittedHostDevices configuration"
    reason = (
        f"KubeVirt refused the GPU: {A2000} is not permitted in the KubeVirt CR's permittedHostDevices. "
        f"An admin must add it. ({kubevirt_says})"
    )
    assert (req.status, req.failure_reason) == (S.FAILED, reason)
    assert timeline(req) == [
        *head(),
        created(req),
        ("mark_failed", S.PROVISIONING, S.FAILED, "worker", reason),
    ]
    assert req.events.get(action="mark_failed").data == {
        "condition": "Synchronized",
        "message": kubevirt_says,
    }
    wait_for(lambda: vmis_of(k8s_api, req) == [], "the refused VMI deleted", timeout=DEADLINE)
    assert launcher_pods(k8s_api, req.vmi_namespace, req.vmi_name) == []
    assert not Reservation.objects.filter(holder=req.holder.key).exists()


def test_unschedulable_vmi_times_out_and_is_deleted(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    # Another VM took the only A2000 after the last sync: approval (stored inventory) still sees
    # it free, the scheduler does not.
    run_blocker(k8s_api, cluster.namespace, A2000, A2000_NODE)
    worker = start_worker()
    req = submit_a2000(world)
    approve(req, world.approver)

    def unschedulable() -> str | None:
        vmi = read_vmi(k8s_api, req.vmi_namespace, req.vmi_name)
        for cond in ((vmi or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "False":
                assert (vmi["status"]["phase"], cond["reason"]) == ("Scheduling", "Unschedulable")
                return str(cond["message"])
        return None

    scheduler_says = wait_for(unschedulable, "our VMI unschedulable", timeout=DEADLINE)
    assert f"1 Insufficient {A2000}" in scheduler_says
    # Within PORTAL_SCHEDULING_TIMEOUT (default 15 min) reconcile waits; past a short one it fails.
    assert [o.action for o in reconcile_pass() if o.request_id == req.pk] == ["waiting"]
    with override_settings(PORTAL_SCHEDULING_TIMEOUT=SCHEDULING_TIMEOUT):
        actions = reconcile_until(req, {S.FAILED, S.RUNNING}, worker)
    assert (actions[-1], actions.count("failed"), set(actions)) == ("failed", 1, {"waiting", "failed"})
    reason = (
        "Timed out waiting for a node (0.2 min); the VMI was deleted so it does not hold a place. "
        "No node has 1 free GA106_RTX_A2000_12GB right now. "
        f"2 node(s) have free A100 PCIe 40GB. (scheduler: {scheduler_says})"
    )
    assert (req.status, req.failure_reason) == (S.FAILED, reason)
    assert timeline(req) == [
        *head(),
        created(req),
        ("mark_failed", S.PROVISIONING, S.FAILED, "worker", reason),
    ]
    assert req.events.get(action="mark_failed").data == {"phase": "Scheduling", "scheduler": scheduler_says}
    wait_for(
        lambda: vmis_of(k8s_api, req) == [] and launcher_pods(k8s_api, req.vmi_namespace, req.vmi_name) == [],
        "the unschedulable VMI and its pod deleted",
        timeout=DEADLINE,
    )
    assert not Reservation.objects.filter(holder=req.holder.key).exists()
    assert read_vmi(k8s_api, cluster.namespace, "blocker")["status"]["phase"] == "Running"


def test_lease_expiry_deletes_the_vmi_and_the_request(
    world: World, start_worker: Callable[..., WorkerProcess], k8s_api: k8s_client.ApiClient
) -> None:
    worker = start_worker()
    req = submit_a2000(world)
    approve(req, world.approver)
    reconcile_until(req, {S.RUNNING}, worker)
    (vmi,) = vmis_of(k8s_api, req)
    assert vmi["status"]["phase"] == "Running"

    VMRequest.objects.filter(pk=req.pk).update(lease_end=timezone.now() - timedelta(minutes=1))
    assert [o.action for o in reconcile_pass() if o.request_id == req.pk] == ["expired"]
    req.refresh_from_db()
    assert (req.status, req.deletion_reason) == (S.DELETING, DeletionReason.EXPIRED)
    actions = reconcile_until(req, {S.DELETED}, worker)
    assert (actions[-1], actions.count("deleted")) == ("deleted", 1)
    assert (req.status, req.deletion_reason) == (S.DELETED, DeletionReason.EXPIRED)
    assert read_vmi(k8s_api, req.vmi_namespace, req.vmi_name) is None
    assert launcher_pods(k8s_api, req.vmi_namespace, req.vmi_name) == []
    assert timeline(req) == [
        *head(),
        created(req),
        running(req),
        ("start_deletion", S.RUNNING, S.DELETING, "worker", "lease expired"),
        (
            "mark_deleted",
            S.DELETING,
            S.DELETED,
            "worker",
            "The VirtualMachineInstance is gone; its devices are free.",
        ),
    ]
    assert not Reservation.objects.filter(holder=req.holder.key).exists()


def holds_a_waiting_provision(worker: WorkerProcess) -> bool:
    """The worker's last provision lines: a re-profile check ended in a retry, and the worker then
    received that retry message (it holds it, unacknowledged, until its countdown ends)."""
    lines = [line for line in worker.log().splitlines() if "Task vmrequests.provision[" in line]
    return (
        len(lines) >= 2
        and "retry: Retry in 2.0s: Wait('waiting for t4-node-01: state success')" in lines[-2]
        and lines[-1].endswith(" received")
    )


def test_worker_killed_during_reprofile_gives_exactly_one_vmi(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    cluster.keep_node(T4_NODE)
    core = k8s_client.CoreV1Api(k8s_api)
    # The vGPU Device Manager is held on t4-node-01 (deploy label "false"), so the re-profile
    # cannot finish before the kill, as a real one that takes minutes would not.
    core.patch_node(T4_NODE, {"metadata": {"labels": {DM_DEPLOY: "false"}}})
    first = start_worker()
    req = submit_t4_16q(world)
    approve(req, world.approver)
    # Worker 1 patches the label, then checks every 2 s: each check is a retry whose message the
    # worker fetches and holds, unacknowledged, until its countdown ends. SIGKILL it while it holds
    # one (frozen first, so the state seen in its log is the state it dies in).
    deadline = time.monotonic() + DEADLINE
    while True:
        first.assert_alive()
        first.freeze()
        if holds_a_waiting_provision(first):
            break
        first.thaw()
        assert time.monotonic() < deadline, f"worker 1 never held a waiting provision:\n{first.log()}"
        time.sleep(0.05)
    assert first.kill() == -9
    assert first.count(r"Wait\('label patched'\)") == 1
    req.refresh_from_db()
    assert (req.status, req.vmi_created_at) == (S.PROVISIONING, None)
    assert vmis_of(k8s_api, req) == []
    assert vgpu_labels(k8s_api, T4_NODE) == {VGPU_CONFIG: "T4-16Q", VGPU_STATE: "success"}
    assert T4_16Q not in gpu_allocatable(k8s_api, T4_NODE)  # that "success" is the old config's

    # The device manager runs again and applies T4-16Q.
    core.patch_node(T4_NODE, {"metadata": {"labels": {DM_DEPLOY: "true"}}})
    wait_for(
        lambda: gpu_allocatable(k8s_api, T4_NODE).get(T4_16Q) == "8", "T4-16Q on t4-node-01", timeout=DEADLINE
    )
    # The message worker 1 held is gone (file broker: deleted when fetched; Redis: back only
    # after the one-hour visibility timeout). Reconcile sees no progress for PORTAL_REQUEUE_AFTER
    # and enqueues provision again; worker 2 finishes the re-profile it finds half done.
    second = start_worker()
    with override_settings(PORTAL_REQUEUE_AFTER=REQUEUE_AFTER):
        actions = reconcile_until(req, {S.RUNNING, S.FAILED}, second)
    assert "requeue" in actions and actions[-1] == "running"
    assert second.count(r"Task vmrequests\.provision\[.*\] succeeded in .*: 'created'") == 1
    assert second.count(r"Task vmrequests\.provision\[.*\] succeeded in .*: 'adopted'") == 0
    assert_running_on(k8s_api, req, T4_NODE, T4_16Q)
    assert len(vmis_of(k8s_api, req)) == 1
    # One label patch, one VMI created: nothing was done twice.
    assert timeline(req) == [*head(), *reprofile_events(req), created(req), running(req)]
    assert vgpu_labels(k8s_api, T4_NODE) == {VGPU_CONFIG: "T4-16Q", VGPU_STATE: "success"}


def test_api_server_outage_is_retried_then_runs(
    world: World,
    start_worker: Callable[..., WorkerProcess],
    k8s_api: k8s_client.ApiClient,
    devcluster: DevCluster,
    tmp_path: Path,
) -> None:
    proxy = TcpProxy(api_server_address(devcluster.kubeconfig)).start()
    try:
        kubeconfig = write_proxy_kubeconfig(
            devcluster.kubeconfig, tmp_path / "kubeconfig-proxy", proxy.server
        )
        worker = start_worker(PORTAL_KUBECONFIG=str(kubeconfig))
        proxy.cut()
        req = submit_a2000(world)
        approve(req, world.approver)
        retry_line = r"Task vmrequests\.provision\[.*\] retry: Retry in .*K8sTransientError.*unreachable"

        def retried_twice() -> bool:
            worker.assert_alive()
            return worker.count(retry_line) >= 2

        wait_for(retried_twice, "two retries while the API server is cut", timeout=DEADLINE)
        req.refresh_from_db()
        assert (req.status, req.vmi_created_at) == (S.PROVISIONING, None)
        assert vmis_of(k8s_api, req) == []

        proxy.restore()
        actions = reconcile_until(req, {S.RUNNING, S.FAILED}, worker)
        assert actions[-1] == "running"
        assert proxy.accepted >= 1
    finally:
        proxy.close()
    assert_running_on(k8s_api, req, A2000_NODE, A2000)
    assert timeline(req) == [*head(), created(req), running(req)]
    assert worker.count(r"Task vmrequests\.provision\[.*\] succeeded") == 1
