"""Small, explicit builders of test data (CONVENTIONS "Tests").

Real cluster objects are read in place from ``../shared/samples/`` (``PORTAL_SHARED_DIR``
overrides the location); they are never copied into the repo. The builders here turn them into
the adapter's dataclasses (``portal/k8s/``) the way the adapter does, for the fields the
inventory rules read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from portal.k8s import ClusterPolicyInfo, KubeVirtInfo, NodeInfo, PermittedMdev, PermittedPci, PodInfo

REPO_DIR = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared directory (``PORTAL_SHARED_DIR``, default ``<repo>/../shared``)."""
    return Path(os.environ.get("PORTAL_SHARED_DIR", REPO_DIR.parent / "shared"))


def sample_path(name: str) -> Path:
    """Path of a file in ``<shared>/samples/``."""
    return shared_dir() / "samples" / name


def load_sample(name: str) -> Any:
    """The parsed YAML document of a sample file."""
    return yaml.safe_load(sample_path(name).read_text(encoding="utf-8"))


def sample_objects(name: str) -> list[dict[str, Any]]:
    """The objects of a sample: the items of a ``v1 List``, else the single object."""
    doc = load_sample(name)
    if isinstance(doc, dict) and doc.get("kind") == "List":
        return list(doc.get("items") or [])
    return [doc]


def node_info(obj: Mapping[str, Any], *, extra_labels: Mapping[str, str] | None = None) -> NodeInfo:
    """A ``NodeInfo`` from a Node object (as ``kubectl get node -o yaml`` prints it).

    ``extra_labels`` supplements labels a sample excerpt does not show (each test says why).
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels.update(extra_labels or {})
    ready: bool | None = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
    return NodeInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=labels,
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        capacity={str(k): str(v) for k, v in (status.get("capacity") or {}).items()},
        allocatable={str(k): str(v) for k, v in (status.get("allocatable") or {}).items()},
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=ready,
    )


def sample_node(name: str, index: int = 0, *, extra_labels: Mapping[str, str] | None = None) -> NodeInfo:
    """``node_info`` of object ``index`` of a sample file."""
    return node_info(sample_objects(name)[index], extra_labels=extra_labels)


def kubevirt_info(obj: Mapping[str, Any]) -> KubeVirtInfo:
    """A ``KubeVirtInfo`` from a KubeVirt CR (``spec.configuration.permittedHostDevices``)."""
    meta = obj.get("metadata") or {}
    config = (obj.get("spec") or {}).get("configuration") or {}
    permitted = config.get("permittedHostDevices")
    permitted_map = permitted or {}
    return KubeVirtInfo(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        permitted_configured=permitted is not None,
        pci_host_devices=tuple(
            PermittedPci(
                selector=str(e.get("pciVendorSelector") or e.get("pciDeviceSelector") or ""),
                resource_name=str(e.get("resourceName", "")),
                external_resource_provider=bool(e.get("externalResourceProvider", False)),
            )
            for e in permitted_map.get("pciHostDevices") or []
        ),
        mediated_devices=tuple(
            PermittedMdev(
                selector=str(e.get("mdevNameSelector", "")),
                resource_name=str(e.get("resourceName", "")),
                external_resource_provider=bool(e.get("externalResourceProvider", False)),
            )
            for e in permitted_map.get("mediatedDevices") or []
        ),
    )


def sample_kubevirt(name: str) -> KubeVirtInfo:
    """``kubevirt_info`` of a KubeVirt CR sample file."""
    return kubevirt_info(load_sample(name))


def config_map_data(name: str) -> dict[str, str]:
    """``data`` of a ConfigMap sample file."""
    return {str(k): str(v) for k, v in (load_sample(name).get("data") or {}).items()}


def cluster_policy(
    *,
    sandbox_enabled: bool = True,
    default_workload: str = "container",
    sandbox_mode: str = "kubevirt",
    name: str = "cluster-policy",
    vgpu_config_name: str = "default-vgpu-devices-config",
    vgpu_default_config: str = "default",
) -> ClusterPolicyInfo:
    """A ClusterPolicy; by default with sandbox workloads enabled (the VM modes need that)."""
    return ClusterPolicyInfo(
        name=name,
        sandbox_enabled=sandbox_enabled,
        default_workload=default_workload,
        sandbox_mode=sandbox_mode,
        vgpu_config_name=vgpu_config_name,
        vgpu_default_config=vgpu_default_config,
    )


def pod(
    name: str,
    *,
    node_name: str = "gpu-node-01",
    namespace: str = "default",
    requests: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    phase: str = "Running",
) -> PodInfo:
    """A non-terminal pod bound to ``node_name`` with ``nvidia.com/*`` requests."""
    return PodInfo(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        node_name=node_name,
        phase=phase,
        labels=dict(labels or {}),
        requests=dict(requests or {}),
    )


def launcher_pod(vmi: str, resource: str, *, count: int = 1, node_name: str = "gpu-node-01") -> PodInfo:
    """A virt-launcher pod of VMI ``vmi`` holding ``count`` × ``resource`` (DOMAIN.md §5.4 labels)."""
    return pod(
        f"virt-launcher-{vmi}-abcde",
        node_name=node_name,
        namespace="gpu-vms",
        requests={resource: count},
        labels={"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": vmi},
    )


# --- stored inventory rows for the capacity service (tests/unit/inventory/test_capacity.py) -----
# Imports are local so this section stays independent of the sections above.


def stored_node(name: str, mode: str = "container", **fields: Any) -> Any:
    """A present, ready ``GpuNode`` row in ``mode`` (label-decided), with ``fields`` overriding."""
    from django.utils import timezone

    from gpuinventory.models import GpuNode

    now = timezone.now()
    values: dict[str, Any] = {
        "first_seen": now,
        "last_seen": now,
        "workload_mode": mode,
        "mode_source": "label",
        "mode_label_value": mode,
        "ready": True,
        "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.workload.config": mode},
    }
    values.update(fields)
    return GpuNode.objects.create(name=name, **values)


def stored_resource(node: Any, name: str, allocatable: int, used: int = 0, **fields: Any) -> Any:
    """A ``GpuResource`` of ``node``; ``kind`` from the node's mode unless given; stale when 0."""
    from gpuinventory.models import GpuResource

    kind = {"container": "gpu", "vm-passthrough": "passthrough", "vm-vgpu": "vgpu"}[node.workload_mode]
    values: dict[str, Any] = {"kind": kind, "capacity": allocatable, "stale": allocatable == 0}
    values.update(fields)
    return GpuResource.objects.create(node=node, name=name, allocatable=allocatable, used=used, **values)


def stored_consumer(node: Any, resource_name: str, pod_name: str, count: int = 1, **fields: Any) -> Any:
    """A ``GpuConsumer`` (pod ``team-a/<pod_name>`` unless ``pod_namespace`` is given)."""
    from gpuinventory.models import GpuConsumer

    fields.setdefault("pod_namespace", "team-a")
    return GpuConsumer.objects.create(
        node=node, resource_name=resource_name, pod_name=pod_name, count=count, **fields
    )


def stored_vgpu_config(name: str, entries: list[dict[str, Any]], **fields: Any) -> Any:
    """A ``VgpuConfig`` row; ``entries`` in the stored shape
    (``[{"device_filter": [..]|None, "devices": "all"|[..], "vgpu_devices": {...}}]``)."""
    from gpuinventory.models import VgpuConfig

    fields.setdefault("config_map", "gpu-operator/default-vgpu-devices-config")
    return VgpuConfig.objects.create(name=name, entries=entries, **fields)


# --- inventory pages and read API (tests/unit/inventory/test_views.py, test_api.py) ------------
# Builds on the stored_* helpers above; imports are local for the same reason.


def stored_sync_run(status: str = "success", age_seconds: int = 5, **fields: Any) -> Any:
    """A finished ``SyncRun`` that ended ``age_seconds`` ago."""
    from datetime import timedelta

    from django.utils import timezone

    from gpuinventory.models import SyncRun

    finished = timezone.now() - timedelta(seconds=age_seconds)
    values: dict[str, Any] = {
        "started": finished - timedelta(seconds=1),
        "finished": finished,
        "status": status,
        "trigger": "beat",
        "counts": {"nodes": 0, "added": 0, "changed": 0, "absent": 0, "rows_written": 0},
    }
    values.update(fields)
    return SyncRun.objects.create(**values)


def stored_permitted_device(resource_name: str, selector: str, kind: str = "pci", **fields: Any) -> Any:
    """A ``PermittedDevice`` row (a ``permittedHostDevices`` entry of the KubeVirt CR)."""
    from gpuinventory.models import PermittedDevice

    fields.setdefault("external_resource_provider", True)
    fields.setdefault("source", "kubevirt/kubevirt")
    return PermittedDevice.objects.create(kind=kind, resource_name=resource_name, selector=selector, **fields)


def portal_user(role: str, username: str | None = None) -> Any:
    """A user in ``role``: ``analyst`` (analysts), ``approver`` (analysts + approvers), ``admin``
    (superuser and staff), ``staff`` (staff only, no group)."""
    from django.contrib.auth.models import Group, User

    admin = role == "admin"
    user = User.objects.create_user(
        username or role, password="x-Password-1", is_staff=role in {"admin", "staff"}, is_superuser=admin
    )
    groups = {"analyst": ["analysts"], "approver": ["analysts", "approvers"]}.get(role, [])
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


def stored_fleet(nodes_per_mode: int = 1) -> list[Any]:
    """``nodes_per_mode`` nodes per mode with resources, a consumer each and flags on passthrough.

    Per index: ``gpu-c-NNN`` container, ``nvidia.com/gpu`` 8 (2 used); ``gpu-p-NNN`` passthrough,
    ``nvidia.com/GA106_RTX_A2000_12GB`` 1 (1 used) plus stale ``nvidia.com/2571``, one flag;
    ``gpu-v-NNN`` vGPU, ``nvidia.com/GRID_T4-8Q`` 4 (1 used).
    """
    made = []
    for index in range(nodes_per_mode):
        node = stored_node(f"gpu-c-{index:03d}", "container", gpu_model="NVIDIA-B200", gpu_count=8)
        stored_resource(node, "nvidia.com/gpu", 8, used=2, model="NVIDIA-B200")
        stored_consumer(node, "nvidia.com/gpu", f"train-{index}", 2)
        made.append(node)
        node = stored_node(
            f"gpu-p-{index:03d}",
            "vm-passthrough",
            gpu_model="RTX A2000 12GB",
            gpu_count=1,
            flags=[{"code": "stale_resource", "params": {"resource": "nvidia.com/2571"}}],
        )
        stored_resource(
            node, "nvidia.com/GA106_RTX_A2000_12GB", 1, used=1, model="RTX A2000 12GB", pci_device_id="2571"
        )
        stored_resource(node, "nvidia.com/2571", 0, pci_device_id="2571")
        stored_consumer(
            node,
            "nvidia.com/GA106_RTX_A2000_12GB",
            f"virt-launcher-vm{index}-abcde",
            1,
            vmi_name=f"vm{index}",
        )
        made.append(node)
        node = stored_node(
            f"gpu-v-{index:03d}",
            "vm-vgpu",
            gpu_model="Tesla T4",
            gpu_count=2,
            vgpu_config="T4-8Q",
            vgpu_config_state="success",
        )
        stored_resource(node, "nvidia.com/GRID_T4-8Q", 4, used=1, model="T4", vgpu_type="T4-8Q", series="Q")
        made.append(node)
    return made
