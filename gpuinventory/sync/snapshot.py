"""The sync's one read of the cluster (docs/inventory.md §3, step 2)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from portal import k8s


@dataclass
class Snapshot:
    """Everything one sync reads from the cluster (plain adapter dataclasses)."""

    version: str
    nodes: list[k8s.NodeInfo]
    pods: list[k8s.PodInfo]
    vmis: list[k8s.VmiInfo]
    policy: k8s.ClusterPolicyInfo | None
    kubevirts: list[k8s.KubeVirtInfo]
    config_map_name: str
    config_map_data: dict[str, str] | None


def take_snapshot() -> Snapshot:
    """Read the cluster once: version, every LIST, and the vGPU ConfigMap.

    Raises:
        k8s.K8sError: any adapter error (not configured, forbidden, unreachable, ...).
    """
    version = k8s.server_version().git_version
    nodes = k8s.list_nodes()
    pods = k8s.list_pods()
    vmis = k8s.list_vmis()
    policy = k8s.get_cluster_policy()
    kubevirts = k8s.list_kubevirts()
    cm_name = policy.vgpu_config_name if policy else k8s.ClusterPolicyInfo(name="").vgpu_config_name
    cm_data = k8s.read_config_map_data(settings.PORTAL_GPU_OPERATOR_NAMESPACE, cm_name)
    return Snapshot(version, nodes, pods, vmis, policy, kubevirts, cm_name, cm_data)
