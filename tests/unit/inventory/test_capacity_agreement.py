"""Reproductions of issue #13 "Capacity owns free": readers that disagreed before the fix.

Written against the stored inventory only (``Reservation`` rows created directly, the way the
approval wrote them), so they ran on the code before the fix too, where they failed: the summary,
the node table, the node page and the nodes API ignored reservations and re-profile promises.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from gpuinventory import capacity
from gpuinventory.models import Reservation
from gpuinventory.summary import inventory_summary
from tests.factories import portal_user, stored_node, stored_resource, stored_sync_run, stored_vgpu_config
from vmrequests.placement import gpu_options

pytestmark = pytest.mark.django_db

A100 = "nvidia.com/GA100_A100_PCIE_40GB"
T4_8Q = "nvidia.com/GRID_T4-8Q"
T4_FILTER = ["0x1EB810DE"]


def analyst() -> Client:
    client = Client()
    client.force_login(portal_user("analyst"))
    return client


def text(html: Any) -> str:
    return re.sub(r"<[^>]+>", " ", str(html)).split()[0]


def test_one_two_device_reservation_is_seen_by_every_reader() -> None:
    """5 idle A100s on p1, 2 of them reserved for an approved request: 3 free, everywhere."""
    stored_sync_run()
    p1 = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=5)
    stored_resource(p1, A100, 5, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    Reservation.objects.create(
        node=p1,
        resource_name=A100,
        count=2,
        holder="vmrequest:1",
        vmi_namespace="team-a",
        vmi_name="ana-vm-1",
    )
    snap = capacity.CapacitySnapshot()
    assert snap.nodes_offering(A100)[0].free == 3
    client = analyst()
    summary = client.get("/api/v1/inventory/summary/").json()["modes"]["vm-passthrough"]
    assert (summary["free"], [g["free"] for g in summary["by_resource"]]) == (3, [3])
    table = client.get("/inventory/nodes/").context["table"]
    assert text(table.rows[0].get_cell("devices_free")) == "3"
    page = client.get("/inventory/nodes/p1/").content.decode()
    assert re.search(r'class="num free"[^>]*>(\d+)', page).group(1) == "3"  # type: ignore[union-attr]
    assert client.get("/api/v1/inventory/nodes/").json()["results"][0]["devices_free"] == 3
    detail = client.get("/api/v1/inventory/nodes/p1/").json()
    assert [r["free"] for r in detail["resources"]] == [3]


def test_after_a_reprofile_the_dashboard_and_the_form_agree_on_a_vgpu_type() -> None:
    """v1 was just re-profiled to T4-8Q (16 instances advertised) for a request whose worker has
    not marked the re-profile done yet: v1 offers nothing until it has. v2 offers 12. The
    dashboard said 28 on 2 nodes while the form offered 12."""
    stored_sync_run()
    stored_vgpu_config(
        "T4-8Q", [{"device_filter": T4_FILTER, "devices": "all", "vgpu_devices": {"T4-8Q": 2}}]
    )
    for name, alloc in (("v1", 16), ("v2", 12)):
        node = stored_node(
            name,
            "vm-vgpu",
            gpu_model="Tesla T4",
            gpu_count=8,
            vgpu_config="T4-8Q",
            vgpu_config_state="success",
        )
        stored_resource(node, T4_8Q, alloc, model="Tesla T4", vgpu_type="T4-8Q", series="Q", permitted=True)
        if name == "v1":
            Reservation.objects.create(
                node=node,
                vgpu_type="T4-8Q",
                count=1,
                reprofile_config="T4-8Q",
                reprofile_from="T4-16Q",
                holder="vmrequest:7",
                vmi_namespace="team-a",
                vmi_name="ana-vm-7",
            )
    offered = next(o for o in gpu_options("vgpu") if o.resource_name == T4_8Q)
    assert (offered.free, offered.max_on_one_node) == (12, 12)
    group = next(g for m in inventory_summary().modes for g in m.by_resource if g.resource == T4_8Q)
    assert group.free == 12
    html = analyst().get("/inventory/").content.decode()
    assert re.search(rf'data-stat="{re.escape(T4_8Q)}-free">(\d+)<', html).group(1) == "12"  # type: ignore[union-attr]
