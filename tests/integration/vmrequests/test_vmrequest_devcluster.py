"""Requests and approvals against the dev cluster's demo inventory (issue 5, "Done when").

The session cluster holds ``devcluster/specs/test.yaml`` plus ``specs/demo.yaml``; each test syncs
it into an empty database (``gpuinventory.sync.run_sync``), creates a team whose namespace is a
fresh cluster namespace, and goes through submit → the queue's verdict → approve.

Demo facts used (devcluster/specs/demo.yaml): ``a2000-node-01`` is the only node with an RTX
A2000 (one, free: the last device); ``t4-node-01`` (8 × T4, default config, idle),
``t4-node-02`` (8 × T4, ``T4-custom``, idle) and the test spec's ``spec-vgpu-01`` (2 × T4) are
the vm-vgpu T4 nodes, and none of them advertises ``T4-16Q``: it is only available by
re-profiling one of them. Other tests in the session add nodes of their own with other names;
the assertions here look at these nodes and resources only.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from kubernetes import client as k8s_client

from devcluster.server import DevCluster
from devcluster.spec import vmi_manifest
from gpuinventory import capacity
from gpuinventory.choices import SyncStatus
from gpuinventory.models import GpuConsumer, GpuResource, Reservation
from gpuinventory.sync import run_sync
from tests.integration.inventory.conftest import wait_for
from tests.integration.vmrequests.conftest import (
    make_analyst,
    make_approver,
    make_image,
    make_team,
    submit_request,
)
from vmrequests.approval import ApprovalRefused, approve
from vmrequests.choices import VMMode, VMRequestStatus
from vmrequests.models import Team, VMRequest
from vmrequests.placement import REPROFILE_PREFIX, QuotaBook, check_request, gpu_options

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

A2000 = "nvidia.com/GA106_RTX_A2000_12GB"
A2000_NODE = "a2000-node-01"
LAST_A2000_GONE = "All RTX A2000 12GB GPUs are in use or reserved right now."
VMI = ("kubevirt.io", "v1")
#: The idle T4 nodes that could offer T4-16Q after re-profiling, most instances first.
T4_REPROFILE_NODES = ["t4-node-01", "t4-node-02", "spec-vgpu-01"]


def sync() -> None:
    run = run_sync("command")
    assert (run.status, run.error) == (SyncStatus.SUCCESS, "")


def verdict_of(req: VMRequest) -> Any:
    """The approval queue's verdict for a pending request (``exclude_pk`` as approval uses it)."""
    return check_request(
        req.team, req.mode, req.resource_name, req.vgpu_type, req.device_count, exclude_pk=req.pk
    )


def a2000_counts() -> tuple[int, int, int, int]:
    """The A2000 on ``a2000-node-01``: (allocatable, used, reserved by active reservations, free)."""
    row = GpuResource.objects.get(node__name=A2000_NODE, name=A2000)
    (summary,) = [r for r in capacity.free_by_resource("vm-passthrough") if r.resource_name == A2000]
    assert summary.free == capacity.free_on_node(A2000_NODE)[A2000]
    return row.allocatable, row.used, summary.reserved, summary.free


def reprofile_nodes(vgpu_type: str) -> list[str]:
    return [c.node for c in capacity.reprofile_candidates(vgpu_type)]


@pytest.fixture
def team(portal_cluster: DevCluster, k8s_namespace: str) -> Team:
    """Team ``quant`` in a fresh namespace: at most 4 GPUs of any kind, 2 × ``T4-16Q``; the demo
    inventory synced."""
    sync()
    return make_team(k8s_namespace, quotas={("", ""): 4, (VMMode.VGPU, "T4-16Q"): 2})


def test_last_passthrough_device_is_reserved_once(team: Team) -> None:
    image = make_image()
    approver = make_approver(team)
    alice, bob = make_analyst(team, "alice"), make_analyst(team, "bob")
    assert a2000_counts() == (1, 0, 0, 1)  # exactly one free: the last one

    first = submit_request(team, alice, image, resource_name=A2000, gpu_model="RTX A2000 12GB")
    second = submit_request(team, bob, image, resource_name=A2000, gpu_model="RTX A2000 12GB")
    assert (first.vmi_name, first.vmi_namespace) == (f"alice-vm-{first.pk}", team.namespace)

    # The queue: both fit now, on the only node with an A2000; the quota after approval is 1 of 4.
    for req in (first, second):
        verdict = verdict_of(req)
        assert verdict.ok and verdict.problems() == []
        p = verdict.placement
        assert (p.fits, p.node, p.resource_name, p.free, p.reprofile) == (True, A2000_NODE, A2000, 1, None)
        assert [(n.node, n.free, n.reserved) for n in p.nodes_now] == [(A2000_NODE, 1, 0)]
        assert p.describe() == "Runs now on a2000-node-01 (1 free there)."
        assert [(q.scope, q.limit, q.used, q.after) for q in verdict.quotas] == [("any GPU", 4, 0, 1)]
        assert [q.describe() for q in verdict.quotas] == ["any GPU: 0 of 4 used, 1 after approval"]

    placement = approve(first, approver, "For the Q4 backtest.")
    assert (placement.node, placement.resource_name, placement.reprofile) == (A2000_NODE, A2000, None)
    first.refresh_from_db()
    assert (first.status, first.decided_by, first.decision_note) == (
        VMRequestStatus.APPROVED,
        approver,
        "For the Q4 backtest.",
    )
    assert list(
        Reservation.objects.values_list(
            "node__name",
            "resource_name",
            "vgpu_type",
            "count",
            "reprofile_config",
            "holder",
            "vmi_namespace",
            "vmi_name",
        )
    ) == [(A2000_NODE, A2000, "", 1, "", first.holder.key, team.namespace, first.vmi_name)]
    event = first.events.get(action="approve")
    assert event.data == {
        "placement": {"fits": True, "node": A2000_NODE, "resource_name": A2000},
        "quotas": ["any GPU: 0 of 4 used, 1 after approval"],
    }
    # The reservation counts as used: nothing left, while the device plugin still says 0 used.
    assert a2000_counts() == (1, 0, 1, 0)
    # The quota after approval is what the queue showed: 1 of 4 held.
    assert [
        (q.used, q.limit) for q in QuotaBook([team.pk]).usage(team.pk, VMMode.PASSTHROUGH, A2000, "", 0)
    ] == [(1, 4)]

    # The queue now says the second one does not fit, and approval refuses it with the plain reason.
    verdict = verdict_of(second)
    assert (verdict.ok, verdict.problems()) == (False, [LAST_A2000_GONE])
    assert [q.describe() for q in verdict.quotas] == ["any GPU: 1 of 4 used, 2 after approval"]
    with pytest.raises(ApprovalRefused) as refused:
        approve(second, approver)
    assert str(refused.value) == LAST_A2000_GONE
    assert refused.value.verdict.problems() == [LAST_A2000_GONE]
    second.refresh_from_db()
    assert (second.status, second.decided_by, second.decided_at) == (VMRequestStatus.SUBMITTED, None, None)
    assert list(second.events.values_list("action", flat=True)) == ["submit"]
    assert Reservation.objects.count() == 1


def test_launcher_pod_replaces_the_reservation(team: Team, k8s_api: k8s_client.ApiClient) -> None:
    """Once the VMI's virt-launcher pod is bound, the sync counts it in ``used`` and the
    reservation stops counting: free stays 0, the device is never counted twice."""
    req = submit_request(team, make_analyst(team, "alice"), make_image(), resource_name=A2000)
    approve(req, make_approver(team))
    assert a2000_counts() == (1, 0, 1, 0)

    custom = k8s_client.CustomObjectsApi(k8s_api)
    core = k8s_client.CoreV1Api(k8s_api)
    custom.create_namespaced_custom_object(
        *VMI,
        req.vmi_namespace,
        "virtualmachineinstances",
        vmi_manifest(req.vmi_name, req.vmi_namespace, [A2000], memory="16Gi", cores=4),
    )
    selector = f"vm.kubevirt.io/name={req.vmi_name}"
    try:
        pod = wait_for(
            lambda: next(
                (
                    p
                    for p in core.list_namespaced_pod(req.vmi_namespace, label_selector=selector).items
                    if p.spec.node_name and p.status.phase == "Running"
                ),
                None,
            ),
            "the virt-launcher pod bound and running",
        )
        assert pod.spec.node_name == A2000_NODE
        sync()
        assert list(
            GpuConsumer.objects.filter(node__name=A2000_NODE).values_list(
                "resource_name", "count", "pod_namespace", "vmi_name"
            )
        ) == [(A2000, 1, req.vmi_namespace, req.vmi_name)]
        # used 1, the reservation no longer active (reserved 0), free unchanged at 0.
        assert a2000_counts() == (1, 1, 0, 0)
        assert Reservation.objects.filter(holder=req.holder.key).count() == 1
        assert list(capacity.active_reservations()) == []
    finally:
        custom.delete_namespaced_custom_object(
            *VMI, req.vmi_namespace, "virtualmachineinstances", req.vmi_name
        )
        wait_for(
            lambda: not core.list_namespaced_pod(req.vmi_namespace, label_selector=selector).items,
            "the virt-launcher pod gone (the A2000 free again for the rest of the session)",
        )


def test_vgpu_type_by_reprofiling_an_idle_node(team: Team) -> None:
    image = make_image()
    approver = make_approver(team)
    alice, bob = make_analyst(team, "alice"), make_analyst(team, "bob")

    (option,) = [o for o in gpu_options(VMMode.VGPU) if o.vgpu_type == "T4-16Q"]
    assert (option.value, option.resource_name, option.free) == (REPROFILE_PREFIX + "T4-16Q", "", 0)
    assert [(c.node, c.current_config, c.config, c.instances) for c in option.reprofile] == [
        ("t4-node-01", "", "T4-16Q", 8),
        ("t4-node-02", "T4-custom", "T4-16Q", 8),
        ("spec-vgpu-01", "", "T4-16Q", 2),
    ]
    assert (
        option.label
        == "Tesla T4 · T4-16Q: 0 free; available after re-profiling node t4-node-01 (8 instances)"
    )

    req = submit_request(team, alice, image, mode=VMMode.VGPU, vgpu_type="T4-16Q", gpu_model="Tesla T4")
    verdict = verdict_of(req)
    assert verdict.ok
    p = verdict.placement
    assert (p.fits, p.node, p.resource_name, p.free, p.nodes_now) == (True, "t4-node-01", "", 0, ())
    assert (p.reprofile.node, p.reprofile.current_config, p.reprofile.config, p.reprofile.instances) == (
        "t4-node-01",
        "",
        "T4-16Q",
        8,
    )
    assert p.describe() == (
        "Re-profile idle node t4-node-01 from vGPU config (default) to T4-16Q (8 instances), then run there."
    )
    assert [q.describe() for q in verdict.quotas] == [
        "any GPU: 0 of 4 used, 1 after approval",
        "T4-16Q: 0 of 2 used, 1 after approval",
    ]

    placement = approve(req, approver)
    assert (placement.node, placement.reprofile.config) == ("t4-node-01", "T4-16Q")
    assert list(
        Reservation.objects.values_list(
            "node__name",
            "resource_name",
            "vgpu_type",
            "count",
            "reprofile_config",
            "reprofile_from",
            "holder",
        )
    ) == [("t4-node-01", "", "T4-16Q", 1, "T4-16Q", "", req.holder.key)]
    req.refresh_from_db()
    assert (req.status, req.resource_name, req.vgpu_type) == (VMRequestStatus.APPROVED, "", "T4-16Q")
    assert req.events.get(action="approve").data["placement"] == {
        "fits": True,
        "node": "t4-node-01",
        "resource_name": "",
        "reprofile": {"node": "t4-node-01", "from": "", "to": "T4-16Q", "instances": 8},
    }

    # t4-node-01 is promised: no longer offered for any re-profile; the next T4-16Q goes elsewhere.
    offers = capacity.reprofile_offers()
    assert [t for t, cands in offers.items() if "t4-node-01" in [c.node for c in cands]] == []
    assert reprofile_nodes("T4-16Q") == T4_REPROFILE_NODES[1:]
    nxt = submit_request(team, bob, image, mode=VMMode.VGPU, vgpu_type="T4-16Q", gpu_model="Tesla T4")
    verdict = verdict_of(nxt)
    assert verdict.ok
    assert (verdict.placement.node, verdict.placement.reprofile.current_config) == ("t4-node-02", "T4-custom")
    assert verdict.placement.describe() == (
        "Re-profile idle node t4-node-02 from vGPU config T4-custom to T4-16Q (8 instances), then run there."
    )
    # Quota after approval is what the queue showed for the first: 1 held of each.
    assert [q.describe() for q in verdict.quotas] == [
        "any GPU: 1 of 4 used, 2 after approval",
        "T4-16Q: 1 of 2 used, 2 after approval",
    ]


def test_approval_queue_page_shows_the_verdicts(team: Team, client: Client) -> None:
    image = make_image()
    approver = make_approver(team)
    alice = make_analyst(team, "alice")
    pt = submit_request(team, alice, image, resource_name=A2000, gpu_model="RTX A2000 12GB")
    vgpu = submit_request(team, alice, image, mode=VMMode.VGPU, vgpu_type="T4-16Q", gpu_model="Tesla T4")

    client.force_login(approver)
    response = client.get(reverse("vmrequests:approval_queue"))
    assert response.status_code == 200
    page = response.content.decode()
    for req in (pt, vgpu):
        assert reverse("vmrequests:vmrequest_approve", args=[req.pk]) in page
    assert "Runs now on a2000-node-01 (1 free there)." in page
    assert (
        "Re-profile idle node t4-node-01 from vGPU config (default) to T4-16Q (8 instances), then run there."
        in page
    )
    assert "any GPU: 0 of 4 used, 1 after approval" in page
