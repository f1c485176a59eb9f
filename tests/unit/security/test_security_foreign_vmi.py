"""#14 finding 1: releasing or terminating a request never deletes a VMI the portal does not own.

A request still ``provisioning`` (waiting for a vGPU re-profile) has no VMI; its analyst chose
the name of a colleague's hand-made VMI. The release goes through the browser (HTTP POST), the
worker's ``vmrequests.delete_vmi`` task then runs against the fake cluster.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from portal import k8s
from tests.fake_k8s import FakeCluster, live_request, provisioning_world
from vmrequests import tasks
from vmrequests.models import VMRequest
from vmrequests.provisioning.ownership import Deletion, delete_own_vmi, foreign_vmi_named

pytestmark = pytest.mark.django_db

FOREIGN = {"app": "colleague-notebook"}
LEFT_ALONE = (
    "The request had no VirtualMachineInstance. The VirtualMachineInstance team-quant/shared-box was "
    "not created by the portal for this request and was left alone."
)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    return FakeCluster.install(monkeypatch)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    out: list[int] = []
    monkeypatch.setattr(tasks.delete_vmi, "delay", out.append)
    return out


def test_release_over_http_leaves_a_foreign_vmi_alone(
    cluster: FakeCluster, sent: list[int], django_capture_on_commit_callbacks: Any
) -> None:
    w = provisioning_world()
    req = live_request(w, "provisioning", vmi_name="shared-box")
    cluster.add_vmi("team-quant", "shared-box", FOREIGN)
    browser = Client()
    browser.force_login(w.alice)
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(f"/requests/{req.pk}/release/", {"note": ""})
    assert (response.status_code, sent) == (302, [req.pk])
    assert tasks.delete_vmi.run(req.pk) == "foreign_left"
    assert "deletionTimestamp" not in cluster.vmis[("team-quant", "shared-box")]["metadata"]
    assert "delete_vmi" not in cluster.names()
    req = VMRequest.objects.get(pk=req.pk)
    assert req.status == "deleted"
    assert list(req.events.order_by("-pk").values_list("message", flat=True)[:1]) == [LEFT_ALONE]


def test_a_foreign_vmi_labelled_as_another_request_is_left_alone(cluster: FakeCluster) -> None:
    labels = {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": "999"}
    cluster.add_vmi("team-quant", "shared-box", labels)
    assert delete_own_vmi(7, "team-quant", "shared-box") is Deletion.FOREIGN
    assert cluster.names() == ["get_vmi"]


def test_own_vmi_is_deleted_with_its_uid_as_precondition(cluster: FakeCluster) -> None:
    ours = {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": "7"}
    cluster.add_vmi("team-quant", "box", ours)
    assert delete_own_vmi(7, "team-quant", "box") is Deletion.DELETED
    assert delete_own_vmi(7, "team-quant", "absent") is Deletion.GONE


def test_a_vmi_replaced_between_read_and_delete_is_not_deleted(cluster: FakeCluster) -> None:
    ours = {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": "7"}
    cluster.add_vmi("team-quant", "box", ours)
    seen = cluster.get_vmi("team-quant", "box")
    cluster.forget_vmi("team-quant", "box")
    cluster.add_vmi("team-quant", "box", FOREIGN)  # a new object, another uid
    with pytest.raises(k8s.K8sTransientError, match="was replaced meanwhile"):
        delete_own_vmi(7, "team-quant", "box", seen)
    assert "deletionTimestamp" not in cluster.vmis[("team-quant", "box")]["metadata"]


def test_foreign_vmi_named(cluster: FakeCluster) -> None:
    cluster.add_vmi("team-quant", "hand-made", FOREIGN)
    cluster.add_vmi("team-quant", "ours", {"app.kubernetes.io/managed-by": "gpu-vm-portal"})
    assert [foreign_vmi_named("team-quant", n) for n in ("hand-made", "ours", "free")] == [True, False, False]
