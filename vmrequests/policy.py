"""Who may do what to a VM request, and why not: the one owner of the rule (CONVENTIONS "Owners").

Every action the pages or the API offer is declared once in ``ACTIONS``: who may run it
(``OWNER``: the requester or the account that filed it for them, ``submitted_by``; ``DECIDER``:
an approver of the request's team holding ``vmrequests.approve_vmrequest``, or an admin), the
statuses it starts from (read from ``choices.TRANSITIONS``, never repeated here), whether the
requester is refused it (self-approval, off unless ``settings.PORTAL_ALLOW_SELF_APPROVAL``) and
any condition on the request itself (a pending lease extension, the team's maximum lease).

``allowed_actions(user, req)`` answers every action at once (``Allowed`` or ``Refused`` with a
translated sentence); ``check(user, req, action)`` raises ``NotAllowed`` with the same sentence.
The services in ``vmrequests.approval`` call ``check``; the request page, the approval queue and
the API's ``allowed_actions`` field render ``allowed_actions``; the mail of a new request goes to
those for whom ``decision_for(..., "approve")`` is allowed. Seeing a request at all stays
``VMRequest.objects.visible_to(user)``: callers check visibility first (404), then the policy.

Checks run in this order, and the first failure is the answer: signed in; the role (``role``:
403); the status (``status``: 409, the request is not in a state the action starts from); the
self-approval rule and the lease cap (``rule``: 403, the ones the pages explain with a note);
a condition of the request's state (``state``: 409, e.g. no extension waiting).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from vmrequests.choices import TRANSITIONS, EventAction, VMRequestStatus
from vmrequests.models import Team, TransitionError, VMRequest
from vmrequests.roles import APPROVE_PERMISSION

#: Who may run an action: the requester or their filer, and/or the team's deciders.
OWNER = "owner"
DECIDER = "decider"

#: Why an action is refused: the caller's role, the request's status, a rule the pages explain
#: with a note (self-approval, the lease cap), or another condition of the request's state.
RefusalKind = Literal["role", "status", "rule", "state"]


@dataclass(frozen=True)
class Allowed:
    """The action would be accepted (the service may still lose a race: ``TransitionError``)."""

    allowed: Literal[True] = True
    reason: str = ""
    kind: str = ""

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True)
class Refused:
    """The action would be refused, with ``reason`` (a translated sentence for the user) and its
    ``kind`` (``RefusalKind``)."""

    reason: str
    kind: RefusalKind
    allowed: Literal[False] = False

    def __bool__(self) -> bool:
        return False


Decision = Allowed | Refused


class NotAllowed(Exception):
    """The user may not do this to this request (``check``); ``str()`` is the reason.

    Attributes:
        refusal: the ``Refused`` answer; ``refusal.kind`` tells a state conflict (``status``,
            ``state``: the API answers 409) from a missing right (``role``, ``rule``: 403).
    """

    def __init__(self, refusal: Refused) -> None:
        self.refusal = refusal
        Exception.__init__(self, refusal.reason)

    @property
    def is_conflict(self) -> bool:
        """True when the request's state, not the user's rights, refuses the action."""
        return self.refusal.kind in ("status", "state")


class StatusNotAllowed(NotAllowed, TransitionError):
    """``NotAllowed`` because of the request's status: also a ``TransitionError`` (``request_id``,
    ``action``, ``current``), so callers that handle a lost race handle this the same way."""

    def __init__(self, refusal: Refused, request_id: int, action: str, current: str) -> None:
        NotAllowed.__init__(self, refusal)
        self.request_id, self.action, self.current = request_id, action, current


@dataclass(frozen=True)
class ActionRule:
    """One action's declaration: ``who`` may run it, ``statuses`` it starts from, ``no_self``
    (refused to the requester unless ``PORTAL_ALLOW_SELF_APPROVAL``), ``own_refusal`` (refused
    to the requester always, with this reason), ``condition`` (a further check of the request),
    ``label`` (the button's words), ``role_reason`` (%(team)s: the team) for the others, and
    ``transition`` (the ``EventAction`` whose ``TRANSITIONS`` entry gives ``statuses``; its
    ``TransitionError`` sentence is the status refusal; blank for the lease actions, which say
    ``status_reason`` instead: %(id)s the request, %(status)s its status)."""

    name: str
    label: Promise
    who: frozenset[str]
    statuses: frozenset[str]
    role_reason: Promise
    no_self: Promise | None = None
    own_refusal: Promise | None = None
    condition: Callable[[Facts], Refused | None] | None = None
    transition: str = ""
    status_reason: Promise | None = None


@dataclass
class Viewer:
    """The user's standing, computed once for many requests (a list, the queue, the API page).

    ``approver_team_ids``: teams the user is an approver of; ``may_approve``: holds the approve
    permission (admins hold every permission). One query for the teams, on first use.
    """

    user: Any
    _only_approver: dict[int, bool] = field(default_factory=dict)

    @cached_property
    def authenticated(self) -> bool:
        return bool(getattr(self.user, "is_authenticated", False))

    @cached_property
    def admin(self) -> bool:
        return self.authenticated and bool(self.user.is_superuser)

    @cached_property
    def may_approve(self) -> bool:
        return self.authenticated and bool(self.user.has_perm(APPROVE_PERMISSION))

    @cached_property
    def approver_team_ids(self) -> frozenset[int]:
        if not self.may_approve:
            return frozenset()
        return frozenset(Team.objects.filter(approvers=self.user).values_list("pk", flat=True))

    def decides_for(self, team_id: int) -> bool:
        """True when the user may decide requests of team ``team_id`` (approver or admin)."""
        return self.may_approve and (self.admin or team_id in self.approver_team_ids)

    def only_approver_of(self, team_id: int) -> bool:
        """True when no one else holding the approve permission approves for ``team_id``."""
        if team_id not in self._only_approver:
            self._only_approver[team_id] = not team_deciders(team_id, exclude_pk=self.user.pk)
        return self._only_approver[team_id]


@dataclass(frozen=True)
class Facts:
    """What the rules read about one user and one request."""

    viewer: Viewer
    req: VMRequest

    @property
    def requester(self) -> bool:
        return self.viewer.authenticated and self.viewer.user.pk == self.req.requester_id

    @property
    def owner(self) -> bool:
        filer = self.req.submitted_by_id is not None and self.viewer.user.pk == self.req.submitted_by_id
        return self.requester or (self.viewer.authenticated and filer)

    @property
    def decider(self) -> bool:
        return self.viewer.decides_for(self.req.team_id)


def team_deciders(team_id: int, *, exclude_pk: int | None = None) -> list[Any]:
    """Active approvers of team ``team_id`` who hold the approve permission (directly, by group
    or as admin), sorted by username; ``exclude_pk`` left out."""
    users = get_user_model().objects.filter(approver_of=team_id, is_active=True).order_by("username")
    if exclude_pk is not None:
        users = users.exclude(pk=exclude_pk)
    return [u for u in users if u.has_perm(APPROVE_PERMISSION)]


# --- conditions beyond role and status ---------------------------------------------------------


def _extension_askable(facts: Facts) -> Refused | None:
    req = facts.req
    if req.lease_end is None:
        return Refused(_("The lease has not started yet."), "state")
    if req.extension_days_requested is not None:
        return Refused(_("An extension is already waiting for an approver."), "state")
    if req.extension_days_left() < 1:
        return Refused(
            ngettext(
                "The lease is already at the team's maximum of %(max)s day in total.",
                "The lease is already at the team's maximum of %(max)s days in total.",
                req.team.max_lease_days,
            )
            % {"max": req.team.max_lease_days},
            "rule",
        )
    return None


def _extension_pending(facts: Facts) -> Refused | None:
    req = facts.req
    if req.extension_days_requested is None or req.lease_end is None:
        return Refused(_("There is no lease extension waiting for a decision."), "state")
    return None


def _extension_grantable(facts: Facts) -> Refused | None:
    refused = _extension_pending(facts)
    if refused is not None:
        return refused
    req = facts.req
    days = req.extension_days_requested or 0
    if days > req.extension_days_left():
        return Refused(
            ngettext(
                "Granting %(days)s more day would make the lease %(total)s days long, over the "
                "team's maximum of %(max)s days in total (%(left)s days are left).",
                "Granting %(days)s more days would make the lease %(total)s days long, over the "
                "team's maximum of %(max)s days in total (%(left)s days are left).",
                days,
            )
            % {
                "days": days,
                "total": req.lease_total_days + days,
                "max": req.team.max_lease_days,
                "left": req.extension_days_left(),
            },
            "rule",
        )
    return None


# --- the declarations --------------------------------------------------------------------------

_RUNNING = frozenset({TRANSITIONS[EventAction.MARK_RUNNING][1]})
NOT_APPROVER = gettext_lazy("You are not an approver of team %(team)s.")
_EXTENSION_STATUS = gettext_lazy(
    "Request #%(id)s is %(status)s; only the lease extension of a running VM can be decided."
)
_DECIDE_SELF = gettext_lazy("You filed this request: another approver must decide it.")
_OWN_LEASE = gettext_lazy("This is your own lease: another approver must decide the extension.")


def _on_transition(
    name: str, label: Promise, who: frozenset[str], transition: str, role_reason: Promise, **extra: Any
) -> ActionRule:
    """The declaration of an action that runs the state machine's ``transition`` (an
    ``EventAction``): it starts from that transition's statuses (``choices.TRANSITIONS``), and its
    status refusal is the ``TransitionError`` sentence. ``extra``: the other ``ActionRule`` fields."""
    return ActionRule(
        name, label, who, TRANSITIONS[transition][0], role_reason, transition=transition, **extra
    )


def _extension_decision(
    name: str, label: Promise, condition: Callable[[Facts], Refused | None]
) -> ActionRule:
    """The declaration of a decision on a pending lease extension: an approver of the team (not
    the requester), while the VM runs, when ``condition`` holds."""
    return ActionRule(
        name,
        label,
        frozenset({DECIDER}),
        _RUNNING,
        NOT_APPROVER,
        no_self=_OWN_LEASE,
        condition=condition,
        status_reason=_EXTENSION_STATUS,
    )


ACTIONS: dict[str, ActionRule] = {
    rule.name: rule
    for rule in (
        _on_transition(
            "approve",
            gettext_lazy("Approve"),
            frozenset({DECIDER}),
            EventAction.APPROVE,
            NOT_APPROVER,
            no_self=_DECIDE_SELF,
        ),
        _on_transition(
            "reject",
            gettext_lazy("Reject"),
            frozenset({DECIDER}),
            EventAction.REJECT,
            NOT_APPROVER,
            no_self=_DECIDE_SELF,
        ),
        _on_transition(
            "cancel",
            gettext_lazy("Cancel"),
            frozenset({OWNER, DECIDER}),
            EventAction.CANCEL,
            gettext_lazy("Only the requester or an approver of the team can cancel this request."),
        ),
        _on_transition(
            "release",
            gettext_lazy("Release"),
            frozenset({OWNER}),
            EventAction.START_DELETION,
            gettext_lazy("Only the requester can release this VM; an approver terminates it instead."),
        ),
        _on_transition(
            "terminate",
            gettext_lazy("Terminate"),
            frozenset({DECIDER}),
            EventAction.START_DELETION,
            NOT_APPROVER,
            own_refusal=gettext_lazy("This is your own VM: release it instead."),
        ),
        _on_transition(
            "retry",
            gettext_lazy("Retry"),
            frozenset({DECIDER}),
            EventAction.RETRY,
            NOT_APPROVER,
            no_self=gettext_lazy("You filed this request: another approver must retry it."),
        ),
        ActionRule(
            "extend",
            gettext_lazy("Ask for a longer lease"),
            frozenset({OWNER}),
            _RUNNING,
            gettext_lazy("Only the requester can ask for a longer lease."),
            condition=_extension_askable,
            status_reason=gettext_lazy(
                "Request #%(id)s is %(status)s; only the lease of a running VM can be extended."
            ),
        ),
        _extension_decision("extension_approve", gettext_lazy("Grant the extension"), _extension_grantable),
        _extension_decision("extension_deny", gettext_lazy("Refuse the extension"), _extension_pending),
    )
}


def _status_refusal(rule: ActionRule, req: VMRequest) -> Refused:
    if rule.transition:
        return Refused(str(TransitionError(req.pk, rule.transition, req.status)), "status")
    status = VMRequestStatus(req.status).label if req.status in VMRequestStatus.values else req.status
    return Refused(str(rule.status_reason) % {"id": req.pk, "status": status}, "status")


def _self_refusal(rule: ActionRule, facts: Facts) -> Refused | None:
    if rule.own_refusal is not None and facts.requester:
        return Refused(str(rule.own_refusal), "rule")
    if rule.no_self is None or not facts.requester or settings.PORTAL_ALLOW_SELF_APPROVAL:
        return None
    if rule.name in ("approve", "reject") and facts.viewer.only_approver_of(facts.req.team_id):
        return Refused(_("Needs another approver: you are the team's only approver."), "rule")
    return Refused(str(rule.no_self), "rule")


def _decide(rule: ActionRule, facts: Facts) -> Decision:
    req = facts.req
    if not facts.viewer.authenticated:
        return Refused(_("Sign in first."), "role")
    if not ((OWNER in rule.who and facts.owner) or (DECIDER in rule.who and facts.decider)):
        return Refused(str(rule.role_reason) % {"team": req.team.name}, "role")
    if req.status not in rule.statuses:
        return _status_refusal(rule, req)
    refused = _self_refusal(rule, facts)
    if refused is None and rule.condition is not None:
        refused = rule.condition(facts)
    return Allowed() if refused is None else refused


def _viewer(user: Any, viewer: Viewer | None) -> Viewer:
    if viewer is not None and viewer.user is user:
        return viewer
    return Viewer(user)


def decision_for(user: Any, req: VMRequest, action: str, *, viewer: Viewer | None = None) -> Decision:
    """The answer for one ``action`` (a key of ``ACTIONS``).

    Raises:
        KeyError: an unknown action name.
    """
    return _decide(ACTIONS[action], Facts(_viewer(user, viewer), req))


def allowed_actions(user: Any, req: VMRequest, *, viewer: Viewer | None = None) -> dict[str, Decision]:
    """Every action of ``ACTIONS``, in declaration order, → ``Allowed()`` or ``Refused(reason,
    kind)`` for ``user`` on ``req`` (which ``user`` is assumed to see: ``visible_to``). Pass one
    ``Viewer(user)`` when asking for many requests (one query for the user's teams)."""
    facts = Facts(_viewer(user, viewer), req)
    return {name: _decide(rule, facts) for name, rule in ACTIONS.items()}


def check(user: Any, req: VMRequest, action: str) -> None:
    """Refuse ``action`` unless the policy allows it.

    Raises:
        NotAllowed: with the reason of the ``Refused`` answer (``.refusal``); for a refusal of
            kind ``status`` the subclass ``StatusNotAllowed``, also a ``TransitionError``.
    """
    decision = decision_for(user, req, action)
    if isinstance(decision, Refused):
        if decision.kind == "status":
            raise StatusNotAllowed(decision, req.pk, ACTIONS[action].transition or action, req.status)
        raise NotAllowed(decision)


def notes(decisions: dict[str, Decision], only: Iterable[str] | None = None) -> list[str]:
    """The reasons of refusals a page explains (kind ``rule``: self-approval, the lease cap),
    without repeats, in declaration order; ``only`` limits them to some actions."""
    wanted = set(ACTIONS if only is None else only)
    seen: list[str] = []
    for name, decision in decisions.items():
        refused = isinstance(decision, Refused) and decision.kind == "rule"
        if name in wanted and refused and decision.reason not in seen:
            seen.append(decision.reason)
    return seen


def decidable_requests(user: Any, *, viewer: Viewer | None = None) -> Q | None:
    """A filter of the requests whose team ``user`` decides for (approver with the approve
    permission, or admin: every team); ``None`` when none (no permission, anonymous). The
    approval queue lists these; the buttons on each still come from ``allowed_actions``."""
    viewer = _viewer(user, viewer)
    if not viewer.may_approve:
        return None
    if viewer.admin:
        return Q()
    return Q(team_id__in=viewer.approver_team_ids)
