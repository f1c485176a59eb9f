"""``POST /api/v1/vm-requests/``: idempotent creation for ticketing systems.

Order of the checks (each may answer instead of creating):

1. ``requested_for``: filing for someone else needs ``vmrequests.submit_for_others`` (403), and
   the user must exist and be active (400).
2. ``Idempotency-Key`` (per caller): seen before with the same body → that request (200); with
   another body → 409 ``idempotency-key-reused`` listing ``differing_fields``.
3. Ticket (``ticket_source`` + ``ticket_id``, unique per filing account in the database:
   ``VMRequestQuerySet.with_ticket``): a request this caller filed exists → the same content
   gives it back (200), other content → 409 ``duplicate-ticket`` listing ``differing_fields``.
   Another account's tickets are never looked at (no squatting, no oracle: #14).
4. ``vmrequests.validation.validate`` on a ``RequestDraft`` of the body (the same rules as the
   browser form: team membership, image, GPU, sizes, SSH key, lease, name, capacity and quota)
   → 400 with its field errors and ``alternatives`` when it does not fit; when it refuses
   because a concurrent duplicate committed meanwhile (ticket ID or VM name taken), 2-3 are
   re-run and answer instead.
5. ``approval.submit`` in one transaction with the key row. Two concurrent duplicates: the
   database's unique constraints let one commit; the other gets ``IntegrityError``, re-runs 2-3
   and answers like a sequential duplicate (one request, never two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from portal.api.problems import ProblemError
from vmrequests import approval
from vmrequests.models import IdempotencyKey, VMRequest
from vmrequests.sshkeys import validate_ssh_public_key
from vmrequests.validation import SUBMIT_FOR_OTHERS as SUBMIT_FOR_OTHERS  # re-exported (portal/api/views.py)
from vmrequests.validation import RequestDraft, RequestInvalid, resolve_requester, validate


@dataclass(frozen=True)
class CreateOutcome:
    """The request answered with, and whether this call created it (201) or found it (200)."""

    request: VMRequest
    created: bool


def create_request(caller: Any, attrs: dict[str, Any], key: str = "") -> CreateOutcome:
    """Create (or find) the request described by ``attrs`` (``VMRequestCreateSerializer``
    validated data) for ``caller``; see the module docstring for the order of checks.

    Raises:
        ProblemError: 400 / 403 / 409 as described above.
    """
    try:
        requester = resolve_requester(caller, attrs.get("requested_for", ""))
    except RequestInvalid as exc:
        raise problem(exc) from exc
    found = _existing(caller, requester, attrs, key)
    if found is not None:
        return found
    try:
        spec = validate(caller, draft_of(attrs))
    except RequestInvalid as exc:
        # A concurrent duplicate may have committed since the check above; the validator then
        # refuses its ticket ID (or VM name). Answer as a sequential duplicate would.
        found = _existing(caller, requester, attrs, key)
        if found is not None:
            return found
        raise problem(exc) from exc
    try:
        with transaction.atomic():
            req = approval.submit(spec, requester, submitted_by=caller)
            if key:
                IdempotencyKey.objects.create(user=caller, key=key, body=_stored(attrs), vm_request=req)
    except IntegrityError:
        found = _existing(caller, requester, attrs, key)
        if found is None:
            raise
        return found
    return CreateOutcome(req, True)


def draft_of(attrs: dict[str, Any]) -> RequestDraft:
    """The ``RequestDraft`` of a validated create body (left-out sizes and lease stay None:
    ``validate`` fills in the image's and the team's defaults)."""
    return RequestDraft(
        team=attrs.get("team") or None,
        mode=attrs["mode"],
        image=attrs["image"],
        resource_name=attrs.get("resource_name", ""),
        vgpu_type=attrs.get("vgpu_type", ""),
        device_count=attrs.get("device_count", 1),
        cpu_cores=attrs.get("cpu_cores"),
        memory_gib=attrs.get("memory_gib"),
        lease_days=attrs.get("lease_days"),
        name=attrs.get("name", ""),
        ssh_public_key=attrs["ssh_public_key"],
        justification=attrs["justification"],
        ticket_source=attrs.get("ticket_source", ""),
        ticket_id=attrs.get("ticket_id", ""),
        requested_for=attrs.get("requested_for", ""),
    )


def problem(exc: RequestInvalid) -> ProblemError:
    """``RequestInvalid`` as problem details: 403 ``not-allowed`` when filing for another user
    is not allowed, else 400 ``validation-error`` with ``errors[{field, code, detail}]`` (field
    null for the request as a whole) and ``alternatives`` (strings) when some would fit."""
    errors = [
        {"field": name, "code": e.code, "detail": e.message}
        for name, items in exc.errors.items()
        for e in items
    ]
    denied = next((e for e in errors if e["field"] == "requested_for" and e["code"] == "not_allowed"), None)
    if denied is not None:
        return ProblemError(403, "not-allowed", str(denied["detail"]))
    detail = " ".join(f"{e['field']}: {e['detail']}" if e["field"] else str(e["detail"]) for e in errors[:5])
    extra = {"alternatives": [a.describe() for a in exc.alternatives]} if exc.alternatives else {}
    return ProblemError(400, "validation-error", detail, errors=errors, extra=extra)


def _stored(attrs: dict[str, Any]) -> dict[str, Any]:
    """The validated body as stored with an Idempotency-Key (JSON values only)."""
    return {k: v for k, v in sorted(attrs.items()) if v not in ("", None)}


def _existing(caller: Any, requester: Any, attrs: dict[str, Any], key: str) -> CreateOutcome | None:
    if key:
        row = IdempotencyKey.objects.filter(user=caller, key=key).select_related("vm_request").first()
        if row is not None:
            now = _stored(attrs)
            differing = sorted(k for k in set(row.body) | set(now) if row.body.get(k) != now.get(k))
            if differing:
                raise ProblemError(
                    409,
                    "idempotency-key-reused",
                    _(
                        "Idempotency-Key %(key)s was used for request #%(id)s with other values of: %(fields)s."
                    )
                    % {"key": key, "id": row.vm_request_id, "fields": ", ".join(differing)},
                    errors=_differing_errors(differing),
                    extra={"differing_fields": differing, "existing_request": row.vm_request_id},
                )
            return CreateOutcome(row.vm_request, False)
    ticket_id = attrs.get("ticket_id", "").strip()
    if not ticket_id:
        return None
    source = attrs.get("ticket_source", "").strip()
    # The caller filed it (requester or submitted_by), so visible_to(caller) includes it.
    req = (
        VMRequest.objects.with_ticket(caller, source, ticket_id)
        .select_related("team", "image", "requester")
        .first()
    )
    if req is None:
        return None
    differing = differences(req, requester, attrs)
    if differing:
        raise ProblemError(
            409,
            "duplicate-ticket",
            _("Ticket %(ticket)s already has request #%(id)s, with other values of: %(fields)s.")
            % {"ticket": ticket_id, "id": req.pk, "fields": ", ".join(differing)},
            errors=_differing_errors(differing),
            extra={"differing_fields": differing, "existing_request": req.pk},
        )
    return CreateOutcome(req, False)


def _differing_errors(fields: list[str]) -> list[dict[str, Any]]:
    return [
        {"field": name, "code": "differs", "detail": _("Differs from the existing request.")}
        for name in fields
    ]


def differences(req: VMRequest, requester: Any, attrs: dict[str, Any]) -> list[str]:
    """Names of the fields of ``attrs`` that do not match ``req`` (fields left out of ``attrs``
    that have defaults are not compared; the SSH key is compared normalised)."""
    out = []
    if req.requester_id != requester.pk:
        out.append("requested_for")
    given = {k: v for k, v in attrs.items() if v not in ("", None)}
    current = {
        "team": req.team.slug,
        "mode": req.mode,
        "resource_name": req.resource_name,
        "vgpu_type": req.vgpu_type,
        "device_count": req.device_count,
        "cpu_cores": req.cpu_cores,
        "memory_gib": req.memory_gib,
        "image": req.image.name,
        "name": req.vmi_name,
        "lease_days": req.lease_days,
        "justification": req.justification.strip(),
    }
    for name, value in current.items():
        if name in given and (given[name].strip() if isinstance(given[name], str) else given[name]) != value:
            out.append(name)
    if "ssh_public_key" in given:
        try:
            key = validate_ssh_public_key(given["ssh_public_key"])
        except ValidationError:
            key = given["ssh_public_key"]
        if key != req.ssh_public_key:
            out.append("ssh_public_key")
    return sorted(out)
