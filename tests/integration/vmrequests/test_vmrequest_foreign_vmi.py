"""#14 finding 1 on the dev cluster: a hand-made VMI named like a request survives a release and a
terminate, the requests end ``deleted`` with a timeline entry saying it was left alone, and the
name is refused at submit.

The requests are ``provisioning`` without a VMI (as when waiting for a vGPU re-profile); the
worker's step ``provisioning.delete_vmi_of`` runs in-process with the real adapter.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s_client

from devcluster.server import DevCluster
from devcluster.spec import vmi_manifest
from tests.integration.vmrequests.conftest import make_analyst, make_approver, make_image, make_team
from tests.vmrequest_factories import stored_request
from vmrequests import provisioning, vm_names
from vmrequests.approval import release, terminate
from vmrequests.models import Team, VMRequest

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

VMI = (
    "kubevirt.io",
    "v1",
)
NAME = "shared-box"


@pytest.fixture
def team(portal_cluster: DevCluster, k8s_namespace: str) -> Team:
    return make_team(k8s_namespace)


@pytest.fixture
def foreign(team: Team, k8s_api: k8s_client.ApiClient) -> k8s_client.CustomObjectsApi:
    """A colleague's VMI ``shared-box`` (no portal labels) in the team's namespace."""
    custom = k8s_client.CustomObjectsApi(k8s_api)
    body = vmi_manifest(NAME, team.namespace, [], labels={"app": "notebook"})
    custom.create_namespaced_custom_object(*VMI, team.namespace, "virtualmachineinstances", body)
    return custom


def still_there(custom: k8s_client.CustomObjectsApi, namespace: str) -> tuple[str, Any]:
    obj = custom.get_namespaced_custom_object(*VMI, namespace, "virtualmachineinstances", NAME)
    return obj["metadata"]["labels"].get("app"), obj["metadata"].get("deletionTimestamp")


def left_alone(namespace: str) -> str:
    return (
        f"The request had no VirtualMachineInstance. The VirtualMachineInstance {namespace}/{NAME} "
        "was not created by the portal for this request and was left alone."
    )


def test_a_foreign_vmi_survives_release_and_terminate(
    team: Team, foreign: k8s_client.CustomObjectsApi
) -> None:
    alice = make_analyst(team, "alice")
    image = make_image()
    released = stored_request(team, alice, image, status="provisioning", vmi_name=NAME)
    release(released, alice)
    assert provisioning.delete_vmi_of(released.pk).action == "foreign_left"
    assert still_there(foreign, team.namespace) == ("notebook", None)

    terminated = stored_request(team, alice, image, status="provisioning", vmi_name=NAME)
    terminate(terminated, make_approver(team), "not needed any more")
    assert provisioning.delete_vmi_of(terminated.pk).action == "foreign_left"
    assert still_there(foreign, team.namespace) == ("notebook", None)

    for req in (released, terminated):
        req = VMRequest.objects.get(pk=req.pk)
        last = list(req.events.order_by("-pk").values_list("to_status", "message")[:1])
        assert (req.status, last) == ("deleted", [("deleted", left_alone(team.namespace))])


def test_the_name_of_a_foreign_vmi_is_refused_at_submit(
    team: Team, foreign: k8s_client.CustomObjectsApi
) -> None:
    problem = vm_names.name_problem(NAME, team)
    assert problem is not None and problem[0] == "foreign_vmi"
    assert vm_names.name_problem("free-box", team) is None
