"""The main job end to end, as a new user meets it (issue 8, "Browser tests").

Two people in two Chromium contexts: the demo ``analyst`` and the demo ``approver`` of
``make run`` (``manage.py create_demo_users`` / ``create_demo_catalog``: teams Quant and Research
in the dev cluster's namespaces ``team-quant`` and ``team-research``). Behind the browser runs
the whole product: a live server, a real Celery worker process and the VMI watcher
(``manage.py watch_vmis``), all on one database (PostgreSQL in CI; a file copy of the SQLite test
database locally) and one broker (Redis in CI; the file broker locally), against the session dev
cluster with ``devcluster/specs/demo.yaml`` (the real samples of ``../shared/samples`` and the
seed article's A100 nodes) on top of ``specs/test.yaml``, its simulator scheduling VMIs, setting
IPs and applying vGPU configs. The inventory sync (beat's job in ``make run``) runs here, in the
test, where the test needs fresh counts, so it knows what each page saw.

1. The analyst signs in, sees the dashboard by mode with the real nodes and opens the A2000
   node, whose stale ``nvidia.com/2571`` and ``nvidia.com/gpu`` entries are flagged.
2. A passthrough VM with the A2000: the approver approves it from the queue; the analyst's page,
   never reloaded, follows the status badge to running with node, IP and connect command.
3. A vGPU type no node offers (``T4-16Q``): the form offers it "after re-profiling node
   t4-node-01"; the queue shows the re-profile; after approval the node's
   ``nvidia.com/vgpu.config`` label changes, the VM runs there and the dashboard's free counts
   change.
4. Two A2000s (the cluster has one, now in use) are refused at the form, with alternatives.
5. The dashboard, the request form and the request page in Chinese (the language switcher).

Screenshots: ``test-artifacts/screenshots/e2e-NN-*.png`` (1280 x 800 viewport).
Waits are Playwright ``expect`` readiness waits with generous bounds (the worker, the simulator
and the 3 s status poll take seconds), never performance limits.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kubernetes import client as k8s_client
from playwright.sync_api import Browser, Frame, Page, expect

from gpuinventory.choices import SyncStatus
from gpuinventory.sync import run_sync
from tests.e2e.conftest import DemoClusterGuard, DemoPortal
from tests.integration.inventory.conftest import wait_for
from tests.integration.vmrequests.worker_harness import WorkerProcess
from vmrequests.choices import VMRequestStatus
from vmrequests.models import Team, VmImage, VMRequest

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: Readiness bound of waits on the worker, the watcher and the simulator (ms, Playwright's unit).
SLOW = 180_000
#: Readiness bound of ordinary page updates (ms).
PAGE = 30_000

A2000 = "nvidia.com/GA106_RTX_A2000_12GB"
A2000_NODE = "a2000-node-01"
T4_NODE = "t4-node-01"
T4_16Q = "nvidia.com/GRID_T4-16Q"
VGPU_CONFIG = "nvidia.com/vgpu.config"
#: The demo's GPU nodes (devcluster/specs/demo.yaml) by workload mode; b200-node-01 has no
#: workload label and runs containers by the ClusterPolicy default.
DEMO_NODES = {
    "container": ["b200-node-01", "gpu-node-01"],
    "vm-passthrough": [A2000_NODE, "gpu-node-02"],
    "vm-vgpu": [T4_NODE, "t4-node-02", "gpu-node-03"],
}
#: The GPU nodes of specs/test.yaml, which the pytest session applies under the demo.
TEST_SPEC_NODES = {
    "container": ["spec-container-01"],
    "vm-passthrough": ["spec-passthrough-01"],
    "vm-vgpu": ["spec-vgpu-01", "spec-vgpu-a100-01"],
}


# --- helpers -----------------------------------------------------------------------------------


def ssh_public_key() -> str:
    """A fresh, valid OpenSSH Ed25519 public key line."""
    key = Ed25519PrivateKey.generate().public_key()
    raw = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return raw.decode() + " analyst@laptop"


def sign_in(page: Page, base: str, username: str, password: str) -> None:
    """Sign in through the login form and land on the home page."""
    page.goto(base + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button.primary")
    expect(page.locator("h1")).to_have_text(f"Welcome, {username}")


def sync_inventory() -> None:
    """One inventory sync of the dev cluster into the shared database (beat's job)."""
    run = run_sync("command")
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")


def stat(page: Page, key: str) -> int | float:
    """The number in the dashboard's ``[data-stat=key]`` element (GPU-equivalents may be decimal)."""
    text = page.locator(f'[data-stat="{key}"]').inner_text().strip()
    return float(text) if "." in text else int(text)


def vgpu_free_per_type(page: Page) -> dict[str, int | float]:
    """The vm-vgpu mode card: free instances per vGPU type."""
    return {t: stat(page, f"vm-vgpu-{t}-free") for t in ("A100-20C", "T4-16C", "T4-16Q", "T4-8C", "T4-8Q")
            if page.locator(f'[data-stat="vm-vgpu-{t}-free"]').count()}  # fmt: skip


def choose(page: Page, selector: str, value: str) -> None:
    """Select ``value`` in the form's ``selector`` and wait for htmx to re-render the GPU part
    of the form (team, mode, image and GPU changes post the form to ``new/gpu-options/``).

    Waits until htmx has swapped and settled the new part, not just until the response arrived:
    a change made in between would go to an element about to be replaced (seen in CI).
    """
    page.evaluate(
        "() => { window.__portalSettled = false; document.body.addEventListener("
        "'htmx:afterSettle', () => { window.__portalSettled = true; }, {once: true}); }"
    )
    with page.expect_response(lambda r: "/requests/new/gpu-options/" in r.url):
        if selector.startswith("input"):
            page.check(selector)
        else:
            page.select_option(selector, value)
    page.wait_for_function("() => window.__portalSettled === true")


def fill_request(
    page: Page, base: str, *, team: Team, image: VmImage, mode: str, gpu: str, name: str, count: int = 1
) -> None:
    """Open the request form from the menu and fill it in (not submitted)."""
    page.click("nav.mainnav >> text=New request")
    expect(page).to_have_url(base + "/requests/new/")
    choose(page, "#id_team", str(team.pk))
    choose(page, "#id_image", str(image.pk))
    if mode != "passthrough":
        choose(page, f'input[name="mode"][value="{mode}"]', mode)
    choose(page, "#id_gpu", gpu)
    expect(page.locator("#id_gpu")).to_have_value(gpu)
    page.fill("#id_device_count", str(count))
    page.fill("#id_name", name)
    page.fill("#id_ssh_public_key", ssh_public_key())
    page.fill("#id_justification", "Backtest of the risk model for Q4.")


def approve_from_queue(approver: Page, base: str, req: VMRequest, note: str) -> None:
    """The approver approves ``req`` from the queue and lands on the queue again."""
    item = approver.locator(f"#request-{req.pk}")
    item.locator("textarea[name=note]").fill(note)
    item.locator("form.approve button").click()
    expect(approver).to_have_url(base + "/requests/queue/")
    expect(approver.locator(".messages")).to_contain_text(f"Request #{req.pk} approved.")


def watch_navigations(page: Page) -> list[str]:
    """URLs of every main-frame navigation of ``page`` from now on (a reload is one)."""
    navigations: list[str] = []

    def on_navigated(frame: Frame) -> None:
        if frame == page.main_frame:
            navigations.append(frame.url)

    page.on("framenavigated", on_navigated)
    return navigations


#: Records the status badge's text each time it changes, in ``window.portalBadges`` (DevTools
#: evaluation, not subject to the page's CSP). A reload would lose the list.
_BADGE_RECORDER = """() => {
  window.portalBadges = [];
  const read = () => {
    const badge = document.querySelector(".status-badge");
    const text = badge ? badge.textContent.trim() : "";
    if (text && window.portalBadges[window.portalBadges.length - 1] !== text) window.portalBadges.push(text);
  };
  read();
  new MutationObserver(read).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def record_badges(page: Page) -> None:
    """Start recording the request page's status badge texts (see :func:`badges_seen`)."""
    page.evaluate(_BADGE_RECORDER)


def badges_seen(page: Page) -> list[str]:
    """The badge texts recorded since :func:`record_badges`, each change once."""
    seen: list[str] = page.evaluate("window.portalBadges")
    return seen


def assert_followed(seen: list[str]) -> None:
    """The badge went from submitted to running through the status machine's order (the 3 s poll
    may skip a short-lived status)."""
    order = ["submitted", "approved", "provisioning", "running"]
    assert seen[0] == "submitted" and seen[-1] == "running", seen
    assert [order.index(s) for s in seen] == sorted({order.index(s) for s in seen}), seen


def node_label(api: k8s_client.ApiClient, node: str, key: str) -> str | None:
    """A node's label ``key`` as the API server has it (None: absent)."""
    return (k8s_client.CoreV1Api(api).read_node(node).metadata.labels or {}).get(key)


# --- the journey -----------------------------------------------------------------------------


@pytest.fixture
def approver_page(browser: Browser) -> Iterator[Page]:
    """The approver's own browser context (cookies apart from the analyst's)."""
    context = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


def test_analyst_and_approver_main_journey(
    demo_cluster_guard: DemoClusterGuard,
    demo_portal: DemoPortal,
    shared_db_server: str,
    celery_worker: Callable[..., WorkerProcess],
    vmi_watcher: WorkerProcess,
    page: Page,
    approver_page: Page,
    screenshot: Callable[..., Path],
    k8s_api: k8s_client.ApiClient,
) -> None:
    base = shared_db_server
    worker = celery_worker()
    approver = approver_page
    quant = Team.objects.get(slug="quant")
    ubuntu = VmImage.objects.get(name="Ubuntu 22.04")
    assert demo_portal.catalog_output.strip() == (
        "Demo catalog: 3 images, teams Quant (team-quant), Research (team-research)"
    )
    assert quant.namespace in demo_cluster_guard.namespaces

    def shot(name: str, of: Page | None = None) -> Path:
        return screenshot(name, of=of, prefix=False, full_page=False)

    # 1. Dashboard by mode with the real nodes; the A2000 node's stale entries flagged. -------
    sign_in(page, base, "analyst", demo_portal.password)
    page.click("nav.mainnav >> text=GPU inventory")
    expect(page.locator("h1")).to_have_text("GPU inventory")
    for mode in ("container", "vm-passthrough", "vm-vgpu"):
        expect(page.locator(f'[data-stat="{mode}-nodes"]')).to_have_text(
            str(len(DEMO_NODES[mode]) + len(TEST_SPEC_NODES[mode]))
        )
        for node in DEMO_NODES[mode]:
            row = page.locator("#node-table tbody tr", has=page.locator(f"a:text-is('{node}')"))
            expect(row).to_contain_text(mode)
    expect(page.locator("#node-table tbody tr", has_text="b200-node-01")).to_contain_text("B200")
    expect(page.locator("#node-table tbody tr", has_text=A2000_NODE)).to_contain_text("RTX A2000 12GB")
    expect(page.locator("#node-table tbody tr", has_text="gpu-node-02")).to_contain_text("A100 PCIe 40GB")
    expect(page.locator("#node-table tbody tr", has_text=T4_NODE)).to_contain_text("T4")
    # Passthrough: 6 A100 PCIe 40GB (gpu-node-02 4, spec-passthrough-01 2; the demo's VMI
    # quant-analyst-01 uses one) and the A2000. vGPU: t4-node-01 16 x T4-8Q (default config),
    # t4-node-02 15 (T4-custom over default), gpu-node-03 4 x A100-20C, spec-vgpu-01 4 x T4-8Q,
    # spec-vgpu-a100-01 2 x A100-20C; none used. The vGPU card shows them per type, never as one
    # "41 devices": T4-8Q 16 + 12 + 4 = 32, T4-8C 2 and T4-16C 1 (t4-node-02), A100-20C 4 + 2 = 6.
    # In GPU-equivalents (frame buffer / board memory): 32 x 0.5 + 2 x 0.5 + 1 + 6 x 0.5 = 21 GPUs,
    # the physical GPUs behind them (8 + 8 + 2 T4, 2 + 1 A100).
    assert [stat(page, f"vm-passthrough-{k}") for k in ("total", "used", "free")] == [7, 1, 6]
    assert vgpu_free_per_type(page) == {"A100-20C": 6, "T4-16C": 1, "T4-8C": 2, "T4-8Q": 32}
    assert [stat(page, f"vm-vgpu-gpus-{k}") for k in ("total", "used", "free")] == [21, 0, 21]
    assert stat(page, f"{A2000}-free") == 1
    shot("e2e-01-dashboard")

    page.click(f"#node-table a:text-is('{A2000_NODE}')")
    expect(page).to_have_url(base + f"/inventory/nodes/{A2000_NODE}/")
    diagnostics = page.locator(".diagnostics .flaglist li")
    stale_flags = diagnostics.filter(has_text="Stale resource entry")
    expect(stale_flags).to_have_count(2)
    for resource in ("nvidia.com/2571", "nvidia.com/gpu"):
        expect(stale_flags.filter(has_text=f"{resource} is advertised with 0 devices")).to_have_count(1)
        row = page.locator("table.table tbody tr.stale", has=page.locator(f"code:text-is('{resource}')"))
        expect(row.locator(".stale-badge")).to_have_text("stale")
    live = page.locator("table.table tbody tr:not(.stale)", has=page.locator(f"code:text-is('{A2000}')"))
    expect(live.locator("td.free")).to_have_text("1")
    shot("e2e-02-a2000-node-stale")

    # 2. Passthrough VM with the A2000: approved from the queue, running without a reload. ---
    fill_request(page, base, team=quant, image=ubuntu, mode="passthrough", gpu=A2000, name="quant-a2000")
    expect(page.locator("#gpu-availability")).to_contain_text("1 free now")
    page.click("form.request-form button.primary")
    req = VMRequest.objects.get(vmi_name="quant-a2000")
    expect(page).to_have_url(base + f"/requests/{req.pk}/")
    badge = page.locator(f"#status-{req.pk}")
    expect(badge).to_have_text("submitted")
    expect(page.locator(".messages")).to_contain_text(
        f"Request #{req.pk} submitted. The approvers of Quant have been notified."
    )
    request_url = page.url
    navigations = watch_navigations(page)
    record_badges(page)
    shot("e2e-03-request-submitted")

    sign_in(approver, base, "approver", demo_portal.password)
    approver.click("nav.mainnav >> text=Approval queue")
    item = approver.locator(f"#request-{req.pk}")
    expect(item.locator("h2 .badge")).to_have_text("fits")
    expect(item.locator(".verdict")).to_contain_text(f"Runs now on {A2000_NODE} (1 free there).")
    expect(item.locator(".verdict")).to_contain_text("any GPU: 0 of 4 used, 1 after approval")
    shot("e2e-04-queue-passthrough", of=approver)
    approve_from_queue(approver, base, req, "For the Q4 backtest.")

    expect(badge).to_have_text("running", timeout=SLOW)
    req.refresh_from_db()
    assert (req.status, req.node_name) == (VMRequestStatus.RUNNING, A2000_NODE)
    ipaddress.ip_address(req.ip_address)
    outcome = page.locator("section.outcome")
    expect(outcome.locator("dd", has_text=A2000_NODE)).to_have_text(A2000_NODE)
    expect(outcome).to_contain_text(req.ip_address)
    expect(outcome.locator("pre.connect")).to_have_text(
        "virtctl ssh ubuntu@vmi/quant-a2000 -n team-quant\nvirtctl console quant-a2000 -n team-quant\n"
    )
    expect(page.locator(".timeline .action-mark_running")).to_have_count(1)
    # The page followed the request by htmx polling alone: never reloaded, never left.
    assert navigations == []
    assert page.url == request_url
    assert_followed(badges_seen(page))
    shot("e2e-05-passthrough-running")

    # 3. A vGPU type that needs a re-profile: node label changes, VM runs, counts change. -----
    assert node_label(k8s_api, T4_NODE, VGPU_CONFIG) is None
    fill_request(page, base, team=quant, image=ubuntu, mode="vgpu", gpu="vgpu-type:T4-16Q", name="quant-t4")
    assert navigations == [base + "/requests/new/"]  # the listener does see a navigation
    option = page.locator("#id_gpu option[value='vgpu-type:T4-16Q']")
    expect(option).to_contain_text(
        f"T4-16Q: 0 free; available after re-profiling node {T4_NODE} (8 instances)"
    )
    expect(page.locator("#gpu-availability .badge.info")).to_have_text(
        f"available after re-profiling node {T4_NODE} (idle)"
    )
    page.locator("fieldset", has=page.locator('input[name="mode"]')).evaluate("el => el.scrollIntoView()")
    shot("e2e-06-vgpu-form-reprofile")
    page.click("form.request-form button.primary")
    vgpu_req = VMRequest.objects.get(vmi_name="quant-t4")
    expect(page).to_have_url(base + f"/requests/{vgpu_req.pk}/")
    navigations = watch_navigations(page)
    record_badges(page)

    approver.reload()
    item = approver.locator(f"#request-{vgpu_req.pk}")
    expect(item.locator(".verdict")).to_contain_text(
        f"Re-profile idle node {T4_NODE} from vGPU config (default) to T4-16Q (8 instances), then run there."
    )
    shot("e2e-07-queue-reprofile", of=approver)
    approve_from_queue(approver, base, vgpu_req, "")

    wait_for(
        lambda: node_label(k8s_api, T4_NODE, VGPU_CONFIG) == "T4-16Q",
        f"{VGPU_CONFIG}=T4-16Q on {T4_NODE}",
        timeout=SLOW / 1000,
    )
    expect(page.locator(f"#status-{vgpu_req.pk}")).to_have_text("running", timeout=SLOW)
    vgpu_req.refresh_from_db()
    assert (vgpu_req.node_name, vgpu_req.resource_name) == (T4_NODE, T4_16Q)
    expect(page.locator("section.outcome")).to_contain_text(vgpu_req.ip_address)
    expect(page.locator("section.outcome pre.connect")).to_contain_text(
        "virtctl ssh ubuntu@vmi/quant-t4 -n team-quant"
    )
    expect(page.locator(".timeline")).to_contain_text(
        f"Set nvidia.com/vgpu.config on node {T4_NODE} from (default) to T4-16Q"
    )
    assert navigations == []
    assert_followed(badges_seen(page))
    shot("e2e-08-vgpu-running")

    sync_inventory()
    page.click("nav.mainnav >> text=GPU inventory")
    # t4-node-01 went from 16 x T4-8Q (all free) to 8 x T4-16Q, one of them used: per type T4-8Q
    # 32 -> 16 free, T4-16Q 7 free; the fleet stays 21 GPU-equivalents, 1 used (a whole T4), 20
    # free (a raw device sum would have jumped 41 -> 33). The A2000 is used: passthrough free 6 -> 5.
    expect(page.locator(f'[data-stat="{T4_16Q}-free"]')).to_have_text("7")
    assert vgpu_free_per_type(page) == {"A100-20C": 6, "T4-16C": 1, "T4-16Q": 7, "T4-8C": 2, "T4-8Q": 16}
    assert [stat(page, f"vm-vgpu-gpus-{k}") for k in ("total", "used", "free")] == [21, 1, 20]
    assert [stat(page, f"vm-passthrough-{k}") for k in ("total", "used", "free")] == [7, 2, 5]
    assert stat(page, f"{A2000}-free") == 0
    shot("e2e-09-dashboard-after")

    # 4. A request that cannot fit is refused at the form, with the alternatives. ------------
    fill_request(
        page, base, team=quant, image=ubuntu, mode="passthrough", gpu=A2000, name="quant-two", count=2
    )
    page.click("form.request-form button.primary")
    expect(page).to_have_url(base + "/requests/new/")
    problems = page.locator(".request-problems")
    expect(problems).to_contain_text("This request cannot be submitted as it is:")
    expect(problems.locator("ul").first).to_contain_text(
        "All RTX A2000 12GB GPUs are in use or reserved right now."
    )
    # The closest that fits now: the quota (any GPU: 4, 2 held) caps it at 2 devices; best fit
    # is the node with the fewest free devices that still fit.
    expect(problems.locator("ul.alternatives li")).to_have_text(
        ["2 × A100 PCIe 40GB — Runs now on spec-passthrough-01 (2 free there)."]
    )
    assert not VMRequest.objects.filter(vmi_name="quant-two").exists()
    shot("e2e-10-refused-with-alternatives")

    # 5. The same pages in Chinese. -----------------------------------------------------------
    page.select_option("#language-select", "zh-hans")
    page.click(".langswitch button")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    page.goto(base + "/inventory/")
    expect(page.locator("h1")).to_have_text("GPU 资源清单")
    expect(page.locator("#inventory-summary")).to_contain_text("按 GPU 型号")
    expect(page.locator("section.card h2", has_text="GPU 节点")).to_have_count(1)
    shot("e2e-11-zh-dashboard")
    page.goto(base + "/requests/new/")
    expect(page.locator("h1")).to_have_text("申请 GPU 虚拟机")
    expect(page.locator("#request-dependent h2")).to_have_text("GPU 与规格")
    expect(page.locator("form.request-form button.primary")).to_have_text("提交申请")
    shot("e2e-12-zh-request-form")
    page.goto(base + f"/requests/{vgpu_req.pk}/")
    expect(page.locator(f"#status-{vgpu_req.pk}")).to_have_text("运行中")
    expect(page.locator("section.outcome h2")).to_have_text("审批结果与虚拟机")
    expect(page.locator("section.outcome h3")).to_have_text("连接方式")
    shot("e2e-13-zh-request")

    worker.assert_alive()
    vmi_watcher.assert_alive()
    assert re.search(r"vmrequests\.provision\[.*\] succeeded", worker.log())
