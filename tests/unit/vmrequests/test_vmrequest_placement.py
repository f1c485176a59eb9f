"""Placement, quotas and alternatives (vmrequests/placement.py) over stored inventory rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from gpuinventory.capacity import CapacitySnapshot, NodeFree
from gpuinventory.models import GpuNode, Reservation
from tests.factories import (
    stored_consumer,
    stored_node,
    stored_permitted_device,
    stored_resource,
    stored_vgpu_config,
)
from vmrequests.models import MAX_DEVICES, GpuQuota, Team, VmImage, VMRequest
from vmrequests.placement import (
    REPROFILE_PREFIX,
    GpuOption,
    Placement,
    QuotaBook,
    QuotaUse,
    check_request,
    find_placement,
    gpu_options,
    vgpus_per_vm_limit,
)

pytestmark = pytest.mark.django_db

A100 = "nvidia.com/GA100_A100_PCIE_40GB"
A10_PT = "nvidia.com/GA102GL_A10"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_4Q = "nvidia.com/GRID_T4-4Q"
T4_2Q = "nvidia.com/GRID_T4-2Q"
A10_8Q = "nvidia.com/NVIDIA_A10-8Q"
T4_FILTER = ["0x1EB810DE"]


def a100(name: str, alloc: int, used: int = 0, **node_fields: Any) -> Any:
    node = stored_node(name, "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=alloc, **node_fields)
    stored_resource(
        node, A100, alloc, used=used, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True
    )
    return node


def vgpu_node(name: str, resource: str, vtype: str, alloc: int, used: int = 0, **fields: Any) -> Any:
    """A vm-vgpu node advertising ``alloc`` × ``resource``; ``used`` devices held by one VM."""
    model = "A10" if vtype.startswith("A10") else "Tesla T4"
    fields.setdefault("vgpu_config_state", "success")
    node = stored_node(name, "vm-vgpu", gpu_model=model, gpu_count=2, vgpu_config=vtype, **fields)
    stored_resource(
        node, resource, alloc, used=used, model=model, vgpu_type=vtype, series=vtype[-1], permitted=True
    )
    if used:
        stored_consumer(node, resource, f"virt-launcher-{name}-vm-abcde", used, vmi_name=f"{name}-vm")
    return node


def reserve(node: Any, holder: str, resource: str, count: int, vgpu_type: str = "") -> Reservation:
    return Reservation.objects.create(
        node=node,
        resource_name=resource,
        vgpu_type=vgpu_type,
        count=count,
        holder=holder,
        vmi_namespace="team-quant",
        vmi_name=holder.replace(":", "-"),
    )


@pytest.fixture
def fleet() -> None:
    """Passthrough: pa 3 free, pb 2, pc 2, pd 1 (A100); px A10 not permitted; a stale A100 row.
    vGPU: v1 Tesla T4 × 2 under T4-8Q, 4 − 1 used = 3 free (busy); v2 Tesla T4 × 2 idle, nothing
    advertised (re-profilable to T4-8Q ×4 or T4-16Q ×2)."""
    a100("pa", 4, used=1)
    a100("pb", 2)
    a100("pc", 3, used=1)
    a100("pd", 1)
    stale = stored_node("pz", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=2)
    stored_resource(stale, A100, 2, model="A100 PCIe 40GB", stale=True)
    gone = stored_node("pgone", "vm-passthrough", gpu_model="A100 PCIe 40GB", present=False)
    stored_resource(gone, A100, 8, model="A100 PCIe 40GB", permitted=True)
    px = stored_node("px", "vm-passthrough", gpu_model="A10", gpu_count=2)
    stored_resource(px, A10_PT, 2, model="A10", pci_device_id="2236", permitted=False)
    c1 = stored_node("c1", "container", gpu_model="NVIDIA-B200", gpu_count=8)
    stored_resource(c1, "nvidia.com/gpu", 8)
    vgpu_node("v1", T4_8Q, "T4-8Q", 4, used=1)
    stored_node("v2", "vm-vgpu", gpu_model="Tesla T4", gpu_count=2, vgpu_config_state="success")
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    stored_vgpu_config(
        "T4-16Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-16Q": 1}}]
    )


def summary(options: list[GpuOption]) -> list[tuple[Any, ...]]:
    return [
        (
            o.value,
            o.resource_name,
            o.vgpu_type,
            o.model,
            o.free,
            o.max_on_one_node,
            o.per_vm_limit,
            [(c.node, c.config, c.instances) for c in o.reprofile],
        )
        for o in options
    ]


# --- gpu_options ------------------------------------------------------------------------------


def test_passthrough_options_exist_and_are_permitted(fleet: None) -> None:
    assert summary(gpu_options("passthrough")) == [(A100, A100, "", "A100 PCIe 40GB", 8, 3, MAX_DEVICES, [])]


def test_passthrough_free_counts_subtract_reservations(fleet: None) -> None:
    reserve(GpuNode.objects.get(name="pa"), "vmrequest:1", A100, 2)
    assert summary(gpu_options("passthrough")) == [(A100, A100, "", "A100 PCIe 40GB", 6, 2, MAX_DEVICES, [])]


def test_vgpu_options_with_reprofile_only_types(fleet: None) -> None:
    assert summary(gpu_options("vgpu")) == [
        (REPROFILE_PREFIX + "T4-16Q", "", "T4-16Q", "Tesla T4", 0, 0, 8, [("v2", "T4-16Q", 2)]),
        (T4_8Q, T4_8Q, "T4-8Q", "Tesla T4", 3, 3, 1, [("v2", "T4-8Q", 4)]),
    ]


def test_reprofile_only_type_needs_kubevirt_permission_when_any_is_listed(fleet: None) -> None:
    stored_permitted_device(T4_8Q, "GRID T4-8Q", kind="mdev")
    assert [o.value for o in gpu_options("vgpu")] == [T4_8Q]
    stored_permitted_device("nvidia.com/GRID_T4-16Q", "GRID T4-16Q", kind="mdev")
    assert [o.value for o in gpu_options("vgpu")] == ["vgpu-type:T4-16Q", T4_8Q]


def test_absent_permitted_devices_count_as_none_listed(fleet: None) -> None:
    stored_permitted_device(T4_8Q, "GRID T4-8Q", kind="mdev", present=False)
    assert [o.value for o in gpu_options("vgpu")] == ["vgpu-type:T4-16Q", T4_8Q]


def test_not_permitted_vgpu_resource_is_not_offered(fleet: None) -> None:
    vgpu_node("v9", A10_8Q, "A10-8Q", 3).resources.update(permitted=False)
    assert [o.value for o in gpu_options("vgpu")] == ["vgpu-type:T4-16Q", T4_8Q]


def test_option_label() -> None:
    option = GpuOption("vgpu", T4_8Q, T4_8Q, "T4-8Q", "Tesla T4", 3, 3, 1)
    assert option.label == "Tesla T4 · T4-8Q: 3 free"
    assert option.fits_now_or_later is True
    assert GpuOption("passthrough", A100, A100, "", "", 0, 0, 8).label == f"{A100}: 0 free"
    assert GpuOption("passthrough", A100, A100, "", "", 0, 0, 8).fits_now_or_later is False


def test_option_label_with_reprofile(fleet: None) -> None:
    option = gpu_options("vgpu")[0]
    assert option.label == "Tesla T4 · T4-16Q: 0 free; available after re-profiling node v2 (2 instances)"
    assert option.fits_now_or_later is True


@pytest.mark.parametrize(
    ("vgpu_type", "limit"),
    [
        ("T4-16Q", 8),
        ("T4-8Q", 1),
        ("A10-24Q", 8),
        ("A10-24A", 1),
        ("A10-24C", 8),
        ("A100-7-40C", 8),
        ("A100-40C", 8),
        ("A100-20C", 1),
        ("garbage", 1),
        ("", 1),
    ],
)
def test_vgpus_per_vm_limit(vgpu_type: str, limit: int) -> None:
    assert vgpus_per_vm_limit(vgpu_type) == limit


# --- find_placement ---------------------------------------------------------------------------


@pytest.mark.parametrize(("count", "node", "free"), [(1, "pd", 1), (2, "pb", 2), (3, "pa", 3)])
def test_best_fit_takes_the_node_with_the_fewest_free_that_fits(
    fleet: None, count: int, node: str, free: int
) -> None:
    placement = find_placement("passthrough", A100, "", count)
    assert (placement.fits, placement.node, placement.resource_name, placement.free, placement.reprofile) == (
        True,
        node,
        A100,
        free,
        None,
    )
    everyone = [("pa", 3), ("pb", 2), ("pc", 2), ("pd", 1)]
    assert [(n.node, n.free) for n in placement.nodes_now] == [(n, f) for n, f in everyone if f >= count]
    assert placement.reason == ""
    assert placement.describe() == f"Runs now on {node} ({free} free there)."


def test_all_devices_must_come_from_one_node(fleet: None) -> None:
    placement = find_placement("passthrough", A100, "", 4)
    assert placement == Placement(
        False,
        reason="No single node has 4 free A100 PCIe 40GB; the most free on one node is 3.",
        free_in_cluster=8,  # pa 3 + pb 2 + pc 2 + pd 1
    )
    assert placement.describe() == placement.reason
    assert placement.as_json() == {"fits": False, "node": "", "resource_name": "", "reason": placement.reason}


def test_reservations_change_the_best_fit(fleet: None) -> None:
    reserve(GpuNode.objects.get(name="pd"), "vmrequest:1", A100, 1)
    reserve(GpuNode.objects.get(name="pb"), "vmrequest:2", A100, 1)
    placement = find_placement("passthrough", A100, "", 1)
    assert (placement.node, placement.free) == ("pb", 1)
    assert placement.nodes_now == (
        NodeFree("pa", "vm-passthrough", A100, 3, 4, 0),
        NodeFree("pc", "vm-passthrough", A100, 2, 3, 0),
        NodeFree("pb", "vm-passthrough", A100, 1, 2, 1),
    )


def test_everything_in_use_reason(fleet: None) -> None:
    for name, free in [("pa", 3), ("pb", 2), ("pc", 2), ("pd", 1)]:
        reserve(GpuNode.objects.get(name=name), f"vmrequest:{name}", A100, free)
    assert find_placement("passthrough", A100, "", 1).reason == (
        "All A100 PCIe 40GB GPUs are in use or reserved right now."
    )
    assert find_placement("passthrough", "nvidia.com/GA100_UNKNOWN", "", 1).reason == (
        "All nvidia.com/GA100_UNKNOWN GPUs are in use or reserved right now."
    )


def test_vgpu_placement_now_by_type(fleet: None) -> None:
    placement = find_placement("vgpu", "", "T4-8Q", 1)
    assert (placement.fits, placement.node, placement.resource_name, placement.free) == (True, "v1", T4_8Q, 3)


def test_reprofile_fallback(fleet: None) -> None:
    placement = find_placement("vgpu", "", "T4-16Q", 2)
    assert (placement.fits, placement.node, placement.resource_name, placement.free, placement.nodes_now) == (
        True,
        "v2",
        "",
        0,
        (),
    )
    assert placement.reprofile is not None
    assert (placement.reprofile.node, placement.reprofile.current_config, placement.reprofile.config) == (
        "v2",
        "",
        "T4-16Q",
    )
    assert placement.describe() == (
        "Re-profile idle node v2 from vGPU config (default) to T4-16Q (2 instances), then run there."
    )
    assert placement.as_json() == {
        "fits": True,
        "node": "v2",
        "resource_name": "",
        "reprofile": {"node": "v2", "from": "", "to": "T4-16Q", "instances": 2},
    }


def test_advertised_type_falls_back_to_reprofile_when_used_up(fleet: None) -> None:
    reserve(GpuNode.objects.get(name="v1"), "vmrequest:1", T4_8Q, 3, "T4-8Q")
    placement = find_placement("vgpu", T4_8Q, "T4-8Q", 1)
    assert (placement.fits, placement.node, placement.resource_name) == (True, "v2", "")
    assert placement.reprofile is not None
    assert (placement.reprofile.config, placement.reprofile.instances) == ("T4-8Q", 4)


def test_reprofile_that_cannot_offer_enough_instances(fleet: None) -> None:
    placement = find_placement("vgpu", "", "T4-16Q", 3)
    assert placement == Placement(
        False, reason="No node has a free T4-16Q vGPU, and no idle node can be re-profiled to offer it."
    )


def test_reprofile_candidate_gone_once_reserved(fleet: None) -> None:
    reserve(GpuNode.objects.get(name="v2"), "vmrequest:7", "", 1, "T4-16Q")
    assert find_placement("vgpu", "", "T4-16Q", 1).fits is False


# --- quotas -----------------------------------------------------------------------------------


def make_team(slug: str = "quant") -> Team:
    return Team.objects.create(name=slug.title(), slug=slug, namespace=f"team-{slug}")


def open_request(team: Team, status: str, mode: str, resource: str, vtype: str, count: int) -> VMRequest:
    user, _ = User.objects.get_or_create(username="alice")
    image, _ = VmImage.objects.get_or_create(name="Ubuntu", defaults={"image": "x", "os": "Ubuntu"})
    req = VMRequest.objects.create(
        requester=user,
        team=team,
        mode=mode,
        resource_name=resource,
        vgpu_type=vtype,
        device_count=count,
        cpu_cores=4,
        memory_gib=16,
        image=image,
        ssh_public_key="ssh-ed25519 AAAA",
        lease_days=7,
        justification="x",
        vmi_namespace=team.namespace,
        status=status,
    )
    req.vmi_name = f"alice-vm-{req.pk}"
    req.save(update_fields=["vmi_name"])
    return req


@pytest.fixture
def quotas() -> dict[str, Any]:
    team, other = make_team("quant"), make_team("research")
    q = {
        "any": GpuQuota.objects.create(team=team, mode="", gpu="", max_devices=6),
        "pt": GpuQuota.objects.create(team=team, mode="passthrough", gpu="", max_devices=4),
        "a100": GpuQuota.objects.create(team=team, mode="passthrough", gpu=A100, max_devices=2),
        "vgpu": GpuQuota.objects.create(team=team, mode="vgpu", gpu="", max_devices=3),
        "t4_8q": GpuQuota.objects.create(team=team, mode="vgpu", gpu="T4-8Q", max_devices=1),
        "other_any": GpuQuota.objects.create(team=other, mode="", gpu="", max_devices=1),
    }
    reqs = {
        "a100_approved": open_request(team, "approved", "passthrough", A100, "", 1),
        "a100_running": open_request(team, "running", "passthrough", A100, "", 1),
        "a10_provisioning": open_request(team, "provisioning", "passthrough", A10_PT, "", 1),
        "t4_8q_running": open_request(team, "running", "vgpu", T4_8Q, "T4-8Q", 1),
        "t4_16q_reprofile": open_request(team, "approved", "vgpu", "", "T4-16Q", 2),
    }
    for status in ("submitted", "rejected", "cancelled", "failed", "deleted", "deleting"):
        open_request(team, status, "passthrough", A100, "", 3)
    open_request(other, "running", "passthrough", A100, "", 4)
    return {"team": team, "other": other, **q, **reqs}


def uses(result: list[QuotaUse]) -> list[tuple[int, str, int, int, int]]:
    return [(u.quota_id, u.scope, u.limit, u.used, u.requested) for u in result]


def test_quota_book_loads_in_two_queries(quotas: dict[str, Any], django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(2):
        QuotaBook([quotas["team"].pk, quotas["other"].pk])


def test_quota_usage_passthrough_resource(quotas: dict[str, Any]) -> None:
    q, team = quotas, quotas["team"]
    book = QuotaBook([team.pk])
    assert uses(book.usage(team.pk, "passthrough", A100, "", 1)) == [
        (q["any"].pk, "any GPU", 6, 6, 1),
        (q["pt"].pk, "any passthrough (whole GPU)", 4, 3, 1),
        (q["a100"].pk, A100, 2, 2, 1),
    ]
    assert [u.fits for u in book.usage(team.pk, "passthrough", A100, "", 1)] == [False, True, False]


def test_quota_usage_other_passthrough_resource(quotas: dict[str, Any]) -> None:
    q, team = quotas, quotas["team"]
    assert uses(QuotaBook([team.pk]).usage(team.pk, "passthrough", A10_PT, "", 1)) == [
        (q["any"].pk, "any GPU", 6, 6, 1),
        (q["pt"].pk, "any passthrough (whole GPU)", 4, 3, 1),
    ]


def test_quota_usage_vgpu_type(quotas: dict[str, Any]) -> None:
    q, team = quotas, quotas["team"]
    assert uses(QuotaBook([team.pk]).usage(team.pk, "vgpu", "", "T4-8Q", 1)) == [
        (q["any"].pk, "any GPU", 6, 6, 1),
        (q["vgpu"].pk, "any vGPU (GPU slice)", 3, 3, 1),
        (q["t4_8q"].pk, "T4-8Q", 1, 1, 1),
    ]
    assert uses(QuotaBook([team.pk]).usage(team.pk, "vgpu", "", "T4-16Q", 2)) == [
        (q["any"].pk, "any GPU", 6, 6, 2),
        (q["vgpu"].pk, "any vGPU (GPU slice)", 3, 3, 2),
    ]


def test_quota_usage_excludes_the_request_being_approved(quotas: dict[str, Any]) -> None:
    q, team = quotas, quotas["team"]
    book = QuotaBook([team.pk])
    result = book.usage(team.pk, "passthrough", A100, "", 1, exclude_pk=q["a100_approved"].pk)
    assert uses(result) == [
        (q["any"].pk, "any GPU", 6, 5, 1),
        (q["pt"].pk, "any passthrough (whole GPU)", 4, 2, 1),
        (q["a100"].pk, A100, 2, 1, 1),
    ]
    assert [u.fits for u in result] == [True, True, True]
    assert result[2].describe() == f"{A100}: 1 of 2 used, 2 after approval"


def test_quota_usage_per_team(quotas: dict[str, Any]) -> None:
    q = quotas
    book = QuotaBook([q["team"].pk, q["other"].pk])
    assert uses(book.usage(q["other"].pk, "vgpu", "", "T4-8Q", 1)) == [
        (q["other_any"].pk, "any GPU", 1, 4, 1)
    ]
    assert uses(QuotaBook([]).usage(q["team"].pk, "vgpu", "", "T4-8Q", 1)) == []


def test_quota_use_arithmetic() -> None:
    use = QuotaUse(1, "any GPU", 4, 3, 2)
    assert (use.after, use.fits, use.describe()) == (5, False, "any GPU: 3 of 4 used, 5 after approval")
    assert QuotaUse(1, "any GPU", 4, 3, 1).fits is True


# --- check_request ------------------------------------------------------------------------------


def test_check_request_ok(fleet: None) -> None:
    team = make_team()
    verdict = check_request(team, "passthrough", A100, "", 2)
    assert (verdict.ok, verdict.placement.node, verdict.quotas, verdict.alternatives, verdict.problems()) == (
        True,
        "pb",
        [],
        [],
        [],
    )


def test_fewer_devices_of_the_same_gpu_come_first(fleet: None) -> None:
    team = make_team()
    px = stored_node("py", "vm-passthrough", gpu_model="A10", gpu_count=4)
    stored_resource(px, A10_PT, 4, model="A10", pci_device_id="2236", permitted=True)
    verdict = check_request(team, "passthrough", A100, "", 4)
    assert verdict.ok is False
    assert verdict.problems() == ["No single node has 4 free A100 PCIe 40GB; the most free on one node is 3."]
    assert [(a.option.value, a.count, a.placement.node) for a in verdict.alternatives] == [
        (A100, 3, "pa"),
        (A10_PT, 4, "py"),
    ]
    assert verdict.alternatives[0].describe() == "3 × A100 PCIe 40GB — Runs now on pa (3 free there)."


def test_alternatives_respect_quota(fleet: None) -> None:
    team = make_team()
    GpuQuota.objects.create(team=team, mode="passthrough", gpu=A100, max_devices=2)
    verdict = check_request(team, "passthrough", A100, "", 4)
    assert verdict.problems() == [
        "No single node has 4 free A100 PCIe 40GB; the most free on one node is 3.",
        f"Your team's quota for {A100} is 2 devices and 0 are held; this request needs 4 more.",
    ]
    assert [(a.option.value, a.count, a.placement.node) for a in verdict.alternatives] == [(A100, 2, "pb")]


def test_no_alternatives_when_asked_not_to(fleet: None) -> None:
    verdict = check_request(make_team(), "passthrough", A100, "", 4, with_alternatives=False)
    assert (verdict.ok, verdict.alternatives) == (False, [])


@pytest.fixture
def vgpu_fleet() -> None:
    """Every vGPU node busy (no re-profiling): T4-8Q used up; T4-4Q 3 free; T4-2Q 7 free;
    A10-8Q 2 free."""
    vgpu_node("v1", T4_8Q, "T4-8Q", 2, used=2)
    vgpu_node("v2", T4_4Q, "T4-4Q", 4, used=1)
    vgpu_node("v3", T4_2Q, "T4-2Q", 8, used=1)
    vgpu_node("v4", A10_8Q, "A10-8Q", 3, used=1)


def test_vgpu_alternatives_same_model_then_nearest_frame_buffer(vgpu_fleet: None) -> None:
    verdict = check_request(make_team(), "vgpu", T4_8Q, "T4-8Q", 1)
    assert verdict.problems() == [
        "No node has a free T4-8Q vGPU, and no idle node can be re-profiled to offer it."
    ]
    assert [(a.option.vgpu_type, a.count, a.placement.node) for a in verdict.alternatives] == [
        ("T4-4Q", 1, "v2"),
        ("T4-2Q", 1, "v3"),
        ("A10-8Q", 1, "v4"),
    ]


def test_vgpu_alternatives_respect_quota_and_max(vgpu_fleet: None) -> None:
    team = make_team()
    GpuQuota.objects.create(team=team, mode="vgpu", gpu="T4-4Q", max_devices=0)
    verdict = check_request(team, "vgpu", T4_8Q, "T4-8Q", 1, max_alternatives=1)
    assert [(a.option.vgpu_type, a.count) for a in verdict.alternatives] == [("T4-2Q", 1)]


def test_same_vgpu_fallback_never_exceeds_the_per_vm_limit() -> None:
    """Regression: over quota with 3 × T4-8Q, the same type was offered as 2 × T4-8Q although a VM
    may hold only one T4-8Q (the fallback now starts at ``min(count - 1, per_vm_limit)``)."""
    vgpu_node("v1", T4_8Q, "T4-8Q", 4)
    team = make_team()
    GpuQuota.objects.create(team=team, mode="vgpu", gpu="T4-8Q", max_devices=2)
    verdict = check_request(team, "vgpu", T4_8Q, "T4-8Q", 3)
    assert verdict.placement.fits is True
    assert [(q.scope, q.used, q.requested, q.fits) for q in verdict.quotas] == [("T4-8Q", 0, 3, False)]
    assert [(a.option.vgpu_type, a.count, a.placement.node) for a in verdict.alternatives] == [
        ("T4-8Q", 1, "v1")
    ]


def test_same_whole_gpu_vgpu_type_falls_back_to_fewer(fleet: None) -> None:
    """T4-16Q may be stacked (limit 8): 3 do not fit the re-profiled node (2 instances), 2 do."""
    verdict = check_request(make_team(), "vgpu", "", "T4-16Q", 3)
    assert verdict.placement.fits is False
    assert [(a.option.value, a.count, a.placement.node) for a in verdict.alternatives] == [
        ("vgpu-type:T4-16Q", 2, "v2"),
        (T4_8Q, 1, "v1"),
    ]


def test_check_request_reuses_the_snapshot_and_book(
    fleet: None, quotas: dict[str, Any], django_assert_num_queries: Any
) -> None:
    team = quotas["team"]
    snap, book = CapacitySnapshot(), QuotaBook([team.pk])
    with django_assert_num_queries(0):
        verdict = check_request(
            team, "passthrough", A100, "", 1, snapshot=snap, book=book, with_alternatives=False
        )
    assert verdict.placement.node == "pd"
    assert [u.fits for u in verdict.quotas] == [False, True, False]
