# mypy: disallow-any-generics, disallow-subclassing-any, disallow-untyped-calls, disallow-untyped-defs
# mypy: disallow-incomplete-defs, disallow-untyped-decorators, warn-unused-ignores, warn-return-any
# mypy: no-implicit-reexport, strict-equality, extra-checks
"""The GPU Operator's ClusterPolicy, KubeVirt CRs and ConfigMaps (the vGPU Device Manager's config)."""

from __future__ import annotations

from portal.k8s import client
from portal.k8s.errors import K8sNotFound
from portal.k8s.parsing import as_dict, parse_cluster_policy, parse_kubevirt, str_map
from portal.k8s.raw import list_raw
from portal.k8s.types import ClusterPolicyInfo, KubeVirtInfo


def get_cluster_policy() -> ClusterPolicyInfo | None:
    """The GPU Operator's ClusterPolicy: listed, the first by name (DOMAIN.md §1, pitfall 14).

    Returns:
        The policy, or None when there is none (or the CRD is not installed).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    try:
        items = list_raw("clusterpolicies")
    except K8sNotFound:
        return None
    if not items:
        return None
    items.sort(key=lambda item: str(as_dict(item.get("metadata")).get("name", "")))
    return parse_cluster_policy(items[0])


def list_kubevirts() -> list[KubeVirtInfo]:
    """Every KubeVirt CR of every namespace (normally one, ``kubevirt/kubevirt``).

    Returns:
        The CRs sorted by namespace/name; [] when the KubeVirt CRD is not installed (404).

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    try:
        items = [parse_kubevirt(item) for item in list_raw("kubevirts")]
    except K8sNotFound:
        return []
    return sorted(items, key=lambda kv: (kv.namespace, kv.name))


def read_config_map_data(namespace: str, name: str) -> dict[str, str] | None:
    """The ``data`` of a ConfigMap.

    Args:
        namespace: e.g. ``settings.PORTAL_GPU_OPERATOR_NAMESPACE``.
        name: e.g. ``ClusterPolicyInfo.vgpu_config_name``.

    Returns:
        ``data`` as a dict (``{}`` when the ConfigMap has none), or None when it does not exist.

    Raises:
        K8sNotConfigured, K8sForbidden, K8sTransientError: see :func:`portal.k8s.errors.translate`.
    """
    try:
        obj = client.fetch(client.core_v1().read_namespaced_config_map, name, namespace)
    except K8sNotFound:
        return None
    return str_map(obj.get("data"))
