"""Fixtures of the inventory integration tests: the portal pointed at the session dev cluster with
the demo spec applied on top of ``devcluster/specs/test.yaml``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.test import override_settings
from kubernetes import client as k8s_client

from devcluster.server import DevCluster, default_shared_dir
from devcluster.spec import ClusterSpec, apply_spec, load_spec
from portal import k8s

T = TypeVar("T")
DEMO_SPEC = Path(__file__).resolve().parents[3] / "devcluster" / "specs" / "demo.yaml"


def wait_for[T](fn: Callable[[], T | None], what: str, timeout: float = 60.0, interval: float = 0.1) -> T:
    """Poll ``fn`` until it returns a truthy value (bounded); fail with ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def gpu_allocatable(api: k8s_client.ApiClient, name: str) -> dict[str, str]:
    """``nvidia.com/*`` entries of a node's allocatable."""
    node = k8s_client.CoreV1Api(api).read_node(name)
    return {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith("nvidia.com/")}


@pytest.fixture(scope="session")
def demo(k8s_api: k8s_client.ApiClient) -> ClusterSpec:
    """The demo spec applied on top of the session cluster, once its nodes are advertised and its
    VMI runs (idempotent: another module may have applied it already)."""
    spec = load_spec(DEMO_SPEC, default_shared_dir())
    apply_spec(k8s_api, spec)
    wait_for(
        lambda: gpu_allocatable(k8s_api, "t4-node-02").get("nvidia.com/GRID_T4-8Q") == "12", "t4-node-02"
    )
    wait_for(
        lambda: gpu_allocatable(k8s_api, "gpu-node-03").get("nvidia.com/NVIDIA_A100-20C") == "4",
        "gpu-node-03",
    )
    custom = k8s_client.CustomObjectsApi(k8s_api)

    def vmi_running() -> bool:
        v = custom.get_namespaced_custom_object(
            "kubevirt.io", "v1", "team-quant", "virtualmachineinstances", "quant-analyst-01"
        )
        return (v.get("status") or {}).get("phase") == "Running"

    wait_for(vmi_running, "quant-analyst-01 Running")
    return spec


@pytest.fixture
def portal_cluster(devcluster: DevCluster, demo: ClusterSpec) -> Iterator[DevCluster]:
    """The portal's adapter pointed at the session cluster (admin kubeconfig)."""
    with override_settings(PORTAL_KUBECONFIG=str(devcluster.kubeconfig), PORTAL_KUBE_CONTEXT=None):
        k8s.api_client.cache_clear()
        try:
            yield devcluster
        finally:
            k8s.api_client.cache_clear()


def unique(prefix: str) -> str:
    """``<prefix>-<8 hex>``: a per-test unique object name."""
    import uuid

    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_gpu_node(
    api: k8s_client.ApiClient,
    name: str,
    model: str,
    count: int,
    workload: str | None,
    labels: dict[str, str] | None = None,
) -> None:
    """Add GPU hardware the way the dev cluster expects: a bare Node with the simulator-only
    inventory annotation (devcluster/README.md); the simulator fills in labels and resources."""
    from devcluster import nodestate

    node_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if workload is not None:
        node_labels[nodestate.LABEL_WORKLOAD] = workload
    k8s_client.CoreV1Api(api).create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": node_labels,
                "annotations": {nodestate.ANN_GPUS: nodestate.inventory_annotation(model, count)},
            },
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        }
    )


def delete_node(api: k8s_client.ApiClient, name: str) -> None:
    """Delete a node; a 404 is fine."""
    from kubernetes.client.rest import ApiException

    try:
        k8s_client.CoreV1Api(api).delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def nodes_to_delete(k8s_api: k8s_client.ApiClient) -> Iterator[list[str]]:
    """Node names appended here are deleted after the test."""
    names: list[str] = []
    yield names
    for name in names:
        delete_node(k8s_api, name)
