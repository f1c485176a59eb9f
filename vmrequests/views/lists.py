"""Request lists, the request page (timeline, live status, lease), the approval queue and the
actions: approve / reject / cancel, release / terminate, ask for / decide a lease extension, retry.
All actions are POST-only and redirect back (to a safe ``next`` or the request page) with a message.

Visibility is ``VMRequest.objects.visible_to(user)`` everywhere: a request the user may not see
is a 404 (outsiders never learn it exists), also for the status partial and the actions. Which
buttons a page draws is ``vmrequests.policy.allowed_actions(user, req)``, the same answer the
services enforce: only the buttons that will work, with a note where a rule (self-approval, the
lease cap) hides one.

The approval queue checks every pending request against ONE ``CapacitySnapshot`` and ONE
``QuotaBook``, so its query count does not grow with the number of requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import formats, timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_safe
from django_htmx.http import HttpResponseStopPolling

from gpuinventory.capacity import CapacitySnapshot
from portal.views_mixins import FilteredTableListMixin
from vmrequests import policy
from vmrequests.approval import approval_verdict
from vmrequests.choices import EventAction, VMRequestStatus
from vmrequests.filtersets import VMRequestFilterSet
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.placement import QuotaBook, Verdict
from vmrequests.sshkeys import describe_ssh_key
from vmrequests.tables import VMRequestTable

#: Element id of the request page's content, swapped in place when the polled status changes.
PAGE_REGION_ID = "request-page"


def can_approve(user: Any) -> bool:
    """True when ``user`` holds the approve permission (admins hold every permission)."""
    return policy.Viewer(user).may_approve


def forbidden(request: HttpRequest, reason: str) -> HttpResponse:
    """The 403 page with ``reason`` (rendered, not raised: an ordinary refusal logs no traceback)."""
    return render(request, "403.html", {"exception": reason}, status=403)


# --- lists -------------------------------------------------------------------------------------


class VMRequestListView(FilteredTableListMixin):
    """Every request the user may see (``visible_to``), with filters, sorting and pagination.

    "All requests" for approvers and admins, "Team requests" for the others (their own and their
    teams' requests).
    """

    filterset_class = VMRequestFilterSet
    table_class = VMRequestTable
    template_name = "vmrequests/vmrequest_list.html"

    def base_queryset(self) -> QuerySet[VMRequest]:
        """The requests this list shows before filtering."""
        return VMRequest.objects.visible_to(self.request.user)

    def get_queryset(self) -> QuerySet[VMRequest]:
        """``base_queryset`` with the rows the table shows joined (fixed query count)."""
        return self.base_queryset().select_related("requester", "team", "image")

    def get_title(self) -> str:
        """The page heading."""
        return _("All requests") if can_approve(self.request.user) else _("Team requests")

    def get_extra_context(self, partial: str | None) -> dict[str, Any]:
        """The heading (the table partial needs nothing more)."""
        return {"title": self.get_title()}


class MyVMRequestListView(VMRequestListView):
    """The user's own requests (same filters and table)."""

    def base_queryset(self) -> QuerySet[VMRequest]:
        """Only the requests the user is the requester of."""
        return VMRequest.objects.filter(requester_id=self.request.user.pk)

    def get_title(self) -> str:
        """The page heading."""
        return _("My requests")


# --- request page ------------------------------------------------------------------------------


def ssh_key_summary(key: str) -> str:
    """The key for display: type, size, comment and fingerprint (``sshkeys.describe_ssh_key``);
    for a stored key that no longer validates, its type and comment as pasted."""
    try:
        return describe_ssh_key(key)
    except ValidationError:
        tokens = key.split()
        return " ".join([tokens[0], *tokens[2:]]) if tokens else ""


def placement_text(placement: dict[str, Any]) -> str:
    """``Placement.as_json()`` (stored in an approval event's data) in words."""
    reprofile = placement.get("reprofile")
    if isinstance(reprofile, dict):
        return _(
            "Placement: re-profile node %(node)s from vGPU config %(old)s to %(new)s (%(n)s instances)."
        ) % {
            "node": reprofile.get("node", ""),
            "old": reprofile.get("from") or _("(default)"),
            "new": reprofile.get("to", ""),
            "n": reprofile.get("instances", ""),
        }
    if not placement.get("fits", True):
        return _("Placement: does not fit (%(reason)s).") % {"reason": placement.get("reason", "")}
    return _("Placement: node %(node)s, %(resource)s.") % {
        "node": placement.get("node", ""),
        "resource": placement.get("resource_name") or "—",
    }


def local_datetime(value: datetime) -> str:
    """``value`` in the site's time zone and date format, with the zone: ``"Jan. 17, 2026,
    9:30 a.m. UTC"`` (every time the pages show says its zone)."""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return f"{formats.date_format(value, 'DATETIME_FORMAT')} {formats.date_format(value, 'T')}"


def _when(value: Any) -> str:
    """An ISO 8601 time stored in event data, in the site's local time and date format."""
    parsed = parse_datetime(value) if isinstance(value, str) else None
    if parsed is None:
        return str(value or "")
    if timezone.is_aware(parsed):
        parsed = timezone.localtime(parsed)
    return local_datetime(parsed)


def worker_details(data: dict[str, Any]) -> list[str]:
    """Lines of a provisioning step or failure (written by ``vmrequests.provisioning``) from its
    ``data``: node, vGPU config change, GPU resource, pin, the vGPU Device Manager state, pods in
    the way, the VMI phase, the scheduler's and KubeVirt's own words. Unknown keys are skipped."""
    lines: list[str] = []
    if data.get("vmi"):
        lines.append(_("VMI: %(vmi)s") % {"vmi": data["vmi"]})
    if data.get("node"):
        lines.append(_("Node: %(node)s") % {"node": data["node"]})
    if "to" in data:
        lines.append(
            _("vGPU config: %(old)s → %(new)s")
            % {"old": data.get("from") or _("(default)"), "new": data.get("to") or _("(default)")}
        )
    if data.get("resource"):
        if data.get("allocatable") is not None:
            lines.append(
                _("Now offers: %(count)s × %(resource)s")
                % {"count": data["allocatable"], "resource": data["resource"]}
            )
        else:
            lines.append(_("GPU resource: %(resource)s") % {"resource": data["resource"]})
    if data.get("pinned_to"):
        lines.append(
            _("Pinned to node %(node)s (where its devices were reserved).") % {"node": data["pinned_to"]}
        )
    if data.get("pods"):
        lines.append(_("Pods using its vGPUs: %(pods)s") % {"pods": ", ".join(map(str, data["pods"]))})
    if "state" in data:
        lines.append(_("vGPU Device Manager state: %(state)s") % {"state": data["state"] or _("(none)")})
    if data.get("restore"):
        template = (
            _("Config %(config)s put back.")
            if data.get("restored")
            else _("Putting back config %(config)s failed.")
        )
        lines.append(template % {"config": data["restore"]})
    if data.get("phase"):
        lines.append(_("VMI phase: %(phase)s") % {"phase": data["phase"]})
    if data.get("scheduler"):
        lines.append(_("Scheduler: %(message)s") % {"message": data["scheduler"]})
    if data.get("condition") and data.get("message"):
        lines.append(
            _("KubeVirt %(condition)s: %(message)s")
            % {"condition": data["condition"], "message": data["message"]}
        )
    return lines


def event_details(event: VMRequestEvent) -> list[str]:
    """Extra lines of a timeline entry from its ``data``: placement and quota lines of an
    approval, who filed a request on the requester's behalf, node and IP when it started, the
    details of a provisioning step or failure (``worker_details``), and the days and new lease
    end of a lease extension."""
    data = event.data if isinstance(event.data, dict) else {}
    lines: list[str] = []
    if isinstance(data.get("placement"), dict):
        lines.append(placement_text(data["placement"]))
    for quota in data.get("quotas") or []:
        lines.append(_("Quota: %(quota)s") % {"quota": quota})
    if data.get("submitted_by"):
        lines.append(_("Filed by %(user)s on the requester's behalf.") % {"user": data["submitted_by"]})
    if event.action == EventAction.MARK_RUNNING and data.get("node"):
        lines.append(
            _("Node %(node)s, IP %(ip)s.") % {"node": data["node"], "ip": data.get("ip") or _("unknown")}
        )
    elif event.action in (EventAction.PROGRESS, EventAction.MARK_FAILED):
        lines.extend(worker_details(data))
    if event.action == EventAction.EXTENSION_REQUEST and data.get("days"):
        lines.append(
            ngettext("%(days)s more day asked for.", "%(days)s more days asked for.", data["days"])
            % {"days": data["days"]}
        )
    elif event.action == EventAction.EXTENSION_APPROVE and data.get("days"):
        lines.append(
            ngettext(
                "Extended by %(days)s day; the lease now ends %(end)s.",
                "Extended by %(days)s days; the lease now ends %(end)s.",
                data["days"],
            )
            % {"days": data["days"], "end": _when(data.get("lease_end"))}
        )
    elif event.action == EventAction.EXTENSION_REJECT and data.get("days"):
        lines.append(
            ngettext("%(days)s more day refused.", "%(days)s more days refused.", data["days"])
            % {"days": data["days"]}
        )
    return lines


@dataclass(frozen=True)
class TimelineEntry:
    """One event of the request page with its extra lines."""

    event: VMRequestEvent
    details: list[str]


def connect_commands(req: VMRequest) -> list[str]:
    """How to reach a running VM with ``virtctl`` (``[]`` unless running)."""
    if req.status != VMRequestStatus.RUNNING or not req.vmi_name:
        return []
    return req.virtctl_commands


#: The request page's buttons by card: decision (approve, reject, cancel), lifecycle (release,
#: terminate, retry) and lease (ask for / decide an extension); names are ``policy.ACTIONS`` keys.
DECISION_ACTIONS = ("approve", "reject", "cancel")
LIFECYCLE_ACTIONS = ("release", "terminate", "retry")
LEASE_ACTIONS = ("extend", "extension_approve", "extension_deny")
#: The approval queue's buttons (it is for decisions; cancel and the rest are on the request page).
QUEUE_ACTIONS = ("approve", "reject")


def action_context(
    user: Any,
    req: VMRequest,
    viewer: policy.Viewer | None = None,
    only: tuple[str, ...] = DECISION_ACTIONS + LIFECYCLE_ACTIONS + LEASE_ACTIONS,
) -> dict[str, Any]:
    """What a page needs to draw ``req``'s buttons from ``policy.allowed_actions``, limited to
    the actions ``only``: ``may`` (action name → bool, every ``policy.ACTIONS`` key),
    ``action_notes`` (why a button a rule hides is missing: decision and lifecycle cards) and
    ``lease_notes`` (the lease card's)."""
    decisions = policy.allowed_actions(user, req, viewer=viewer)
    return {
        "may": {name: bool(decision) and name in only for name, decision in decisions.items()},
        "action_notes": policy.notes(
            decisions, [a for a in DECISION_ACTIONS + LIFECYCLE_ACTIONS if a in only]
        ),
        "lease_notes": policy.notes(decisions, [a for a in LEASE_ACTIONS if a in only]),
    }


@require_safe
def vmrequest(request: HttpRequest, pk: int) -> HttpResponse:
    """One request: what was asked, the decision, where it runs and how to connect, the lease
    (end with its time zone, the days granted in total, the pending extension and where it would
    move the end), the timeline, and the buttons ``policy.allowed_actions`` allows, with a note
    where a rule hides one. 404 when the user may not see it. The query count does not grow with
    the number of events."""
    req = get_object_or_404(
        VMRequest.objects.visible_to(request.user).select_related(
            "requester", "submitted_by", "team", "image", "decided_by"
        ),
        pk=pk,
    )
    events = list(req.events.select_related("actor").order_by("created", "pk"))
    actions = action_context(request.user, req)
    may = actions["may"]
    running = req.status == VMRequestStatus.RUNNING
    verdict = None
    if may["approve"] or may["retry"]:
        verdict = approval_verdict(req, CapacitySnapshot(), QuotaBook([req.team_id]))
    context = {
        "req": req,
        "poll": not req.is_terminal,
        "shown": req.status,
        "timeline": [TimelineEntry(e, event_details(e)) for e in events],
        "ssh_key": ssh_key_summary(req.ssh_public_key),
        "connect": connect_commands(req),
        **actions,
        "any_action": any(may[name] for name in DECISION_ACTIONS + LIFECYCLE_ACTIONS)
        or bool(actions["action_notes"]),
        "pending_extension": running and req.extension_days_requested is not None,
        "show_lease": running and req.lease_end is not None,
        "lease_over": req.lease_end is not None and req.lease_end <= timezone.now(),
        "max_lease_days": req.team.max_lease_days,
        "extension_days_left": req.extension_days_left(),
        "lease_warning_hours": settings.PORTAL_LEASE_WARNING_HOURS,
        "verdict": verdict,
        "last_step": next((e for e in reversed(events) if e.action == EventAction.PROGRESS), None),
        "lease_end_if_started": req.lease_end_if_started() if req.lease_end is None else None,
    }
    return render(request, "vmrequests/vmrequest.html", context)


@require_safe
def vmrequest_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The status badge alone, polled by the request page every 3 s.

    Answers 286 (htmx: stop polling) with the final badge once the request is terminal. When the
    status differs from the one the page shows (``?shown=``), an htmx request gets the whole
    request page instead, with ``HX-Retarget``/``HX-Reselect`` ``#request-page`` and
    ``HX-Reswap: outerHTML``: htmx swaps the new facts, connect commands, actions and timeline in
    place (no reload; the new badge polls on unless terminal). 404 when not visible.
    """
    req = get_object_or_404(VMRequest.objects.visible_to(request.user), pk=pk)
    shown = request.GET.get("shown", "")
    poll = not req.is_terminal
    if getattr(request, "htmx", False) and shown and shown != req.status:
        response = vmrequest(request, pk)
        response["HX-Retarget"] = response["HX-Reselect"] = f"#{PAGE_REGION_ID}"
        response["HX-Reswap"] = "outerHTML"
        if not poll:
            response.status_code = HttpResponseStopPolling.status_code
        return response
    html = render_to_string(
        "vmrequests/inc/status_badge.html",
        {"req": req, "poll": poll, "shown": shown or req.status},
        request=request,
    )
    return HttpResponse(html) if poll else HttpResponseStopPolling(html)


# --- approval queue ----------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueRow:
    """One pending request of the queue with its verdict, the lease end if started now, and its
    buttons (``action_context``: ``may``, ``action_notes``)."""

    req: VMRequest
    verdict: Verdict
    lease_end: datetime
    actions: dict[str, Any]


@require_safe
def approval_queue(request: HttpRequest) -> HttpResponse:
    """Pending requests of the teams the user decides for (``policy.decidable_requests``),
    oldest first, each with where it would run now (or which idle node would be re-profiled),
    the team's quota after approval, problems when it does not fit, the lease end if started
    now, and the buttons ``policy.allowed_actions`` allows (on their own request an approver
    sees the note "another approver must decide it" instead). Approvers only (others: 403)."""
    viewer = policy.Viewer(request.user)
    scope = policy.decidable_requests(request.user, viewer=viewer)
    if scope is None:
        return forbidden(request, _("Only approvers can see the approval queue."))
    pending = list(
        VMRequest.objects.filter(scope, status=VMRequestStatus.SUBMITTED)
        .select_related("requester", "team", "image")
        .order_by("created", "pk")
    )
    rows: list[QueueRow] = []
    if pending:
        snapshot = CapacitySnapshot()
        book = QuotaBook(r.team_id for r in pending)
        rows = [
            QueueRow(
                r,
                approval_verdict(r, snapshot, book),
                r.lease_end_if_started(),
                action_context(request.user, r, viewer, QUEUE_ACTIONS),
            )
            for r in pending
        ]
    return render(
        request,
        "vmrequests/approval_queue.html",
        {"rows": rows, "queue_url": reverse("vmrequests:approval_queue")},
    )
