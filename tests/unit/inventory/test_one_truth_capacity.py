"""One truth for "free" (issue #13): every page, API and the form show the same free devices.

One stored cluster state (built with the factories, the way the sync stores it) with active
reservations, a finished reservation (launcher pod bound), a vGPU re-profile in progress, stale
entries and a cordoned node. The dashboard (HTML), the node list (HTML), the node page (HTML),
``/api/v1/inventory/summary/``, ``/api/v1/inventory/nodes/`` (list and detail), the request form's
options (HTML and ``placement.gpu_options``) and the approval queue must show the numbers below,
which are derived by hand from the state (comments in ``state``). The integration path (the sync
storing a real dev-cluster state, then these readers) is covered by
``tests/integration/inventory/test_sync.py`` and the provisioning worker tests.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client

from gpuinventory import reservations
from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.capacity.sorting import annotate_node_capacity
from gpuinventory.models import GpuNode
from tests.factories import stored_consumer, stored_node, stored_resource, stored_sync_run, stored_vgpu_config
from tests.vmrequest_factories import request_world, stored_request
from vmrequests.placement import gpu_options

pytestmark = pytest.mark.django_db

A100 = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_16Q = "nvidia.com/GRID_T4-16Q"
GPU = "nvidia.com/gpu"
T4_FILTER = ["0x1EB810DE"]

#: Free devices per resource, cluster-wide (what every reader must show).
FREE_BY_RESOURCE = {A100: 1, T4_8Q: 1, T4_16Q: 0, GPU: 2}
#: Free devices per node (Σ over the node's requestable resources).
FREE_BY_NODE = {"c1": 2, "p1": 1, "p2": 0, "v1": 1, "v2": 0}
#: Free devices per (node, resource).
FREE_BY_NODE_RESOURCE = {
    ("c1", GPU): 2,
    ("p1", A100): 1,
    ("p2", A100): 0,
    ("v1", T4_8Q): 1,
    ("v2", T4_16Q): 0,
}


@pytest.fixture
def state() -> SimpleNamespace:
    """The cluster state; the free counts of ``FREE_*`` follow from it:

    - c1 (container, B200 × 8): ``nvidia.com/gpu`` 8 allocatable, 6 used → 2 free; a stale
      ``nvidia.com/mig-1g.5gb: 0`` left from a MIG config (never counted).
    - p1 (vm-passthrough, A100 × 4): 4 allocatable, 1 used (a running VM), 2 reserved for
      tim's approved request (launcher pod not bound yet) → 4 − 1 − 2 = 1 free.
    - p2 (vm-passthrough, A100 × 2): cordoned → its 2 idle GPUs are not requestable (0 free,
      2 unusable ``node_cordoned``); a stale ``nvidia.com/2571: 0`` (old plugin name).
    - v1 (vm-vgpu, T4 × 2, config T4-8Q): ``GRID_T4-8Q`` 4 allocatable, 2 used (an old VM and
      bob's VM whose launcher pod is bound, so bob's reservation no longer counts), 1 reserved
      for apa's approved request → 4 − 2 − 1 = 1 free; a stale ``GRID_T4-16Q: 0`` from its
      previous config.
    - v2 (vm-vgpu, T4 × 2, config T4-16Q): ``GRID_T4-16Q`` 2 allocatable, 0 used, but promised to
      a re-profile to T4-8Q that has started and not finished (a reservation of 1 × T4-8Q by
      type) → its current vGPUs are about to be deleted: 0 free, 2 unusable ``reprofile_promised``.

    Pending in the queue (apa approves team quant): ana's 1 × A100 and tim's 1 × T4-8Q vGPU.
    """
    w = request_world()
    stored_sync_run()
    c1 = stored_node("c1", gpu_model="B200", gpu_count=8, gpu_memory_mib=183359)
    stored_resource(c1, GPU, 8, used=6)
    stored_consumer(c1, GPU, "train-0", 6)
    stored_resource(c1, "nvidia.com/mig-1g.5gb", 0, kind="mig")
    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(p1, A100, 4, used=1, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    stored_consumer(p1, A100, "virt-launcher-old-abcde", 1, vmi_name="old", pod_namespace="team-quant")
    p2 = stored_node("p2", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=2, unschedulable=True)
    stored_resource(p2, A100, 2, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    stored_resource(p2, "nvidia.com/2571", 0, pci_device_id="2571")
    v1 = stored_node(
        "v1", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(v1, T4_8Q, 4, used=2, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    stored_resource(v1, T4_16Q, 0, model="Tesla T4", vgpu_type="T4-16Q", series="Q")
    stored_consumer(
        v1, T4_8Q, "virt-launcher-old-vgpu-abcde", 1, vmi_name="old-vgpu", pod_namespace="team-quant"
    )
    v2 = stored_node(
        "v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config="T4-16Q", vgpu_config_state="success"
    )
    stored_resource(v2, T4_16Q, 2, model="Tesla T4", vgpu_type="T4-16Q", series="Q", permitted=True)
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )

    def held(req: Any, node: GpuNode, resource: str, count: int, vgpu_type: str = "", **marks: Any) -> None:
        reservations.reserve(
            req.holder,
            node,
            resource_name=resource,
            vgpu_type=vgpu_type,
            count=count,
            vmi_namespace=req.vmi_namespace,
            vmi_name=req.vmi_name,
            **marks,
        )

    # tim: 2 × A100 approved on p1, VMI not started.
    held(stored_request(w.quant, w.tim, w.image, status="approved", device_count=2), p1, A100, 2)
    # apa: 1 × T4-8Q approved on v1, VMI not started.
    vgpu = {"mode": "vgpu", "resource_name": T4_8Q, "vgpu_type": "T4-8Q", "gpu_model": "Tesla T4"}
    held(stored_request(w.quant, w.apa, w.image, status="approved", **vgpu), v1, T4_8Q, 1, "T4-8Q")
    # bob's VM runs on v1: its launcher pod is bound (a consumer), so the reservation is spent.
    bobs = stored_request(w.research, w.bob, w.image, status="running", **vgpu)
    held(bobs, v1, T4_8Q, 1, "T4-8Q")
    stored_consumer(
        v1,
        T4_8Q,
        f"virt-launcher-{bobs.vmi_name}-abcde",
        1,
        vmi_name=bobs.vmi_name,
        pod_namespace="team-research",
    )
    # ana: 1 × T4-8Q by re-profiling v2 from T4-16Q; the label is patched, the manager is at work.
    reprofiling = stored_request(
        w.quant, w.ana, w.image, status="provisioning", **{**vgpu, "resource_name": ""}
    )
    held(reprofiling, v2, "", 1, "T4-8Q", reprofile_config="T4-8Q", reprofile_from="T4-16Q")
    res = reservations.reservation_of(reprofiling.holder)
    assert res is not None
    reservations.mark_reprofile_started(res, "T4-16Q", datetime(2026, 12, 1, 23, 0, tzinfo=UTC))
    # In the queue: r_ana (1 × A100, from request_world) and r_tim turned into 1 × T4-8Q.
    w.r_tim.__class__.objects.filter(pk=w.r_tim.pk).update(**vgpu)
    w.r_olga.delete()  # another team's request: not in apa's queue anyway
    return w


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def number(html: str, pattern: str) -> int:
    match = re.search(pattern, html)
    assert match, pattern
    return int(match.group(1))


def test_the_snapshot_itself(state: SimpleNamespace) -> None:
    snap = CapacitySnapshot()
    got = {
        (r.node, r.resource_name): (r.allocatable, r.used, r.reserved, r.free, r.unusable, r.reason)
        for r in snap.rows
    }
    assert got == {
        ("c1", GPU): (8, 6, 0, 2, 0, ""),
        ("p1", A100): (4, 1, 2, 1, 0, ""),
        ("p2", A100): (2, 0, 0, 0, 2, "node_cordoned"),
        ("v1", T4_8Q): (4, 2, 1, 1, 0, ""),
        ("v2", T4_16Q): (2, 0, 0, 0, 2, "reprofile_promised"),
    }
    assert {(m, n): t.free for (m, n), t in snap.by_resource().items()} == {
        ("container", GPU): 2,
        ("vm-passthrough", A100): 1,
        ("vm-vgpu", T4_8Q): 1,
        ("vm-vgpu", T4_16Q): 0,
    }
    vgpu = snap.by_mode()["vm-vgpu"]
    # GPU-equivalents: T4-8Q = 8 GB of a 16 GB T4 = 0.5; T4-16Q = 1.
    assert vgpu.gpu_equivalents() == {
        "total": 4,
        "used": 1,
        "reserved": 0.5,
        "free": 0.5,
        "unsized_devices": 0,
    }


def test_dashboard(state: SimpleNamespace) -> None:
    html = client_for(state.ana).get("/inventory/").content.decode()
    for resource, free in FREE_BY_RESOURCE.items():
        assert number(html, rf'data-stat="{re.escape(resource)}-free">(\d+)<') == free, resource
    assert number(html, r'data-stat="vm-passthrough-free">(\d+)<') == 1
    assert number(html, r'data-stat="container-free">(\d+)<') == 2
    # vGPU per type, never one "devices" sum; and 0.5 free GPU-equivalents.
    assert number(html, r'data-stat="vm-vgpu-T4-8Q-free">(\d+)<') == 1
    assert number(html, r'data-stat="vm-vgpu-T4-16Q-free">(\d+)<') == 0
    assert 'data-stat="vm-vgpu-free"' not in html
    assert 'data-stat="vm-vgpu-gpus-free">0.5<' in html
    assert (
        "Not counted as free: 2 more free devices that cannot be requested now "
        "(node promised to a vGPU re-profile: 2)"
    ) in unescape(html)


def _node_rows(html: str) -> dict[str, str]:
    rows = {}
    for chunk in html.split("<tr")[1:]:
        match = re.search(r'href="/inventory/nodes/([^/"]+)/"', chunk)
        if match:
            rows[match.group(1)] = chunk.split("</tr>")[0]
    return rows


def test_node_list(state: SimpleNamespace) -> None:
    html = client_for(state.ana).get("/inventory/nodes/?per_page=200").content.decode()
    rows = _node_rows(html)
    assert {name: number(row, r'data-free="(\d+)"') for name, row in rows.items()} == FREE_BY_NODE
    got = {
        (name, res): int(free)
        for name, row in rows.items()
        for res, free in re.findall(r'data-resource="([^"]+)">[^<]* <b>(\d+)</b>', row)
        if (name, res) in FREE_BY_NODE_RESOURCE
    }
    assert got == FREE_BY_NODE_RESOURCE
    assert "2 reserved" in rows["p1"]
    # Sorting by free uses the SQL sort key; it agrees with the snapshot on every node.
    keys = {n.name: n.devices_free for n in annotate_node_capacity(GpuNode.objects.all())}  # type: ignore[attr-defined]
    assert keys == FREE_BY_NODE


def test_node_pages(state: SimpleNamespace) -> None:
    client = client_for(state.ana)
    for name, free in FREE_BY_NODE.items():
        html = client.get(f"/inventory/nodes/{name}/").content.decode()
        assert number(html, r'data-stat="node-free">(\d+)<') == free, name
        for (node, resource), res_free in FREE_BY_NODE_RESOURCE.items():
            if node == name:
                assert number(html, rf'data-stat="{re.escape(resource)}-free">(\d+)') == res_free
    p2 = client.get("/inventory/nodes/p2/").content.decode()
    assert "not requestable: node cordoned: 2" in unescape(p2)


def test_summary_api(state: SimpleNamespace) -> None:
    modes = client_for(state.ana).get("/api/v1/inventory/summary/").json()["modes"]
    got = {g["resource"]: g["free"] for m in modes.values() for g in m["by_resource"]}
    assert got == FREE_BY_RESOURCE
    assert {m: modes[m]["free"] for m in modes} == {"container": 2, "vm-passthrough": 1, "vm-vgpu": 1}
    assert [(g["label"], g["free"], g["reserved"]) for g in modes["vm-vgpu"]["by_vgpu_type"]] == [
        ("T4-16Q", 0, 0),
        ("T4-8Q", 1, 1),
    ]
    assert modes["vm-vgpu"]["free_unusable_reasons"] == {"reprofile_promised": 2}
    assert modes["vm-passthrough"]["free_unusable_reasons"] == {"node_cordoned": 2}


def test_nodes_api(state: SimpleNamespace) -> None:
    client = client_for(state.ana)
    listed = client.get("/api/v1/inventory/nodes/?page_size=100").json()["results"]
    assert {n["name"]: n["devices_free"] for n in listed} == FREE_BY_NODE
    by_free = client.get("/api/v1/inventory/nodes/?ordering=-devices_free").json()["results"]
    assert [n["devices_free"] for n in by_free] == sorted(FREE_BY_NODE.values(), reverse=True)
    got = {}
    for name in FREE_BY_NODE:
        detail = client.get(f"/api/v1/inventory/nodes/{name}/").json()
        got.update({(name, r["name"]): r["free"] for r in detail["resources"] if not r["stale"]})
    assert got == FREE_BY_NODE_RESOURCE
    p1 = next(r for r in client.get("/api/v1/inventory/nodes/p1/").json()["resources"] if r["name"] == A100)
    assert (p1["reserved"], p1["free"], p1["free_unusable"], p1["free_unusable_reason"]) == (2, 1, 0, "")


def test_form_options(state: SimpleNamespace) -> None:
    options = {
        o.resource_name: o.free for m in ("passthrough", "vgpu") for o in gpu_options(m) if o.resource_name
    }
    assert options == {A100: 1, T4_8Q: 1, T4_16Q: 0}
    client = client_for(state.ana)
    for mode, resource in (("passthrough", A100), ("vgpu", T4_8Q), ("vgpu", T4_16Q)):
        html = client.get("/requests/new/", {"mode": mode, "gpu": resource}).content.decode()
        label = re.search(rf'<option value="{re.escape(resource)}"[^>]*>[^<]*: (\d+) free', html)
        assert label and int(label.group(1)) == FREE_BY_RESOURCE[resource], resource
        assert number(html, r'<p data-free="(\d+)"') == FREE_BY_RESOURCE[resource]


def test_approval_queue(state: SimpleNamespace) -> None:
    html = client_for(state.apa).get("/requests/queue/").content.decode()
    items = {
        int(pk): body
        for pk, body in re.findall(
            r'<article class="card queue-item" id="request-(\d+)">(.*?)</article>', html, re.S
        )
    }
    assert set(items) == {state.r_ana.pk, state.r_tim.pk}
    ana, tim = items[state.r_ana.pk], items[state.r_tim.pk]
    assert number(ana, r'data-free-cluster="(\d+)"') == FREE_BY_RESOURCE[A100]
    assert re.findall(r'data-node="([^"]+)" data-free="(\d+)"', ana) == [("p1", "1")]
    assert number(tim, r'data-free-cluster="(\d+)"') == FREE_BY_RESOURCE[T4_8Q]
    assert re.findall(r'data-node="([^"]+)" data-free="(\d+)"', tim) == [("v1", "1")]
