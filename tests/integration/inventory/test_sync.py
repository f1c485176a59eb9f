"""The inventory sync against the real dev cluster (kube-apiserver + simulator) with the demo spec.

Each test gets an empty database and syncs the session cluster, which holds ``specs/test.yaml`` plus
``specs/demo.yaml``. Nodes and VMIs a test changes are its own (unique names), so other tests in
the session only add nodes this module does not assert on.
"""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone
from kubernetes import client as k8s_client

from devcluster.server import DevCluster
from devcluster.spec import vmi_manifest
from gpuinventory import capacity
from gpuinventory.choices import SyncStatus
from gpuinventory.models import GpuConsumer, GpuNode, GpuResource, PermittedDevice, SyncRun, VgpuConfig
from gpuinventory.sync import lock_ttl_seconds, run_sync
from portal import k8s
from tests.integration.inventory.conftest import create_gpu_node, gpu_allocatable, unique, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

A100_PT = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
DEMO_AND_TEST_NODES = {
    "a2000-node-01",
    "b200-node-01",
    "gpu-node-01",
    "gpu-node-02",
    "gpu-node-03",
    "t4-node-01",
    "t4-node-02",
    "spec-container-01",
    "spec-passthrough-01",
    "spec-vgpu-01",
    "spec-vgpu-a100-01",
}
RESOURCE_FIELDS = ("kind", "model", "pci_device_id", "vgpu_type", "framebuffer_gb", "series")
COUNT_FIELDS = ("capacity", "allocatable", "used", "stale", "permitted")


def ok_sync(trigger: str = "command") -> SyncRun:
    run = run_sync(trigger)
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")
    return run


def resources(node: str) -> dict[str, tuple[Any, ...]]:
    return {
        r.name: tuple(getattr(r, f) for f in (*RESOURCE_FIELDS, *COUNT_FIELDS))
        for r in GpuResource.objects.filter(node__name=node)
    }


def counts(node: str) -> dict[str, tuple[int, int, bool]]:
    """resource → (allocatable, used, stale)."""
    return {r.name: (r.allocatable, r.used, r.stale) for r in GpuResource.objects.filter(node__name=node)}


def consumers(node: str) -> list[tuple[str, int, str, str, str]]:
    return [
        (c.resource_name, c.count, c.pod_namespace, c.pod_name, c.vmi_name)
        for c in GpuConsumer.objects.filter(node__name=node)
    ]


def test_demo_inventory(portal_cluster: DevCluster) -> None:
    run = ok_sync()
    present = set(GpuNode.objects.filter(present=True).values_list("name", flat=True))
    assert present >= DEMO_AND_TEST_NODES
    assert run.counts == {
        "nodes": len(present),
        "added": len(present),
        "changed": 0,
        "absent": 0,
        "rows_written": run.counts["rows_written"],
    }
    assert run.warnings == []
    assert run.cluster_version == "v1.37.2"
    assert set(run.timings) == {"list_ms", "derive_ms", "apply_ms", "total_ms"}
    assert run.trigger == "command" and run.finished is not None

    b200 = GpuNode.objects.get(name="b200-node-01")
    assert (b200.workload_mode, b200.mode_source, b200.mode_label_value, b200.transitioning) == (
        "container",
        "cluster_default",
        "",
        False,
    )
    assert (b200.gpu_model, b200.gpu_count, b200.gpu_memory_mib, b200.ready, b200.flags) == (
        "B200",  # GFD's NVIDIA-B200 under the PCI table's display name (naming.display_model_for_gfd)
        8,
        183359,
        True,
        [],
    )
    assert resources("b200-node-01") == {
        "nvidia.com/gpu": ("gpu", "B200", "", "", None, "", 8, 8, 6, False, None),
    }
    assert b200.labels["nvidia.com/gpu.product"] == "NVIDIA-B200"  # the raw product is kept
    assert consumers("b200-node-01") == [
        ("nvidia.com/gpu", 4, "team-research", "llm-pretrain-0", ""),
        ("nvidia.com/gpu", 2, "team-research", "llm-pretrain-1", ""),
    ]

    a2000 = GpuNode.objects.get(name="a2000-node-01")
    assert (a2000.workload_mode, a2000.mode_source, a2000.gpu_model, a2000.gpu_count) == (
        "vm-passthrough",
        "label",
        "RTX A2000 12GB",
        1,
    )
    assert a2000.flags == [
        {"code": "stale_resource", "params": {"resource": "nvidia.com/2571"}},
        {"code": "stale_resource", "params": {"resource": "nvidia.com/gpu"}},
    ]
    assert resources("a2000-node-01") == {
        "nvidia.com/2571": ("passthrough", "RTX A2000 12GB", "2571", "", None, "", 0, 0, 0, True, False),
        "nvidia.com/GA106_RTX_A2000_12GB": (
            "passthrough",
            "RTX A2000 12GB",
            "2571",
            "",
            None,
            "",
            1,
            1,
            0,
            False,
            True,
        ),
        "nvidia.com/gpu": ("gpu", "", "", "", None, "", 0, 0, 0, True, None),
    }

    t4_default = GpuNode.objects.get(name="t4-node-01")
    assert (t4_default.workload_mode, t4_default.gpu_model, t4_default.gpu_count) == (
        "vm-vgpu",
        "Tesla T4",
        8,
    )
    assert (t4_default.vgpu_config, t4_default.vgpu_config_state) == ("", "success")
    assert resources("t4-node-01") == {
        T4_8Q: ("vgpu", "Tesla T4", "", "T4-8Q", Decimal("8.0"), "Q", 16, 16, 0, False, True),
        "nvidia.com/gpu": ("gpu", "", "", "", None, "", 0, 0, 0, True, None),
    }
    t4_custom = GpuNode.objects.get(name="t4-node-02")
    assert (t4_custom.vgpu_config, t4_custom.vgpu_config_state) == ("T4-custom", "success")
    assert counts("t4-node-02") == {
        "nvidia.com/GRID_T4-16C": (1, 0, False),
        "nvidia.com/GRID_T4-8C": (2, 0, False),
        T4_8Q: (12, 0, False),
        "nvidia.com/gpu": (0, 0, True),
    }
    assert counts("gpu-node-03") == {"nvidia.com/NVIDIA_A100-20C": (4, 0, False)}
    assert consumers("gpu-node-01") == [("nvidia.com/gpu", 1, "team-quant", "risk-model-training", "")]

    # The demo VMI runs on one of the two A100 passthrough nodes (the simulated scheduler picks).
    (vmi,) = GpuConsumer.objects.filter(vmi_name="quant-analyst-01")
    assert vmi.node.name in {"gpu-node-02", "spec-passthrough-01"}
    assert (vmi.resource_name, vmi.count, vmi.pod_namespace) == (A100_PT, 1, "team-quant")
    assert re.fullmatch(r"virt-launcher-quant-analyst-01-[a-z0-9]{5}", vmi.pod_name)

    # vGPU configs: the ClusterPolicy's custom ConfigMap merged over the operator default (711 + T4-custom).
    assert VgpuConfig.objects.filter(present=True).count() == 712
    custom = VgpuConfig.objects.get(name="T4-custom")
    assert custom.config_map == "gpu-operator/custom-vgpu-config"
    assert custom.entries == [
        {"device_filter": None, "devices": [0], "vgpu_devices": {"T4-16C": 1}},
        {"device_filter": None, "devices": [1], "vgpu_devices": {"T4-8C": 2}},
        {"device_filter": None, "devices": [2], "vgpu_devices": {"T4-8Q": 2}},
        {"device_filter": None, "devices": [3], "vgpu_devices": {"T4-8Q": 2}},
    ]
    default_t4 = [
        e for e in VgpuConfig.objects.get(name="default").entries if e["device_filter"] == ["0x1EB810DE"]
    ]
    assert default_t4 == [{"device_filter": ["0x1EB810DE"], "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]

    # Permitted devices: the session cluster's KubeVirt CR (from specs/test.yaml, not the A10).
    pci = set(
        PermittedDevice.objects.filter(kind="pci").values_list(
            "resource_name", "selector", "external_resource_provider", "source", "present"
        )
    )
    assert pci == {
        (A100_PT, "10DE:20F1", True, "kubevirt/kubevirt", True),
        ("nvidia.com/GA106_RTX_A2000_12GB", "10DE:2571", True, "kubevirt/kubevirt", True),
    }
    assert PermittedDevice.objects.get(kind="mdev", resource_name=T4_8Q).selector == "GRID T4-8Q"
    assert not PermittedDevice.objects.filter(resource_name__contains="A10-").exists()

    # The capacity service over what was stored.
    assert capacity.free_on_node("b200-node-01") == {"nvidia.com/gpu": 2}
    assert capacity.free_on_node("t4-node-02") == {
        "nvidia.com/GRID_T4-16C": 1,
        "nvidia.com/GRID_T4-8C": 2,
        T4_8Q: 12,
    }


def test_no_change_resync_writes_zero_rows(portal_cluster: DevCluster) -> None:
    first = ok_sync()
    assert first.counts["rows_written"] > 0
    before = {n.name: n.updated for n in GpuNode.objects.all()}
    second = ok_sync("beat")
    assert second.counts == {
        "nodes": first.counts["nodes"],
        "added": 0,
        "changed": 0,
        "absent": 0,
        "rows_written": 0,
    }
    assert {n.name: n.updated for n in GpuNode.objects.all()} == before
    assert SyncRun.objects.filter(status=SyncStatus.SUCCESS).count() == 2


def test_node_going_absent_is_kept_with_last_seen(
    portal_cluster: DevCluster, k8s_api: k8s_client.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("inv-gone")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "T4", 2, "vm-vgpu")
    wait_for(lambda: gpu_allocatable(k8s_api, name) == {T4_8Q: "4"}, "T4 node advertised")
    first = ok_sync()
    node = GpuNode.objects.get(name=name)
    assert (node.present, node.first_seen, node.last_seen) == (True, first.started, first.started)
    assert counts(name) == {T4_8Q: (4, 0, False)}
    second = ok_sync()  # nothing changed: last_seen is not rewritten
    assert second.counts["rows_written"] == 0

    k8s_client.CoreV1Api(k8s_api).delete_node(name)
    third = ok_sync()
    assert (third.counts["absent"], third.counts["nodes"]) == (1, first.counts["nodes"] - 1)
    assert third.counts["rows_written"] == 1  # only the node row; its resources are kept
    node.refresh_from_db()
    # Last listed by the second sync (the last successful one before it vanished).
    assert (node.present, node.first_seen, node.last_seen) == (False, first.started, second.started)
    assert counts(name) == {T4_8Q: (4, 0, False)}
    assert capacity.free_on_node(name) == {}  # absent nodes offer nothing
    assert ok_sync().counts["absent"] == 0  # already absent: not counted again, nothing written


def test_paused_operands_show_transitioning_then_settle(
    portal_cluster: DevCluster, k8s_api: k8s_client.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("inv-pause")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "T4", 2, "vm-vgpu")
    wait_for(lambda: gpu_allocatable(k8s_api, name) == {T4_8Q: "4"}, "T4 node advertised")
    ok_sync()
    assert GpuNode.objects.get(name=name).transitioning is False

    # What the vGPU Device Manager does during a change (DOMAIN.md §3 step 3): the simulated
    # operator leaves paused values alone and the paused plugin stops advertising.
    paused = {
        "nvidia.com/gpu.deploy.sandbox-device-plugin": "paused-for-vgpu-change",
        "nvidia.com/gpu.deploy.sandbox-validator": "paused-for-vgpu-change",
    }
    info = k8s.patch_node_labels(name, paused)
    assert {k: info.labels[k] for k in paused} == paused
    wait_for(lambda: gpu_allocatable(k8s_api, name) == {}, "vGPUs withdrawn")
    run = ok_sync()
    assert run.counts["changed"] == 1
    node = GpuNode.objects.get(name=name)
    assert node.transitioning is True
    assert "transitioning" in [f["code"] for f in node.flags]
    # Re-profiling: the GPUs did not change, so the stored identity stays and no annotation is asked for.
    assert (node.gpu_model, node.gpu_count) == ("Tesla T4", 2)
    assert not {"gpu_count_unknown", "gpu_model_unknown"} & {f["code"] for f in node.flags}
    assert next(f for f in node.flags if f["code"] == "transitioning")["params"]["cause"] == "vgpu_paused"
    # The simulated kubelet drops the paused plugin's resource (a real one may keep it at 0 until it
    # restarts, which the sync stores as stale): the row goes with it.
    assert (run.counts["rows_written"], counts(name)) == (2, {})
    assert [c.node for c in capacity.nodes_offering(T4_8Q) if c.node == name] == []

    k8s.patch_node_labels(name, dict.fromkeys(paused, "true"))
    wait_for(lambda: gpu_allocatable(k8s_api, name).get(T4_8Q) == "4", "vGPUs back")
    ok_sync()
    node.refresh_from_db()
    assert node.transitioning is False
    assert counts(name) == {T4_8Q: (4, 0, False)}


def test_vgpu_relabel_goes_through_pending_to_the_new_profile(
    portal_cluster: DevCluster, k8s_api: k8s_client.ApiClient, nodes_to_delete: list[str]
) -> None:
    name = unique("inv-reprofile")
    nodes_to_delete.append(name)
    create_gpu_node(k8s_api, name, "T4", 2, "vm-vgpu")
    wait_for(lambda: gpu_allocatable(k8s_api, name) == {T4_8Q: "4"}, "T4 node advertised")
    ok_sync()
    (candidate,) = [c for c in capacity.reprofile_candidates("T4-16Q") if c.node == name]
    assert (candidate.config, candidate.instances, dict(candidate.offers)) == ("T4-16Q", 2, {"T4-16Q": 2})

    k8s.patch_node_labels(name, {"nvidia.com/vgpu.config": candidate.config})

    def settled() -> GpuNode | None:
        ok_sync()
        node = GpuNode.objects.get(name=name)
        return (
            node
            if node.vgpu_config_state == "success" and counts(name).get("nvidia.com/GRID_T4-16Q")
            else None
        )

    node = wait_for(settled, "the new profile synced", interval=0.2)
    assert (node.vgpu_config, node.transitioning) == ("T4-16Q", False)
    # The old type is gone from the node (the simulated kubelet keeps no zero entry for it).
    assert counts(name) == {"nvidia.com/GRID_T4-16Q": (2, 0, False)}


def test_usage_rises_when_a_vmi_launcher_pod_is_bound(
    portal_cluster: DevCluster, k8s_api: k8s_client.ApiClient, k8s_namespace: str, nodes_to_delete: list[str]
) -> None:
    name = unique("inv-pt")
    nodes_to_delete.append(name)
    pool = unique("pool")
    create_gpu_node(
        k8s_api, name, "A100-PCIE-40GB", 2, "vm-passthrough", labels={"test.inventory/pool": pool}
    )
    wait_for(lambda: gpu_allocatable(k8s_api, name) == {A100_PT: "2"}, "passthrough node advertised")
    ok_sync()
    assert counts(name) == {A100_PT: (2, 0, False)}
    assert consumers(name) == []

    custom = k8s_client.CustomObjectsApi(k8s_api)
    vmi = vmi_manifest("inv-vm-01", k8s_namespace, [A100_PT], {"test.inventory/pool": pool})
    custom.create_namespaced_custom_object(
        "kubevirt.io", "v1", k8s_namespace, "virtualmachineinstances", vmi, field_validation="Strict"
    )
    try:

        def running() -> bool:
            v = custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", k8s_namespace, "virtualmachineinstances", "inv-vm-01"
            )
            return (v.get("status") or {}).get("phase") == "Running"

        wait_for(running, "VMI Running")
        run = ok_sync()
        assert (run.counts["changed"], run.counts["added"]) == (1, 0)
        # One resource row updated and one consumer row inserted.
        assert run.counts["rows_written"] == 2
        assert counts(name) == {A100_PT: (2, 1, False)}
        ((resource, count, namespace, pod, vmi_name),) = consumers(name)
        assert (resource, count, namespace, vmi_name) == (A100_PT, 1, k8s_namespace, "inv-vm-01")
        assert re.fullmatch(r"virt-launcher-inv-vm-01-[a-z0-9]{5}", pod)
        assert capacity.free_on_node(name) == {A100_PT: 1}
    finally:
        custom.delete_namespaced_custom_object(
            "kubevirt.io", "v1", k8s_namespace, "virtualmachineinstances", "inv-vm-01"
        )


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path, devcluster: DevCluster) -> Path:
    """A kubeconfig like the session's, but for https://127.0.0.1:1 (connection refused)."""
    config = yaml.safe_load(devcluster.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    path = tmp_path / "kubeconfig-unreachable"
    path.write_text(yaml.safe_dump(config))
    return path


def _snapshot() -> list[tuple[Any, ...]]:
    return [
        *GpuNode.objects.values_list("name", "present", "last_seen", "updated", "workload_mode"),
        *GpuResource.objects.values_list("node__name", "name", "allocatable", "used"),
        *GpuConsumer.objects.values_list("node__name", "pod_name", "count"),
    ]


def test_unreachable_cluster_fails_and_keeps_the_last_good_rows(
    portal_cluster: DevCluster, unreachable_kubeconfig: Path
) -> None:
    good = ok_sync()
    before = _snapshot()
    with override_settings(PORTAL_KUBECONFIG=str(unreachable_kubeconfig)):
        k8s.api_client.cache_clear()
        failed = run_sync("beat")
    k8s.api_client.cache_clear()
    assert failed.status == SyncStatus.FAILED
    assert failed.error.startswith("cannot read the cluster: Kubernetes API unreachable: MaxRetryError")
    assert "127.0.0.1" in failed.error and "port=1" in failed.error
    assert (failed.counts, failed.warnings, failed.cluster_version) == ({}, [], "")
    assert set(failed.timings) == {"total_ms"}
    assert _snapshot() == before
    assert SyncRun.objects.filter(status=SyncStatus.RUNNING).count() == 0  # the lock is released
    assert SyncRun.objects.latest() == failed
    assert SyncRun.objects.filter(status=SyncStatus.SUCCESS).get() == good


def test_overlap_lock(portal_cluster: DevCluster, caplog: pytest.LogCaptureFixture) -> None:
    holder = SyncRun.objects.create(started=timezone.now(), trigger="beat", status=SyncStatus.RUNNING)
    with caplog.at_level("INFO", logger="gpuinventory.sync"):
        lost = run_sync("manual")
    assert lost.pk == holder.pk and lost.status == SyncStatus.RUNNING
    assert SyncRun.objects.count() == 1 and GpuNode.objects.count() == 0
    assert f"inventory sync (manual) skipped: sync {holder.pk} (beat) running since" in caplog.text
    with pytest.raises(CommandError, match=r"^sync skipped: another sync \(beat, started .*\) is running$"):
        call_command("sync_inventory")

    # A lock older than the Celery hard time limit + 60 s is abandoned (the worker was killed).
    SyncRun.objects.filter(pk=holder.pk).update(
        started=timezone.now() - timedelta(seconds=lock_ttl_seconds() + 5)
    )
    won = ok_sync("manual")
    assert won.pk != holder.pk
    holder.refresh_from_db()
    assert holder.status == SyncStatus.FAILED
    assert re.fullmatch(r"abandoned: still running after \d+ s \(worker killed\?\); taken over", holder.error)


def test_sync_inventory_command_in_process(portal_cluster: DevCluster, unreachable_kubeconfig: Path) -> None:
    from io import StringIO

    out = StringIO()
    call_command("sync_inventory", stdout=out)
    run = SyncRun.objects.latest()
    c = run.counts
    assert out.getvalue() == (
        f"sync ok: {c['nodes']} nodes ({c['nodes']} added, 0 changed, 0 absent), "
        f"{c['rows_written']} rows written in {run.timings['total_ms']} ms\n"
    )
    with override_settings(PORTAL_KUBECONFIG=str(unreachable_kubeconfig)):
        k8s.api_client.cache_clear()
        with pytest.raises(
            CommandError, match=r"^sync failed: cannot read the cluster: Kubernetes API unreachable"
        ):
            call_command("sync_inventory")
    k8s.api_client.cache_clear()


def test_sync_inventory_command_exit_codes(
    devcluster: DevCluster, demo: Any, unreachable_kubeconfig: Path, tmp_path: Path
) -> None:
    """``manage.py sync_inventory`` as an admin runs it: its own process and database."""
    root = Path(__file__).resolve().parents[3]
    env = {
        "PATH": "/usr/bin:/bin",
        "PORTAL_VAR_DIR": str(tmp_path / "var"),
        "PORTAL_SHARED_DIR": str(root.parent / "shared"),
    }

    def manage(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=root,
            env={**env, **({"PORTAL_KUBECONFIG": str(kubeconfig)} if kubeconfig else {})},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    migrated = manage("migrate", "--noinput", "-v", "0")
    assert (migrated.returncode, migrated.stderr) == (0, "")
    ok = manage("sync_inventory", kubeconfig=devcluster.kubeconfig)
    assert ok.returncode == 0, ok.stderr
    assert re.fullmatch(
        r"sync ok: (\d+) nodes \(\1 added, 0 changed, 0 absent\), \d+ rows written in \d+ ms\n", ok.stdout
    )
    again = manage("sync_inventory", kubeconfig=devcluster.kubeconfig)
    assert again.returncode == 0, again.stderr
    assert re.fullmatch(
        r"sync ok: (\d+) nodes \(0 added, 0 changed, 0 absent\), 0 rows written in \d+ ms\n", again.stdout
    )
    failed = manage("sync_inventory", kubeconfig=unreachable_kubeconfig)
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert re.search(
        r"^CommandError: sync failed: cannot read the cluster: Kubernetes API unreachable: MaxRetryError",
        failed.stderr,
        re.M,
    )
