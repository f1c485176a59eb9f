"""Reconcile (vmrequests/provisioning/reconcile.py ``reconcile_request``/``reconcile``) without a cluster:
every branch of the docstring, the scheduler's message in plain words, leases, deletion, and
the one-LIST loop with its error handling, against the in-memory fake adapter (tests/fake_k8s.py)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import translation

from gpuinventory.capacity import CapacitySnapshot
from gpuinventory.models import Reservation
from portal import k8s
from tests.factories import stored_node, stored_resource
from tests.fake_k8s import NOW, T4_8Q, Clock, FakeCluster, live_request, provisioning_world
from vmrequests import provisioning
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.provisioning import Outcome

pytestmark = pytest.mark.django_db

NS = "team-quant"
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/GA100_A100_PCIE_40GB."
NOT_PERMITTED = (
    "failed to render launch manifest: GPU nvidia.com/GA100_A100_PCIE_40GB is not permitted in "
    "permittedHostDevices configuration"
)


@pytest.fixture(autouse=True)
def _settings(settings: Any) -> Iterator[None]:
    settings.TIME_ZONE = "UTC"
    settings.LANGUAGE_CODE = "en"
    settings.PORTAL_REQUEUE_AFTER = 60
    settings.PORTAL_SCHEDULING_TIMEOUT = 900
    settings.PORTAL_LEASE_WARNING_HOURS = 24
    settings.PORTAL_BASE_URL = "https://gpu.example.com"
    with translation.override("en"):
        yield


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock.install(monkeypatch, NOW)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    return FakeCluster.install(monkeypatch)


@pytest.fixture
def w(clock: Clock) -> Any:
    return provisioning_world()


def fresh(req: VMRequest) -> VMRequest:
    return VMRequest.objects.select_related("image", "team", "requester").get(pk=req.pk)


def events(req: VMRequest) -> list[tuple[str, str, str, str, str]]:
    return list(
        VMRequestEvent.objects.filter(request=req).values_list(
            "action", "from_status", "to_status", "actor_label", "message"
        )
    )


def our_vmi(cluster: FakeCluster, req: VMRequest, phase: str = "", **status: Any) -> None:
    """The VMI the portal created for ``req`` (its manifest), with ``phase`` and ``status``."""
    cluster.vmis[(req.vmi_namespace, req.vmi_name)] = provisioning.vmi_manifest(req, req.resource_name)
    if phase:
        cluster.set_vmi_status(req.vmi_namespace, req.vmi_name, phase, **status)


def reconcile_one(req: VMRequest, cluster: FakeCluster) -> Outcome:
    """``reconcile_request`` with the VMI the fake holds (None when there is none)."""
    return provisioning.reconcile_request(fresh(req), cluster.get_vmi(req.vmi_namespace, req.vmi_name))


def created(w: Any, status: str = "provisioning", **fields: Any) -> VMRequest:
    """A provisioning request whose VMI was created now."""
    return live_request(w, status, vmi_created_at=NOW, **fields)


def running(w: Any, cluster: FakeCluster, **fields: Any) -> VMRequest:
    """A running request on p1 (10.0.0.7), lease ending in 7 days, with its Running VMI."""
    values: dict[str, Any] = {
        "vmi_created_at": NOW,
        "node_name": "p1",
        "ip_address": "10.0.0.7",
        "lease_end": NOW + timedelta(days=7),
    }
    values.update(fields)
    req = live_request(w, "running", **values)
    our_vmi(cluster, req, "Running", node="p1", ip="10.0.0.7")
    return req


# --- approved / provisioning ----------------------------------------------------------------------


def test_approved_waits_for_a_worker_then_is_requeued(w: Any, cluster: FakeCluster, clock: Clock) -> None:
    req = live_request(w, "approved")
    clock.advance(seconds=60)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting")
    clock.advance(seconds=1)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "requeue")


def test_provisioning_without_a_vmi_yet_waits_then_is_requeued(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    req = live_request(w, "provisioning")
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting")
    clock.advance(seconds=61)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "requeue", "no VMI yet")
    assert fresh(req).status == "provisioning"


def test_running_with_an_ip_marks_the_request_running_with_how_to_connect(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    req = created(w)
    our_vmi(cluster, req, "Running", node="p1", ip="10.244.1.17")
    clock.advance(minutes=2)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "running")
    req = fresh(req)
    assert (req.status, req.node_name, req.ip_address, req.lease_end) == (
        "running",
        "p1",
        "10.244.1.17",
        clock.now + timedelta(days=7),
    )
    connect = f"virtctl ssh analyst@vmi/{req.vmi_name} -n {NS}\nvirtctl console {req.vmi_name} -n {NS}"
    assert events(req) == [("mark_running", "provisioning", "running", "worker", connect)]
    assert VMRequestEvent.objects.get(request=req).data == {"node": "p1", "ip": "10.244.1.17"}
    assert Reservation.objects.filter(holder=req.holder.key).count() == 1
    assert "delete_vmi" not in cluster.names()


def test_running_without_an_ip_waits(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    our_vmi(cluster, req, "Running", node="p1")
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting", "no IP yet")
    assert fresh(req).status == "provisioning"


@pytest.mark.parametrize(
    ("phase", "conditions", "detail"),
    [
        (
            "Failed",
            [{"type": "Ready", "status": "False", "reason": "PodFailed", "message": "virt-launcher crashed"}],
            "virt-launcher crashed",
        ),
        ("Failed", None, ""),
        ("Succeeded", None, ""),
    ],
)
def test_a_stopped_vmi_is_deleted_and_the_request_fails(
    w: Any, cluster: FakeCluster, phase: str, conditions: Any, detail: str
) -> None:
    req = created(w)
    our_vmi(cluster, req, phase, node="p1", conditions=conditions)
    message = f"The VM stopped ({phase}): {detail}" if detail else f"The VM stopped ({phase})."
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", message)
    assert cluster.names()[-1:] == ["delete_vmi"]
    req = fresh(req)
    assert (req.status, req.failure_reason) == ("failed", message)
    assert Reservation.objects.filter(holder=req.holder.key).exists() is False


def test_failed_create_not_permitted_deletes_the_vmi_and_asks_an_admin(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    our_vmi(
        cluster,
        req,
        "Pending",
        conditions=[
            {"type": "Synchronized", "status": "False", "reason": "FailedCreate", "message": NOT_PERMITTED}
        ],
    )
    message = (
        "KubeVirt refused the GPU: nvidia.com/GA100_A100_PCIE_40GB is not permitted in the KubeVirt CR's "
        f"permittedHostDevices. An admin must add it. ({NOT_PERMITTED})"
    )
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", message)
    assert cluster.names() == ["get_vmi", "delete_vmi"]
    assert cluster.vmis[(NS, req.vmi_name)]["metadata"]["deletionTimestamp"]
    req = fresh(req)
    assert (req.status, req.failure_reason) == ("failed", message)
    assert VMRequestEvent.objects.get(request=req, action="mark_failed").data == {
        "condition": "Synchronized",
        "message": NOT_PERMITTED,
    }


def test_another_failed_create_reports_kubevirts_message(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    why = "failed to render launch manifest: the memory request is too large"
    our_vmi(
        cluster,
        req,
        "Pending",
        conditions=[{"type": "Synchronized", "status": "False", "reason": "FailedCreate", "message": why}],
    )
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", f"KubeVirt could not start the VM: {why}")
    assert cluster.names() == ["get_vmi", "delete_vmi"]


def test_synchronized_false_for_another_reason_keeps_waiting(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    our_vmi(
        cluster, req, "Pending", conditions=[{"type": "Synchronized", "status": "False", "reason": "Other"}]
    )
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting", "Pending")


@pytest.fixture
def alternatives(w: Any) -> None:
    """Besides p1's A100s: p3 with 2 free A10s (permitted), p4 with a free L40S KubeVirt does not
    permit, p5 with an A10 that is in use, and v2's T4-8Q vGPUs (another mode)."""
    p3 = stored_node("p3", "vm-passthrough", gpu_model="A10", gpu_count=2)
    stored_resource(p3, "nvidia.com/GA102GL_A10", 2, model="A10", pci_device_id="2236", permitted=True)
    p4 = stored_node("p4", "vm-passthrough", gpu_model="L40S", gpu_count=1)
    stored_resource(p4, "nvidia.com/AD102GL_L40S", 1, model="L40S", pci_device_id="26b9", permitted=False)
    p5 = stored_node("p5", "vm-passthrough", gpu_model="A10", gpu_count=1)
    stored_resource(
        p5, "nvidia.com/GA102GL_A10", 1, used=1, model="A10", pci_device_id="2236", permitted=True
    )


def test_scheduling_timeout_deletes_the_vmi_and_explains_in_plain_words(
    w: Any, cluster: FakeCluster, clock: Clock, alternatives: None
) -> None:
    req = created(w)
    unschedulable = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}
    ]
    our_vmi(cluster, req, "Scheduling", conditions=unschedulable)
    clock.advance(seconds=900)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting", "Scheduling")
    clock.advance(seconds=1)
    message = (
        "Timed out waiting for a node (15 min); the VMI was deleted so it does not hold a place. "
        "No node has 1 free GA100_A100_PCIE_40GB right now. 1 node(s) have free A10. "
        f"(scheduler: {UNSCHEDULABLE})"
    )
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", message)
    assert cluster.names()[-1] == "delete_vmi"
    req = fresh(req)
    assert (req.status, req.failure_reason) == ("failed", message)
    assert VMRequestEvent.objects.get(request=req, action="mark_failed").data == {
        "phase": "Scheduling",
        "scheduler": UNSCHEDULABLE,
    }


def test_explain_unschedulable_for_a_vgpu_type_lists_free_types_by_node(w: Any, clock: Clock) -> None:
    v3 = stored_node(
        "v3", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, vgpu_config="T4-4Q", vgpu_config_state="success"
    )
    stored_resource(
        v3, "nvidia.com/GRID_T4-4Q", 4, model="Tesla T4", vgpu_type="T4-4Q", series="Q", permitted=True
    )
    v4 = stored_node(
        "v4", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, vgpu_config="T4-8Q", vgpu_config_state="success"
    )
    stored_resource(v4, T4_8Q, 2, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
    req = live_request(
        w,
        "provisioning",
        mode="vgpu",
        resource_name="nvidia.com/GRID_T4-16Q",
        vgpu_type="T4-16Q",
        device_count=2,
    )
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/GRID_T4-16Q."
    assert provisioning.explain_unschedulable(req, message, CapacitySnapshot()) == (
        "No node has 2 free T4-16Q right now. 1 node(s) have free T4-4Q; 2 node(s) have free T4-8Q. "
        f"(scheduler: {message})"
    )


def test_explain_unschedulable_without_insufficient_resources(w: Any) -> None:
    """No other passthrough GPU is free (v2's vGPUs are another mode): no alternatives."""
    req = live_request(w, "provisioning")
    taint = "0/3 nodes are available: 3 node(s) had untolerated taint {gpu: true}."
    assert provisioning.explain_unschedulable(req, f" {taint}\n") == (
        f"The scheduler could not place the VM. (scheduler: {taint})"
    )


def test_a_timeout_without_a_scheduler_message_says_no_empty_brackets(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    req = created(w)
    our_vmi(cluster, req, "Pending")
    clock.advance(seconds=901)
    outcome = reconcile_one(req, cluster)
    assert outcome == Outcome(
        req.pk,
        "failed",
        "Timed out waiting for a node (15 min); the VMI was deleted so it does not hold a place. "
        "The scheduler could not place the VM.",
    )


def test_vmi_gone_after_creation_while_provisioning_fails(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    message = "The VirtualMachineInstance was deleted outside the portal before it ran."
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", message)
    assert (fresh(req).status, fresh(req).failure_reason) == ("failed", message)
    assert cluster.names() == ["get_vmi"]


def test_losing_the_race_to_mark_running(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    our_vmi(cluster, req, "Running", node="p1", ip="10.0.0.9")
    stale = fresh(req)
    VMRequest.objects.filter(pk=req.pk).update(status="deleting")
    outcome = provisioning.reconcile_request(stale, cluster.get_vmi(NS, req.vmi_name))
    assert outcome == Outcome(req.pk, "lost", f"Request #{req.pk} is deleting; it cannot be marked running.")
    assert (fresh(req).status, fresh(req).node_name) == ("deleting", "")


# --- running: leases, deleted outside -----------------------------------------------------------


def test_running_vmi_deleted_outside_marks_the_request_deleted(w: Any, cluster: FakeCluster) -> None:
    req = running(w, cluster)
    cluster.forget_vmi(NS, req.vmi_name)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "deleted_outside")
    req = fresh(req)
    assert (req.status, req.deletion_reason) == ("deleted", "deleted_outside")
    assert events(req) == [
        (
            "mark_deleted",
            "running",
            "deleted",
            "worker",
            "The VirtualMachineInstance was deleted outside the portal.",
        )
    ]
    assert Reservation.objects.filter(holder=req.holder.key).exists() is False


def test_running_vmi_failed_is_deleted_and_the_request_fails(w: Any, cluster: FakeCluster) -> None:
    req = running(w, cluster)
    cluster.set_vmi_status(NS, req.vmi_name, "Failed", node="p1")
    assert reconcile_one(req, cluster) == Outcome(req.pk, "failed", "The VM stopped (Failed).")
    assert cluster.names()[-1] == "delete_vmi"
    assert fresh(req).status == "failed"


def test_running_ok_follows_a_new_ip(w: Any, cluster: FakeCluster) -> None:
    req = running(w, cluster)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "ok")
    cluster.set_vmi_status(NS, req.vmi_name, "Running", node="p1", ip="10.0.0.8")
    assert reconcile_one(req, cluster) == Outcome(req.pk, "ok")
    assert (fresh(req).node_name, fresh(req).ip_address, events(req)) == ("p1", "10.0.0.8", [])


def test_lease_end_deletes_the_vmi(w: Any, cluster: FakeCluster, clock: Clock) -> None:
    req = running(w, cluster, lease_end=NOW + timedelta(hours=1), lease_warning_sent_at=NOW)
    clock.advance(minutes=59, seconds=59)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "ok")
    clock.advance(seconds=1)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "expired")
    assert cluster.names()[-1:] == ["delete_vmi"]
    assert cluster.vmis[(NS, req.vmi_name)]["metadata"]["deletionTimestamp"]
    req = fresh(req)
    assert (req.status, req.deletion_reason) == ("deleting", "expired")
    assert events(req) == [("start_deletion", "running", "deleting", "worker", "lease expired")]
    assert Reservation.objects.filter(holder=req.holder.key).count() == 1


def test_lease_warning_is_sent_once(w: Any, cluster: FakeCluster, clock: Clock) -> None:
    req = running(w, cluster, lease_end=NOW + timedelta(hours=24, seconds=1))
    assert reconcile_one(req, cluster) == Outcome(req.pk, "ok")
    clock.advance(seconds=1)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "lease_warning")
    assert fresh(req).lease_warning_sent_at == clock.now
    assert events(req) == [
        ("lease_warning", "running", "running", "worker", "The lease ends at 2026-12-02 09:00 UTC.")
    ]
    assert [(m.to, m.subject) for m in mail.outbox] == [
        (["alice@example.com"], f"The lease of your GPU VM {req.vmi_name} ends on 2026-12-02 09:00 UTC")
    ]
    clock.advance(minutes=5)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "ok")
    assert (len(mail.outbox), len(events(req))) == (1, 1)


# --- deleting -------------------------------------------------------------------------------------


def test_deleting_deletes_once_then_marks_deleted_when_gone(w: Any, cluster: FakeCluster) -> None:
    req = running(w, cluster)
    VMRequest.objects.filter(pk=req.pk).update(status="deleting", deletion_reason="released")
    assert reconcile_one(req, cluster) == Outcome(req.pk, "deleting")
    assert cluster.names() == ["get_vmi", "delete_vmi"]
    assert reconcile_one(req, cluster) == Outcome(req.pk, "deleting")
    assert cluster.names() == ["get_vmi", "delete_vmi", "get_vmi"]
    assert Reservation.objects.filter(holder=req.holder.key).count() == 1
    cluster.finish_deletion(NS, req.vmi_name)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "deleted")
    req = fresh(req)
    assert (req.status, req.deletion_reason) == ("deleted", "released")
    assert events(req) == [
        (
            "mark_deleted",
            "deleting",
            "deleted",
            "worker",
            "The VirtualMachineInstance is gone; its devices are free.",
        )
    ]
    assert Reservation.objects.filter(holder=req.holder.key).exists() is False


@pytest.mark.parametrize("status", ["submitted", "failed", "deleted", "rejected", "cancelled"])
def test_other_statuses_are_skipped(w: Any, cluster: FakeCluster, status: str) -> None:
    req = live_request(w, status)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "skipped", status)


# --- reconcile(): one LIST for all ------------------------------------------------------------


def test_reconcile_lists_once_and_handles_every_live_request(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    starting = created(w)
    our_vmi(cluster, starting, "Running", node="p1", ip="10.0.0.5")
    waiting = live_request(w, "approved")
    up = running(w, cluster)
    live_request(w, "failed")  # not live: not looked at
    clock.advance(seconds=5)
    assert provisioning.reconcile() == [
        Outcome(up.pk, "ok"),
        Outcome(waiting.pk, "waiting"),
        Outcome(starting.pk, "running"),
    ]
    assert cluster.calls == [("list_vmis_labelled", "app.kubernetes.io/managed-by=gpu-vm-portal")]


def test_reconcile_without_live_requests_only_lists(w: Any, cluster: FakeCluster) -> None:
    live_request(w, "failed")
    assert provisioning.reconcile() == []
    assert cluster.names() == ["list_vmis_labelled"]


def test_reconcile_deletes_the_vmi_of_an_ended_request(w: Any, cluster: FakeCluster) -> None:
    ended = created(w)
    our_vmi(cluster, ended, "Running", node="p1")
    VMRequest.objects.filter(pk=ended.pk).update(status="deleted")
    assert provisioning.reconcile() == [Outcome(ended.pk, "orphan_deleted")]
    assert cluster.names() == ["list_vmis_labelled", "delete_vmi"]
    assert provisioning.reconcile() == []  # being deleted: not again


def test_requeue_touches_updated_so_the_next_reconcile_does_not_requeue_again(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    approved = live_request(w, "approved")
    started = live_request(w, "provisioning")
    clock.advance(seconds=61)
    assert provisioning.reconcile() == [
        Outcome(started.pk, "requeue", "no VMI yet"),
        Outcome(approved.pk, "requeue"),
    ]
    assert [fresh(r).updated for r in (approved, started)] == [clock.now, clock.now]
    clock.advance(seconds=5)
    assert provisioning.reconcile() == [Outcome(started.pk, "waiting"), Outcome(approved.pk, "waiting")]
    clock.advance(seconds=56)
    assert [o.action for o in provisioning.reconcile()] == ["requeue", "requeue"]


def test_a_vmi_labelled_for_another_request_is_ignored(w: Any, cluster: FakeCluster) -> None:
    req = live_request(w, "provisioning")
    cluster.add_vmi(
        NS,
        req.vmi_name,
        {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": str(req.pk + 1000)},
    )
    cluster.set_vmi_status(NS, req.vmi_name, "Failed")
    assert provisioning.reconcile() == [Outcome(req.pk, "waiting")]
    assert cluster.names() == ["list_vmis_labelled"]
    assert "deletionTimestamp" not in cluster.vmis[(NS, req.vmi_name)]["metadata"]


def test_a_transient_list_error_propagates(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    cluster.fail("list_vmis_labelled", k8s.K8sTransientError("Kubernetes API unreachable: MaxRetryError"))
    with pytest.raises(k8s.K8sTransientError, match="unreachable"):
        provisioning.reconcile()
    assert fresh(req).status == "provisioning"


def test_another_error_for_one_request_does_not_stop_the_others(w: Any, cluster: FakeCluster) -> None:
    broken = created(w)
    our_vmi(cluster, broken, "Failed")
    fine = created(w)
    our_vmi(cluster, fine, "Running", node="p1", ip="10.0.0.6")
    cluster.fail("delete_vmi", k8s.K8sForbidden("Kubernetes API 403 Forbidden"))
    assert provisioning.reconcile() == [
        Outcome(fine.pk, "running"),
        Outcome(broken.pk, "error", "Kubernetes API 403 Forbidden"),
    ]
    assert (fresh(broken).status, fresh(fine).status) == ("provisioning", "running")


def test_a_transient_error_for_one_request_propagates(w: Any, cluster: FakeCluster) -> None:
    req = created(w)
    our_vmi(cluster, req, "Failed")
    cluster.fail("delete_vmi", k8s.K8sTransientError("Kubernetes API 503"))
    with pytest.raises(k8s.K8sTransientError):
        provisioning.reconcile()
    assert fresh(req).status == "provisioning"


def test_a_scheduled_vmi_does_not_time_out_waiting_for_a_node(
    w: Any, cluster: FakeCluster, clock: Clock, settings: Any
) -> None:
    """Placed on a node (image pull, boot): the scheduling timeout no longer applies."""
    settings.PORTAL_SCHEDULING_TIMEOUT = 60
    req = created(w)
    our_vmi(cluster, req, "Scheduled", node="p1")
    clock.advance(seconds=3600)
    assert reconcile_one(req, cluster) == Outcome(req.pk, "waiting", "Scheduled")
    assert "delete_vmi" not in cluster.names()
