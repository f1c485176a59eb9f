"""Fixtures of the deployment tests: the RBAC of ``deploy/base`` applied to the session dev
cluster, and tokens of its ServiceAccounts from the TokenRequest API.

Re-exported from the other integration tiers: ``demo`` (the demo spec on the session cluster) and
the real-Celery-worker fixtures ``worker_db``, ``celery_queue``, ``celery_worker``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import override_settings
from kubernetes import client as k8s_client
from kubernetes.client.rest import ApiException

from devcluster.server import DevCluster, kubeconfig_dict
from portal import k8s
from tests.integration.inventory.conftest import demo, wait_for
from tests.integration.vmrequests.conftest import celery_queue, celery_worker, worker_db

__all__ = ["celery_queue", "celery_worker", "demo", "worker_db"]

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "base"
PORTAL_NS = "gpu-vm-portal"
WORKER_SA = "gpu-vm-portal"
WEB_SA = "gpu-vm-portal-web"
OPERATOR_NS = "gpu-operator"
#: A node of devcluster/specs/test.yaml that no test changes (used to probe the admission policy).
QUIET_NODE = "spec-container-01"
#: Objects whose kind this module can create: kind -> (API class, snake name, namespaced).
KINDS: dict[str, tuple[Callable[[k8s_client.ApiClient], Any], str, bool]] = {
    "Namespace": (k8s_client.CoreV1Api, "namespace", False),
    "ServiceAccount": (k8s_client.CoreV1Api, "service_account", True),
    "ConfigMap": (k8s_client.CoreV1Api, "config_map", True),
    "Service": (k8s_client.CoreV1Api, "service", True),
    "Pod": (k8s_client.CoreV1Api, "pod", True),
    "Deployment": (k8s_client.AppsV1Api, "deployment", True),
    "Job": (k8s_client.BatchV1Api, "job", True),
    "NetworkPolicy": (k8s_client.NetworkingV1Api, "network_policy", True),
    "ClusterRole": (k8s_client.RbacAuthorizationV1Api, "cluster_role", False),
    "ClusterRoleBinding": (k8s_client.RbacAuthorizationV1Api, "cluster_role_binding", False),
    "Role": (k8s_client.RbacAuthorizationV1Api, "role", True),
    "RoleBinding": (k8s_client.RbacAuthorizationV1Api, "role_binding", True),
    "ValidatingAdmissionPolicy": (
        k8s_client.AdmissionregistrationV1Api,
        "validating_admission_policy",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        k8s_client.AdmissionregistrationV1Api,
        "validating_admission_policy_binding",
        False,
    ),
}
#: The kinds the fixture ``deployed`` creates for real (the identities and their rights).
RBAC_KINDS = (
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def base_objects() -> list[dict[str, Any]]:
    """Every object of the files deploy/base/kustomization.yaml lists, in its order (parsed with
    PyYAML: what ``kubectl apply -k`` sends, since the kustomization adds no transformer but the
    image tag, which is already the manifests' own)."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        objects += [doc for doc in yaml.safe_load_all((BASE / name).read_text()) if doc is not None]
    return objects


def create(api: k8s_client.ApiClient, obj: dict[str, Any], *, dry_run: bool = False) -> Any:
    """Create ``obj`` with strict server-side field validation (``dryRun=All`` when asked).

    Raises:
        ApiException: as the API server answered (409 when it exists).
    """
    cls, snake, namespaced = KINDS[obj["kind"]]
    kwargs: dict[str, Any] = {"body": obj, "field_validation": "Strict"}
    if dry_run:
        kwargs["dry_run"] = "All"
    if namespaced:
        return getattr(cls(api), f"create_namespaced_{snake}")(obj["metadata"]["namespace"], **kwargs)
    return getattr(cls(api), f"create_{snake}")(**kwargs)


def read(api: k8s_client.ApiClient, kind: str, name: str, namespace: str | None = None) -> Any:
    """Read one object; None when it does not exist."""
    cls, snake, namespaced = KINDS[kind]
    try:
        if namespaced:
            return getattr(cls(api), f"read_namespaced_{snake}")(name, namespace)
        return getattr(cls(api), f"read_{snake}")(name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def apply(api: k8s_client.ApiClient, obj: dict[str, Any]) -> None:
    """Create ``obj``, or replace it (strategic merge patch; lists such as ``rules`` are replaced
    whole) when it exists."""
    try:
        create(api, obj)
    except ApiException as exc:
        if exc.status != 409:
            raise
        cls, snake, namespaced = KINDS[obj["kind"]]
        name = obj["metadata"]["name"]
        if namespaced:
            getattr(cls(api), f"patch_namespaced_{snake}")(name, obj["metadata"]["namespace"], obj)
        else:
            getattr(cls(api), f"patch_{snake}")(name, obj)


def can(api: k8s_client.ApiClient, verb: str, resource: str, group: str = "", **attrs: str) -> bool:
    """SelfSubjectAccessReview: may the identity of ``api`` do ``verb`` on ``resource``?

    ``attrs``: ``namespace``, ``name``, ``subresource`` of the resource attributes.
    """
    review = k8s_client.V1SelfSubjectAccessReview(
        spec=k8s_client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=k8s_client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, **attrs
            )
        )
    )
    result = k8s_client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(result.status.allowed)


def operator_role(extra_names: list[str]) -> dict[str, Any]:
    """deploy/base's Role in the GPU Operator namespace, with ``extra_names`` appended to its
    ``resourceNames`` (deploy/README.md: the ClusterPolicy's custom vGPU ConfigMap)."""
    (role,) = [o for o in base_objects() if o["kind"] == "Role"]
    role["rules"][0]["resourceNames"] += extra_names
    return role


def policy_binding(config_map_name: str) -> dict[str, Any]:
    """deploy/base's ValidatingAdmissionPolicyBinding with its ``paramRef`` naming the cluster's
    vGPU ConfigMap (deploy/README.md: change it with the Role's ``resourceNames``)."""
    (binding,) = [o for o in base_objects() if o["kind"] == "ValidatingAdmissionPolicyBinding"]
    binding["spec"]["paramRef"]["name"] = config_map_name or binding["spec"]["paramRef"]["name"]
    return binding


def cluster_policy_config_name(api: k8s_client.ApiClient) -> str:
    """The vGPU ConfigMap the ClusterPolicy names (``""`` for the operator's default)."""
    (policy,) = k8s_client.CustomObjectsApi(api).list_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies"
    )["items"]
    return str(((policy["spec"].get("vgpuDeviceManager") or {}).get("config") or {}).get("name") or "")


@dataclass
class Deployed:
    """The RBAC of deploy/base on the session cluster, and clients of its two ServiceAccounts."""

    worker: k8s_client.ApiClient  # ServiceAccount gpu-vm-portal (worker, watcher)
    web: k8s_client.ApiClient  # ServiceAccount gpu-vm-portal-web (web, beat, migrate)
    worker_kubeconfig: Path  # a kubeconfig file with the worker's token
    config_map_name: str  # the vGPU ConfigMap of the cluster's ClusterPolicy
    username: str = f"system:serviceaccount:{PORTAL_NS}:{WORKER_SA}"


def service_account_token(api: k8s_client.ApiClient, name: str) -> str:
    """A one-hour token of ServiceAccount ``gpu-vm-portal/<name>`` from the TokenRequest API."""
    request = k8s_client.AuthenticationV1TokenRequest(
        spec=k8s_client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    status = (
        k8s_client.CoreV1Api(api).create_namespaced_service_account_token(name, PORTAL_NS, request).status
    )
    return str(status.token)


@pytest.fixture(scope="module")
def deployed(
    devcluster: DevCluster, k8s_api: k8s_client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Deployed:
    """Create (or update) the Namespace, ServiceAccounts, ClusterRole(Binding), the GPU Operator
    Role(Binding) and the node-label admission policy of deploy/base as the admin; the Role and
    the policy binding's paramRef get the cluster's custom vGPU ConfigMap name as deploy/README.md
    tells admins to. Then tokens of
    both ServiceAccounts, once RBAC and the policy are in force."""
    config_map_name = cluster_policy_config_name(k8s_api)
    for obj in base_objects():
        if obj["kind"] == "Role":
            obj = operator_role([config_map_name])
        elif obj["kind"] == "ValidatingAdmissionPolicyBinding":
            obj = policy_binding(config_map_name)
        if obj["kind"] in RBAC_KINDS:
            apply(k8s_api, obj)
    worker_token = service_account_token(k8s_api, WORKER_SA)
    worker = devcluster.api_client_for_token(worker_token)
    web = devcluster.api_client_for_token(service_account_token(k8s_api, WEB_SA))
    path = tmp_path_factory.mktemp("deploy") / "worker-kubeconfig"
    path.write_text(
        yaml.safe_dump(
            kubeconfig_dict(devcluster.server, devcluster.ca_cert.read_bytes(), WORKER_SA, worker_token)
        )
    )
    # The RBAC authorizer and the admission plugin both work from watch caches: wait until the
    # bindings and the policy are live (a dry-run patch of another label is then refused).
    wait_for(lambda: can(worker, "list", "nodes"), "the ClusterRoleBinding in force")
    wait_for(
        lambda: can(worker, "get", "configmaps", namespace=OPERATOR_NS, name=config_map_name),
        "the GPU Operator RoleBinding in force",
    )

    def policy_denies() -> bool:
        try:
            k8s_client.CoreV1Api(worker).patch_node(
                QUIET_NODE, {"metadata": {"labels": {"example.com/probe": "x"}}}, dry_run="All"
            )
        except ApiException as exc:
            return exc.status == 403
        return False

    wait_for(policy_denies, "the node-label ValidatingAdmissionPolicy in force", timeout=120)
    return Deployed(worker=worker, web=web, worker_kubeconfig=path, config_map_name=config_map_name)


@contextlib.contextmanager
def adapter_as(kubeconfig: Path) -> Iterator[None]:
    """Point the portal's adapter (``portal/k8s/``) at ``kubeconfig`` for the duration."""
    with override_settings(PORTAL_KUBECONFIG=str(kubeconfig), PORTAL_KUBE_CONTEXT=None):
        k8s.api_client.cache_clear()
        try:
            yield
        finally:
            k8s.api_client.cache_clear()


def apply_team_rbac(
    api: k8s_client.ApiClient, worker: k8s_client.ApiClient, slug: str
) -> list[dict[str, Any]]:
    """Apply what ``manage.py team_rbac --team <slug>`` prints, as the admin; wait until the
    worker identity may create VMIs there. Returns the applied objects."""
    import io

    out = io.StringIO()
    call_command("team_rbac", "--team", slug, stdout=out)
    objects = [doc for doc in yaml.safe_load_all(out.getvalue()) if doc is not None]
    for obj in objects:
        apply(api, obj)
    namespace = objects[0]["metadata"]["namespace"]
    wait_for(
        lambda: can(worker, "create", "virtualmachineinstances", "kubevirt.io", namespace=namespace),
        f"the team RoleBinding in {namespace} in force",
    )
    return objects
