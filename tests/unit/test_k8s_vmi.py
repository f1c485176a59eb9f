"""The adapter's provisioning calls (portal/k8s/): ``parse_vmi`` (conditions, IP, created,
deleting) and ``get_node``, ``list_pods_on_node``, ``patch_node_labels``, ``create_vmi``,
``get_vmi``, ``delete_vmi``, ``list_vmis_labelled`` with a fake client object (no cluster):
the arguments each passes, and how HTTP errors map to results or typed errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

from portal import k8s
from portal.k8s import client as k8s_client_module

GROUP = ("kubevirt.io", "v1")
SELECTOR = "app.kubernetes.io/managed-by=gpu-vm-portal"


class _Response:
    """What a ``_preload_content=False`` call returns: raw JSON in ``data``."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class FakeApi:
    """Stands in for ``CoreV1Api`` and ``CustomObjectsApi``: records ``(method, args, kwargs)``
    and answers each call with the next scripted response (a dict → JSON body, an exception →
    raised)."""

    def __init__(self, replies: list[Any], calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
        self.replies = replies
        self.calls = calls

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> _Response:
            self.calls.append((method, args, kwargs))
            reply = self.replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return _Response(reply)

        return call


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[Any], list[Any]]]:
    """``(replies, calls)`` of a fake client used for both API classes; timeout 7 s."""
    replies: list[Any] = []
    calls: list[Any] = []
    monkeypatch.setattr(k8s_client_module, "api_client", lambda: "the-api-client")

    def factory(api_client: Any) -> FakeApi:
        assert api_client == "the-api-client"
        return FakeApi(replies, calls)

    monkeypatch.setattr(kube_client, "CoreV1Api", factory)
    monkeypatch.setattr(kube_client, "CustomObjectsApi", factory)
    with override_settings(PORTAL_KUBE_TIMEOUT=7):
        yield replies, calls


def http(status: int, reason: str) -> ApiException:
    return ApiException(status=status, reason=reason)


RUNNING_VMI: dict[str, Any] = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {
        "name": "alice-vm-7",
        "namespace": "team-quant",
        "uid": "0b7c1f0e-1d2a-4a5b-9c8d-7e6f5a4b3c2d",
        "creationTimestamp": "2026-12-01T09:00:03Z",
        "labels": {
            "app.kubernetes.io/managed-by": "gpu-vm-portal",
            "gpu-vm-portal.io/request-id": "7",
            "kubevirt.io/nodeName": "p1",
        },
        "annotations": {"gpu-vm-portal.io/requester": "alice"},
    },
    "spec": {
        "domain": {
            "devices": {
                "gpus": [
                    {"name": "gpu1", "deviceName": "nvidia.com/GA100_A100_PCIE_40GB"},
                    {"name": "gpu2", "deviceName": "nvidia.com/GA100_A100_PCIE_40GB"},
                ]
            }
        }
    },
    "status": {
        "phase": "Running",
        "nodeName": "p1",
        "interfaces": [
            {"name": "secondary", "interfaceName": "eth1"},
            {"name": "default", "ipAddress": "10.244.1.17", "ipAddresses": ["10.244.1.17", "fd10:244::11"]},
        ],
        "conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": None},
            {
                "type": "LiveMigratable",
                "status": "False",
                "reason": "DisksNotLiveMigratable",
                "message": "cannot migrate VMI which does not use masquerade",
            },
            {"type": "AgentConnected", "status": "True", "reason": None, "message": None},
        ],
    },
}


# --- parse_vmi --------------------------------------------------------------------------------------


def test_parse_a_running_vmi() -> None:
    vmi = k8s.parse_vmi(RUNNING_VMI)
    assert vmi == k8s.VmiInfo(
        namespace="team-quant",
        name="alice-vm-7",
        uid="0b7c1f0e-1d2a-4a5b-9c8d-7e6f5a4b3c2d",
        phase="Running",
        node_name="p1",
        labels={
            "app.kubernetes.io/managed-by": "gpu-vm-portal",
            "gpu-vm-portal.io/request-id": "7",
            "kubevirt.io/nodeName": "p1",
        },
        annotations={"gpu-vm-portal.io/requester": "alice"},
        gpu_device_names=("nvidia.com/GA100_A100_PCIE_40GB", "nvidia.com/GA100_A100_PCIE_40GB"),
        conditions=(
            k8s.VmiCondition("Ready", "True"),
            k8s.VmiCondition(
                "LiveMigratable",
                "False",
                "DisksNotLiveMigratable",
                "cannot migrate VMI which does not use masquerade",
            ),
            k8s.VmiCondition("AgentConnected", "True"),
        ),
        ip_address="10.244.1.17",
        created="2026-12-01T09:00:03Z",
        deleting=False,
    )
    assert vmi.condition("LiveMigratable") == k8s.VmiCondition(
        "LiveMigratable",
        "False",
        "DisksNotLiveMigratable",
        "cannot migrate VMI which does not use masquerade",
    )
    assert vmi.condition("PodScheduled") is None


def test_parse_an_unschedulable_vmi_being_deleted() -> None:
    vmi = k8s.parse_vmi(
        {
            "metadata": {
                "name": "bob-vm-8",
                "namespace": "team-quant",
                "deletionTimestamp": "2026-12-01T09:20:00Z",
            },
            "status": {
                "phase": "Scheduling",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/GA102GL_A10.",
                    }
                ],
            },
        }
    )
    assert (vmi.phase, vmi.node_name, vmi.ip_address, vmi.created, vmi.deleting) == (
        "Scheduling",
        None,
        None,
        "",
        True,
    )
    assert vmi.condition("PodScheduled") == k8s.VmiCondition(
        "PodScheduled",
        "False",
        "Unschedulable",
        "0/3 nodes are available: 3 Insufficient nvidia.com/GA102GL_A10.",
    )


def test_parse_tolerates_missing_and_malformed_status() -> None:
    bare = k8s.parse_vmi({"metadata": {"name": "x", "namespace": "n"}})
    assert bare == k8s.VmiInfo(namespace="n", name="x")
    odd = k8s.parse_vmi(
        {
            "metadata": {"name": "x", "namespace": "n"},
            "status": {"conditions": "none", "interfaces": [{"name": "default", "ipAddress": ""}, "junk"]},
        }
    )
    assert (odd.conditions, odd.ip_address, odd.condition("Ready")) == ((), None, None)


# --- calls ----------------------------------------------------------------------------------------------


def test_get_node_reads_it_live(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    replies.append(
        {
            "metadata": {"name": "v2", "labels": {"nvidia.com/vgpu.config": "T4-8Q"}},
            "status": {"allocatable": {"nvidia.com/GRID_T4-8Q": "4"}},
        }
    )
    node = k8s.get_node("v2")
    assert (node.name, dict(node.labels), dict(node.allocatable)) == (
        "v2",
        {"nvidia.com/vgpu.config": "T4-8Q"},
        {"nvidia.com/GRID_T4-8Q": "4"},
    )
    assert calls == [("read_node", ("v2",), {"_preload_content": False, "_request_timeout": 7})]
    replies.append(http(404, "Not Found"))
    with pytest.raises(k8s.K8sNotFound):
        k8s.get_node("gone")


def test_list_pods_on_node_filters_on_the_server_and_pages(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api

    def pod(name: str, phase: str, requests: dict[str, str]) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "team-quant"},
            "spec": {"nodeName": "v2", "containers": [{"name": "c", "resources": {"requests": requests}}]},
            "status": {"phase": phase},
        }

    replies.extend(
        [
            {
                "items": [pod("virt-launcher-a", "Running", {"nvidia.com/GRID_T4-8Q": "1"})],
                "metadata": {"continue": "c1"},
            },
            {"items": [pod("done", "Succeeded", {"nvidia.com/GRID_T4-8Q": "1"})], "metadata": {}},
        ]
    )
    pods = k8s.list_pods_on_node("v2")
    assert [(p.name, dict(p.requests)) for p in pods] == [("virt-launcher-a", {"nvidia.com/GRID_T4-8Q": 1})]
    selector = "spec.nodeName=v2,status.phase!=Succeeded,status.phase!=Failed"
    base = {"limit": 500, "_preload_content": False, "field_selector": selector, "_request_timeout": 7}
    assert calls == [
        ("list_pod_for_all_namespaces", (), base),
        ("list_pod_for_all_namespaces", (), {**base, "_continue": "c1"}),
    ]


def test_patch_node_labels_sends_a_small_strict_patch(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    replies.append({"metadata": {"name": "v2", "labels": {"nvidia.com/vgpu.config": "T4-16Q"}}})
    node = k8s.patch_node_labels("v2", {"nvidia.com/vgpu.config": "T4-16Q", "old": None})
    assert dict(node.labels) == {"nvidia.com/vgpu.config": "T4-16Q"}
    assert calls == [
        (
            "patch_node",
            ("v2", {"metadata": {"labels": {"nvidia.com/vgpu.config": "T4-16Q", "old": None}}}),
            {"field_validation": "Strict", "_preload_content": False, "_request_timeout": 7},
        )
    ]


def test_create_vmi_with_strict_field_validation(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    body = {k: v for k, v in RUNNING_VMI.items() if k != "status"}
    replies.append(RUNNING_VMI)
    assert k8s.create_vmi("team-quant", body) == k8s.parse_vmi(RUNNING_VMI)
    assert calls == [
        (
            "create_namespaced_custom_object",
            (*GROUP, "team-quant", "virtualmachineinstances", body),
            {"field_validation": "Strict", "_preload_content": False, "_request_timeout": 7},
        )
    ]


@pytest.mark.parametrize(
    ("status", "reason", "error"),
    [
        (409, "Conflict", k8s.K8sConflict),
        (422, "Unprocessable Entity", k8s.K8sInvalid),
        (403, "Forbidden", k8s.K8sForbidden),
        (404, "Not Found", k8s.K8sNotFound),
        (503, "Service Unavailable", k8s.K8sTransientError),
    ],
)
def test_create_vmi_errors_are_typed(
    api: tuple[list[Any], list[Any]], status: int, reason: str, error: type[k8s.K8sError]
) -> None:
    replies, _ = api
    replies.append(http(status, reason))
    with pytest.raises(error) as caught:
        k8s.create_vmi("team-quant", {"metadata": {"name": "x"}})
    assert str(caught.value) == f"Kubernetes API {status} {reason}"
    assert isinstance(caught.value.__cause__, ApiException)


def test_get_vmi(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    replies.extend([RUNNING_VMI, http(404, "Not Found"), http(403, "Forbidden")])
    assert k8s.get_vmi("team-quant", "alice-vm-7") == k8s.parse_vmi(RUNNING_VMI)
    assert k8s.get_vmi("team-quant", "gone") is None
    with pytest.raises(k8s.K8sForbidden):
        k8s.get_vmi("team-quant", "secret")
    assert calls[0] == (
        "get_namespaced_custom_object",
        (*GROUP, "team-quant", "virtualmachineinstances", "alice-vm-7"),
        {"_preload_content": False, "_request_timeout": 7},
    )


def test_delete_vmi(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    replies.extend([{"kind": "Status", "status": "Success"}, http(404, "Not Found"), http(500, "Internal")])
    assert k8s.delete_vmi("team-quant", "alice-vm-7", "u-1") is True
    assert k8s.delete_vmi("team-quant", "alice-vm-7", "u-1") is False
    with pytest.raises(k8s.K8sTransientError):
        k8s.delete_vmi("team-quant", "alice-vm-7", "u-1")
    with pytest.raises(ValueError, match="needs the uid"):
        k8s.delete_vmi("team-quant", "alice-vm-7", "")
    assert calls[0] == (
        "delete_namespaced_custom_object",
        (*GROUP, "team-quant", "virtualmachineinstances", "alice-vm-7"),
        {
            "body": {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "u-1"}},
            "_preload_content": False,
            "_request_timeout": 7,
        },
    )


def test_list_vmis_labelled_pages_with_the_selector(api: tuple[list[Any], list[Any]]) -> None:
    replies, calls = api
    other = {"metadata": {"name": "b", "namespace": "team-research"}}
    replies.extend(
        [{"items": [RUNNING_VMI], "metadata": {"continue": "tok"}}, {"items": [other], "metadata": {}}]
    )
    assert [(v.namespace, v.name) for v in k8s.list_vmis_labelled(SELECTOR)] == [
        ("team-quant", "alice-vm-7"),
        ("team-research", "b"),
    ]
    base = {"limit": 500, "_preload_content": False, "label_selector": SELECTOR, "_request_timeout": 7}
    assert calls == [
        ("list_cluster_custom_object", (*GROUP, "virtualmachineinstances"), base),
        ("list_cluster_custom_object", (*GROUP, "virtualmachineinstances"), {**base, "_continue": "tok"}),
    ]


def test_list_vmis_labelled_without_kubevirt_and_errors(api: tuple[list[Any], list[Any]]) -> None:
    replies, _ = api
    replies.extend([http(404, "Not Found"), http(429, "Too Many Requests"), http(403, "Forbidden")])
    assert k8s.list_vmis_labelled(SELECTOR) == []
    with pytest.raises(k8s.K8sTransientError, match="429"):
        k8s.list_vmis_labelled(SELECTOR)
    with pytest.raises(k8s.K8sForbidden):
        k8s.list_vmis_labelled(SELECTOR)


def test_translate_keeps_the_api_server_message() -> None:
    from kubernetes.client.exceptions import ApiException

    exc = ApiException(status=403, reason="Forbidden")
    # The client hands over the body as bytes from urllib3.
    status_body: Any = (
        b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":"nodes \\"n1\\" is forbidden: User '
        b'\\"system:serviceaccount:gpu-vm-portal:gpu-vm-portal\\" cannot delete resource \\"nodes\\"","code":403}'
    )
    exc.body = status_body
    error = k8s.translate(exc)
    assert isinstance(error, k8s.K8sForbidden)
    assert str(error) == (
        'Kubernetes API 403 Forbidden: nodes "n1" is forbidden: User '
        '"system:serviceaccount:gpu-vm-portal:gpu-vm-portal" cannot delete resource "nodes"'
    )
    plain = ApiException(status=503, reason="Service Unavailable")
    plain.body = "upstream connect error"
    assert str(k8s.translate(plain)) == "Kubernetes API 503 Service Unavailable"
