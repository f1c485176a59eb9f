"""A database of the previous release migrates forward and keeps every row.

The previous release is commit ``6dafcf1`` (main before the "one truth" round): its migration
leaf nodes are :data:`PREVIOUS_RELEASE`. The test migrates the test database back to them,
writes rows into every table through the historical models of that state (teams with members,
approvers, quotas and rules, images, requests with events and idempotency keys, inventory rows
and a reservation, a sync run, an API token, webhook endpoints, events, deliveries and attempts,
a group holding a webhook permission), migrates forward to the newest migrations and reads the
rows back through today's models. It runs on whichever database the suite uses: SQLite locally,
PostgreSQL in CI (``DATABASE_URL``).

``serialized_rollback`` restores the rows the migrations themselves wrote (groups, permissions)
for the tests that run after this one.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps as current_apps
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder

#: The migration leaf nodes of commit 6dafcf1, the release before this one.
PREVIOUS_RELEASE = [
    ("gpuinventory", "0003_reservation"),
    ("portal", "0001_apitoken"),
    ("vmrequests", "0004_webhooks"),
    ("webhooks", None),  # the app did not exist: none of its migrations applied
]

WHEN = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.UTC)
EVENT_ID = uuid.UUID("5f0c7c4e-2b1f-4a63-9a55-0d7c2b9e1a01")
WEBHOOK_MODELS = ("webhookendpoint", "webhookevent", "webhookdelivery", "webhookattempt")


def _migrate(targets: list[Any]) -> Any:
    """Migrate the test database to ``targets``; return the historical apps of that state."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    ContentType.objects.clear_cache()
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def _latest() -> list[Any]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def old_release() -> Iterator[Any]:
    """The database at :data:`PREVIOUS_RELEASE` (historical apps); migrated forward afterwards
    whatever the test did."""
    old = _migrate(PREVIOUS_RELEASE)
    applied = MigrationRecorder(connection).applied_migrations()
    assert ("vmrequests", "0004_webhooks") in applied and ("gpuinventory", "0003_reservation") in applied
    newer = [
        key for key in applied if key[0] == "webhooks" or (key[0] == "vmrequests" and key[1][:4] > "0004")
    ]
    assert newer == []
    try:
        yield old
    finally:
        _migrate(_latest())


def _populate(old: Any) -> dict[str, Any]:
    """One row or more in every table of the previous release; returns their keys."""
    User = old.get_model("auth", "User")
    Group = old.get_model("auth", "Group")
    Permission = old.get_model("auth", "Permission")
    ContentTypeOld = old.get_model("contenttypes", "ContentType")
    get = old.get_model
    alice = User.objects.create(username="alice-m", email="alice@example.com")
    bob = User.objects.create(username="bob-m")
    team = get("vmrequests", "Team").objects.create(name="Quant M", slug="quant-m", namespace="team-quant-m")
    team.members.add(alice, bob)
    team.approvers.add(bob)
    get("vmrequests", "GpuQuota").objects.create(team=team, max_devices=4)
    get("vmrequests", "AutoApprovalRule").objects.create(team=team, mode="vgpu")
    image = get("vmrequests", "VmImage").objects.create(
        name="Ubuntu M", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu 22.04"
    )
    req = get("vmrequests", "VMRequest").objects.create(
        requester=alice,
        team=team,
        image=image,
        mode="passthrough",
        resource_name="nvidia.com/GA100_A100_PCIE_40GB",
        device_count=2,
        cpu_cores=8,
        memory_gib=32,
        ssh_public_key="ssh-ed25519 AAAA migration",
        lease_days=7,
        justification="kept across the migration",
        vmi_namespace="team-quant-m",
        vmi_name="alice-m-vm-1",
        status="approved",
    )
    get("vmrequests", "VMRequestEvent").objects.create(
        request=req, actor=bob, action="approved", from_status="submitted", to_status="approved"
    )
    get("vmrequests", "IdempotencyKey").objects.create(
        user=alice, key="ticket-7", body={"a": 1}, vm_request=req
    )
    node = get("gpuinventory", "GpuNode").objects.create(
        name="p1-m", first_seen=WHEN, last_seen=WHEN, workload_mode="vm-passthrough", mode_source="label"
    )
    get("gpuinventory", "GpuResource").objects.create(
        node=node, name="nvidia.com/GA100_A100_PCIE_40GB", kind="passthrough", allocatable=2
    )
    get("gpuinventory", "GpuConsumer").objects.create(
        node=node,
        resource_name="nvidia.com/GA100_A100_PCIE_40GB",
        count=1,
        pod_namespace="team-quant-m",
        pod_name="virt-launcher-x-abcde",
    )
    get("gpuinventory", "VgpuConfig").objects.create(name="T4-8Q", config_map="default-vgpu-devices-config")
    get("gpuinventory", "PermittedDevice").objects.create(
        kind="pci", resource_name="nvidia.com/GA100_A100_PCIE_40GB", selector="10DE:20F1", source="kubevirt"
    )
    get("gpuinventory", "SyncRun").objects.create(started=WHEN, finished=WHEN, status="success")
    get("gpuinventory", "Reservation").objects.create(
        node=node,
        count=2,
        holder=f"vmrequest:{req.pk}",
        vmi_namespace="team-quant-m",
        vmi_name="alice-m-vm-1",
    )
    get("portal", "ApiToken").objects.create(
        digest="d" * 128, token_key="abcdefgh", name="ticketing", user=alice, scopes=["read"]
    )
    endpoint = get("vmrequests", "WebhookEndpoint").objects.create(
        name="ticketing-m",
        url="https://tickets.example.com/hook",
        secret="s3cret",
        event_types=["vm_request.*"],
    )
    event = get("vmrequests", "WebhookEvent").objects.create(
        id=EVENT_ID, type="vm_request.approved", occurred_at=WHEN, payload={"version": 1, "id": str(EVENT_ID)}
    )
    delivery = get("vmrequests", "WebhookDelivery").objects.create(
        endpoint=endpoint, event=event, status="failed", attempts=1, last_status_code=500
    )
    get("vmrequests", "WebhookAttempt").objects.create(
        delivery=delivery, number=1, started_at=WHEN, duration_ms=12, status_code=500
    )
    # The content types and a permission as the previous release's post_migrate made them.
    for model in WEBHOOK_MODELS:
        ContentTypeOld.objects.get_or_create(app_label="vmrequests", model=model)
    ct = ContentTypeOld.objects.get(app_label="vmrequests", model="webhookdelivery")
    perm, _ = Permission.objects.get_or_create(
        content_type=ct, codename="change_webhookdelivery", defaults={"name": "Can change webhook delivery"}
    )
    operators = Group.objects.create(name="webhook-operators")
    operators.permissions.add(perm)
    bob.groups.add(operators)
    return {"request": req.pk, "delivery": delivery.pk, "endpoint": endpoint.pk, "bob": bob.pk}


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_previous_release_database_migrates_forward_with_every_row(old_release: Any) -> None:
    keys = _populate(old_release)
    _migrate(_latest())

    from django.contrib.auth.models import User

    from gpuinventory.models import (
        GpuConsumer,
        GpuNode,
        GpuResource,
        PermittedDevice,
        Reservation,
        SyncRun,
        VgpuConfig,
    )
    from portal.models import ApiToken
    from vmrequests.models import AutoApprovalRule, GpuQuota, IdempotencyKey, Team, VmImage, VMRequest
    from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint, WebhookEvent

    team = Team.objects.get(slug="quant-m")
    assert sorted(u.username for u in team.members.all()) == ["alice-m", "bob-m"]
    assert [u.username for u in team.approvers.all()] == ["bob-m"]
    assert list(GpuQuota.objects.filter(team=team).values_list("max_devices", flat=True)) == [4]
    assert list(AutoApprovalRule.objects.filter(team=team).values_list("mode", flat=True)) == ["vgpu"]
    assert VmImage.objects.get(name="Ubuntu M").os == "Ubuntu 22.04"
    req = VMRequest.objects.get(pk=keys["request"])
    assert (req.status, req.device_count, req.vmi_name, req.requester.username) == (
        "approved",
        2,
        "alice-m-vm-1",
        "alice-m",
    )
    assert [
        (e.action, e.from_status, e.to_status, e.actor and e.actor.username) for e in req.events.all()
    ] == [("approved", "submitted", "approved", "bob-m")]
    assert IdempotencyKey.objects.get(key="ticket-7").vm_request_id == req.pk
    node = GpuNode.objects.get(name="p1-m")
    assert list(GpuResource.objects.filter(node=node).values_list("allocatable", flat=True)) == [2]
    assert GpuConsumer.objects.get(node=node).pod_name == "virt-launcher-x-abcde"
    assert VgpuConfig.objects.filter(name="T4-8Q").count() == 1
    assert PermittedDevice.objects.get(selector="10DE:20F1").kind == "pci"
    assert SyncRun.objects.filter(started=WHEN, status="success").count() == 1
    reservation = Reservation.objects.get(node=node)
    assert (reservation.count, reservation.vmi_name) == (2, "alice-m-vm-1")
    assert ApiToken.objects.get(token_key="abcdefgh").scopes == ["read"]

    # The webhook rows, through the models of the new app, in the tables they always had.
    endpoint = WebhookEndpoint.objects.get(pk=keys["endpoint"])
    assert (endpoint.name, endpoint.secret, endpoint.event_types) == (
        "ticketing-m",
        "s3cret",
        ["vm_request.*"],
    )
    assert WebhookEvent.objects.get(pk=EVENT_ID).payload == {"version": 1, "id": str(EVENT_ID)}
    delivery = WebhookDelivery.objects.get(pk=keys["delivery"])
    assert (delivery.status, delivery.endpoint_id, delivery.event_id, delivery.last_status_code) == (
        "failed",
        endpoint.pk,
        EVENT_ID,
        500,
    )
    assert list(WebhookAttempt.objects.filter(delivery=delivery).values_list("number", "status_code")) == [
        (1, 500)
    ]

    # Content types moved with the models: the group's permission now reads webhooks.*.
    moved = ContentType.objects.filter(model__in=WEBHOOK_MODELS)
    assert sorted(moved.values_list("app_label", "model")) == sorted(("webhooks", m) for m in WEBHOOK_MODELS)
    assert ContentType.objects.get_for_model(
        current_apps.get_model("webhooks", "WebhookDelivery")
    ).app_label == ("webhooks")
    bob = User.objects.get(pk=keys["bob"])
    assert bob.has_perm("webhooks.change_webhookdelivery")
    assert not bob.has_perm("vmrequests.change_webhookdelivery")
