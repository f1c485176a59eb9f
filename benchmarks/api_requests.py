"""REST API cost: ``GET /api/v1/vm-requests/`` pages and idempotent ``POST`` retries, against the
database work they cannot avoid, measured in the same run.

Usage (from the repository root; a script, not a test)::

    .venv/bin/python -m benchmarks.api_requests --requests 2000 --rounds 20

Setup (not timed): a throw-away SQLite database with one team, one image, ``--requests``
requests and a token-authenticated service account (every scope).

- **list**: ``GET /api/v1/vm-requests/?page_size=500`` through the whole Django stack (token
  authentication, scope check, throttle, filters, pagination, serializer, JSON) versus the
  **baseline**: the same 500 rows read with one ``values()`` query of every column the API shows
  plus ``json.dumps``. Ratio target ≤ 10: the API builds a model instance per row and DRF
  renders 36 fields one by one (measured 8.8 on 2 cores: 217 ms for 500 rows, 0.43 ms a row; the
  default page of 50 costs about 25 ms).
- **retry**: ``POST /api/v1/vm-requests/`` repeating an existing ticket (the idempotent path a
  ticketing system takes when it retries) versus the **baseline** ``GET`` of that request by ID.
  Ratio target ≤ 3.

Prints medians (ms) of ``--rounds`` runs, queries per call, and peak Python memory of one list
call (tracemalloc). Exit status 0 when both ratios meet their targets.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

LIST_TARGET = 10.0
RETRY_TARGET = 3.0


class QueryCounter:
    """A ``connection.execute_wrapper`` that counts the SQL statements run through it."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)


def median_ms(fn: Callable[[], Any], rounds: int) -> float:
    """Median wall time of ``fn`` over ``rounds`` calls, in milliseconds (one warm-up call)."""
    fn()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def run(args: argparse.Namespace) -> int:
    work = Path(tempfile.mkdtemp(prefix="api-bench-"))
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PORTAL_VAR_DIR": str(work),
            "DATABASE_URL": f"sqlite:///{work / 'bench.sqlite3'}",
            "LOG_LEVEL": "ERROR",
            "ALLOWED_HOSTS": "testserver",
            "PORTAL_API_THROTTLE_RATE": "1000000/min",
        }
    )
    os.environ.pop("CELERY_BROKER_URL", None)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from portal.models import ApiToken
    from vmrequests.models import Team, VmImage, VMRequest

    call_command("migrate", "--noinput", verbosity=0)
    users = get_user_model().objects
    ana = users.create_user("ana")
    bot = users.create_user("ticketing")
    team = Team.objects.create(name="Quant", slug="quant", namespace="team-quant")
    team.members.set([ana, bot])
    image = VmImage.objects.create(
        name="Ubuntu 22.04", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu"
    )
    VMRequest.objects.bulk_create(
        VMRequest(
            requester=ana,
            submitted_by=bot,
            team=team,
            mode="passthrough",
            resource_name="nvidia.com/GA100_A100_PCIE_40GB",
            gpu_model="A100 PCIe 40GB",
            cpu_cores=8,
            memory_gib=64,
            image=image,
            ssh_public_key="ssh-ed25519 AAAA bench",
            lease_days=7,
            justification="benchmark",
            ticket_source="SNOW",
            ticket_id=f"INC{i:07d}",
            vmi_name=f"ana-vm-{i}",
            vmi_namespace="team-quant",
        )
        for i in range(args.requests)
    )
    from django.contrib.auth.models import Permission

    bot.user_permissions.add(Permission.objects.get(codename="submit_for_others"))
    _, token = ApiToken.issue(bot, "bench", ["read", "write", "approve"], 1)
    client = Client(headers={"Authorization": f"Token {token}"})
    first = VMRequest.objects.order_by("pk").first()
    assert first is not None
    retry_body = {
        "team": "quant",
        "mode": "passthrough",
        "resource_name": first.resource_name,
        "image": image.name,
        "ssh_public_key": first.ssh_public_key,
        "justification": first.justification,
        "requested_for": "ana",
        "ticket_source": "SNOW",
        "ticket_id": first.ticket_id,
    }
    fields = [
        "id", "status", "team__slug", "requester__username", "submitted_by__username", "ticket_source",
        "ticket_id", "mode", "resource_name", "vgpu_type", "gpu_model", "device_count", "cpu_cores",
        "memory_gib", "image__name", "ssh_public_key", "lease_days", "justification", "vmi_namespace",
        "vmi_name", "node_name", "ip_address", "decided_by__username", "decided_by_policy", "decided_at",
        "decision_note", "failure_reason", "deletion_reason", "lease_end", "extension_days_requested",
        "extension_reason", "vmi_created_at", "created", "updated",
    ]  # fmt: skip

    def api_list() -> None:
        response = client.get("/api/v1/vm-requests/?page_size=500")
        assert response.status_code == 200 and len(response.json()["results"]) == 500

    def raw_list() -> None:
        rows = list(VMRequest.objects.order_by("-created", "-pk").values(*fields)[:500])
        json.dumps(rows, default=str)

    def api_retry() -> None:
        response = client.post("/api/v1/vm-requests/", retry_body, content_type="application/json")
        assert response.status_code == 200, response.content

    def api_get() -> None:
        assert client.get(f"/api/v1/vm-requests/{first.pk}/").status_code == 200

    results = {}
    for name, fn in (
        ("list", api_list),
        ("baseline list", raw_list),
        ("retry", api_retry),
        ("baseline get", api_get),
    ):
        with connection.execute_wrapper(counter := QueryCounter()):
            fn()
        results[name] = (median_ms(fn, args.rounds), counter.count)
    tracemalloc.start()
    api_list()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    for name, (ms, n) in results.items():
        print(f"{name:14s} {ms:8.1f} ms  {n:3d} queries")
    list_ratio = results["list"][0] / results["baseline list"][0]
    retry_ratio = results["retry"][0] / results["baseline get"][0]
    print(f"list ratio  {list_ratio:.2f} (target ≤ {LIST_TARGET}); 500 of {args.requests} requests per page")
    print(f"retry ratio {retry_ratio:.2f} (target ≤ {RETRY_TARGET})")
    print(f"list call peak Python memory {peak / 2**20:.1f} MiB")
    return 0 if list_ratio <= LIST_TARGET and retry_ratio <= RETRY_TARGET else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests in the database (≥ 500)")
    parser.add_argument("--rounds", type=int, default=20, help="timed calls per measurement")
    args = parser.parse_args()
    if args.requests < 500:
        parser.error("--requests must be at least 500 (one full page)")
    sys.exit(run(args))


if __name__ == "__main__":
    main()
