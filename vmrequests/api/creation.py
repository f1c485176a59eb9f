"""``POST /api/v1/vm-requests/``: idempotent creation for ticketing systems.

Order of the checks (each may answer instead of creating):

1. ``requested_for``: filing for someone else needs ``vmrequests.submit_for_others`` (403), and
   the user must exist and be active (400).
2. ``Idempotency-Key`` (per caller): seen before with the same body → that request (200); with
   another body → 409 ``idempotency-key-reused`` listing ``differing_fields``.
3. Ticket (``ticket_source`` + ``ticket_id``, unique in the database): a request exists → the
   same content gives it back (200), other content → 409 ``duplicate-ticket`` listing
   ``differing_fields``.
4. The browser's validation (``VMRequestForm``: team membership, image, GPU, SSH key, bounds,
   capacity and quota) → 400 with field errors and ``alternatives`` when it does not fit; when
   it refuses because a concurrent duplicate committed meanwhile (ticket ID or VM name taken),
   2-3 are re-run and answer instead.
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
from vmrequests.api.serializers import user_by_name
from vmrequests.choices import VMMode
from vmrequests.forms import VMRequestForm, user_teams
from vmrequests.models import IdempotencyKey, Team, VmImage, VMRequest
from vmrequests.placement import REPROFILE_PREFIX
from vmrequests.sshkeys import validate_ssh_public_key

SUBMIT_FOR_OTHERS = "vmrequests.submit_for_others"


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
    requester = _requester(caller, attrs.get("requested_for", "").strip())
    found = _existing(caller, requester, attrs, key)
    if found is not None:
        return found
    try:
        form = _validated_form(requester, attrs)
    except ProblemError:
        # A concurrent duplicate may have committed since the check above; the form then
        # refuses its ticket ID (or VM name). Answer as a sequential duplicate would.
        found = _existing(caller, requester, attrs, key)
        if found is not None:
            return found
        raise
    spec = form.spec()
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


def _requester(caller: Any, username: str) -> Any:
    if not username or username == caller.get_username():
        return caller
    if not caller.has_perm(SUBMIT_FOR_OTHERS):
        raise ProblemError(
            403,
            "not-allowed",
            _("Filing a request for another user (requested_for) needs the %(perm)s permission.")
            % {"perm": SUBMIT_FOR_OTHERS},
        )
    user = user_by_name(username)
    if user is None:
        message = _("There is no active user %(name)s.") % {"name": username}
        raise ProblemError(
            400,
            "validation-error",
            message,
            errors=[{"field": "requested_for", "code": "unknown_user", "detail": message}],
        )
    return user


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
    req = (
        VMRequest.objects.filter(ticket_source=source, ticket_id=ticket_id)
        .select_related("team", "image", "requester")
        .first()
    )
    if req is None:
        return None
    if not VMRequest.objects.visible_to(caller).filter(pk=req.pk).exists():
        raise ProblemError(
            409,
            "duplicate-ticket",
            _("Ticket %(ticket)s already has a VM request that you may not see.") % {"ticket": ticket_id},
            extra={"differing_fields": []},
        )
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


def _validated_form(requester: Any, attrs: dict[str, Any]) -> VMRequestForm:
    """Run the browser's ``VMRequestForm`` on the API body; 400 problem details if it refuses."""
    team = _team(requester, attrs.get("team", ""))
    image = VmImage.objects.filter(name=attrs["image"], enabled=True).first()
    data: dict[str, Any] = {
        "team": team.pk if team else "0",
        "mode": attrs["mode"],
        "image": image.pk if image else "0",
        "gpu": attrs.get("resource_name", ""),
        "device_count": attrs.get("device_count", 1),
        "cpu_cores": attrs.get("cpu_cores") or (image.default_cpu_cores if image else ""),
        "memory_gib": attrs.get("memory_gib") or (image.default_memory_gib if image else ""),
        "lease_days": attrs.get("lease_days") or (team.default_lease_days if team else ""),
        "name": attrs.get("name", ""),
        "ssh_public_key": attrs["ssh_public_key"],
        "justification": attrs["justification"],
        "ticket_id": attrs.get("ticket_id", "").strip(),
    }
    form = VMRequestForm(requester, data=data, ticket_source=attrs.get("ticket_source", "").strip())
    vgpu_type = attrs.get("vgpu_type", "")
    if vgpu_type and attrs["mode"] == VMMode.VGPU:
        offered = sorted(
            (o for o in form.options if o.vgpu_type == vgpu_type),
            key=lambda o: (not o.resource_name, -o.free),
        )
        data["gpu"] = offered[0].value if offered else REPROFILE_PREFIX + vgpu_type
    if form.is_valid():
        return form
    gpu_field = "vgpu_type" if vgpu_type else "resource_name"
    errors = []
    for name, items in form.errors.as_data().items():
        if name in DERIVED_DEFAULTS and name not in attrs:
            continue  # left out, and its default could not be derived: the team/image error says why
        field = None if name == "__all__" else (gpu_field if name == "gpu" else name)
        for error in items:
            for message in error.messages:
                if name == "gpu" and error.code in ("unknown_gpu", "other_mode"):
                    message = f"{message} {_offered(form, attrs['mode'])}"
                errors.append({"field": field, "code": error.code or "invalid", "detail": message})
    detail = " ".join(f"{e['field']}: {e['detail']}" if e["field"] else str(e["detail"]) for e in errors[:5])
    extra = {"alternatives": [a.describe() for a in form.alternatives]} if form.alternatives else {}
    raise ProblemError(400, "validation-error", detail, errors=errors, extra=extra)


#: Fields the API may leave out because they default from the team or the image.
DERIVED_DEFAULTS = frozenset({"cpu_cores", "memory_gib", "lease_days"})


def _offered(form: VMRequestForm, mode: str) -> str:
    """``"Offered for vgpu: nvidia.com/GRID_T4-8Q, T4-16Q (after re-profiling)."``"""
    names = [
        o.resource_name or _("%(type)s (after re-profiling)") % {"type": o.vgpu_type} for o in form.options
    ]
    if not names:
        return _("No GPU is offered for %(mode)s now.") % {"mode": mode}
    return _("Offered for %(mode)s: %(names)s.") % {"mode": mode, "names": ", ".join(names)}


def _team(requester: Any, slug: str) -> Team | None:
    """The team by slug, or the requester's only team when none is given."""
    if slug:
        return Team.objects.filter(slug=slug).first()
    teams = list(user_teams(requester)[:2])
    if len(teams) == 1:
        return teams[0]
    message = _("Give the team (slug); %(user)s is in %(n)s teams.") % {
        "user": requester.get_username(),
        "n": user_teams(requester).count(),
    }
    raise ProblemError(
        400, "validation-error", message, errors=[{"field": "team", "code": "required", "detail": message}]
    )
