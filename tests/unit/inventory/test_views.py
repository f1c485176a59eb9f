"""Inventory pages: access per role, the htmx partials, filters, sorting, pagination, query budget,
exact dashboard numbers, the node page, "Sync now", and Chinese rendering."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gpuinventory.models import GpuNode
from tests.factories import (
    portal_user,
    stored_consumer,
    stored_fleet,
    stored_node,
    stored_permitted_device,
    stored_resource,
    stored_sync_run,
    stored_vgpu_config,
)

pytestmark = pytest.mark.django_db

PAGES = [
    "/inventory/",
    "/inventory/nodes/",
    "/inventory/nodes/gpu-p-000/",
    "/inventory/vgpu-configs/",
    "/inventory/permitted-devices/",
]


@pytest.fixture
def fleet() -> list[GpuNode]:
    """The known rows of the exact-number tests (see ``stored_fleet``), plus:

    - ``gpu-v-over``: vGPU node whose pods use more than allocatable (free must stay 0);
    - ``gpu-gone``: an absent container node (never counted);
    - a vGPU config, a permitted device and a successful sync 5 s ago.
    """
    nodes = stored_fleet(1)
    over = stored_node("gpu-v-over", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, ready=False)
    stored_resource(over, "nvidia.com/GRID_T4-8Q", 2, used=3, model="T4", vgpu_type="T4-8Q")
    gone = stored_node(
        "gpu-gone",
        "container",
        present=False,
        last_seen=timezone.now() - timedelta(days=2),
        gpu_model="NVIDIA-B200",
    )
    stored_resource(gone, "nvidia.com/gpu", 8, used=8)
    stored_vgpu_config("T4-8Q", [{"device_filter": None, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}])
    stored_permitted_device("nvidia.com/GA106_RTX_A2000_12GB", "10DE:2571")
    stored_sync_run(age_seconds=5)
    return [*nodes, over, gone]


def client_for(role: str) -> Client:
    client = Client()
    client.force_login(portal_user(role))
    return client


def stat(html: str, key: str) -> int | float:
    """The number in ``<dd ... data-stat="key">N</dd>`` (GPU-equivalents may be decimal)."""
    match = re.search(rf'data-stat="{re.escape(key)}">(\d+(?:\.\d+)?)<', html)
    assert match, f"no stat {key}"
    text = match.group(1)
    return float(text) if "." in text else int(text)


def node_names(response: Any) -> list[str]:
    return [row.record.name for row in response.context["table"].page.object_list]


# --- access -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_anonymous_is_sent_to_login(fleet: list[GpuNode], path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_anonymous_sync_now_is_sent_to_login(fleet: list[GpuNode]) -> None:
    response = Client().post("/inventory/sync/")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/inventory/sync/"


@pytest.mark.parametrize("role", ["analyst", "approver", "admin"])
@pytest.mark.parametrize("path", PAGES)
def test_every_role_reads_every_page(fleet: list[GpuNode], role: str, path: str) -> None:
    response = client_for(role).get(path)
    assert response.status_code == 200
    if path != "/inventory/nodes/gpu-p-000/":  # the list pages
        assert "HX-Request" in response["Vary"]


def test_unknown_node_is_404(fleet: list[GpuNode]) -> None:
    assert client_for("analyst").get("/inventory/nodes/no-such-node/").status_code == 404


def test_nav_links_to_the_inventory(fleet: list[GpuNode]) -> None:
    html = client_for("analyst").get("/").content.decode()
    assert 'href="/inventory/"' in html


# --- sync now -----------------------------------------------------------------------------------


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Record ``gpuinventory.tasks.sync.delay`` calls instead of sending them to a broker."""
    from gpuinventory import tasks

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(tasks.sync, "delay", lambda *args, **kwargs: calls.append(kwargs))
    return calls


@pytest.mark.parametrize("role", ["analyst", "approver"])
def test_sync_now_is_forbidden_to_non_admins(
    fleet: list[GpuNode], role: str, queued: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(role)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/inventory/sync/")
    assert response.status_code == 403
    assert queued == []
    assert "Sync now" not in client.get("/inventory/").content.decode()


@pytest.mark.parametrize("role", ["admin", "staff"])
def test_sync_now_queues_one_sync_after_commit(
    fleet: list[GpuNode], role: str, queued: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    client = client_for(role)
    assert "Sync now" in client.get("/inventory/").content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post("/inventory/sync/")
    assert queued == []  # nothing sent before the commit
    for callback in callbacks:
        callback()
    assert response.status_code == 302
    assert response["Location"] == "/inventory/"
    assert queued == [{"trigger": "manual"}]
    assert "A sync was queued" in client.get("/inventory/").content.decode()


def test_sync_now_needs_post(fleet: list[GpuNode]) -> None:
    assert client_for("admin").get("/inventory/sync/").status_code == 405


def test_sync_now_needs_csrf(fleet: list[GpuNode]) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(portal_user("admin"))
    assert client.post("/inventory/sync/").status_code == 403


# --- htmx ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/inventory/", "/inventory/nodes/"])
def test_htmx_request_gets_only_the_table_partial(fleet: list[GpuNode], path: str) -> None:
    client = client_for("analyst")
    full = client.get(path)
    partial = client.get(path, headers={"HX-Request": "true", "HX-Target": "node-table"})

    def vary(response: Any) -> set[str]:
        return {value.strip() for value in response["Vary"].split(",")}

    assert "HX-Request" in vary(full)
    assert vary(full) == vary(partial)
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="node-table"')
    assert "<html" not in body and "<nav" not in body.split("pagination")[0]
    assert 'hx-trigger="every 10s, visibilitychange from:document"' in body
    assert 'id="inventory-summary"' not in body
    assert "gpu-c-000" in body
    assert re.search(r"Last synced \d s ago", body)
    assert "<html" in full.content.decode()


def test_htmx_summary_partial(fleet: list[GpuNode]) -> None:
    response = client_for("analyst").get(
        "/inventory/", headers={"HX-Request": "true", "HX-Target": "inventory-summary"}
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="inventory-summary"')
    assert 'id="node-table"' not in body
    assert stat(body, "vm-vgpu-gpus-total") == 3  # 6 × T4-8Q, half a 16 GB T4 each


def test_every_htmx_control_has_a_real_link(fleet: list[GpuNode]) -> None:
    html = client_for("analyst").get("/inventory/nodes/?per_page=2").content.decode()
    for match in re.finditer(r"<a [^>]*hx-get=\"([^\"]+)\"[^>]*>", html):
        tag = match.group(0)
        assert f'href="{match.group(1)}"' in tag
        assert 'hx-push-url="true"' in tag
    form = re.search(r"<form class=\"filters\"[^>]*>", html)
    assert form is not None
    assert 'method="get"' in form.group(0) and 'action="/inventory/nodes/"' in form.group(0)
    assert 'hx-push-url="true"' in form.group(0)


def test_pages_have_no_inline_scripts_or_styles(fleet: list[GpuNode]) -> None:
    client = client_for("admin")
    for path in PAGES:
        html = client.get(path).content.decode()
        assert html.count("<script") == html.count("<script src="), path
        assert "<style" not in html and " style=" not in html, path


# --- filters, sorting, pagination ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("mode=vm-vgpu", ["gpu-v-000", "gpu-v-over"]),
        ("mode=container", ["gpu-c-000", "gpu-gone"]),
        ("model=RTX+A2000+12GB", ["gpu-p-000"]),
        ("resource=nvidia.com/GRID_T4-8Q", ["gpu-v-000", "gpu-v-over"]),
        ("resource=nvidia.com/2571", None),  # stale entries are not offered as a filter value
        ("ready=false", ["gpu-v-over"]),
        ("present=false", ["gpu-gone"]),
        ("has_flags=true", ["gpu-p-000"]),
        ("has_flags=false&mode=vm-passthrough", []),
        ("q=a2000", ["gpu-p-000"]),
        ("q=gpu-v", ["gpu-v-000", "gpu-v-over"]),
        ("q=T4-8Q&ready=true", ["gpu-v-000"]),
    ],
)
def test_filters(fleet: list[GpuNode], query: str, expected: list[str] | None) -> None:
    response = client_for("analyst").get(f"/inventory/nodes/?{query}")
    assert response.status_code == 200
    if expected is None:
        assert response.context["filter"].errors
        assert node_names(response) == []
    else:
        assert node_names(response) == expected


def test_sorting(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    assert node_names(client.get("/inventory/nodes/"))[:3] == ["gpu-c-000", "gpu-gone", "gpu-p-000"]
    by_free = client.get("/inventory/nodes/?sort=-devices_free")
    assert node_names(by_free)[:3] == ["gpu-c-000", "gpu-v-000", "gpu-gone"]  # 6, 3, 0 (absent: 0)
    by_name_desc = client.get("/inventory/nodes/?sort=-name")
    assert node_names(by_name_desc)[0] == "gpu-v-over"
    html = by_free.content.decode()
    assert 'aria-sort="descending"' in html
    assert 'href="?sort=devices_free"' in html  # the next click sorts ascending


def test_pagination_keeps_filters(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    page1 = client.get("/inventory/nodes/?per_page=2&sort=name")
    page2 = client.get("/inventory/nodes/?per_page=2&sort=name&page=2")
    assert node_names(page1) == ["gpu-c-000", "gpu-gone"]
    assert node_names(page2) == ["gpu-p-000", "gpu-v-000"]
    html = page1.content.decode()
    assert "1–2 of 5" in html
    assert 'href="?per_page=2&amp;sort=name&amp;page=2"' in html


# --- query budget -------------------------------------------------------------------------------


def count_queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as context:
        assert client.get(path).status_code == 200
    return len(context.captured_queries)


@pytest.mark.parametrize(
    "path",
    ["/inventory/?per_page=200", "/inventory/nodes/?per_page=200", "/inventory/nodes/?per_page=200&q=gpu"],
)
def test_query_budget_does_not_grow_with_nodes(path: str, django_assert_max_num_queries: Any) -> None:
    client = client_for("analyst")
    stored_sync_run()
    stored_fleet(2)  # 6 nodes
    small = count_queries(client, path)
    GpuNode.objects.all().delete()
    stored_fleet(17)  # 51 nodes, all on one page
    large = count_queries(client, path)
    assert small == large
    # 17 on the dashboard: the summary's snapshot and the page's snapshot each read the active
    # reservations once (a fixed cost, not per node).
    with django_assert_max_num_queries(17):
        client.get(path)


def test_htmx_table_partial_is_cheap(fleet: list[GpuNode], django_assert_max_num_queries: Any) -> None:
    client = client_for("analyst")
    with django_assert_max_num_queries(9):
        client.get("/inventory/", headers={"HX-Request": "true", "HX-Target": "node-table"})


def test_node_page_query_budget(django_assert_max_num_queries: Any) -> None:
    client = client_for("analyst")
    node = stored_node("big", "vm-vgpu")
    for index in range(40):
        stored_resource(node, f"nvidia.com/GRID_T4-{index}Q", 1, vgpu_type=f"T4-{index}Q")
        stored_consumer(node, f"nvidia.com/GRID_T4-{index}Q", f"virt-launcher-{index}", vmi_name=f"vm{index}")
    with django_assert_max_num_queries(10):  # + the node's active reservations (one query)
        assert client.get("/inventory/nodes/big/").status_code == 200


# --- exact numbers ------------------------------------------------------------------------------


def test_dashboard_numbers(fleet: list[GpuNode]) -> None:
    response = client_for("analyst").get("/inventory/")
    html = response.content.decode()
    expected = {
        "container-nodes": 1,  # gpu-gone is absent
        "container-total": 8,
        "container-used": 2,
        "container-free": 6,
        "vm-passthrough-nodes": 1,
        "vm-passthrough-total": 1,  # the stale nvidia.com/2571 is not counted
        "vm-passthrough-used": 1,
        "vm-passthrough-free": 0,
        "vm-vgpu-nodes": 2,
        "vm-vgpu-nodes-ready": 1,
        "vm-vgpu-nodes-in-use": 2,
        "vm-vgpu-nodes-idle": 0,
        # vGPU instances are shown per type (never one "devices" sum) and in GPU-equivalents:
        "vm-vgpu-T4-8Q-free": 3,  # 4 − 1, plus max(0, 2 − 3)
        "vm-vgpu-gpus-total": 3,  # 6 instances × 8 GB ÷ 16 GB
        "vm-vgpu-gpus-used": 1.5,  # 1 + min(3, 2) instances used × 0.5
        "vm-vgpu-gpus-free": 1.5,  # 3 free × 0.5
        "nvidia.com/GRID_T4-8Q-free": 3,
    }
    assert {key: stat(html, key) for key in expected} == expected
    assert "1 node is absent from the cluster and not counted." in html
    summary = response.context["summary"]
    vgpu = next(m for m in summary.modes if m.mode == "vm-vgpu")
    assert [(g.label, g.nodes, g.gpus, g.total, g.used, g.free) for g in vgpu.by_model] == [
        ("Tesla T4", 2, 3, 6, 4, 3)
    ]
    assert [(g.label, g.resource, g.nodes) for g in vgpu.by_resource] == [
        ("T4-8Q", "nvidia.com/GRID_T4-8Q", 2)
    ]
    # the chart: one SVG per mode with devices, used bar widths proportional (290 units = largest total)
    assert html.count('<svg class="barchart"') == 3
    # vGPU bars in GPU-equivalents: 1.5 of 3 GPUs used (each node's used capped at its allocatable)
    assert 'class="bar-used" x="240" y="4" width="145.0"' in html


def test_bare_pci_id_is_shown_as_unknown_model(fleet: list[GpuNode]) -> None:
    node = stored_node("l40", "vm-passthrough")
    stored_resource(node, "nvidia.com/26b5", 2, pci_device_id="26b5")
    html = client_for("analyst").get("/inventory/").content.decode()
    assert "unknown model, PCI 10de:26b5" in html


def test_sync_states(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    stored_sync_run(status="failed", age_seconds=2, error="connection refused: https://10.0.0.1:6443")
    html = client.get("/inventory/").content.decode()
    assert "sync failed" in html
    assert "connection refused: https://10.0.0.1:6443" in html
    assert re.search(r"The data shown is from the last successful sync, \d s ago\.", html)


def test_no_sync_yet() -> None:
    html = client_for("analyst").get("/inventory/").content.decode()
    assert "No inventory sync has run yet" in html


# --- node page and lists ------------------------------------------------------------------------


def test_node_page(fleet: list[GpuNode]) -> None:
    node = GpuNode.objects.get(name="gpu-p-000")
    node.labels = {
        **node.labels,
        "nvidia.com/gpu.deploy.vfio-manager": "true",
        "nvidia.com/gpu.deploy.nvsm": "",
        "nvidia.com/gpu.product": "NVIDIA-RTX-A2000-12GB",
    }
    node.save()
    html = client_for("analyst").get("/inventory/nodes/gpu-p-000/").content.decode()
    assert "node label" in html and "nvidia.com/gpu.workload.config=vm-passthrough" in html
    assert "<code>vfio-manager</code>" in html
    assert '<tr class="attention"><td><code>nvsm</code></td><td><code>""</code></td></tr>' in html
    assert "NVIDIA-RTX-A2000-12GB" in html  # GFD label, flagged as possibly stale on VM nodes
    assert "On VM nodes these may be left over" in html
    assert '<tr class="stale">' in html and "nvidia.com/2571" in html
    assert "team-a/virt-launcher-vm0-abcde" in html and "team-a/vm0" in html
    assert "Stale resource entry" in html  # flags.describe title
    assert "kubectl get node gpu-p-000 -o jsonpath" in html  # its command, with the node filled in


def test_absent_node_is_marked(fleet: list[GpuNode]) -> None:
    html = client_for("analyst").get("/inventory/nodes/gpu-gone/").content.decode()
    assert "This node is no longer in the cluster. Last seen" in html
    assert "2\xa0days ago" in html
    table = client_for("approver").get("/inventory/nodes/?present=false").content.decode()
    assert '<tr class="absent even">' in table and "2 days ago" in table


def test_vgpu_config_and_permitted_lists(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    vgpu = client.get("/inventory/vgpu-configs/").content.decode()
    assert 'id="T4-8Q"' in vgpu and "T4-8Q × 2" in vgpu and "all GPUs" in vgpu
    permitted = client.get("/inventory/permitted-devices/?kind=pci").content.decode()
    assert "nvidia.com/GA106_RTX_A2000_12GB" in permitted and "10DE:2571" in permitted
    assert "nvidia.com/GA106" not in client.get("/inventory/permitted-devices/?kind=mdev").content.decode()


# --- Chinese ------------------------------------------------------------------------------------


def test_dashboard_in_chinese(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    html = client.get("/inventory/", headers={"Accept-Language": "zh-CN,zh;q=0.9"}).content.decode()
    assert '<html lang="zh-hans">' in html
    assert "<h1>GPU 资源清单</h1>" in html
    assert "立即同步" not in html  # analysts get no Sync now button
    assert "按 GPU 型号" in html
    assert re.search(r"上次同步：\d+ 秒前", html)
    assert stat(html, "vm-vgpu-T4-8Q-free") == 3
    node = client.get("/inventory/nodes/gpu-p-000/", headers={"Accept-Language": "zh-CN"}).content.decode()
    assert "诊断" in node and "谁在使用 GPU" in node


# --- user-test fixes: labels, vGPU config, wording, stale rows, plain words, 403, narrow screens --


@pytest.fixture
def analyst() -> Client:
    return client_for("analyst")


def node_html(client: Client, name: str, language: str = "en") -> str:
    return client.get(f"/inventory/nodes/{name}/", headers={"Accept-Language": language}).content.decode()


def label_table(html: str, css_class: str) -> str:
    match = re.search(rf'<table class="table compact {css_class}"><tbody>(.*?)</tbody></table>', html, re.S)
    assert match, f"no label table {css_class}"
    return match.group(1)


def test_labels_are_grouped_by_the_component_that_writes_them(fleet: list[GpuNode], analyst: Client) -> None:
    node = GpuNode.objects.get(name="gpu-v-000")
    node.labels = {
        **node.labels,
        "nvidia.com/gpu.deploy.vgpu-device-manager": "true",
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
        "nvidia.com/mig.config": "all-disabled",
        "nvidia.com/mig.config.state": "success",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/vgpu.config": "T4-8Q",
        "nvidia.com/vgpu.config.state": "success",
        "nvidia.com/vgpu.present": "false",
        "nvidia.com/vgpu.host-driver-version": "550.90.05",
        "nvidia.com/gpu.product": "Tesla-T4",
    }
    node.save()
    html = node_html(analyst, "gpu-v-000")
    operator = label_table(html, "labels-operator")
    assert "<code>nvidia.com/gpu.present</code>" in operator
    assert "<code>nvidia.com/gpu-driver-upgrade-state</code>" in operator
    assert "<code>vgpu-device-manager</code>" in label_table(html, "labels-deploy")
    mig = label_table(html, "labels-mig")
    assert "<code>nvidia.com/mig.config</code>" in mig and "<code>nvidia.com/mig.config.state</code>" in mig
    assert "mig.capable" not in mig
    vgpu = label_table(html, "labels-vgpu")
    assert "<tr><td><code>nvidia.com/vgpu.config</code></td><td><code>T4-8Q</code></td></tr>" in vgpu
    assert "<code>nvidia.com/vgpu.config.state</code>" in vgpu
    assert "vgpu.present" not in vgpu and "host-driver" not in vgpu
    gfd = label_table(html, "labels-gfd")
    for key in ("gpu.product", "mig.capable", "vgpu.present", "vgpu.host-driver-version"):
        assert f"<code>nvidia.com/{key}</code>" in gfd
    for key in ("gpu.present", "mig.config", "vgpu.config"):
        assert f"<code>nvidia.com/{key}</code>" not in gfd
    assert "<h3>GPU Operator</h3>" in html and "<h3>MIG manager</h3>" in html
    assert "<h3>vGPU Device Manager</h3>" in html


def test_vgpu_node_without_config_label_shows_the_cluster_policy_default(
    fleet: list[GpuNode], analyst: Client
) -> None:
    GpuNode.objects.filter(name="gpu-v-000").update(vgpu_config="", vgpu_config_state="success")
    html = node_html(analyst, "gpu-v-000")
    assert (
        '<dd class="vgpu-config"><span class="hint">not set: the vGPU Device Manager applies the ClusterPolicy '
        "default (<code>vgpuDeviceManager.config.default</code>, normally <code>default</code>)</span>"
    ) in html
    assert '<span class="badge ok">success</span>' in html
    assert "none: the ClusterPolicy default config applies" in html
    table = analyst.get("/inventory/nodes/?mode=vm-vgpu").content.decode()
    assert '<span class="hint">ClusterPolicy default</span> <span class="badge ok">success</span>' in table
    chinese = node_html(analyst, "gpu-v-000", "zh-CN")
    assert "未设置：vGPU Device Manager 使用 ClusterPolicy 的默认配置" in chinese


def test_left_over_vgpu_state_on_a_non_vgpu_node_is_ignored(fleet: list[GpuNode], analyst: Client) -> None:
    node = GpuNode.objects.get(name="gpu-p-000")
    node.vgpu_config_state = "success"
    node.labels = {**node.labels, "nvidia.com/vgpu.config.state": "success"}
    node.save()
    html = node_html(analyst, "gpu-p-000")
    assert (
        '<dd class="vgpu-config">—'
        ' <span class="hint left-over">(left-over vGPU labels, ignored: this node is not in vm-vgpu mode)</span></dd>'
    ) in html
    assert '<span class="badge ok">success</span>' not in html
    assert (
        '<tr class="stale"><td><code>nvidia.com/vgpu.config.state</code></td><td><code>success</code></td></tr>'
    ) in label_table(html, "labels-vgpu")
    assert "Left over: this node is not in vm-vgpu mode" in html
    table = analyst.get("/inventory/nodes/?mode=vm-passthrough").content.decode()
    assert '<span class="badge ok">success</span>' not in table


def test_vgpu_configs_page_wording_and_per_index_entries(fleet: list[GpuNode], analyst: Client) -> None:
    stored_vgpu_config(
        "T4-custom",
        [
            {"device_filter": ["0x1EB810DE"], "devices": [0], "vgpu_devices": {"T4-16C": 1}},
            {"device_filter": None, "devices": [1, 2], "vgpu_devices": {"T4-8Q": 2, "T4-4Q": 1}},
        ],
    )
    client = analyst
    html = client.get("/inventory/vgpu-configs/").content.decode()
    assert "delete every vGPU on the node's GPUs" not in html
    assert "reconfigure only the GPUs that config matches" in html
    assert "GPUs the config does not match keep their vGPUs." in html
    assert (
        '<div class="entry">GPU 0: T4-16C × 1 <span class="hint">only PCI devices 0x1EB810DE</span></div>'
        in html
    )
    assert '<div class="entry">GPUs 1, 2: T4-4Q × 1, T4-8Q × 2 <span class="hint"></span></div>' in html
    assert '<div class="entry">all GPUs: T4-8Q × 2 <span class="hint"></span></div>' in html
    chinese = client.get("/inventory/vgpu-configs/", headers={"Accept-Language": "zh-CN"}).content.decode()
    assert "GPU 0：T4-16C × 1" in chinese and "所有 GPU：T4-8Q × 2" in chinese


def test_stale_resource_shows_a_dash_in_the_permitted_column(fleet: list[GpuNode], analyst: Client) -> None:
    GpuNode.objects.get(name="gpu-p-000").resources.update(permitted=False)
    html = node_html(analyst, "gpu-p-000")
    stale_row = re.search(r'<tr class="stale">(.*?)</tr>', html, re.S)
    assert stale_row and "nvidia.com/2571" in stale_row.group(1)
    assert stale_row.group(1).rstrip().endswith("<td>—</td>")
    assert '<span class="badge flag-error">no</span>' in html  # the live resource still says "no"


@pytest.mark.parametrize(
    ("source", "text", "chinese"),
    [
        ("passthrough_name", "(from the passthrough resource name)", "来自直通资源名称"),
        ("vgpu_type", "(from the advertised vGPU types)", "来自节点公布的 vGPU 类型"),
        ("gfd", "(from GPU Feature Discovery labels)", "来自 GPU Feature Discovery 标签"),
        ("vgpu_config", "(from the vGPU config)", "来自 vGPU 配置"),
    ],
)
def test_model_source_in_plain_words(
    fleet: list[GpuNode], source: str, text: str, chinese: str, analyst: Client
) -> None:
    GpuNode.objects.filter(name="gpu-p-000").update(model_source=source)
    html = node_html(analyst, "gpu-p-000")
    assert f'<span class="hint">{text}</span>' in html
    assert f"from {source})" not in html
    assert chinese in node_html(analyst, "gpu-p-000", "zh-CN")


def test_severity_badges_are_translated(fleet: list[GpuNode], analyst: Client) -> None:
    html = node_html(analyst, "gpu-p-000")
    match = re.search(
        r'<span class="badge flag-(\w+)">(\w+)</span> <strong>Stale resource entry</strong>', html
    )
    assert match and match.group(1) == match.group(2)
    labels = {"error": "错误", "warning": "警告", "info": "提示"}
    chinese = node_html(analyst, "gpu-p-000", "zh-CN")
    assert f'<span class="badge flag-{match.group(1)}">{labels[match.group(1)]}</span>' in chinese


def test_filter_errors_name_the_field_label(fleet: list[GpuNode], analyst: Client) -> None:
    html = analyst.get("/inventory/nodes/?mode=bogus").content.decode()
    assert (
        "Some filters are not valid: Mode: Select a valid choice. bogus is not one of the available choices."
    ) in html
    assert "mode: Select" not in html


def test_sync_now_refusal_says_why(
    fleet: list[GpuNode], caplog: pytest.LogCaptureFixture, analyst: Client
) -> None:
    response = analyst.post("/inventory/sync/")
    assert response.status_code == 403
    html = response.content.decode()
    assert '<p class="reason">Only administrators can start a sync.</p>' in html
    assert not any(record.exc_info for record in caplog.records)
    chinese = client_for("approver").post("/inventory/sync/", headers={"Accept-Language": "zh-CN"})
    assert '<p class="reason">只有管理员可以发起同步。</p>' in chinese.content.decode()


def test_sync_now_get_is_405_with_a_short_text(fleet: list[GpuNode]) -> None:
    response = client_for("admin").get("/inventory/sync/")
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert response.content.decode() == "Use the Sync now button.\n"


def test_generic_403_page_keeps_its_text() -> None:
    from django.template.loader import render_to_string

    html = render_to_string("403.html", {"exception": ""})
    assert "Your account does not have the role this page needs." in html


def test_commands_wrap_and_grids_fit_a_narrow_screen() -> None:
    from pathlib import Path

    from django.conf import settings

    css = (Path(settings.BASE_DIR) / "static" / "css" / "portal.css").read_text()
    commands = re.search(r"\.commands \{([^}]*)\}", css)
    assert (
        commands
        and "white-space: pre-wrap" in commands.group(1)
        and "word-break: break-all" in commands.group(1)
    )
    # No fixed grid minimum wider than a 420 px screen.
    assert not re.search(r"minmax\(\d", css)


def test_dashboard_shows_free_devices_that_cannot_be_requested(fleet: list[GpuNode], analyst: Client) -> None:
    cordoned = stored_node("gpu-v-cordoned", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, unschedulable=True)
    stored_resource(cordoned, "nvidia.com/GRID_T4-8Q", 2, model="T4", vgpu_type="T4-8Q")
    html = analyst.get("/inventory/").content.decode()
    assert (
        '<p class="hint unusable" data-stat="vm-vgpu-free-unusable">Not counted as free: 2 more free devices '
        "that cannot be requested now (node cordoned: 2)</p>"
    ) in html
    chinese = analyst.get("/inventory/", headers={"Accept-Language": "zh-CN"}).content.decode()
    assert "不计入空闲：另有 2 个空闲设备当前无法申请（节点已封锁：2）" in chinese
