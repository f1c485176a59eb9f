"""What a valid VM request is: the one place the request rules live (issue #13).

``validate(user, draft) -> RequestSpec`` checks a ``RequestDraft`` (the fields as plain typed
values) and returns the ``RequestSpec`` that ``approval.submit`` writes, or raises
``RequestInvalid`` with every error found (``{field or None: [FieldError(code, message)]}``)
and, when it does not fit, the closest alternatives that do. The browser form
(``vmrequests/forms.py``) and the API (``vmrequests/api/creation.py``) only parse types, build
the draft, call ``validate`` and map ``RequestInvalid`` to form or RFC 9457 field errors.

Rules in the order checked (each field's codes: docs/requests.md §7): ``requested_for`` (the
``vmrequests.submit_for_others`` permission, an active user; it stops the rest); lengths, the
model's ``max_length`` (justification 2,000, SSH key 8,192, ticket source 50, ticket ID 100; a
chosen name 40, leaving room in the 63-character VMI name); ``team`` (one of the requester's,
or their only one when left out); ``image`` (enabled); ``mode``; the GPU (offered now or after
a re-profile, ``placement.gpu_options``; never one KubeVirt does not permit, DOMAIN.md §5.4);
sizes (``device_count`` 1..8 and the per-VM vGPU limit of the NVIDIA vGPU User Guide,
``cpu_cores`` 1..64 and ``memory_gib`` 1..1024 defaulting to the image's, memory at least the
image's minimum); ``lease_days`` (≥ 1, at most the team's maximum, defaulting to its default);
``name`` (DNS-1123 label, then ``vmrequests.vm_names``: not a generated shape, not live in the
namespace, not a VMI there the portal did not create);
``ssh_public_key`` (``vmrequests.sshkeys``); ``justification`` (≥ 5 characters);
``ticket_id`` (unused for its source); then capacity and quota (``placement.check_request``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from gpuinventory.capacity import CapacitySnapshot
from vmrequests.choices import VMMode
from vmrequests.models import (
    MAX_CPU_CORES,
    MAX_DEVICES,
    MAX_MEMORY_GIB,
    Team,
    VmImage,
    VMRequest,
    dns1123_label_validator,
)
from vmrequests.placement import Alternative, GpuOption, check_request, gpu_options
from vmrequests.sshkeys import validate_ssh_public_key
from vmrequests.vm_names import MAX_NAME_LENGTH, name_problem

#: Permission to file a request for another user (``requested_for``).
SUBMIT_FOR_OTHERS = "vmrequests.submit_for_others"
#: Shortest justification (characters, surrounding whitespace ignored).
MIN_JUSTIFICATION_LENGTH = 5
#: Text fields capped by the model's ``max_length`` (the name's cap is ``MAX_NAME_LENGTH``).
CAPPED_FIELDS = ("ssh_public_key", "justification", "ticket_source", "ticket_id")
#: The fields that say which GPU is asked for.
GPU_FIELDS = frozenset({"resource_name", "vgpu_type"})


@dataclass(frozen=True)
class RequestSpec:
    """A valid request (``validate``'s result, written by ``approval.submit``): sizes in cores and
    GiB, lease in days; ``resource_name`` ``""`` for a vGPU type only offered after a re-profile;
    ``requester`` the user it is for (None when built by hand for ``approval.submit``)."""

    team: Team
    mode: str
    resource_name: str
    vgpu_type: str
    gpu_model: str
    device_count: int
    cpu_cores: int
    memory_gib: int
    image: Any
    ssh_public_key: str
    lease_days: int
    justification: str
    name: str = ""
    ticket_source: str = ""
    ticket_id: str = ""
    requester: Any = None


@dataclass(frozen=True)
class RequestDraft:
    """A request as the caller typed it, types parsed, nothing checked.

    ``team``: primary key (form) or slug (API); None: the requester's only team. ``image``:
    primary key or name. GPU: ``resource_name`` (exact, ``nvidia.com/...``) or, for vGPU, the
    bare ``vgpu_type`` (``T4-8Q``). ``cpu_cores``/``memory_gib`` None: the image's defaults;
    ``lease_days`` None: the team's default. ``requested_for``: a username, ``""`` for the caller.
    """

    mode: str
    image: int | str | None
    ssh_public_key: str
    justification: str
    team: int | str | None = None
    resource_name: str = ""
    vgpu_type: str = ""
    device_count: int | None = 1
    cpu_cores: int | None = None
    memory_gib: int | None = None
    lease_days: int | None = None
    name: str = ""
    ticket_source: str = ""
    ticket_id: str = ""
    requested_for: str = ""


@dataclass(frozen=True)
class FieldError:
    """One refusal: a machine ``code`` and the translated ``message`` for the user."""

    code: str
    message: str


@dataclass(eq=False)  # an exception keeps identity equality and stays hashable
class RequestInvalid(Exception):
    """The draft breaks one or more rules (module docstring).

    Attributes:
        errors: ``{field name or None: [FieldError, ...]}`` in the order found (``None``: the
            request as a whole, e.g. capacity and quota).
        alternatives: up to three options that fit now when capacity or quota refused it.
    """

    errors: dict[str | None, list[FieldError]]
    alternatives: list[Alternative] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(" ".join(e.message for items in self.errors.values() for e in items))

    def codes(self) -> dict[str | None, list[str]]:
        """``{field: [code, ...]}``."""
        return {name: [e.code for e in items] for name, items in self.errors.items()}


def model_cap(model: Any, name: str) -> int:
    """The ``max_length`` of ``model.<name>`` (characters): the length caps are the model's.

    Raises:
        TypeError: the field has no ``max_length``.
    """
    cap = getattr(model._meta.get_field(name), "max_length", None)
    if not isinstance(cap, int):
        raise TypeError(f"{model.__name__}.{name} has no max_length")
    return cap


def user_teams(user: Any) -> QuerySet[Team]:
    """Teams ``user`` may request VMs for: those they are a member or an approver of, by name."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(Q(members=user) | Q(approvers=user)).distinct().order_by("name")


def resolve_requester(caller: Any, username: str) -> Any:
    """The user a request is for: ``caller``, or the active user ``username`` when ``caller``
    holds ``SUBMIT_FOR_OTHERS``.

    Raises:
        RequestInvalid: on ``requested_for``, code ``not_allowed`` (no permission) or
            ``unknown_user`` (no such active user).
    """
    username = (username or "").strip()
    if not username or username == caller.get_username():
        return caller
    if not caller.has_perm(SUBMIT_FOR_OTHERS):
        message = _("Filing a request for another user (requested_for) needs the %(perm)s permission.") % {
            "perm": SUBMIT_FOR_OTHERS
        }
        raise RequestInvalid({"requested_for": [FieldError("not_allowed", message)]})
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        message = _("There is no active user %(name)s.") % {"name": username}
        raise RequestInvalid({"requested_for": [FieldError("unknown_user", message)]})
    return user


def ticket_taken(account: Any, source: str, ticket_id: str) -> bool:
    """True when ``account`` filed a request with this ticket (``VMRequestQuerySet.with_ticket``)."""
    return VMRequest.objects.with_ticket(account, source, ticket_id).exists()


def validate(
    user: Any,
    draft: RequestDraft,
    *,
    refused: Collection[str] = (),
    snapshot: CapacitySnapshot | None = None,
) -> RequestSpec:
    """Check ``draft`` for ``user`` against every request rule (module docstring).

    Args:
        user: the caller (the requester unless ``draft.requested_for`` names someone else).
        draft: the parsed request.
        refused: fields the caller's parser already refused (wrong type, missing): their rules,
            and the rules that need them, are skipped, and no default is filled in for them.
        snapshot: a capacity snapshot to reuse (else one is loaded).

    Returns:
        The ``RequestSpec`` to submit (key normalised, texts stripped, defaults filled in).

    Raises:
        RequestInvalid: every rule broken, with the alternatives when it does not fit.
    """
    check = _Check(resolve_requester(user, draft.requested_for), draft, refused, snapshot)
    check.filer = user
    return check.run()


class _Check:
    """One validation run: collects errors field by field, then builds the spec."""

    def __init__(
        self, requester: Any, draft: RequestDraft, refused: Collection[str], snap: CapacitySnapshot | None
    ) -> None:
        self.requester = requester
        self.filer: Any = requester  # the account filing (its tickets count); validate() sets it
        self.draft = draft
        self.skip: set[str] = set(refused)
        self._snapshot = snap
        self.errors: dict[str | None, list[FieldError]] = {}
        self.alternatives: list[Alternative] = []

    @cached_property
    def snap(self) -> CapacitySnapshot:
        return self._snapshot or CapacitySnapshot()

    def fail(self, name: str | None, code: str, message: str) -> None:
        """Record one error; a failed field counts as unknown for the rules after it."""
        self.errors.setdefault(name, []).append(FieldError(code, str(message)))
        if name is not None:
            self.skip.add(name)

    def django(self, name: str, validator: Callable[[Any], None], value: Any) -> bool:
        """Run a Django validator (its message and code); True when it passed."""
        try:
            validator(value)
        except ValidationError as exc:
            self.fail(name, exc.code or "invalid", exc.messages[0])
            return False
        return True

    def given(self, name: str) -> bool:
        return name not in self.skip

    def bounded(self, name: str, value: int, maximum: int | None = None) -> bool:
        """``value`` ≥ 1 and ≤ ``maximum`` (Django's messages); True when it is."""
        top = [MaxValueValidator(maximum)] if maximum is not None else []
        return all(self.django(name, v, value) for v in (MinValueValidator(1), *top))

    def run(self) -> RequestSpec:
        d = self.draft
        self.caps()
        team = self.team()
        image = self.image()
        mode = self.mode()
        option = self.gpu(mode)
        count = self.device_count(option)
        cpu = self.size("cpu_cores", d.cpu_cores, MAX_CPU_CORES, image, "default_cpu_cores")
        memory = self.memory(image)
        lease = self.lease(team)
        name = self.name(team)
        key = self.ssh_key()
        justification = self.justification()
        self.ticket()
        if team is not None and mode and option is not None and count is not None:
            self.capacity(team, mode, option, count)
        if self.errors or None in (team, image, option, count, cpu, memory, lease) or not mode:
            # Without errors here a value is missing only because the caller refused it.
            raise RequestInvalid(self.errors, self.alternatives)
        assert team and image and option and count and cpu and memory and lease  # for mypy
        return RequestSpec(
            team=team,
            mode=mode,
            resource_name=option.resource_name,
            vgpu_type=option.vgpu_type,
            gpu_model=option.model,
            device_count=count,
            cpu_cores=cpu,
            memory_gib=memory,
            image=image,
            ssh_public_key=key,
            lease_days=lease,
            justification=justification,
            name=name,
            ticket_source=d.ticket_source.strip(),
            ticket_id=d.ticket_id.strip(),
            requester=self.requester,
        )

    # --- one method per rule ------------------------------------------------------------------

    def caps(self) -> None:
        for name in CAPPED_FIELDS:
            if self.given(name):
                cap = model_cap(VMRequest, name)
                self.django(name, MaxLengthValidator(cap), getattr(self.draft, name).strip())
        if self.given("name"):
            self.django("name", MaxLengthValidator(MAX_NAME_LENGTH), self.draft.name.strip())

    def team(self) -> Team | None:
        if not self.given("team"):
            return None
        ref, mine = self.draft.team, user_teams(self.requester)
        if ref is None or ref == "":
            teams = list(mine[:2])
            if len(teams) == 1:
                return teams[0]
            message = _("Give the team (slug); %(user)s is in %(n)s teams.") % {
                "user": self.requester.get_username(),
                "n": mine.count(),
            }
            self.fail("team", "required", message)
            return None
        found = mine.filter(pk=ref).first() if isinstance(ref, int) else mine.filter(slug=ref).first()
        if found is None:
            self.fail("team", "invalid_choice", _("Choose one of your teams."))
        return found

    def image(self) -> VmImage | None:
        if not self.given("image"):
            return None
        ref, enabled = self.draft.image, VmImage.objects.filter(enabled=True)
        found = enabled.filter(pk=ref).first() if isinstance(ref, int) else enabled.filter(name=ref).first()
        if found is None:
            self.fail("image", "invalid_choice", _("Choose one of the listed images."))
        return found

    def mode(self) -> str:
        if not self.given("mode"):
            return ""
        if self.draft.mode not in VMMode.values:
            message = _("Choose one of: %(modes)s.") % {"modes": ", ".join(VMMode.values)}
            self.fail("mode", "invalid_choice", message)
            return ""
        return self.draft.mode

    def gpu(self, mode: str) -> GpuOption | None:
        d = self.draft
        if not mode or GPU_FIELDS & self.skip:
            return None
        if bool(d.resource_name) == bool(d.vgpu_type):
            self.fail("resource_name", "gpu", _("Give either resource_name or vgpu_type (exactly one)."))
            return None
        if d.vgpu_type and mode != VMMode.VGPU:
            self.fail("vgpu_type", "mode", _("vgpu_type is only for mode vgpu."))
            return None
        options = gpu_options(mode, self.snap)
        if d.resource_name:
            found = next((o for o in options if o.resource_name == d.resource_name), None)
        else:
            offered = sorted(
                (o for o in options if o.vgpu_type == d.vgpu_type),
                key=lambda o: (not o.resource_name, -o.free),
            )
            found = offered[0] if offered else None
        if found is None:
            self.not_offered(mode, options)
        return found

    def not_offered(self, mode: str, options: list[GpuOption]) -> None:
        """Why the asked GPU is not offered, then what is (``not_permitted`` / ``other_mode`` /
        ``unknown_gpu``)."""
        d = self.draft
        name, ref = ("resource_name", d.resource_name) if d.resource_name else ("vgpu_type", d.vgpu_type)
        rows = [r for r in self.snap.resources if (r.name if d.resource_name else r.vgpu_type) == ref]
        values = {"gpu": ref[:120], "mode": VMMode(mode).label}
        if any(r.permitted is False for r in rows):
            code = "not_permitted"
            text = _(
                "KubeVirt does not permit %(gpu)s (it is not in permittedHostDevices), so a VM cannot use it."
            )
        elif rows:
            code = "other_mode"
            text = _("%(gpu)s is not a %(mode)s GPU. Choose another mode, or one of the listed GPUs.")
        else:
            code = "unknown_gpu"
            text = _(
                "%(gpu)s is not in the GPU inventory (or no longer offered). Choose one of the listed GPUs."
            )
        self.fail(name, code, f"{text % values} {offered_text(options, mode)}")

    def device_count(self, option: GpuOption | None) -> int | None:
        count = self.draft.device_count
        if not self.given("device_count") or count is None:
            return None
        if not self.bounded("device_count", count, MAX_DEVICES):
            return None
        if option is not None and count > option.per_vm_limit:
            if option.vgpu_type and option.per_vm_limit == 1:
                message = _("NVIDIA allows only one vGPU of type %(type)s per VM.") % {
                    "type": option.vgpu_type
                }
            else:
                message = _("At most %(n)s devices of this GPU per VM.") % {"n": option.per_vm_limit}
            self.fail("device_count", "per_vm_limit", message)
            return None
        return count

    def size(self, name: str, value: int | None, top: int, image: VmImage | None, default: str) -> int | None:
        """A size between 1 and ``top``; None: the image's ``default`` attribute."""
        if not self.given(name):
            return None
        if value is None:
            return getattr(image, default) if image is not None else None
        return value if self.bounded(name, value, top) else None

    def memory(self, image: VmImage | None) -> int | None:
        memory = self.size("memory_gib", self.draft.memory_gib, MAX_MEMORY_GIB, image, "default_memory_gib")
        if memory is not None and image is not None and memory < image.min_memory_gib:
            text = _("The image %(image)s needs at least %(min)s GiB of memory.")
            self.fail("memory_gib", "invalid", text % {"image": image.name, "min": image.min_memory_gib})
            return None
        return memory

    def lease(self, team: Team | None) -> int | None:
        lease = self.draft.lease_days
        if not self.given("lease_days"):
            return None
        if lease is None:
            return team.default_lease_days if team is not None else None
        if not self.bounded("lease_days", lease):
            return None
        if team is not None and lease > team.max_lease_days:
            text = _("Team %(team)s allows leases of at most %(max)s days.")
            self.fail("lease_days", "max_lease", text % {"team": team.name, "max": team.max_lease_days})
            return None
        return lease

    def name(self, team: Team | None) -> str:
        name = self.draft.name.strip()
        if not name or not self.given("name") or not self.django("name", dns1123_label_validator, name):
            return name
        problem = name_problem(name, team)
        if problem is not None:
            self.fail("name", *problem)
        return name

    def ssh_key(self) -> str:
        if not self.given("ssh_public_key"):
            return ""
        try:
            return validate_ssh_public_key(self.draft.ssh_public_key)
        except ValidationError as exc:
            self.fail("ssh_public_key", exc.code or "invalid", exc.messages[0])
            return ""

    def justification(self) -> str:
        text = self.draft.justification.strip()
        if self.given("justification") and len(text) < MIN_JUSTIFICATION_LENGTH:
            self.fail(
                "justification",
                "min_length" if text else "required",
                _("Say in a sentence why you need this VM (at least 5 characters)."),
            )
        return text

    def ticket(self) -> None:
        ticket, source = self.draft.ticket_id.strip(), self.draft.ticket_source.strip()
        checkable = ticket and self.given("ticket_id") and self.given("ticket_source")
        if checkable and ticket_taken(self.filer, source, ticket):
            message = _("Ticket %(ticket)s already has a VM request.") % {"ticket": ticket}
            self.fail("ticket_id", "duplicate", message)

    def capacity(self, team: Team, mode: str, option: GpuOption, count: int) -> None:
        verdict = check_request(team, mode, option.resource_name, option.vgpu_type, count, snapshot=self.snap)
        if verdict.ok:
            return
        problems = verdict.problems()
        if not verdict.placement.fits:
            self.fail(None, "invalid", problems.pop(0))
        for problem in problems:
            self.fail(None, "quota", problem)
        self.alternatives = list(verdict.alternatives)


def offered_text(options: list[GpuOption], mode: str) -> str:
    """``"Offered for vgpu: nvidia.com/GRID_T4-8Q, T4-16Q (after re-profiling)."``"""
    names = [o.resource_name or _("%(type)s (after re-profiling)") % {"type": o.vgpu_type} for o in options]
    if not names:
        return _("No GPU is offered for %(mode)s now.") % {"mode": mode}
    return _("Offered for %(mode)s: %(names)s.") % {"mode": mode, "names": ", ".join(names)}
