"""The portal running as the ServiceAccount of ``deploy/`` against the REAL dev cluster (issue 8,
"Deployment into a cluster"): what it needs works, what it must not do is refused.

The fixture ``deployed`` (conftest.py) creates the identities and rights of ``deploy/base`` as the
admin and takes tokens of both ServiceAccounts from the TokenRequest API. Each team namespace gets
the Role and RoleBinding ``manage.py team_rbac`` prints for its ``Team`` row. Then, with the
portal's adapter pointed at a kubeconfig holding the worker's token:

- the inventory sync reads the same cluster the admin sees (nodes, pods and VMIs of every
  namespace, the ClusterPolicy, the KubeVirt CR, the vGPU ConfigMap);
- a real Celery worker process provisions an approved passthrough request to Running and deletes
  its VMI when it is released; another re-profiles a vGPU node (the label patch the admission
  policy allows) and runs the VM; reconcile and the watcher's LIST/WATCH run as the same identity;
- the API server answers 403 to everything else tried: deleting nodes, reading secrets, VMIs
  outside team namespaces, namespaces, pods, other node labels and taints, RBAC itself; and the
  web's ServiceAccount may do nothing but read ``/version``.

The workload manifests are validated by the same API server with ``dryRun=All`` (strict field
validation, and Pod Security "restricted" on pods made from their templates).

Cluster facts: see tests/integration/vmrequests/test_vmrequest_provisioning_worker.py (the
A2000 on ``a2000-node-01``; ``t4-node-01`` re-profiled for ``T4-16Q``; ClusterPolicy vGPU
ConfigMap ``gpu-operator/custom-vgpu-config``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db.models import Model
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from devcluster.server import DevCluster
from devcluster.spec import vmi_manifest
from gpuinventory.choices import SyncStatus
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, VgpuConfig
from gpuinventory.sync import run_sync
from portal import k8s
from tests.integration.deploy.conftest import (
    OPERATOR_NS,
    PORTAL_NS,
    QUIET_NODE,
    RBAC_KINDS,
    Deployed,
    adapter_as,
    apply,
    apply_team_rbac,
    base_objects,
    can,
    create,
    operator_role,
    read,
)
from tests.integration.inventory.conftest import wait_for
from tests.integration.vmrequests.conftest import (
    create_roles,
    make_analyst,
    make_approver,
    make_image,
    make_team,
)
from tests.integration.vmrequests.test_vmrequest_provisioning_worker import (
    A2000,
    A2000_NODE,
    T4_16Q,
    T4_NODE,
    VGPU_CONFIG,
    VGPU_STATE,
    ClusterGuard,
    World,
    assert_running_on,
    created,
    head,
    reconcile_until,
    reprofile_events,
    running,
    submit_a2000,
    submit_t4_16q,
    timeline,
    vgpu_labels,
    vmis_of,
)
from tests.integration.vmrequests.worker_harness import WorkerProcess
from vmrequests.approval import approve, release
from vmrequests.choices import DeletionReason, VMMode, VMRequestStatus
from vmrequests.management.commands.team_rbac import team_rbac_objects
from vmrequests.provisioning import MANAGED_BY, MANAGED_BY_LABEL

pytestmark = [pytest.mark.integration]

S = VMRequestStatus
VMI = ("kubevirt.io", "v1")


def forbidden(call: Callable[[], Any]) -> str:
    """Run ``call``; it must fail with HTTP 403 (``ApiException``, or the adapter's ``K8sForbidden``
    chained to one). Returns the API server's message."""
    try:
        call()
    except ApiException as exc:
        assert exc.status == 403, exc
        return str(json.loads(exc.body)["message"])
    except k8s.K8sForbidden as exc:
        assert isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 403
        return str(json.loads(exc.__cause__.body)["message"])
    raise AssertionError("the call was allowed")


def rbac_denied(
    user: str, verb: str, resource: str, group: str = "", *, namespace: str = "", name: str = ""
) -> str:
    """The RBAC authorizer's 403 message, as kube-apiserver words it."""
    qualified = f"{resource}.{group}" if group else resource
    target = f'{qualified} "{name}" is forbidden' if name else f"{qualified} is forbidden"
    kind = f'resource "{resource}" in API group "{group}"'
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'{target}: User "{user}" cannot {verb} {kind} {scope}'


# --- the manifests, validated by the API server -----------------------------------------------------


def test_workload_manifests_pass_server_side_validation(
    deployed: Deployed, k8s_api: k8s_client.ApiClient
) -> None:
    """ConfigMap, Service, Deployments and the Job: created with ``dryRun=All`` and strict field
    validation (nothing stored); a Pod from each pod template passes Pod Security "restricted",
    which namespace.yaml enforces."""
    workloads = [o for o in base_objects() if o["kind"] not in RBAC_KINDS]  # RBAC_KINDS: made by `deployed`
    assert sorted((o["kind"], o["metadata"]["name"]) for o in workloads) == [
        ("ConfigMap", "gpu-vm-portal"),
        ("Deployment", "gpu-vm-portal-beat"),
        ("Deployment", "gpu-vm-portal-watcher"),
        ("Deployment", "gpu-vm-portal-web"),
        ("Deployment", "gpu-vm-portal-worker"),
        ("Job", "gpu-vm-portal-migrate"),
        ("NetworkPolicy", "gpu-vm-portal-beat"),
        ("NetworkPolicy", "gpu-vm-portal-default-deny"),
        ("NetworkPolicy", "gpu-vm-portal-migrate"),
        ("NetworkPolicy", "gpu-vm-portal-watcher"),
        ("NetworkPolicy", "gpu-vm-portal-web"),
        ("NetworkPolicy", "gpu-vm-portal-worker"),
        ("Service", "gpu-vm-portal-web"),
    ]
    for obj in workloads:
        made = create(k8s_api, obj, dry_run=True)
        assert (made.metadata.name, made.metadata.namespace) == (obj["metadata"]["name"], PORTAL_NS)
        assert read(k8s_api, obj["kind"], obj["metadata"]["name"], PORTAL_NS) is None
    # Defaults the server filled in show the object was really built, e.g. the Deployment strategy.
    web = create(
        k8s_api, next(o for o in workloads if o["metadata"]["name"] == "gpu-vm-portal-web"), dry_run=True
    )
    assert web.spec.strategy.type == "RollingUpdate"
    assert web.spec.template.spec.containers[0].readiness_probe.http_get.path == "/readyz"

    templates = {
        o["metadata"]["name"]: o["spec"]["template"] for o in workloads if o["kind"] in {"Deployment", "Job"}
    }
    for name, template in templates.items():
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"psa-{name}",
                "namespace": PORTAL_NS,
                "labels": template["metadata"]["labels"],
            },
            "spec": template["spec"],
        }
        assert create(k8s_api, pod, dry_run=True).metadata.name == f"psa-{name}"
    # The control: the same pod as root is refused by Pod Security admission in that namespace.
    spec = dict(templates["gpu-vm-portal-web"]["spec"])
    spec["securityContext"] = {"runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}}
    root_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "psa-root", "namespace": PORTAL_NS},
        "spec": spec,
    }
    message = forbidden(lambda: create(k8s_api, root_pod, dry_run=True))
    assert message == (
        'pods "psa-root" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true '
        "(pod must not set securityContext.runAsNonRoot=false)"
    )


# --- what the worker's identity may do: exactly the adapter's calls ----------------------------------


def test_access_matrix_of_the_worker_service_account(
    deployed: Deployed, k8s_api: k8s_client.ApiClient, k8s_namespace: str
) -> None:
    """SelfSubjectAccessReview as the worker, for every right it needs and the nearest ones it
    must not have. ``k8s_namespace`` is a namespace that is not a team's."""
    team_ns = f"t-team-{uuid.uuid4().hex[:8]}"
    for obj in team_rbac_objects(team_ns, ["matrix"], PORTAL_NS, "gpu-vm-portal", with_namespace=True):
        apply(k8s_api, obj)
    wait_for(
        lambda: can(deployed.worker, "create", "virtualmachineinstances", "kubevirt.io", namespace=team_ns),
        "the team RoleBinding in force",
    )
    kv, rbac = "kubevirt.io", "rbac.authorization.k8s.io"
    cm = deployed.config_map_name
    checks: dict[tuple[str, str, str, str, str], bool] = {}

    def check(verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> None:
        attrs = {key: value for key, value in (("namespace", namespace), ("name", name)) if value}
        resource, _, sub = resource.partition("/")
        if sub:
            attrs["subresource"] = sub
        checks[(verb, group, f"{resource}/{sub}" if sub else resource, namespace, name)] = can(
            deployed.worker, verb, resource, group, **attrs
        )

    for verb in ("get", "list", "watch", "patch", "update", "create", "delete"):
        check(verb, "nodes")
    check("patch", "nodes/status")
    for verb in ("list", "get", "watch", "create", "delete"):
        check(verb, "pods")
    check("list", "pods", namespace=team_ns)
    check("create", "pods", namespace=team_ns)
    check("list", "events")
    for verb in ("get", "list"):
        check(verb, "secrets", namespace=team_ns)
        check(verb, "secrets", namespace=PORTAL_NS)
    check("list", "secrets")
    check("get", "configmaps", namespace=OPERATOR_NS, name="default-vgpu-devices-config")
    check("get", "configmaps", namespace=OPERATOR_NS, name=cm)
    check("get", "configmaps", namespace=OPERATOR_NS, name="default-mig-parted-config")
    check("list", "configmaps", namespace=OPERATOR_NS)
    check("update", "configmaps", namespace=OPERATOR_NS, name=cm)
    check("list", "virtualmachineinstances", kv)
    check("watch", "virtualmachineinstances", kv)
    for verb in ("get", "create", "delete", "update", "patch"):
        check(verb, "virtualmachineinstances", kv, namespace=team_ns)
        check(verb, "virtualmachineinstances", kv, namespace=k8s_namespace)
    check("get", "virtualmachineinstances/console", "subresources.kubevirt.io", namespace=team_ns)
    check("create", "virtualmachines", kv, namespace=team_ns)
    check("list", "kubevirts", kv)
    check("patch", "kubevirts", kv, namespace="kubevirt", name="kubevirt")
    check("list", "clusterpolicies", "nvidia.com")
    check("patch", "clusterpolicies", "nvidia.com", name="cluster-policy")
    for verb in ("get", "patch", "create", "delete"):
        check(verb, "namespaces", name=team_ns)
    check("create", "serviceaccounts/token", namespace=PORTAL_NS, name="gpu-vm-portal")
    check("create", "roles", rbac, namespace=team_ns)
    check("create", "rolebindings", rbac, namespace=team_ns)
    check("create", "clusterrolebindings", rbac)
    check("escalate", "clusterroles", rbac, name="gpu-vm-portal")
    check(
        "delete",
        "validatingadmissionpolicies",
        "admissionregistration.k8s.io",
        name="gpu-vm-portal-node-labels",
    )

    allowed = sorted(key for key, ok in checks.items() if ok)
    assert allowed == sorted(
        [
            ("get", "", "nodes", "", ""),
            ("list", "", "nodes", "", ""),
            ("patch", "", "nodes", "", ""),
            ("list", "", "pods", "", ""),
            ("list", "", "pods", team_ns, ""),
            ("get", "", "configmaps", OPERATOR_NS, "default-vgpu-devices-config"),
            ("get", "", "configmaps", OPERATOR_NS, cm),
            ("list", kv, "virtualmachineinstances", "", ""),
            ("watch", kv, "virtualmachineinstances", "", ""),
            ("get", kv, "virtualmachineinstances", team_ns, ""),
            ("create", kv, "virtualmachineinstances", team_ns, ""),
            ("delete", kv, "virtualmachineinstances", team_ns, ""),
            ("list", kv, "kubevirts", "", ""),
            ("list", "nvidia.com", "clusterpolicies", "", ""),
        ]
    )
    assert (len(checks), len(checks) - len(allowed)) == (54, 40)  # the other 40 asked are denied


# --- the inventory sync as the worker ------------------------------------------------------------------


def inventory_rows() -> dict[str, list[tuple[Any, ...]]]:
    """The inventory tables as sorted, comparable tuples."""

    def rows(model: type[Model], *fields: str) -> list[tuple[Any, ...]]:
        return sorted(model._default_manager.values_list(*fields), key=repr)

    return {
        "nodes": rows(
            GpuNode,
            "name",
            "present",
            "workload_mode",
            "gpu_model",
            "gpu_count",
            "vgpu_config",
            "vgpu_config_state",
        ),
        "resources": rows(
            GpuResource, "node__name", "name", "kind", "capacity", "allocatable", "used", "stale", "permitted"
        ),
        "consumers": rows(
            GpuConsumer, "node__name", "resource_name", "count", "pod_namespace", "pod_name", "vmi_name"
        ),
        "vgpu_configs": rows(VgpuConfig, "name", "config_map", "present"),
        "permitted": rows(PermittedDevice, "kind", "resource_name", "selector", "source"),
    }


@pytest.mark.django_db
def test_inventory_sync_as_the_service_account(
    deployed: Deployed, demo: Any, devcluster: DevCluster, k8s_api: k8s_client.ApiClient
) -> None:
    # The reference: the same sync as the admin.
    with adapter_as(devcluster.kubeconfig):
        reference = run_sync("command")
    assert (reference.status, reference.error) == (SyncStatus.SUCCESS, "")
    as_admin = inventory_rows()
    assert reference.counts["nodes"] == len(as_admin["nodes"]) > 0

    with adapter_as(deployed.worker_kubeconfig):
        # deploy/base as shipped names only the operator's default ConfigMap, and this cluster's
        # ClusterPolicy names a custom one: the sync is refused until the README's patch is in.
        apply(k8s_api, operator_role([]))
        try:
            wait_for(
                lambda: (
                    not can(
                        deployed.worker,
                        "get",
                        "configmaps",
                        namespace=OPERATOR_NS,
                        name=deployed.config_map_name,
                    )
                ),
                "the Role without the custom ConfigMap in force",
            )
            refused = run_sync("command")
        finally:
            apply(k8s_api, operator_role([deployed.config_map_name]))
        assert (refused.status, refused.error) == (
            SyncStatus.FAILED,
            "cannot read the cluster: Kubernetes API 403 Forbidden: "
            f'configmaps "{deployed.config_map_name}" is forbidden: User "{deployed.username}" cannot get '
            f'resource "configmaps" in API group "" in the namespace "{OPERATOR_NS}"',
        )
        wait_for(
            lambda: can(
                deployed.worker, "get", "configmaps", namespace=OPERATOR_NS, name=deployed.config_map_name
            ),
            "the Role with the custom ConfigMap in force",
        )
        run = run_sync("command")
    # The worker sees what the admin sees: nothing added, changed or gone, the same rows.
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")
    assert {key: run.counts[key] for key in ("nodes", "added", "changed", "absent")} == {
        "nodes": len(as_admin["nodes"]),
        "added": 0,
        "changed": 0,
        "absent": 0,
    }
    rows = inventory_rows()
    assert rows == as_admin
    # Read across namespaces: the demo's VM in team-quant (a VMI and its virt-launcher pod) and the
    # spec's container pod; the ClusterPolicy's ConfigMap; the KubeVirt CR's permitted devices.
    consumers = {(c[3], c[4] if not c[5] else c[5]) for c in rows["consumers"]}
    assert {("team-quant", "quant-analyst-01"), ("team-quant", "spec-training-0")} <= consumers
    assert {v[1] for v in rows["vgpu_configs"]} == {f"{OPERATOR_NS}/{deployed.config_map_name}"}
    assert {p[3] for p in rows["permitted"]} == {"kubevirt/kubevirt"}


# --- provisioning as the worker, with a real Celery worker process -----------------------------------


@pytest.fixture
def cluster(k8s_api: k8s_client.ApiClient, k8s_namespace: str) -> Iterator[ClusterGuard]:
    """Puts back what a test changed on the shared cluster (VMIs of its namespace, node labels)."""
    guard = ClusterGuard(k8s_api, k8s_namespace)
    try:
        yield guard
    finally:
        guard.restore()


@pytest.fixture
def world(
    worker_db: str, demo: Any, deployed: Deployed, cluster: ClusterGuard, k8s_api: k8s_client.ApiClient
) -> Iterator[World]:
    """Team ``quant`` in the test's namespace with the Role ``manage.py team_rbac`` prints for it,
    the inventory synced as the worker's ServiceAccount, and the adapter of this process (reconcile,
    the watcher's calls) pointed at that identity for the whole test."""
    create_roles()
    with adapter_as(deployed.worker_kubeconfig):
        run = run_sync("command")
        assert (run.status, run.error) == (SyncStatus.SUCCESS, "")
        team = make_team(cluster.namespace, quotas={("", ""): 4, (VMMode.VGPU, "T4-16Q"): 2})
        applied = apply_team_rbac(k8s_api, deployed.worker, team.slug)
        assert [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in applied] == [
            ("Role", cluster.namespace, "gpu-vm-portal-vmis"),
            ("RoleBinding", cluster.namespace, "gpu-vm-portal-vmis"),
            ("Role", cluster.namespace, "gpu-vm-portal-web-vmis"),
            ("RoleBinding", cluster.namespace, "gpu-vm-portal-web-vmis"),
        ]
        yield World(team, make_approver(team), make_analyst(team, "alice"), make_image())


@pytest.fixture
def start_worker(
    celery_worker: Callable[..., WorkerProcess], cluster: ClusterGuard, deployed: Deployed
) -> Callable[[], WorkerProcess]:
    """A real ``celery worker`` process whose adapter uses the worker ServiceAccount's token
    (stopped before ``cluster`` cleans up)."""
    return lambda: celery_worker(PORTAL_KUBECONFIG=str(deployed.worker_kubeconfig))


def test_passthrough_request_runs_and_is_released_as_the_service_account(
    world: World, start_worker: Callable[[], WorkerProcess], k8s_api: k8s_client.ApiClient
) -> None:
    worker = start_worker()
    req = submit_a2000(world)
    approve(req, world.approver, "For the Q4 backtest.")

    reconcile_until(req, {S.RUNNING}, worker)
    assert_running_on(k8s_api, req, A2000_NODE, A2000)
    assert timeline(req) == [*head("For the Q4 backtest."), created(req), running(req)]

    # The watcher's calls (manage.py watch_vmis): LIST and WATCH across namespaces.
    selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    listed, version = k8s.list_vmis_labelled_with_version(selector)
    assert (req.vmi_namespace, req.vmi_name) in {(v.namespace, v.name) for v in listed}
    events = list(k8s.watch_vmis(selector, version, timeout_seconds=1))
    assert all(e.vmi.labels[MANAGED_BY_LABEL] == MANAGED_BY for e in events)

    # Released: the worker's vmrequests.delete_vmi deletes the VMI, reconcile marks it deleted.
    release(req, world.analyst)
    reconcile_until(req, {S.DELETED}, worker)
    assert (req.status, req.deletion_reason) == (S.DELETED, DeletionReason.RELEASED)
    assert vmis_of(k8s_api, req) == []
    assert worker.count(r"Task vmrequests\.delete_vmi\[[0-9a-f-]+\] succeeded") == 1
    assert timeline(req)[-1] == (
        "mark_deleted",
        S.DELETING,
        S.DELETED,
        "worker",
        "The VirtualMachineInstance is gone; its devices are free.",
    )


def test_vgpu_reprofile_runs_as_the_service_account(
    world: World,
    start_worker: Callable[[], WorkerProcess],
    cluster: ClusterGuard,
    k8s_api: k8s_client.ApiClient,
) -> None:
    """The label patch of a re-profile is the one node write the admission policy lets through."""
    assert cluster.keep_node(T4_NODE) == {VGPU_CONFIG: None, VGPU_STATE: "success"}
    worker = start_worker()
    req = submit_t4_16q(world)
    approve(req, world.approver)

    reconcile_until(req, {S.RUNNING}, worker)
    assert vgpu_labels(k8s_api, T4_NODE) == {VGPU_CONFIG: "T4-16Q", VGPU_STATE: "success"}
    assert_running_on(k8s_api, req, T4_NODE, T4_16Q)
    assert timeline(req) == [*head(), *reprofile_events(req), created(req), running(req)]


# --- what the worker's identity must not do: the API server's 403s -----------------------------------


@pytest.mark.django_db
def test_what_the_service_account_must_not_do(
    deployed: Deployed, demo: Any, k8s_api: k8s_client.ApiClient, k8s_namespace: str
) -> None:
    user = deployed.username
    admin_core = k8s_client.CoreV1Api(k8s_api)
    core = k8s_client.CoreV1Api(deployed.worker)
    custom = k8s_client.CustomObjectsApi(deployed.worker)
    # A team (its namespace has the Role of manage.py team_rbac) and a secret in that namespace.
    team_ns = f"t-team-{uuid.uuid4().hex[:8]}"
    admin_core.create_namespace({"metadata": {"name": team_ns}})
    team = make_team(team_ns, slug="risk")
    apply_team_rbac(k8s_api, deployed.worker, team.slug)
    admin_core.create_namespaced_secret(
        team_ns, {"metadata": {"name": "db-password"}, "stringData": {"pw": "x"}}
    )
    other_ns = k8s_namespace  # exists, but no team uses it
    vmi = vmi_manifest("intruder", other_ns, [A2000])
    node_before = admin_core.read_node(QUIET_NODE)

    # Nodes: never deleted, never created.
    assert forbidden(lambda: core.delete_node(QUIET_NODE)) == rbac_denied(
        user, "delete", "nodes", name=QUIET_NODE
    )
    assert forbidden(lambda: core.create_node({"metadata": {"name": "rogue"}})) == rbac_denied(
        user, "create", "nodes"
    )
    # Secrets: not anywhere, not even in a team's namespace or its own.
    assert forbidden(lambda: core.list_secret_for_all_namespaces()) == rbac_denied(user, "list", "secrets")
    assert forbidden(lambda: core.read_namespaced_secret("db-password", team_ns)) == rbac_denied(
        user, "get", "secrets", namespace=team_ns, name="db-password"
    )
    assert forbidden(lambda: core.list_namespaced_secret(PORTAL_NS)) == rbac_denied(
        user, "list", "secrets", namespace=PORTAL_NS
    )
    # VMIs outside team namespaces: not created, read or deleted (the adapter's own calls).
    with adapter_as(deployed.worker_kubeconfig):
        assert forbidden(lambda: k8s.create_vmi(other_ns, vmi)) == rbac_denied(
            user, "create", "virtualmachineinstances", "kubevirt.io", namespace=other_ns
        )
        assert forbidden(lambda: k8s.get_vmi("team-quant", "quant-analyst-01")) == rbac_denied(
            user,
            "get",
            "virtualmachineinstances",
            "kubevirt.io",
            namespace="team-quant",
            name="quant-analyst-01",
        )
        assert forbidden(lambda: k8s.delete_vmi("team-quant", "quant-analyst-01", "any-uid")) == rbac_denied(
            user,
            "delete",
            "virtualmachineinstances",
            "kubevirt.io",
            namespace="team-quant",
            name="quant-analyst-01",
        )
        # Nodes: only nvidia.com/vgpu.config may change (the admission policy).
        policy_says = (
            f"nodes \"{QUIET_NODE}\" is forbidden: ValidatingAdmissionPolicy 'gpu-vm-portal-node-labels' with "
            "binding 'gpu-vm-portal-node-labels' denied request: "
        )
        assert (
            forbidden(
                lambda: k8s.patch_node_labels(
                    QUIET_NODE, {"nvidia.com/gpu.workload.config": "vm-passthrough"}
                )
            )
            == policy_says + "the portal may only change the label nvidia.com/vgpu.config of a node"
        )
        assert forbidden(lambda: k8s.patch_node_labels(QUIET_NODE, {"kubernetes.io/hostname": None})) == (
            policy_says + "the portal may only remove the label nvidia.com/vgpu.config of a node"
        )
    assert (
        forbidden(
            lambda: core.patch_node(QUIET_NODE, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})
        )
        == policy_says + "the portal may not change a node's spec (taints, unschedulable, ...)"
    )
    assert forbidden(lambda: core.patch_node(QUIET_NODE, {"spec": {"unschedulable": True}})).endswith(
        "the portal may not change a node's spec (taints, unschedulable, ...)"
    )
    assert forbidden(lambda: core.patch_node(QUIET_NODE, {"metadata": {"annotations": {"x": "y"}}})) == (
        policy_says + "the portal may not change a node's annotations, finalizers or owner references"
    )
    # #14 finding 11: its value must be a config of the vGPU ConfigMap (the policy's parameter):
    # not a made-up name, not a structural key of the file, and a dot is not a wildcard
    # (T4.8Q is not T4-8Q).
    not_a_config = policy_says + (
        "the portal may only set nvidia.com/vgpu.config to a config of the vGPU devices ConfigMap, not "
    )
    for value in ("A100-made-up", "vgpu-devices", "devices", "T4.8Q"):
        assert (
            forbidden(
                lambda value=value: core.patch_node(
                    QUIET_NODE, {"metadata": {"labels": {VGPU_CONFIG: value}}}, dry_run="All"
                )
            )
            == not_a_config + value
        )
    # ... and that one label passes with real config names (dry run: nothing changes).
    for value in ("T4-16Q", "T4-custom", "A100-1-5C", "default"):
        core.patch_node(QUIET_NODE, {"metadata": {"labels": {VGPU_CONFIG: value}}}, dry_run="All")
    node_after = admin_core.read_node(QUIET_NODE)
    assert (node_after.metadata.resource_version, node_after.metadata.labels) == (
        node_before.metadata.resource_version,
        node_before.metadata.labels,
    )
    # In a team namespace: VMIs yes (dry run), but no pods, and RBAC cannot be widened.
    made = custom.create_namespaced_custom_object(
        *VMI, team_ns, "virtualmachineinstances", vmi_manifest("ok", team_ns, [A2000]), dry_run="All"
    )
    assert made["metadata"]["namespace"] == team_ns
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    assert forbidden(lambda: core.create_namespaced_pod(team_ns, pod)) == rbac_denied(
        user, "create", "pods", namespace=team_ns
    )
    binding = {
        "metadata": {"name": "more"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "gpu-vm-portal", "namespace": PORTAL_NS}],
    }
    assert forbidden(
        lambda: k8s_client.RbacAuthorizationV1Api(deployed.worker).create_namespaced_role_binding(
            team_ns, binding
        )
    ) == rbac_denied(user, "create", "rolebindings", "rbac.authorization.k8s.io", namespace=team_ns)
    # Namespaces, a team's or another: never changed (the API server names the namespace itself).
    for ns in (team_ns, other_ns):
        assert forbidden(
            lambda ns=ns: core.patch_namespace(ns, {"metadata": {"labels": {"x": "y"}}})
        ) == rbac_denied(user, "patch", "namespaces", namespace=ns, name=ns)
        assert forbidden(lambda ns=ns: core.delete_namespace(ns)) == rbac_denied(
            user, "delete", "namespaces", namespace=ns, name=ns
        )
    assert forbidden(lambda: core.create_namespace({"metadata": {"name": "rogue"}})) == rbac_denied(
        user, "create", "namespaces"
    )
    # The GPU Operator's objects and the KubeVirt CR: read only what is needed, write nothing.
    assert forbidden(lambda: core.list_namespaced_config_map(OPERATOR_NS)) == rbac_denied(
        user, "list", "configmaps", namespace=OPERATOR_NS
    )
    assert forbidden(
        lambda: core.patch_namespaced_config_map(
            deployed.config_map_name, OPERATOR_NS, {"data": {"config.yaml": ""}}
        )
    ) == rbac_denied(user, "patch", "configmaps", namespace=OPERATOR_NS, name=deployed.config_map_name)
    assert forbidden(
        lambda: custom.patch_namespaced_custom_object(*VMI, "kubevirt", "kubevirts", "kubevirt", {"spec": {}})
    ) == rbac_denied(user, "patch", "kubevirts", "kubevirt.io", namespace="kubevirt", name="kubevirt")
    assert forbidden(
        lambda: custom.patch_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": {}}
        )
    ) == rbac_denied(user, "patch", "clusterpolicies", "nvidia.com", name="cluster-policy")

    # The web's ServiceAccount: GET /version (for /readyz) and nothing else.
    web_user = f"system:serviceaccount:{PORTAL_NS}:gpu-vm-portal-web"
    assert k8s_client.VersionApi(deployed.web).get_code().git_version.startswith("v1.")
    web = k8s_client.CoreV1Api(deployed.web)
    assert forbidden(lambda: web.list_node()) == rbac_denied(web_user, "list", "nodes")
    assert forbidden(lambda: web.list_pod_for_all_namespaces()) == rbac_denied(web_user, "list", "pods")
    assert forbidden(
        lambda: k8s_client.CustomObjectsApi(deployed.web).list_cluster_custom_object(
            *VMI, "virtualmachineinstances"
        )
    ) == rbac_denied(web_user, "list", "virtualmachineinstances", "kubevirt.io")
