"""Read API ``/api/v1/inventory/``: access per role (anonymous gets JSON 401, never a redirect),
the UI's filters, pagination, node detail, exact summary numbers and a flat query budget."""

from __future__ import annotations

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
    stored_fleet,
    stored_node,
    stored_permitted_device,
    stored_resource,
    stored_sync_run,
    stored_vgpu_config,
)

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    "/api/v1/inventory/",
    "/api/v1/inventory/nodes/",
    "/api/v1/inventory/nodes/gpu-p-000/",
    "/api/v1/inventory/summary/",
    "/api/v1/inventory/vgpu-configs/",
    "/api/v1/inventory/vgpu-configs/T4-8Q/",
    "/api/v1/inventory/permitted-devices/",
]


@pytest.fixture
def fleet() -> list[GpuNode]:
    """``stored_fleet(1)`` + an over-used vGPU node + an absent node, a config, a permitted device."""
    nodes = stored_fleet(1)
    over = stored_node("gpu-v-over", "vm-vgpu", gpu_model="Tesla T4", gpu_count=1, ready=False)
    stored_resource(over, "nvidia.com/GRID_T4-8Q", 2, used=3, model="T4", vgpu_type="T4-8Q")
    gone = stored_node("gpu-gone", "container", present=False, last_seen=timezone.now() - timedelta(days=2))
    stored_resource(gone, "nvidia.com/gpu", 8, used=8)
    stored_vgpu_config("T4-8Q", [{"device_filter": None, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}])
    stored_permitted_device("nvidia.com/GA106_RTX_A2000_12GB", "10DE:2571")
    stored_permitted_device("nvidia.com/GRID_T4-8Q", "GRID T4-8Q", kind="mdev")
    stored_sync_run(age_seconds=5)
    return [*nodes, over, gone]


def client_for(role: str) -> Client:
    client = Client()
    client.force_login(portal_user(role))
    return client


def names(payload: dict[str, Any]) -> list[str]:
    return [row["name"] for row in payload["results"]]


@pytest.mark.parametrize("path", ENDPOINTS)
def test_anonymous_gets_json_401_never_a_redirect(fleet: list[GpuNode], path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response["Content-Type"] == "application/problem+json"
    assert "Location" not in response
    assert response.json() == {
        "type": "about:blank",
        "title": "Authentication required.",
        "status": 401,
        "detail": "Authentication credentials were not provided.",
        "instance": path,
    }


@pytest.mark.parametrize("role", ["analyst", "approver", "admin"])
@pytest.mark.parametrize("path", ENDPOINTS)
def test_every_role_reads(fleet: list[GpuNode], role: str, path: str) -> None:
    response = client_for(role).get(path)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    "path",
    ["/api/v1/inventory/nodes/", "/api/v1/inventory/vgpu-configs/", "/api/v1/inventory/permitted-devices/"],
)
def test_read_only(fleet: list[GpuNode], path: str) -> None:
    assert client_for("admin").post(path, {}, content_type="application/json").status_code == 405


def test_node_list_is_paginated_and_ordered(fleet: list[GpuNode]) -> None:
    payload = client_for("analyst").get("/api/v1/inventory/nodes/?page_size=2").json()
    assert payload["count"] == 5
    assert names(payload) == ["gpu-c-000", "gpu-gone"]
    assert payload["next"] == "http://testserver/api/v1/inventory/nodes/?page=2&page_size=2"
    first = payload["results"][0]
    assert first["url"] == "http://testserver/api/v1/inventory/nodes/gpu-c-000/"
    assert (first["devices_total"], first["devices_used"], first["devices_free"]) == (8, 2, 6)
    assert first["workload_mode"] == "container" and first["flag_count"] == 0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("mode=vm-vgpu", ["gpu-v-000", "gpu-v-over"]),
        ("resource=nvidia.com/GRID_T4-8Q&ready=true", ["gpu-v-000"]),
        ("present=false", ["gpu-gone"]),
        ("has_flags=true", ["gpu-p-000"]),
        ("model=Tesla+T4", ["gpu-v-000", "gpu-v-over"]),
        ("q=a2000", ["gpu-p-000"]),
        ("ordering=-devices_free", ["gpu-c-000", "gpu-v-000", "gpu-gone", "gpu-p-000", "gpu-v-over"]),
    ],
)
def test_node_filters_match_the_ui(fleet: list[GpuNode], query: str, expected: list[str]) -> None:
    client = client_for("analyst")
    assert names(client.get(f"/api/v1/inventory/nodes/?{query}").json()) == expected
    if not query.startswith("ordering"):
        ui = client.get(f"/inventory/nodes/?{query}&sort=name")
        assert [row.record.name for row in ui.context["table"].page.object_list] == sorted(expected)


def test_invalid_filter_is_a_400(fleet: list[GpuNode]) -> None:
    response = client_for("analyst").get("/api/v1/inventory/nodes/?mode=kata")
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "tag:gpu-vm-portal,2026:validation-error"
    assert [(e["field"], e["code"]) for e in body["errors"]] == [("mode", "invalid_choice")]


def test_node_detail(fleet: list[GpuNode]) -> None:
    payload = client_for("analyst").get("/api/v1/inventory/nodes/gpu-p-000/").json()
    assert payload["name"] == "gpu-p-000"
    assert payload["mode_source"] == "label"
    assert [
        (r["name"], r["allocatable"], r["used"], r["free"], r["stale"]) for r in payload["resources"]
    ] == [
        ("nvidia.com/2571", 0, 0, 0, True),
        ("nvidia.com/GA106_RTX_A2000_12GB", 1, 1, 0, False),
    ]
    assert payload["consumers"] == [
        {
            "pod_namespace": "team-a",
            "pod_name": "virt-launcher-vm0-abcde",
            "vmi_name": "vm0",
            "resource_name": "nvidia.com/GA106_RTX_A2000_12GB",
            "count": 1,
        }
    ]
    [flag] = payload["flags"]
    assert flag["code"] == "stale_resource"
    assert flag["params"] == {"resource": "nvidia.com/2571"}
    assert flag["severity"] == "info"
    assert flag["title"] == "Stale resource entry"
    assert any("gpu-p-000" in command for command in flag["commands"])


def test_node_detail_404(fleet: list[GpuNode]) -> None:
    assert client_for("analyst").get("/api/v1/inventory/nodes/nope/").status_code == 404


def test_summary_numbers(fleet: list[GpuNode]) -> None:
    payload = client_for("analyst").get("/api/v1/inventory/summary/").json()
    modes = payload["modes"]
    assert set(modes) == {"container", "vm-passthrough", "vm-vgpu"}
    picked = {
        mode: (
            data["nodes"],
            data["nodes_ready"],
            data["nodes_in_use"],
            data["total"],
            data["used"],
            data["free"],
        )
        for mode, data in modes.items()
    }
    assert picked == {
        "container": (1, 1, 1, 8, 2, 6),
        "vm-passthrough": (1, 1, 1, 1, 1, 0),
        "vm-vgpu": (2, 1, 2, 6, 4, 3),
    }
    assert modes["vm-vgpu"]["by_resource"] == [
        {
            "label": "T4-8Q",
            "nodes": 2,
            "gpus": None,
            "total": 6,
            "used": 4,
            "free": 3,
            "resource": "nvidia.com/GRID_T4-8Q",
            "kind": "vgpu",
            "model": "T4",
            "free_unusable": 0,
            "free_unusable_reasons": {},
            "reserved": 0,
            "vgpu_type": "T4-8Q",
            "nodes_with_free": 1,
            "max_free_on_one_node": 3,
            # 8 GB instances of a 16 GB T4: 6 → 3 GPUs; used 1 + min(3, 2) = 3 → 1.5
            "gpu_equivalents": {"total": 3, "used": 1.5, "reserved": 0, "free": 1.5, "unsized_devices": 0},
        }
    ]
    assert [(g["label"], g["free"], g["total"]) for g in modes["vm-vgpu"]["by_vgpu_type"]] == [
        ("T4-8Q", 3, 6)
    ]
    assert (modes["vm-vgpu"]["uniform"], modes["vm-passthrough"]["uniform"]) == (False, True)
    assert modes["container"]["gpu_equivalents"] == {
        "total": 8,
        "used": 2,
        "reserved": 0,
        "free": 6,
        "unsized_devices": 0,
    }
    assert (modes["vm-vgpu"]["free_unusable"], modes["vm-vgpu"]["free_unusable_reasons"]) == (0, {})
    assert modes["vm-passthrough"]["by_model"][0]["label"] == "RTX A2000 12GB"
    assert payload["absent_nodes"] == 1
    assert payload["last_sync"]["status"] == "success"
    assert 0 <= payload["data_age_seconds"] < 60


def test_summary_when_the_last_sync_failed(fleet: list[GpuNode]) -> None:
    stored_sync_run(status="failed", age_seconds=1, error="timeout")
    payload = client_for("analyst").get("/api/v1/inventory/summary/").json()
    assert payload["last_sync"]["status"] == "failed"
    assert payload["last_sync"]["error"] == "timeout"
    assert payload["last_success"]["status"] == "success"


def test_vgpu_configs_and_permitted_devices(fleet: list[GpuNode]) -> None:
    client = client_for("analyst")
    configs = client.get("/api/v1/inventory/vgpu-configs/").json()
    assert [c["name"] for c in configs["results"]] == ["T4-8Q"]
    assert configs["results"][0]["entries"][0]["vgpu_devices"] == {"T4-8Q": 2}
    devices = client.get("/api/v1/inventory/permitted-devices/?kind=mdev").json()
    assert devices["results"] == [
        {
            "kind": "mdev",
            "resource_name": "nvidia.com/GRID_T4-8Q",
            "selector": "GRID T4-8Q",
            "external_resource_provider": True,
            "source": "kubevirt/kubevirt",
            "present": True,
        }
    ]


def test_node_list_query_budget(django_assert_max_num_queries: Any) -> None:
    client = client_for("analyst")

    def count() -> int:
        with CaptureQueriesContext(connection) as context:
            assert client.get("/api/v1/inventory/nodes/?page_size=500").status_code == 200
        return len(context.captured_queries)

    stored_fleet(2)
    small = count()
    GpuNode.objects.all().delete()
    stored_fleet(17)
    assert count() == small
    with django_assert_max_num_queries(8):
        client.get("/api/v1/inventory/nodes/?page_size=500")
