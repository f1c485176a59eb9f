"""Provisioning (vmrequests/provisioning/) without a cluster: the VMI manifest against
hand-written expected documents, ``provision()`` (create, adopt, conflict, permanent and
transient errors, lost race) and the vGPU re-profile (live pod check, label patch, waiting,
success, failed/timeout with the label put back), against the in-memory fake adapter
(tests/fake_k8s.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import translation

from gpuinventory.models import Reservation
from portal import k8s
from tests.factories import cluster_policy
from tests.fake_k8s import (
    A100,
    NOW,
    SSH_KEY,
    T4_8Q,
    T4_16Q,
    Clock,
    FakeCluster,
    live_request,
    provisioning_world,
)
from tests.vmrequest_factories import stored_request
from vmrequests import provisioning
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.provisioning import Outcome, Wait

pytestmark = pytest.mark.django_db

EXPECTED = Path(__file__).resolve().parent / "expected"
CONFIG = "nvidia.com/vgpu.config"
STATE = "nvidia.com/vgpu.config.state"


@pytest.fixture(autouse=True)
def _english() -> Iterator[None]:
    with translation.override("en"):
        yield


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock.install(monkeypatch, NOW)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    return FakeCluster.install(monkeypatch)


@pytest.fixture
def w() -> Any:
    return provisioning_world()


def events(req: VMRequest) -> list[tuple[str, str, str, str, str]]:
    return list(
        VMRequestEvent.objects.filter(request=req).values_list(
            "action", "from_status", "to_status", "actor_label", "message"
        )
    )


def fresh(req: VMRequest) -> VMRequest:
    return VMRequest.objects.get(pk=req.pk)


def reservation(req: VMRequest) -> Reservation | None:
    return Reservation.objects.filter(holder=req.holder.key).first()


# --- the manifest --------------------------------------------------------------------------------


def split_user_data(manifest: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The manifest without its cloud-init ``userData``, and the parsed ``#cloud-config`` document."""
    rest = yaml.safe_load(yaml.safe_dump(manifest))
    volume = rest["spec"]["volumes"][1]
    assert volume["name"] == "cloudinitdisk"
    text = volume["cloudInitNoCloud"].pop("userData")
    first, _, body = text.partition("\n")
    assert first == "#cloud-config"
    return rest, yaml.safe_load(body)


def assert_matches_expected(manifest: dict[str, Any], name: str) -> None:
    expected = yaml.safe_load((EXPECTED / name).read_text(encoding="utf-8"))
    got_rest, got_cloud = split_user_data(manifest)
    want_rest, want_cloud = split_user_data(expected)
    assert got_rest == want_rest
    assert got_cloud == want_cloud


def test_passthrough_manifest_is_the_expected_document(w: Any) -> None:
    req = stored_request(
        w.quant,
        w.alice,
        w.image,
        pk=4242,
        vmi_name="analyst-a100-01",
        device_count=2,
        cpu_cores=8,
        memory_gib=32,
        ssh_public_key=SSH_KEY,
        ticket_source="jira",
        ticket_id="OPS-7",
    )
    assert_matches_expected(provisioning.vmi_manifest(req, A100), "vmi-passthrough-2gpu.yaml")


def test_vgpu_manifest_pinned_to_a_node_is_the_expected_document(w: Any) -> None:
    req = stored_request(
        w.quant,
        w.alice,
        w.image,
        pk=4243,
        vmi_name="analyst-a10-12q-01",
        mode="vgpu",
        resource_name="nvidia.com/NVIDIA_A10-12Q",
        vgpu_type="A10-12Q",
        device_count=1,
        cpu_cores=4,
        memory_gib=16,
        ssh_public_key=SSH_KEY + "\n",
    )
    manifest = provisioning.vmi_manifest(req, "nvidia.com/NVIDIA_A10-12Q", pin_node="gpu-node-01")
    assert_matches_expected(manifest, "vmi-vgpu-pinned.yaml")


def test_two_vgpus_both_have_display_off_and_a_ticket_without_source(w: Any) -> None:
    req = stored_request(
        w.quant,
        w.alice,
        w.image,
        mode="vgpu",
        resource_name=T4_8Q,
        vgpu_type="T4-8Q",
        device_count=2,
        ticket_id="42",
    )
    manifest = provisioning.vmi_manifest(req, T4_8Q)
    assert manifest["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "vgpu1", "deviceName": T4_8Q, "virtualGPUOptions": {"display": {"enabled": False}}},
        {"name": "vgpu2", "deviceName": T4_8Q, "virtualGPUOptions": {"display": {"enabled": False}}},
    ]
    assert manifest["metadata"]["annotations"] == {
        "gpu-vm-portal.io/requester": "alice",
        "gpu-vm-portal.io/ticket": "42",
    }
    assert "nodeSelector" not in manifest["spec"]


def test_cloud_config_creates_the_login_user_with_sudo_and_the_key() -> None:
    text = provisioning.cloud_init_user_data("ubuntu", "  ssh-ed25519 AAAAC3Nz alice@laptop \n")
    first, _, body = text.partition("\n")
    assert first == "#cloud-config"
    assert yaml.safe_load(body) == {
        "users": [
            {
                "name": "ubuntu",
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/bash",
                "ssh_authorized_keys": ["ssh-ed25519 AAAAC3Nz alice@laptop"],
            }
        ]
    }


@pytest.mark.parametrize(
    "comment",
    [
        "x: y",
        'a" ]}\n- name: root',
        "#nope",
        "&anchor *alias !!python/object:os.system",
        "{sudo: ALL}, [1, 2] | > % @ `",
        "bob\nusers:\n  - name: root\n    sudo: ALL=(ALL) NOPASSWD:ALL",
    ],
)
def test_a_key_comment_with_yaml_syntax_injects_nothing(comment: str) -> None:
    key = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq {comment}"
    first, _, body = provisioning.cloud_init_user_data("analyst", key).partition("\n")
    assert first == "#cloud-config"
    assert yaml.safe_load(body) == {
        "users": [
            {
                "name": "analyst",
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/bash",
                "ssh_authorized_keys": [key],
            }
        ]
    }


# --- provision: create, adopt, conflict, errors ------------------------------------------------


def test_approved_request_gets_its_vmi(w: Any, cluster: FakeCluster, clock: Clock) -> None:
    req = live_request(w)
    assert provisioning.provision(req.pk) == Outcome(req.pk, "created")
    req = fresh(req)
    assert (req.status, req.vmi_created_at, req.failure_reason) == ("provisioning", NOW, "")
    # Pinned to the node its device was reserved on at approval.
    assert cluster.calls == [("create_vmi", "team-quant", provisioning.vmi_manifest(req, A100, "p1"))]
    assert list(cluster.vmis) == [("team-quant", req.vmi_name)]
    assert events(req) == [
        ("start_provisioning", "approved", "provisioning", "worker", ""),
        (
            "progress",
            "provisioning",
            "provisioning",
            "worker",
            f"Created VirtualMachineInstance team-quant/{req.vmi_name}.",
        ),
    ]
    assert VMRequestEvent.objects.get(request=req, action="progress").data == {
        "vmi": f"team-quant/{req.vmi_name}",
        "resource": A100,
        "pinned_to": "p1",
    }
    assert reservation(req) is not None


def test_a_vmi_created_after_the_request_moved_on_is_deleted(
    w: Any, cluster: FakeCluster, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Released while the worker was creating the VMI: the VMI must not be left behind."""
    req = live_request(w)
    create = cluster.create_vmi

    def create_then_release(namespace: str, body: dict[str, Any]) -> Any:
        made = create(namespace, body)
        VMRequest.objects.filter(pk=req.pk).update(status="deleted")
        return made

    monkeypatch.setattr(k8s, "create_vmi", create_then_release)
    outcome = provisioning.provision(req.pk)
    assert outcome == Outcome(req.pk, "lost", "the request moved on while its VMI was created; VMI deleted")
    assert cluster.names()[-1] == "delete_vmi"
    assert fresh(req).vmi_created_at is None


def test_redelivery_adopts_the_vmi_the_first_delivery_created(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    req = live_request(w, "provisioning")
    cluster.add_vmi(
        "team-quant",
        req.vmi_name,
        {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": str(req.pk)},
    )
    assert provisioning.provision(req.pk) == Outcome(req.pk, "adopted")
    assert cluster.names() == ["create_vmi", "get_vmi"]
    assert list(cluster.vmis) == [("team-quant", req.vmi_name)]
    req = fresh(req)
    assert (req.status, req.vmi_created_at) == ("provisioning", NOW)
    assert events(req) == [
        (
            "progress",
            "provisioning",
            "provisioning",
            "worker",
            f"VirtualMachineInstance team-quant/{req.vmi_name} already existed for this request; adopted.",
        )
    ]


@pytest.mark.parametrize(
    "labels",
    [{}, {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": "999999"}],
    ids=["someone-elses", "another-request"],
)
def test_a_vmi_of_that_name_without_our_label_is_a_conflict(
    w: Any, cluster: FakeCluster, clock: Clock, labels: dict[str, str]
) -> None:
    req = live_request(w)
    cluster.add_vmi("team-quant", req.vmi_name, labels)
    outcome = provisioning.provision(req.pk)
    message = (
        f"A VirtualMachineInstance named {req.vmi_name} already exists in namespace team-quant and was not "
        "created by the portal for this request. An approver must remove or rename it."
    )
    assert outcome == Outcome(req.pk, "failed", message)
    req = fresh(req)
    assert (req.status, req.failure_reason, req.vmi_created_at) == ("failed", message, None)
    assert reservation(req) is None
    assert cluster.names() == ["create_vmi", "get_vmi"]
    assert cluster.vmis[("team-quant", req.vmi_name)]["metadata"]["labels"] == labels


@pytest.mark.parametrize(
    "error",
    [
        k8s.K8sInvalid("Kubernetes API 422 Unprocessable Entity"),
        k8s.K8sForbidden("Kubernetes API 403 Forbidden"),
        k8s.K8sNotFound("Kubernetes API 404 Not Found"),
    ],
    ids=type,
)
def test_permanent_errors_fail_fast_with_the_api_message(
    w: Any, cluster: FakeCluster, clock: Clock, error: k8s.K8sError
) -> None:
    req = live_request(w)
    cluster.fail("create_vmi", error)
    message = f"Kubernetes refused the VirtualMachineInstance: {error}"
    if isinstance(error, k8s.K8sNotFound):
        message = (
            "Namespace team-quant does not exist in the cluster (or KubeVirt is not installed). An admin must "
            "create it or correct the team's namespace; then an approver can retry."
        )
    assert provisioning.provision(req.pk) == Outcome(req.pk, "failed", message)
    req = fresh(req)
    assert (req.status, req.failure_reason, req.vmi_created_at) == ("failed", message, None)
    assert reservation(req) is None
    assert cluster.vmis == {}
    failed = VMRequestEvent.objects.get(request=req, action="mark_failed")
    assert failed.data == {"error": str(error), "kind": type(error).__name__}


def test_a_transient_error_propagates_and_changes_nothing_else(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    req = live_request(w)
    cluster.fail("create_vmi", k8s.K8sTransientError("Kubernetes API 503 Service Unavailable"))
    with pytest.raises(k8s.K8sTransientError, match="503"):
        provisioning.provision(req.pk)
    req = fresh(req)
    assert (req.status, req.vmi_created_at, req.failure_reason) == ("provisioning", None, "")
    assert reservation(req) is not None
    assert [e[0] for e in events(req)] == ["start_provisioning"]
    # The retry creates it.
    assert provisioning.provision(req.pk) == Outcome(req.pk, "created")
    assert cluster.names() == ["create_vmi", "create_vmi"]


def test_a_vmi_gone_between_409_and_get_is_a_transient_error(w: Any, cluster: FakeCluster) -> None:
    req = live_request(w)
    cluster.add_vmi("team-quant", req.vmi_name)
    original = cluster.get_vmi

    def vanished(namespace: str, name: str) -> k8s.VmiInfo | None:
        cluster.forget_vmi(namespace, name)
        return original(namespace, name)

    k8s.get_vmi = vanished  # type: ignore[assignment]  # the fixture's monkeypatch restores it
    with pytest.raises(k8s.K8sTransientError, match="the conflicting VMI disappeared; retrying"):
        provisioning.provision(req.pk)
    assert fresh(req).status == "provisioning"


@pytest.mark.parametrize("status", ["submitted", "running", "deleting", "failed", "cancelled", "deleted"])
def test_a_request_not_approved_is_skipped(w: Any, cluster: FakeCluster, status: str) -> None:
    req = live_request(w, status)
    assert provisioning.provision(req.pk) == Outcome(req.pk, "skipped", status)
    assert cluster.calls == []
    assert fresh(req).status == status


def test_a_request_whose_vmi_was_created_is_skipped(w: Any, cluster: FakeCluster) -> None:
    req = live_request(w, "provisioning", vmi_created_at=NOW)
    assert provisioning.provision(req.pk) == Outcome(req.pk, "skipped", "VMI already created")
    assert cluster.calls == []


def test_losing_the_race_to_start_provisioning_just_stops(
    w: Any, cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = live_request(w)
    stale = fresh(req)  # read while approved ...
    VMRequest.objects.filter(pk=req.pk).update(status="cancelled")  # ... cancelled before the swap
    monkeypatch.setattr(provisioning.create, "_load", lambda pk: stale)  # where provision() looks it up
    assert provisioning.provision(req.pk) == Outcome(
        req.pk, "lost", f"Request #{req.pk} is cancelled; it cannot be provisioned."
    )
    assert cluster.calls == []
    assert (fresh(req).status, events(req)) == ("cancelled", [])


def test_a_request_without_its_reservation_fails(w: Any, cluster: FakeCluster) -> None:
    req = live_request(w, reserve=False)
    message = "The devices reserved at approval are gone; an approver must approve the request again."
    assert provisioning.provision(req.pk) == Outcome(req.pk, "failed", message)
    assert (fresh(req).status, cluster.calls) == ("failed", [])


def test_retry_does_not_adopt_the_previous_vmi_while_it_is_being_deleted(
    w: Any, cluster: FakeCluster, clock: Clock
) -> None:
    """A failed request's VMI was deleted (KubeVirt still finalising it) and an approver retried:
    the old VMI carries our label, but adopting it would follow a VMI about to vanish."""
    req = live_request(w)
    ours = {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": str(req.pk)}
    cluster.add_vmi("team-quant", req.vmi_name, ours)
    old = cluster.get_vmi("team-quant", req.vmi_name)
    assert old is not None
    cluster.delete_vmi("team-quant", req.vmi_name, old.uid)
    with pytest.raises(k8s.K8sTransientError, match="still being deleted"):
        provisioning.provision(req.pk)
    assert (fresh(req).status, fresh(req).vmi_created_at) == ("provisioning", None)
    cluster.finish_deletion("team-quant", req.vmi_name)
    assert provisioning.provision(req.pk) == Outcome(req.pk, "created")
    assert cluster.vmis[("team-quant", req.vmi_name)]["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "deviceName": A100}
    ]


# --- the vGPU re-profile -------------------------------------------------------------------------


@pytest.fixture
def vgpu(w: Any, cluster: FakeCluster) -> Any:
    """A T4-16Q request reserved on v2 for re-profiling T4-8Q → T4-16Q; the live v2 runs T4-8Q
    (state success, 4 × GRID_T4-8Q free) with the sandbox device plugin pod and no VM; a VM on v1
    uses a T4-8Q (another node: it must not matter)."""
    cluster.add_node("v2", {CONFIG: "T4-8Q", STATE: "success"}, {"cpu": "32", T4_8Q: "4"})
    cluster.add_node("v1", {CONFIG: "T4-8Q", STATE: "success"}, {"cpu": "32", T4_8Q: "4"})
    cluster.add_pod("gpu-operator", "nvidia-sandbox-device-plugin-daemonset-x7k2p", "v2")
    cluster.add_pod("team-quant", "virt-launcher-busy-abcde", "v1", {T4_8Q: 1})
    cluster.cluster_policy = cluster_policy(vgpu_default_config="T4-default")
    return live_request(
        w,
        node=w.v2,
        mode="vgpu",
        resource_name="",
        vgpu_type="T4-16Q",
        gpu_model="Tesla T4",
        reprofile_config="T4-16Q",
        reprofile_from="T4-8Q",
    )


def first_pass(req: VMRequest) -> Wait:
    with pytest.raises(Wait) as caught:
        provisioning.provision(req.pk)
    return caught.value


def test_first_pass_checks_pods_live_and_patches_only_the_config_label(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    VMRequest.objects.filter(pk=vgpu.pk).update(updated=NOW.replace(hour=8))
    wait = first_pass(vgpu)
    assert (wait.countdown, wait.why) == (2.0, "label patched")
    assert cluster.calls == [
        ("get_node", "v2"),
        ("list_pods_on_node", "v2"),
        ("patch_node_labels", "v2", {CONFIG: "T4-16Q"}),
    ]
    assert cluster.nodes["v2"].labels == {CONFIG: "T4-16Q", STATE: "success"}
    res = reservation(vgpu)
    assert res is not None
    assert (res.reprofile_from, res.reprofile_started, res.reprofile_done) == ("T4-8Q", NOW, False)
    req = fresh(vgpu)
    assert (req.status, req.updated, req.resource_name) == ("provisioning", NOW, "")
    assert events(req)[-1] == (
        "progress",
        "provisioning",
        "provisioning",
        "worker",
        "Set nvidia.com/vgpu.config on node v2 from T4-8Q to T4-16Q; waiting for the vGPU Device Manager.",
    )
    assert VMRequestEvent.objects.filter(request=req, action="progress").get().data == {
        "node": "v2",
        "from": "T4-8Q",
        "to": "T4-16Q",
    }


def test_first_pass_refuses_while_a_pod_on_the_node_uses_a_vgpu(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    """The stored inventory says v2 is idle; the live cluster has a VM on it."""
    cluster.add_pod("team-research", "virt-launcher-late-q9x8z", "v2", {T4_8Q: 1})
    cluster.add_pod("team-quant", "virt-launcher-early-a1b2c", "v2", {T4_8Q: 2})
    message = (
        "Node v2 was not re-profiled: its vGPUs are in use (team-quant/virt-launcher-early-a1b2c, "
        "team-research/virt-launcher-late-q9x8z), and changing the vGPU config would destroy them. Ask an approver to approve the "
        "request again once another node is idle."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.names() == ["get_node", "list_pods_on_node"]
    assert cluster.nodes["v2"].labels == {CONFIG: "T4-8Q", STATE: "success"}
    req = fresh(vgpu)
    assert (req.status, req.failure_reason) == ("failed", message)
    assert reservation(req) is None
    assert VMRequestEvent.objects.get(request=req, action="mark_failed").data == {
        "node": "v2",
        "pods": ["team-quant/virt-launcher-early-a1b2c", "team-research/virt-launcher-late-q9x8z"],
    }


def test_first_pass_waits_while_the_node_is_being_reconfigured(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    cluster.nodes["v2"].labels[STATE] = "pending"
    wait = first_pass(vgpu)
    assert (wait.countdown, wait.why) == (10.0, "node v2 is already being reconfigured")
    assert "patch_node_labels" not in cluster.names()
    res = reservation(vgpu)
    assert res is not None and res.reprofile_started is None
    assert fresh(vgpu).updated == NOW


def test_first_pass_refuses_a_node_whose_config_failed(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    cluster.nodes["v2"].labels[STATE] = "failed"
    message = (
        "Node v2 was not re-profiled: its vGPU Device Manager reports state failed for the current config. "
        "An admin must look at the node first."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert "patch_node_labels" not in cluster.names()
    assert cluster.nodes["v2"].labels == {CONFIG: "T4-8Q", STATE: "failed"}
    assert reservation(fresh(vgpu)) is None


def patched(vgpu: VMRequest, cluster: FakeCluster) -> None:
    """Run the first pass (label patched) and forget its calls."""
    first_pass(vgpu)
    cluster.calls.clear()


def test_second_pass_waits_while_pending(vgpu: VMRequest, cluster: FakeCluster, clock: Clock) -> None:
    patched(vgpu, cluster)
    cluster.nodes["v2"].labels[STATE] = "pending"
    cluster.nodes["v2"].allocatable = {"cpu": "32"}
    clock.advance(seconds=2)
    wait = first_pass(vgpu)
    assert (wait.countdown, wait.why) == (2.0, "waiting for v2: state pending")
    assert cluster.calls == [("get_node", "v2")]
    assert fresh(vgpu).updated == clock.now


def test_success_but_type_not_advertised_yet_waits(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    patched(vgpu, cluster)
    cluster.nodes["v2"].allocatable = {"cpu": "32", T4_8Q: "0"}
    wait = first_pass(vgpu)
    assert wait.why == "waiting for v2: state success"
    assert cluster.calls == [("get_node", "v2")]


def test_success_sets_the_resource_name_and_creates_the_vmi_pinned_to_the_node(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    patched(vgpu, cluster)
    cluster.nodes["v2"].allocatable = {"cpu": "32", T4_8Q: "0", T4_16Q: "2"}
    clock.advance(seconds=30)
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "created")
    req = fresh(vgpu)
    res = reservation(req)
    assert res is not None
    assert (req.resource_name, res.resource_name, res.reprofile_done) == (T4_16Q, T4_16Q, True)
    assert (req.status, req.vmi_created_at) == ("provisioning", clock.now)
    assert cluster.names() == ["get_node", "create_vmi"]
    body = cluster.vmis[("team-quant", req.vmi_name)]
    assert body["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "v2"}
    assert body["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "vgpu1", "deviceName": T4_16Q, "virtualGPUOptions": {"display": {"enabled": False}}}
    ]
    assert body == provisioning.vmi_manifest(req, T4_16Q, "v2")
    assert [m for *_, m in events(req)][-2:] == [
        "Node v2 now offers 2 × nvidia.com/GRID_T4-16Q.",
        f"Created VirtualMachineInstance team-quant/{req.vmi_name}.",
    ]
    # A redelivery now finds the VMI created: nothing is patched or created again.
    cluster.calls.clear()
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "skipped", "VMI already created")
    assert cluster.calls == []


def test_failed_state_puts_the_previous_label_back(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    patched(vgpu, cluster)
    cluster.nodes["v2"].labels[STATE] = "failed"
    message = (
        "Re-profiling node v2 to vGPU config T4-16Q failed: the vGPU Device Manager reported state failed. "
        "The previous config T4-8Q was put back. An admin should check the vGPU Device Manager on that node."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.calls == [("get_node", "v2"), ("patch_node_labels", "v2", {CONFIG: "T4-8Q"})]
    assert cluster.nodes["v2"].labels == {CONFIG: "T4-8Q", STATE: "failed"}
    req = fresh(vgpu)
    assert (req.status, req.failure_reason) == ("failed", message)
    assert reservation(req) is None
    assert VMRequestEvent.objects.get(request=req, action="mark_failed").data == {
        "node": "v2",
        "state": "failed",
        "restored": True,
        "restore": "T4-8Q",
    }


@pytest.mark.parametrize(
    ("policy", "restore"),
    [(cluster_policy(vgpu_default_config="T4-default"), "T4-default"), (None, "default")],
    ids=["policy-default", "no-policy"],
)
def test_failed_state_on_a_node_without_label_restores_the_policy_default(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock, policy: Any, restore: str
) -> None:
    del cluster.nodes["v2"].labels[CONFIG]
    cluster.cluster_policy = policy
    patched(vgpu, cluster)
    res = reservation(vgpu)
    assert res is not None and res.reprofile_from == ""
    assert events(fresh(vgpu))[-1][4] == (
        "Set nvidia.com/vgpu.config on node v2 from (default) to T4-16Q; waiting for the vGPU Device Manager."
    )
    cluster.nodes["v2"].labels[STATE] = "failed"
    outcome = provisioning.provision(vgpu.pk)
    assert outcome.action == "failed"
    assert f"The previous config {restore} was put back." in outcome.detail
    assert cluster.calls == [
        ("get_node", "v2"),
        ("get_cluster_policy",),
        ("patch_node_labels", "v2", {CONFIG: restore}),
    ]


def test_timeout_puts_the_previous_label_back(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock, settings: Any
) -> None:
    settings.PORTAL_REPROFILE_TIMEOUT = 600
    patched(vgpu, cluster)
    cluster.nodes["v2"].labels[STATE] = "pending"
    clock.advance(seconds=600)
    assert first_pass(vgpu).why == "waiting for v2: state pending"
    clock.advance(seconds=1)
    message = (
        "Re-profiling node v2 to vGPU config T4-16Q failed: it did not finish within 10 minutes. "
        "The previous config T4-8Q was put back. An admin should check the vGPU Device Manager on that node."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.calls[-1] == ("patch_node_labels", "v2", {CONFIG: "T4-8Q"})
    assert reservation(vgpu) is None


def test_timeout_measured_from_the_stored_start(vgpu: VMRequest, cluster: FakeCluster, settings: Any) -> None:
    """Without a frozen clock: the start recorded in the Reservation is moved back instead."""
    settings.PORTAL_REPROFILE_TIMEOUT = 90
    patched(vgpu, cluster)
    res = reservation(vgpu)
    assert res is not None and res.reprofile_started is not None
    Reservation.objects.filter(pk=res.pk).update(reprofile_started=res.reprofile_started.replace(year=2000))
    outcome = provisioning.provision(vgpu.pk)
    assert outcome.action == "failed"
    assert "it did not finish within 1.5 minutes. The previous config T4-8Q was put back." in outcome.detail


def test_a_failing_restore_says_an_admin_must_set_the_label(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    patched(vgpu, cluster)
    cluster.nodes["v2"].labels[STATE] = "failed"
    cluster.fail("patch_node_labels", k8s.K8sForbidden("Kubernetes API 403 Forbidden"))
    message = (
        "Re-profiling node v2 to vGPU config T4-16Q failed: the vGPU Device Manager reported state failed. "
        "Putting back the previous config T4-8Q failed too; an admin must set it. An admin should check the "
        "vGPU Device Manager on that node."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-16Q"
    assert VMRequestEvent.objects.get(request=vgpu, action="mark_failed").data["restored"] is False


def test_redelivery_after_an_unrecorded_patch_keeps_the_previous_config_of_the_plan(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    """A worker died after patching the label but before its transaction recorded the patch: the
    live label already holds the target, so the previous config is the one the approval planned
    from (T4-8Q), not the target itself (a "restore" to T4-16Q would restore nothing)."""
    cluster.nodes["v2"].labels[CONFIG] = "T4-16Q"
    first_pass(vgpu)
    res = reservation(vgpu)
    assert res is not None and (res.reprofile_from, res.reprofile_started) == ("T4-8Q", NOW)
    cluster.nodes["v2"].labels[STATE] = "failed"
    outcome = provisioning.provision(vgpu.pk)
    assert "The previous config T4-8Q was put back." in outcome.detail
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-8Q"


@pytest.mark.parametrize(
    ("function", "error", "calls"),
    [
        ("get_node", k8s.K8sNotFound("Kubernetes API 404 Not Found"), ["get_node"]),
        (
            "list_pods_on_node",
            k8s.K8sForbidden("Kubernetes API 403 Forbidden"),
            ["get_node", "list_pods_on_node"],
        ),
        (
            "patch_node_labels",
            k8s.K8sForbidden("Kubernetes API 403 Forbidden"),
            ["get_node", "list_pods_on_node", "patch_node_labels"],
        ),
    ],
    ids=["node-gone", "pods-forbidden", "patch-forbidden"],
)
def test_a_permanent_error_in_the_first_pass_fails_fast(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock, function: str, error: k8s.K8sError, calls: list[str]
) -> None:
    """Not left in provisioning for ``reconcile`` to requeue forever (issue 6: permanent errors
    fail fast with the message on the request). The label was never changed: nothing to put back."""
    cluster.fail(function, error)
    message = f"Re-profiling node v2 to vGPU config T4-16Q failed: Kubernetes refused a call ({error})."
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.names() == calls
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-8Q"
    assert (fresh(vgpu).status, fresh(vgpu).failure_reason, reservation(vgpu)) == ("failed", message, None)


def test_a_permanent_error_after_the_patch_puts_the_label_back(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    patched(vgpu, cluster)
    cluster.fail("get_node", k8s.K8sForbidden("Kubernetes API 403 Forbidden"))
    message = (
        "Re-profiling node v2 to vGPU config T4-16Q failed: Kubernetes refused a call (Kubernetes API 403 "
        "Forbidden). The previous config T4-8Q was put back."
    )
    assert provisioning.provision(vgpu.pk) == Outcome(vgpu.pk, "failed", message)
    assert cluster.calls == [("get_node", "v2"), ("patch_node_labels", "v2", {CONFIG: "T4-8Q"})]
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-8Q"


def test_a_transient_error_in_the_reprofile_propagates(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    cluster.fail("list_pods_on_node", k8s.K8sTransientError("Kubernetes API 503"))
    with pytest.raises(k8s.K8sTransientError):
        provisioning.provision(vgpu.pk)
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-8Q"
    res = reservation(vgpu)
    assert res is not None and res.reprofile_started is None
    assert fresh(vgpu).status == "provisioning"


def test_a_transient_error_reading_the_policy_retries_instead_of_guessing_default(
    vgpu: VMRequest, cluster: FakeCluster, clock: Clock
) -> None:
    """The node had no label: the config to put back is the ClusterPolicy's default. Writing
    ``default`` because the policy could not be read right now could name a config the node's
    ConfigMap does not have."""
    del cluster.nodes["v2"].labels[CONFIG]
    patched(vgpu, cluster)
    cluster.nodes["v2"].labels[STATE] = "failed"
    cluster.fail("get_cluster_policy", k8s.K8sTransientError("Kubernetes API 503"))
    with pytest.raises(k8s.K8sTransientError):
        provisioning.provision(vgpu.pk)
    assert (cluster.nodes["v2"].labels[CONFIG], fresh(vgpu).status) == ("T4-16Q", "provisioning")
    outcome = provisioning.provision(vgpu.pk)
    assert "The previous config T4-default was put back." in outcome.detail
    assert cluster.nodes["v2"].labels[CONFIG] == "T4-default"
