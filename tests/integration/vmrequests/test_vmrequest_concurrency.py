"""Concurrent approvals: two approvals can never hand out the same last device (issue 5).

Each approval runs in its own thread with its own database connection; a ``threading.Barrier``
releases them into ``vmrequests.approval.approve`` together. Exactly one wins, the others are
refused with the plain reason, and exactly one ``Reservation`` exists. CI runs this on
PostgreSQL (``pg_advisory_xact_lock``), a laptop on SQLite (``BEGIN IMMEDIATE``, see
``portal/settings.py``); ``docs/testing.md`` says how to run the PostgreSQL tier locally.

The inventory is stored rows (``tests/factories.py``): what matters here is the lock, not the
cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from gpuinventory.models import GpuNode, Reservation
from tests.factories import stored_consumer, stored_node, stored_resource
from tests.integration.vmrequests.conftest import (
    create_roles,
    file_database,
    make_analyst,
    make_approver,
    make_image,
    make_team,
    submit_request,
)
from vmrequests.approval import APPROVAL_LOCK_KEY, ApprovalRefused, _approval_lock, approve, cancel
from vmrequests.choices import VMMode, VMRequestStatus
from vmrequests.models import Team, VmImage, VMRequest

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

A2000 = "nvidia.com/GA106_RTX_A2000_12GB"
A100 = "nvidia.com/GA100_A100_PCIE_40GB"
LAST_A2000_GONE = "All RTX A2000 12GB GPUs are in use or reserved right now."
A100_QUOTA_FULL = f"Your team's quota for {A100} is 1 devices and 1 are held; this request needs 1 more."
#: How long a thread may take at most before the test calls it stuck (the SQLite busy timeout
#: is 20 s; nothing here should come close).
JOIN_TIMEOUT = 120.0


@pytest.fixture
def threaded_db(transactional_db: None, tmp_path: Path) -> Iterator[None]:
    """A database that other threads' connections can share the way production processes do.

    PostgreSQL: the test database as it is. SQLite: pytest-django's test database is an
    in-memory, shared-cache one, where a second writer gets "database table is locked" at once
    instead of waiting (shared-cache locks ignore the busy timeout), unlike the file database
    of a real deployment. So for the duration of the test the ``default`` alias points at a copy
    of the test database in a file (``sqlite3`` backup API) with the same options
    (``transaction_mode=IMMEDIATE``, ``timeout``); afterwards the in-memory connection is put
    back, untouched, for pytest-django's flush.
    """
    with file_database(tmp_path):
        yield


@dataclass
class World:
    """What the races need: one team, its approver and analysts, an image, and the inventory."""

    team: Team
    approver: User
    analysts: list[User]
    image: VmImage


@pytest.fixture
def world(threaded_db: None) -> World:
    """Inventory: ``pt-a2000-01`` with 2 A2000s, one of them used (one free, the last one), and
    ``pt-a100-01`` with 4 free A100s; team ``quant`` (namespace ``team-quant``) may hold at most 1
    A100 at once."""
    create_roles()
    a2000 = stored_node("pt-a2000-01", "vm-passthrough", gpu_model="RTX A2000 12GB", gpu_count=2)
    stored_resource(a2000, A2000, 2, used=1, model="RTX A2000 12GB", pci_device_id="2571", permitted=True)
    stored_consumer(a2000, A2000, "virt-launcher-other-abcde", pod_namespace="team-b", vmi_name="other")
    a100 = stored_node("pt-a100-01", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(a100, A100, 4, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    team = make_team("team-quant", quotas={(VMMode.PASSTHROUGH, A100): 1})
    analysts = [make_analyst(team, f"analyst{i}") for i in range(3)]
    return World(team, make_approver(team), analysts, make_image())


def race(
    pks: list[int], approver_pk: int, action: Callable[[VMRequest, Any], Any] = approve
) -> dict[int, str]:
    """Run ``action(request, approver)`` for every request in its own thread and connection, all
    released together by a barrier.

    Returns:
        ``{pk: "approved" | "refused: <reason>" | "error: <exception>"}``.
    """
    barrier = threading.Barrier(len(pks))
    results: dict[int, str] = {}

    def work(pk: int) -> None:
        try:
            req = VMRequest.objects.get(pk=pk)
            by = User.objects.get(pk=approver_pk)
            barrier.wait()
            action(req, by)
            results[pk] = "approved"
        except ApprovalRefused as exc:
            results[pk] = f"refused: {exc}"
        except Exception as exc:
            results[pk] = f"error: {exc!r}"
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(pk,), name=f"approve-{pk}") for pk in pks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert [t.name for t in threads if t.is_alive()] == []
    return results


def reservations() -> list[tuple[str, str, str, int]]:
    """(holder, node, resource, count) of every reservation."""
    return [
        (r.holder, r.node.name, r.resource_name, r.count)
        for r in Reservation.objects.select_related("node").order_by("pk")
    ]


def statuses(pks: list[int]) -> dict[int, str]:
    return dict(VMRequest.objects.filter(pk__in=pks).values_list("pk", "status"))


def test_concurrent_approvals_of_the_last_device_exactly_one_wins(world: World) -> None:
    for round_no in range(4):
        pks = [
            submit_request(
                world.team, analyst, world.image, resource_name=A2000, gpu_model="RTX A2000 12GB"
            ).pk
            for analyst in world.analysts
        ]
        results = race(pks, world.approver.pk)

        winners = [pk for pk, outcome in results.items() if outcome == "approved"]
        assert len(winners) == 1, (round_no, results)
        (winner,) = winners
        losers = sorted(set(pks) - {winner})
        assert {pk: results[pk] for pk in losers} == dict.fromkeys(losers, f"refused: {LAST_A2000_GONE}")
        assert reservations() == [(f"vmrequest:{winner}", "pt-a2000-01", A2000, 1)]
        assert statuses(pks) == {
            **dict.fromkeys(losers, VMRequestStatus.SUBMITTED),
            winner: VMRequestStatus.APPROVED,
        }
        approval = VMRequest.objects.get(pk=winner).events.get(action="approve")
        assert (approval.actor_id, approval.from_status, approval.to_status) == (
            world.approver.pk,
            VMRequestStatus.SUBMITTED,
            VMRequestStatus.APPROVED,
        )
        assert approval.data["placement"] == {"fits": True, "node": "pt-a2000-01", "resource_name": A2000}
        for pk in losers:  # a refused approval writes nothing: the timeline holds only the submission
            assert list(VMRequest.objects.get(pk=pk).events.values_list("action", flat=True)) == ["submit"]

        # Free the device again for the next round: cancelling ends the reservation.
        for pk in pks:
            cancel(VMRequest.objects.get(pk=pk), world.approver)
        assert reservations() == []


def test_concurrent_approvals_cannot_exceed_the_team_quota(world: World) -> None:
    """Four A100s are free but the team may hold one: the quota re-check is under the same lock."""
    pks = [
        submit_request(world.team, analyst, world.image, resource_name=A100, gpu_model="A100 PCIe 40GB").pk
        for analyst in world.analysts[:2]
    ]
    results = race(pks, world.approver.pk)

    winners = [pk for pk, outcome in results.items() if outcome == "approved"]
    assert len(winners) == 1, results
    (loser,) = set(pks) - set(winners)
    assert results[loser] == f"refused: {A100_QUOTA_FULL}"
    assert reservations() == [(f"vmrequest:{winners[0]}", "pt-a100-01", A100, 1)]
    assert statuses(pks) == {winners[0]: VMRequestStatus.APPROVED, loser: VMRequestStatus.SUBMITTED}


def test_an_approval_waits_for_the_one_in_flight(world: World) -> None:
    """Approval B starts while approval A holds the lock and has written (not yet committed) the
    reservation of the last A2000: B waits for A and is then refused.

    On PostgreSQL the test sees B waiting for the advisory lock (``pg_locks``) before A commits,
    so without the lock B would read the device as free and win. On SQLite B cannot even begin
    its ``IMMEDIATE`` transaction until A commits.
    """
    first = submit_request(world.team, world.analysts[0], world.image, resource_name=A2000)
    second = submit_request(world.team, world.analysts[1], world.image, resource_name=A2000)
    node = GpuNode.objects.get(name="pt-a2000-01")
    holding = threading.Event()
    release = threading.Event()
    outcome: dict[str, str] = {}

    def in_flight() -> None:
        try:
            with transaction.atomic():
                _approval_lock()
                Reservation.objects.create(
                    node=node,
                    resource_name=A2000,
                    count=1,
                    holder=first.holder.key,
                    vmi_namespace=first.vmi_namespace,
                    vmi_name=first.vmi_name,
                )
                holding.set()
                assert release.wait(JOIN_TIMEOUT)
            outcome["first"] = "committed"
        except Exception as exc:
            outcome["first"] = f"error: {exc!r}"
            holding.set()
        finally:
            connection.close()

    a = threading.Thread(target=in_flight, name="in-flight")
    a.start()
    assert holding.wait(JOIN_TIMEOUT)
    started = threading.Event()

    def second_approval() -> None:
        started.set()
        outcome.update(race([second.pk], world.approver.pk))

    b = threading.Thread(target=second_approval, name="second")
    b.start()
    assert started.wait(JOIN_TIMEOUT)
    if connection.vendor == "postgresql":
        wait_for_advisory_waiter()
    release.set()
    a.join(JOIN_TIMEOUT)
    b.join(JOIN_TIMEOUT)
    assert (a.is_alive(), b.is_alive()) == (False, False)

    assert outcome == {"first": "committed", second.pk: f"refused: {LAST_A2000_GONE}"}
    assert reservations() == [(first.holder.key, "pt-a2000-01", A2000, 1)]
    assert statuses([second.pk]) == {second.pk: VMRequestStatus.SUBMITTED}


def wait_for_advisory_waiter() -> None:
    """Poll ``pg_locks`` (bounded) until one session waits for the approval advisory lock."""
    deadline = time.monotonic() + JOIN_TIMEOUT
    waiting = 0
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
                [APPROVAL_LOCK_KEY],
            )
            waiting = cursor.fetchone()[0]
        if waiting:
            break
        time.sleep(0.02)
    assert waiting == 1


def test_the_approval_lock_statement() -> None:
    """PostgreSQL: the lock is one ``pg_advisory_xact_lock`` on the approval key (released at
    commit or rollback). SQLite: no statement; the ``IMMEDIATE`` transaction mode takes the
    database write lock at ``BEGIN`` instead."""
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        _approval_lock()
    statements = [q["sql"] for q in queries.captured_queries]
    if connection.vendor == "postgresql":
        assert statements == [f"SELECT pg_advisory_xact_lock({APPROVAL_LOCK_KEY})"]
        assert APPROVAL_LOCK_KEY == 1196447062
    else:
        assert connection.vendor == "sqlite"
        assert statements == []
        assert connection.settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
