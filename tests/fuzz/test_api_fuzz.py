"""Property-based fuzzing of the REST API from its own OpenAPI schema (schemathesis, in process).

The schema is docs/openapi.yaml (the document ``/api/schema/`` serves:
tests/unit/api/test_api_openapi.py); every operation is called with generated valid and invalid
inputs through Django's WSGI handler in this process, authenticated with a token of all three
scopes. Every response must pass schemathesis' default checks: no 5xx; status code, content
type, headers and body as documented; invalid input rejected (but see
``negative_data_rejection``); schema-valid input accepted (but see ``DOMAIN_REFUSALS``).

The caller is ``apa`` of ``request_world()`` (approver and member of team ``quant``) with the
permission to file requests for others, on ``request_form_inventory()`` plus a successful sync
run and a permitted device; ``quant`` has requests in several states. Path parameters are the
generated value or, half of the time, an object that exists; half of the create bodies name a
real team, image and resource, so the calls also reach the services behind validation
(``sometimes_existing_objects``).

Bounded by the number of examples, not by time: ``PORTAL_FUZZ_EXAMPLES`` per operation and
phase (default 20, ``make fuzz-api`` uses 100), fixed seed, no example database.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation.meta import negated_parameters
from schemathesis.specs.openapi import checks as builtin_checks

from portal.api.auth import TokenRateThrottle
from portal.models import ApiToken
from tests.factories import stored_permitted_device, stored_sync_run
from tests.vmrequest_factories import (
    A100_PT,
    request_form_inventory,
    request_world,
    ssh_public_key,
    stored_request,
)

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
#: Query parameters whose malformed values the API ignores rather than rejects: DRF's
#: ``PageNumberPagination`` falls back to the default page size, django-filter's BooleanFilter
#: (FilterSets shared with the UI) treats anything but true/false as "no filter".
LENIENT_QUERY_PARAMETERS = frozenset({"page_size", "ready", "present", "has_flags", "transitioning"})
#: Merged into half of the positive create bodies (``sometimes_existing_objects``).
#: ``ticket_source``/``ticket_id`` stay as generated (idempotency on ticket IDs).
REALISTIC_CREATE = {
    "team": "quant",
    "image": "Ubuntu 22.04",
    "mode": "passthrough",
    "resource_name": A100_PT,
    "vgpu_type": "",
    "device_count": 1,
    "cpu_cores": 4,
    "memory_gib": 16,
    "lease_days": 7,
    "name": "",
    "requested_for": "",
    "ssh_public_key": ssh_public_key("ed25519", "fuzz@ticketing"),
    "justification": "Fine-tune the pricing model.",
}

MAX_EXAMPLES = int(os.environ.get("PORTAL_FUZZ_EXAMPLES", "20"))
SEED = 20260907

#: Responses per operation label ("GET /api/v1/me/") and status code (checks' extra calls
#: included), written to SUMMARY_FILE after the run.
CALLS: dict[str, Counter[int]] = {}
SUMMARY_FILE = Path(__file__).resolve().parents[2] / "test-artifacts" / "fuzz-api-summary.txt"


@pytest.fixture(scope="module", autouse=True)
def _write_summary() -> Iterator[None]:
    """After the module, for ``make fuzz-api``: per operation the number of calls and of each
    status code, then the totals."""
    CALLS.clear()
    yield
    lines = []
    for label, statuses in sorted(CALLS.items()):
        by_status = " ".join(f"{code}x{n}" for code, n in sorted(statuses.items()))
        lines.append(f"{statuses.total():6d}  {label:48s} {by_status}")
    total: Counter[int] = sum(CALLS.values(), Counter())
    lines.append(
        f"{total.total():6d}  calls over {len(CALLS)} operations, "
        f"{sum(n for code, n in total.items() if code < 300)} answered 2xx "
        f"(PORTAL_FUZZ_EXAMPLES={MAX_EXAMPLES}, seed {SEED})"
    )
    SUMMARY_FILE.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY_FILE.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def fuzz_world(db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """The seeded world (module docstring) and the caller's token; no broker, no throttling."""
    from vmrequests import approval, tasks
    from vmrequests.models import VMRequest, VMRequestEvent

    monkeypatch.setattr(tasks.provision, "delay", lambda pk: None)
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: None)
    # The fuzzer sends far more than the production rate per minute; 429 is tested elsewhere.
    monkeypatch.setattr(TokenRateThrottle, "rate", "1000000/min", raising=False)
    cache.clear()

    request_form_inventory()
    w = request_world()
    stored_sync_run()
    stored_permitted_device(A100_PT, "10DE:20F1")
    w.apa.user_permissions.add(Permission.objects.get(codename="submit_for_others"))
    lease_end = timezone.now().replace(microsecond=0) + timedelta(days=5)
    w.r_running = stored_request(
        w.quant, w.tim, w.image, status="running", node_name="p1", ip_address="10.0.0.7", lease_end=lease_end
    )
    w.r_extending = stored_request(
        w.quant,
        w.ana,
        w.image,
        status="running",
        node_name="p1",
        ip_address="10.0.0.8",
        lease_end=lease_end,
        extension_days_requested=3,
        extension_reason="One more training run.",
    )
    w.r_rejected = stored_request(w.quant, w.ana, w.image)
    approval.reject(w.r_rejected, w.apa, "No budget this quarter.")
    approval.approve(w.r_tim, w.apa, "ok")
    for req in VMRequest.objects.all():
        VMRequestEvent.objects.create(
            request=req, actor=req.requester, action="submit", from_status="", to_status="submitted"
        )
    _, w.token = ApiToken.issue(w.apa, "fuzz", ["read", "write", "approve"], 30)
    # Calls go straight to the WSGI handler: like Django's test client, keep the handler from
    # closing the test's database connection at the end of each request (PostgreSQL would lose
    # the test transaction).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield w
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)
        cache.clear()


def existing_values() -> dict[str, list[Any]]:
    """Values of each path parameter name that name an existing object."""
    from gpuinventory.models import GpuNode, PermittedDevice, VgpuConfig
    from vmrequests.models import Team, VmImage, VMRequest

    return {
        "id": [
            *VMRequest.objects.values_list("pk", flat=True),
            *PermittedDevice.objects.values_list("pk", flat=True),
        ],
        "name": [
            *GpuNode.objects.values_list("name", flat=True),
            *VgpuConfig.objects.values_list("name", flat=True),
            *VmImage.objects.values_list("name", flat=True),
        ],
        "slug": list(Team.objects.values_list("slug", flat=True)),
    }


#: Statuses a schema-valid request may get where domain rules apply (see CONFIG["operations"]).
DOMAIN_REFUSALS = ["2xx", 400, 401, 403, 404, 409, 429]
CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": SEED,
        "generation": {
            "mode": "all",
            "max-examples": MAX_EXAMPLES,
            "deterministic": True,
            "database": "none",
            "with-security-parameters": False,
        },
        "phases": {
            "examples": {"enabled": True},
            "coverage": {"enabled": True},
            "fuzzing": {"enabled": True},
        },
        "operations": [
            {
                # A schema-valid body can still name a team the caller is not in, an image that
                # does not exist, more lease days than the team allows: 400 by the domain rules,
                # which no schema can state. Any other refusal (405, 406, 415, 422) still fails.
                "include-method": "POST",
                "checks": {"positive_data_acceptance": {"expected-statuses": DOMAIN_REFUSALS}},
            },
            {
                # Filters whose choices are rows (team slugs, stored GPU models and resource
                # names): an unknown value is a 400 that the schema (a free string) cannot state.
                "include-method": "GET",
                "include-path": ["/api/v1/vm-requests/", "/api/v1/inventory/nodes/"],
                "checks": {"positive_data_acceptance": {"expected-statuses": DOMAIN_REFUSALS}},
            },
        ],
    }
)
# The committed schema; tests/unit/api/test_api_openapi.py proves /api/schema/ serves the same.
# (schemathesis.pytest.from_fixture, which would load it from /api/schema/ inside a test, reads
# pytest's private Node._nodeid, which pytest 9.2 no longer has.)
schema = schemathesis.openapi.from_path(SCHEMA_FILE, config=CONFIG)
schema.app = WSGIHandler()


@schema.hook("after_call")
def count_response(context: Any, case: Any, response: Any) -> None:
    """Count every response by operation and status code (SUMMARY_FILE)."""
    CALLS.setdefault(case.operation.label, Counter())[response.status_code] += 1


@schema.hook("flatmap_case")
def sometimes_existing_objects(context: Any, case: Any) -> Any:
    """Half of the cases name objects of the seeded world: path parameters that exist, and
    create bodies with a real team, image, resource and SSH key. Only parts the case keeps
    valid are replaced (a negative case's invalid component stays as generated)."""
    negated = {location for _, location in negated_parameters(case.meta)}
    mode = case.meta.generation.mode if case.meta is not None else None
    replace_path = bool(case.path_parameters) and ParameterLocation.PATH not in negated
    replace_body = (
        (case.operation.method.upper(), case.operation.path) == ("POST", "/api/v1/vm-requests/")
        and isinstance(case.body, dict)
        and mode is not None
        and mode.is_positive
    )
    if not (replace_path or replace_body):
        return st.just(case)
    known = existing_values() if replace_path else {}
    if replace_path and not all(known.get(name) for name in case.path_parameters):
        replace_path = False

    def realistic(picks: dict[str, Any]) -> Any:
        if replace_path:
            case.path_parameters = {**case.path_parameters, **picks}
        if replace_body:
            case.body = {**case.body, **REALISTIC_CREATE}
        return case

    picks = st.fixed_dictionaries(
        {name: st.sampled_from(known[name]) for name in (case.path_parameters if replace_path else {})}
    )
    return st.one_of(st.just(case), picks.map(realistic))


def negative_data_rejection(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' ``negative_data_rejection``, except when the only invalid parts are query
    parameters the API ignores instead of answering 400: an empty value (a filter form's unset
    field) or a malformed value of ``LENIENT_QUERY_PARAMETERS``."""
    try:
        return builtin_checks.negative_data_rejection(ctx, response, case)
    except AcceptedNegativeData:
        negated = set(negated_parameters(case.meta))
        if negated and all(
            location == ParameterLocation.QUERY
            and (name in LENIENT_QUERY_PARAMETERS or read_value(case, name) == "")
            for name, location in negated
        ):
            return None
        raise


def read_value(case: Any, name: str) -> Any:
    """The value of query parameter ``name`` as Django reads it: the last one when repeated,
    ``""`` when absent (an object is sent as its own keys, form style, so ``name`` is absent)."""
    value = (case.query or {}).get(name, "")
    if isinstance(value, list):
        value = value[-1] if value else ""
    return "" if isinstance(value, dict) else value


@schema.parametrize()
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
def test_api_conforms_to_its_schema(case: Any, fuzz_world: SimpleNamespace) -> None:
    """The world is built once per operation; the examples of one operation share it (and what
    the previous examples created or changed in it)."""
    case.call_and_validate(
        headers={"Authorization": f"Token {fuzz_world.token}"},
        excluded_checks=[builtin_checks.negative_data_rejection],
        additional_checks=[negative_data_rejection],
    )
