"""The approval service (vmrequests/approval.py): submit, approve with reservations, reject,
cancel and auto-approval, including every refused and lost-race branch."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from gpuinventory import capacity
from gpuinventory.models import Reservation
from tests.factories import (
    portal_user,
    stored_consumer,
    stored_node,
    stored_resource,
    stored_vgpu_config,
)
from vmrequests import approval
from vmrequests.approval import ApprovalRefused, NotAllowed, RequestSpec
from vmrequests.models import (
    AutoApprovalRule,
    GpuQuota,
    Team,
    TransitionError,
    VmImage,
    VMRequest,
    VMRequestEvent,
)
from vmrequests.placement import find_placement

pytestmark = pytest.mark.django_db

A100 = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_FILTER = ["0x1EB810DE"]


@pytest.fixture
def world() -> dict[str, Any]:
    """Team quant (namespace team-quant): analysts alice and carol, approver bob; frank approves
    team research only; dave is listed as a quant approver without the permission.
    Inventory: p1 with the last free A100 (2, 1 used); v1 Tesla T4 under T4-8Q with 1 of 2
    free (busy); v2 idle Tesla T4 re-profilable to T4-16Q (2 instances)."""
    quant = Team.objects.create(name="Quant", slug="quant", namespace="team-quant")
    research = Team.objects.create(name="Research", slug="research", namespace="team-research")
    w: dict[str, Any] = {
        "quant": quant,
        "research": research,
        "alice": portal_user("analyst", "alice"),
        "carol": portal_user("analyst", "carol"),
        "bob": portal_user("approver", "bob"),
        "frank": portal_user("approver", "frank"),
        "dave": portal_user("analyst", "dave"),
        "root": portal_user("admin", "root"),
    }
    quant.members.add(w["alice"], w["carol"], w["bob"])
    quant.approvers.add(w["bob"], w["dave"])
    research.approvers.add(w["frank"])
    w["image"] = VmImage.objects.create(
        name="Ubuntu 22.04", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu", login_user="ubuntu"
    )
    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=2)
    stored_resource(p1, A100, 2, used=1, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    stored_consumer(p1, A100, "virt-launcher-old-abcde", 1, vmi_name="old", pod_namespace="team-quant")
    v1 = stored_node(
        "v1", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(v1, T4_8Q, 2, used=1, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    stored_consumer(v1, T4_8Q, "virt-launcher-vgpu-abcde", 1, vmi_name="vgpu", pod_namespace="team-quant")
    stored_node("v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config_state="success")
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )
    return w


def spec(w: dict[str, Any], **fields: Any) -> RequestSpec:
    values: dict[str, Any] = {
        "team": w["quant"],
        "mode": "passthrough",
        "resource_name": A100,
        "vgpu_type": "",
        "gpu_model": "A100 PCIe 40GB",
        "device_count": 1,
        "cpu_cores": 8,
        "memory_gib": 32,
        "image": w["image"],
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq alice@laptop",
        "lease_days": 7,
        "justification": "fine-tune a model",
    }
    values.update(fields)
    return RequestSpec(**values)


def vgpu_spec(w: dict[str, Any], vtype: str, resource: str = "", **fields: Any) -> RequestSpec:
    return spec(w, mode="vgpu", resource_name=resource, vgpu_type=vtype, gpu_model="Tesla T4", **fields)


def events(req: VMRequest) -> list[tuple[Any, ...]]:
    return list(
        VMRequestEvent.objects.filter(request=req).values_list(
            "action", "from_status", "to_status", "actor__username", "actor_label"
        )
    )


def reservations() -> list[tuple[Any, ...]]:
    return list(
        Reservation.objects.order_by("holder").values_list(
            "holder",
            "node__name",
            "resource_name",
            "vgpu_type",
            "count",
            "reprofile_config",
            "reprofile_from",
            "vmi_namespace",
            "vmi_name",
        )
    )


def a100_free() -> int:
    return next(r.free for r in capacity.free_by_resource("vm-passthrough") if r.resource_name == A100)


# --- submit -----------------------------------------------------------------------------------


def test_submit_writes_the_request_and_its_first_event(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    req.refresh_from_db()
    assert (req.status, req.vmi_name, req.vmi_namespace, req.requester, req.submitted_by) == (
        "submitted",
        f"alice-vm-{req.pk}",
        "team-quant",
        world["alice"],
        None,
    )
    assert (req.resource_name, req.device_count, req.cpu_cores, req.memory_gib, req.lease_days) == (
        A100,
        1,
        8,
        32,
        7,
    )
    assert list(
        req.events.values_list(
            "action", "from_status", "to_status", "actor_id", "actor_label", "message", "data"
        )
    ) == [("submit", "", "submitted", world["alice"].pk, "", "fine-tune a model", {})]
    assert reservations() == []


def test_submit_on_behalf_of_the_requester(world: dict[str, Any]) -> None:
    bot = portal_user("staff", "ticket-bot")
    req = approval.submit(
        spec(world, ticket_source="jira", ticket_id="OPS-7", name="alice-gpu"),
        world["alice"],
        submitted_by=bot,
    )
    req.refresh_from_db()
    assert (req.submitted_by, req.vmi_name, req.ticket_source, req.ticket_id) == (
        bot,
        "alice-gpu",
        "jira",
        "OPS-7",
    )
    assert list(req.events.values_list("actor__username", "data")) == [
        ("ticket-bot", {"submitted_by": "ticket-bot"})
    ]
    same = approval.submit(spec(world), world["alice"], submitted_by=world["alice"])
    assert same.submitted_by is None
    assert list(same.events.values_list("actor__username", "data")) == [("alice", {})]


# --- approve ----------------------------------------------------------------------------------


def test_approve_reserves_the_device_and_records_placement_and_quota(world: dict[str, Any]) -> None:
    GpuQuota.objects.create(team=world["quant"], mode="", gpu="", max_devices=4)
    req = approval.submit(spec(world), world["alice"])
    assert a100_free() == 1
    placement = approval.approve(req, world["bob"], "go ahead")
    assert (placement.fits, placement.node, placement.resource_name, placement.reprofile) == (
        True,
        "p1",
        A100,
        None,
    )
    assert req.status == "approved"
    assert (req.decided_by, req.decision_note, req.decided_by_policy) == (world["bob"], "go ahead", False)
    assert reservations() == [(req.holder.key, "p1", A100, "", 1, "", "", "team-quant", req.vmi_name)]
    assert events(req) == [
        ("submit", "", "submitted", "alice", ""),
        ("approve", "submitted", "approved", "bob", ""),
    ]
    assert req.events.get(action="approve").data == {
        "placement": {"fits": True, "node": "p1", "resource_name": A100},
        "quotas": ["any GPU: 0 of 4 used, 1 after approval"],
    }
    assert a100_free() == 0


def test_approve_a_reprofile(world: dict[str, Any]) -> None:
    req = approval.submit(vgpu_spec(world, "T4-16Q"), world["alice"])
    placement = approval.approve(req, world["bob"])
    assert (placement.node, placement.resource_name) == ("v2", "")
    assert reservations() == [
        (req.holder.key, "v2", "", "T4-16Q", 1, "T4-16Q", "", "team-quant", req.vmi_name)
    ]
    assert req.events.get(action="approve").data["placement"] == {
        "fits": True,
        "node": "v2",
        "resource_name": "",
        "reprofile": {"node": "v2", "from": "", "to": "T4-16Q", "instances": 2},
    }
    assert req.resource_name == ""
    # The reserved node is no longer idle: a second T4-16Q request has nowhere to go.
    assert find_placement("vgpu", "", "T4-16Q", 1).fits is False


def test_approve_fills_in_the_resource_name_of_an_advertised_vgpu_type(world: dict[str, Any]) -> None:
    req = approval.submit(vgpu_spec(world, "T4-8Q"), world["alice"])
    approval.approve(req, world["bob"])
    assert (req.resource_name, VMRequest.objects.get(pk=req.pk).resource_name) == (T4_8Q, T4_8Q)
    assert reservations() == [(req.holder.key, "v1", T4_8Q, "T4-8Q", 1, "", "", "team-quant", req.vmi_name)]


def test_second_approval_of_the_last_device_is_refused(world: dict[str, Any]) -> None:
    first = approval.submit(spec(world), world["alice"])
    second = approval.submit(spec(world), world["carol"])
    approval.approve(first, world["bob"])
    with pytest.raises(ApprovalRefused) as exc:
        approval.approve(second, world["bob"])
    assert str(exc.value) == "All A100 PCIe 40GB GPUs are in use or reserved right now."
    assert exc.value.verdict.ok is False
    second.refresh_from_db()
    assert second.status == "submitted"
    assert events(second) == [("submit", "", "submitted", "carol", "")]
    assert [r[0] for r in reservations()] == [first.holder.key]


def test_over_quota_at_approval_is_refused(world: dict[str, Any]) -> None:
    GpuQuota.objects.create(team=world["quant"], mode="", gpu="", max_devices=1)
    held = approval.submit(vgpu_spec(world, "T4-8Q"), world["alice"])
    approval.approve(held, world["bob"])
    req = approval.submit(spec(world), world["alice"])
    with pytest.raises(ApprovalRefused) as exc:
        approval.approve(req, world["bob"])
    assert exc.value.verdict.problems() == [
        "Your team's quota for any GPU is 1 devices and 1 are held; this request needs 1 more."
    ]
    assert VMRequest.objects.get(pk=req.pk).status == "submitted"
    assert [r[0] for r in reservations()] == [held.holder.key]


@pytest.mark.parametrize("who", ["alice", "carol", "frank", "dave"])
def test_approve_by_a_non_approver_is_not_allowed(world: dict[str, Any], who: str) -> None:
    req = approval.submit(spec(world), world["alice"])
    with pytest.raises(NotAllowed, match=r"^You are not an approver of team Quant\.$"):
        approval.approve(req, world[who])
    assert VMRequest.objects.get(pk=req.pk).status == "submitted"
    assert reservations() == []


def test_an_approver_cannot_approve_their_own_request(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["bob"])
    # bob is quant's only approver holding the permission (dave lacks it)
    with pytest.raises(NotAllowed, match=r"^Needs another approver: you are the team's only approver\.$"):
        approval.approve(req, world["bob"])
    world["ellen"] = portal_user("approver", "ellen")
    world["quant"].approvers.add(world["ellen"])
    with pytest.raises(NotAllowed, match=r"^You filed this request: another approver must decide it\.$"):
        approval.approve(req, world["bob"])
    assert (VMRequest.objects.get(pk=req.pk).status, reservations()) == ("submitted", [])
    approval.approve(req, world["ellen"])
    assert VMRequest.objects.get(pk=req.pk).status == "approved"


def test_an_admin_cannot_approve_their_own_request_unless_the_setting_allows(
    world: dict[str, Any], settings: Any
) -> None:
    req = approval.submit(spec(world), world["root"])
    with pytest.raises(NotAllowed, match=r"^You filed this request: another approver must decide it\.$"):
        approval.approve(req, world["root"])
    assert VMRequest.objects.get(pk=req.pk).status == "submitted"
    settings.PORTAL_ALLOW_SELF_APPROVAL = True
    approval.approve(req, world["root"])
    assert VMRequest.objects.get(pk=req.pk).status == "approved"


def test_superuser_may_approve(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    approval.approve(req, world["root"])
    assert (req.status, req.decided_by) == ("approved", world["root"])


def test_approve_twice_loses(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    stale = VMRequest.objects.get(pk=req.pk)
    approval.approve(req, world["bob"])
    for again in (req, stale):
        with pytest.raises(TransitionError, match=r"is approved; it cannot be approved\.$"):
            approval.approve(again, world["bob"])
    assert [r[0] for r in reservations()] == [req.holder.key]
    assert [e[0] for e in events(req)] == ["submit", "approve"]


def test_approve_after_someone_else_rejected_loses(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    approval.reject(VMRequest.objects.get(pk=req.pk), world["root"], "not this quarter")
    with pytest.raises(TransitionError, match=r"is rejected; it cannot be approved\.$"):
        approval.approve(req, world["bob"])
    assert reservations() == []


# --- reject and cancel ------------------------------------------------------------------------


def test_reject(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    with pytest.raises(NotAllowed):
        approval.reject(req, world["carol"], "no")
    with pytest.raises(ValueError, match="a rejection needs a reason"):
        approval.reject(req, world["bob"], "")
    approval.reject(req, world["bob"], "use the shared cluster")
    req.refresh_from_db()
    assert (req.status, req.decided_by, req.decision_note) == (
        "rejected",
        world["bob"],
        "use the shared cluster",
    )
    with pytest.raises(TransitionError):
        approval.reject(req, world["bob"], "again")


def test_cancel_after_approve_gives_the_capacity_back(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    approval.approve(req, world["bob"])
    assert (a100_free(), find_placement("passthrough", A100, "", 1).fits) == (0, False)
    with pytest.raises(NotAllowed, match="Only the requester or an approver of the team can cancel"):
        approval.cancel(req, world["carol"])
    approval.cancel(req, world["alice"], "not needed")
    assert VMRequest.objects.get(pk=req.pk).status == "cancelled"
    assert reservations() == []
    assert (a100_free(), find_placement("passthrough", A100, "", 1).node) == (1, "p1")
    with pytest.raises(TransitionError, match=r"is cancelled; it cannot be cancelled\.$"):
        approval.cancel(req, world["alice"])


def test_an_approver_may_cancel(world: dict[str, Any]) -> None:
    req = approval.submit(spec(world), world["alice"])
    approval.cancel(req, world["bob"])
    assert events(req)[-1] == ("cancel", "submitted", "cancelled", "bob", "")


# --- auto-approval ----------------------------------------------------------------------------


def rule(w: dict[str, Any], **fields: Any) -> AutoApprovalRule:
    values: dict[str, Any] = {"mode": "vgpu", "max_devices": 1, "max_vgpu_framebuffer_gb": Decimal("8")}
    values.update(fields)
    return AutoApprovalRule.objects.create(team=w["quant"], **values)


def test_matching_rule_approves_as_policy(world: dict[str, Any]) -> None:
    r = rule(world)
    req = approval.submit(vgpu_spec(world, "T4-8Q", T4_8Q), world["alice"])
    assert req.status == "approved"
    assert (req.decided_by, req.decided_by_policy) == (None, True)
    assert events(req) == [
        ("submit", "", "submitted", "alice", ""),
        ("auto_approve", "submitted", "approved", None, "policy"),
    ]
    event = req.events.get(action="auto_approve")
    assert event.message == "Auto-approved by rule: vGPU (GPU slice) up to 1 device(s), ≤ 8 GB"
    assert event.data == {
        "placement": {"fits": True, "node": "v1", "resource_name": T4_8Q},
        "quotas": [],
        "rule_id": r.pk,
    }
    assert reservations() == [(req.holder.key, "v1", T4_8Q, "T4-8Q", 1, "", "", "team-quant", req.vmi_name)]


def test_matching_rule_without_capacity_leaves_a_note(world: dict[str, Any]) -> None:
    rule(world)
    first = approval.submit(vgpu_spec(world, "T4-8Q", T4_8Q), world["alice"])
    req = approval.submit(vgpu_spec(world, "T4-8Q", T4_8Q), world["carol"])
    assert (first.status, req.status) == ("approved", "submitted")
    assert events(req) == [
        ("submit", "", "submitted", "carol", ""),
        ("note", "submitted", "submitted", None, "policy"),
    ]
    assert req.events.get(action="note").message == (
        "Auto-approval rule matched (vGPU (GPU slice) up to 1 device(s), ≤ 8 GB) but the request does not "
        "fit now: No node has a free T4-8Q vGPU, and no idle node can be re-profiled to offer it. "
        "Left for an approver."
    )
    assert [r[0] for r in reservations()] == [first.holder.key]


@pytest.mark.parametrize(
    ("rule_fields", "request_type"),
    [
        ({}, "T4-16Q"),  # 16 GB > 8 GB
        ({"mode": "passthrough", "max_vgpu_framebuffer_gb": None}, "T4-8Q"),
        ({"enabled": False}, "T4-8Q"),
        ({"max_lease_days": 3}, "T4-8Q"),
    ],
)
def test_non_matching_rule_leaves_the_request_submitted(
    world: dict[str, Any], rule_fields: dict[str, Any], request_type: str
) -> None:
    rule(world, **rule_fields)
    req = approval.submit(vgpu_spec(world, request_type), world["alice"])
    assert VMRequest.objects.get(pk=req.pk).status == "submitted"
    assert events(req) == [("submit", "", "submitted", "alice", "")]
    assert reservations() == []


def test_rules_of_another_team_do_not_apply(world: dict[str, Any]) -> None:
    AutoApprovalRule.objects.create(team=world["research"], mode="vgpu", max_devices=1)
    req = approval.submit(vgpu_spec(world, "T4-8Q", T4_8Q), world["alice"])
    assert req.status == "submitted"
