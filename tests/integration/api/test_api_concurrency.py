"""Concurrent duplicate creates through the REST API: one request, never two (issue 7).

A ticketing system that times out and retries, or runs several workers, may send the same
ticket (or the same ``Idempotency-Key``) several times at once. Each call here runs in its own
thread with its own database connection and its own test client; a ``threading.Barrier``
releases them together into ``POST /api/v1/vm-requests/``. Exactly one answers 201, the others
answer like a sequential duplicate: 200 with the same body when the content is the same, 409
``duplicate-ticket`` naming the differing fields when it is not.

SQLite runs on a file copy of the test database (``file_database``, as in
``tests/integration/vmrequests/test_vmrequest_concurrency.py``); PostgreSQL as it is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from portal.models import ApiToken
from tests.integration.vmrequests.conftest import create_roles, file_database
from tests.vmrequest_factories import A100_PT, request_form_inventory, request_world, ssh_public_key
from vmrequests.models import IdempotencyKey, VMRequest, VMRequestEvent

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

URL = "/api/v1/vm-requests/"
THREADS = 4
ROUNDS = 3
#: How long a thread may take at most before the test calls it stuck (the SQLite busy timeout
#: is 20 s; nothing here should come close).
JOIN_TIMEOUT = 120.0
SSH_KEY = ssh_public_key("ed25519", "analyst@laptop")


@pytest.fixture
def world(transactional_db: None, tmp_path: Path) -> Iterator[Any]:
    """``request_world()`` on ``request_form_inventory()`` in a database other threads share,
    and one API token of ana (all scopes)."""
    with file_database(tmp_path):
        create_roles()
        request_form_inventory()
        w = request_world()
        _, w.token = ApiToken.issue(w.ana, "ticketing", ["read", "write"], 30)
        yield w


def body(ticket: str, **overrides: Any) -> dict[str, Any]:
    """Ana's request for 1 A100 (4 cores, 16 GiB, 7 days) for ``ticket`` of ServiceNow."""
    values: dict[str, Any] = {
        "team": "quant",
        "mode": "passthrough",
        "resource_name": A100_PT,
        "device_count": 1,
        "cpu_cores": 4,
        "memory_gib": 16,
        "image": "Ubuntu 22.04",
        "ssh_public_key": SSH_KEY,
        "lease_days": 7,
        "justification": "Backtest of the risk model.",
        "ticket_source": "SNOW",
        "ticket_id": ticket,
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}


def race(
    token: str, bodies: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> list[tuple[int, Any]]:
    """POST every body from its own thread (own connection, own client), released together.

    Returns:
        ``[(status, parsed body) or (0, "error: <exception>")]`` in the order of ``bodies``.
    """
    barrier = threading.Barrier(len(bodies))
    results: list[tuple[int, Any]] = [(0, "not run")] * len(bodies)

    def work(index: int) -> None:
        try:
            client = Client(headers={"Authorization": f"Token {token}", **(headers or {})})
            payload = json.dumps(bodies[index])
            barrier.wait()
            response = client.post(URL, payload, content_type="application/json")
            results[index] = (response.status_code, json.loads(response.content))
        except Exception as exc:
            results[index] = (0, f"error: {exc!r}")
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i,), name=f"create-{i}") for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert [t.name for t in threads if t.is_alive()] == []
    return results


def test_concurrent_duplicates_of_a_ticket_create_one_request(world: Any) -> None:
    for round_no in range(ROUNDS):
        ticket = f"INC{round_no:04d}"
        results = race(world.token, [body(ticket)] * THREADS)

        statuses = sorted(status for status, _ in results)
        assert statuses == [200] * (THREADS - 1) + [201], (round_no, results)
        (req,) = VMRequest.objects.filter(ticket_source="SNOW", ticket_id=ticket)
        assert {data["id"] for _, data in results} == {req.pk}
        created = next(data for status, data in results if status == 201)
        assert all(data == created for _, data in results)  # the same body for every answer
        assert (created["requester"], created["status"], created["vmi_name"]) == (
            "ana",
            "submitted",
            f"ana-vm-{req.pk}",
        )
        assert list(VMRequestEvent.objects.filter(request=req).values_list("action", flat=True)) == ["submit"]
    assert VMRequest.objects.count() == 3 + ROUNDS


def test_concurrent_duplicates_with_other_content_create_one_request(world: Any) -> None:
    """Two threads send 4 cores, two send 8 cores, for the same ticket: whichever content is
    stored first wins; its twin gets 200, the other two 409 naming ``cpu_cores``."""
    for round_no in range(ROUNDS):
        ticket = f"CHG{round_no:04d}"
        bodies = [body(ticket), body(ticket, cpu_cores=8), body(ticket), body(ticket, cpu_cores=8)]
        results = race(world.token, bodies)

        (req,) = VMRequest.objects.filter(ticket_source="SNOW", ticket_id=ticket)
        winner_cores = req.cpu_cores
        assert winner_cores in (4, 8)
        expected = []
        for sent, (status, data) in zip(bodies, results, strict=True):
            if sent["cpu_cores"] == winner_cores:
                assert status in (200, 201), (round_no, results)
                assert data["id"] == req.pk
                expected.append("same")
            else:
                assert status == 409, (round_no, results)
                assert data["type"] == "tag:gpu-vm-portal,2026:duplicate-ticket"
                assert (data["differing_fields"], data["existing_request"]) == (["cpu_cores"], req.pk)
                expected.append("other")
        assert sorted(status for status, _ in results) == [200, 201, 409, 409], (round_no, results)
        assert expected.count("same") == expected.count("other") == 2
    assert VMRequest.objects.count() == 3 + ROUNDS


def test_concurrent_duplicates_of_an_idempotency_key_create_one_request(world: Any) -> None:
    for round_no in range(ROUNDS):
        key = f"order-{round_no}"
        sent = body("", ticket_source=None, ticket_id=None, name=f"box-{round_no}")
        results = race(world.token, [sent] * THREADS, {"Idempotency-Key": key})

        assert sorted(status for status, _ in results) == [200] * (THREADS - 1) + [201], (round_no, results)
        (row,) = IdempotencyKey.objects.filter(user=world.ana, key=key)
        assert {data["id"] for _, data in results} == {row.vm_request_id}
        assert VMRequest.objects.filter(vmi_name=f"box-{round_no}").count() == 1
    assert VMRequest.objects.count() == 3 + ROUNDS
