"""The request actions: approve, reject, cancel, release, terminate, lease extension, retry.

POST only (405 otherwise), CSRF-protected. A request the user may not see is a 404. Everything
else comes back as a message on the page the form was posted from (``next``, same site only):
a refusal of the policy (``vmrequests.policy.NotAllowed``: its reason, e.g. "You filed this
request: another approver must decide it."), a refused transition, a request that no longer fits.
The pages only draw the buttons the policy allows, so these messages are for stale pages and
hand-made POSTs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from vmrequests import approval
from vmrequests.approval import ApprovalRefused, NotAllowed
from vmrequests.choices import VMRequestStatus
from vmrequests.models import TransitionError, VMRequest
from vmrequests.placement import Placement
from vmrequests.views.lists import local_datetime

# --- actions -----------------------------------------------------------------------------------


def _visible_or_404(request: HttpRequest, pk: int) -> VMRequest:
    return get_object_or_404(
        VMRequest.objects.visible_to(request.user).select_related("team", "requester"), pk=pk
    )


def _back(request: HttpRequest, req: VMRequest) -> HttpResponseRedirect:
    """Redirect to the POSTed ``next`` when it is a safe URL on this site, else the request page."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = req.get_absolute_url()
    return HttpResponseRedirect(target)


def _refused(
    request: HttpRequest, req: VMRequest, exc: NotAllowed, template: str = "%(why)s"
) -> HttpResponseRedirect:
    """The policy's reason (in ``template``: %(id)s, %(why)s) as a message, a warning when the
    request's state refused it, an error when the user's rights or a rule did; back on the page
    the form came from."""
    text = template % {"id": req.pk, "why": exc} if exc.refusal.kind in ("state", "rule") else str(exc)
    (messages.warning if exc.is_conflict else messages.error)(request, text)
    return _back(request, req)


@require_POST
def vmrequest_approve(request: HttpRequest, pk: int) -> HttpResponse:
    """Approve with an optional ``note``: re-checks capacity and quota and reserves the devices.

    404 when not visible; the policy's refusal (not an approver, the requester themself), a
    request that no longer fits or was already decided come back as a message and nothing changes.
    """
    return _approve_or_retry(
        request,
        pk,
        approval.approve,
        refused=_("Request #%(id)s was not approved: %(why)s"),
        done=_("Request #%(id)s approved. %(where)s"),
    )


@require_POST
def vmrequest_reject(request: HttpRequest, pk: int) -> HttpResponse:
    """Reject with a required ``reason``. 404 when not visible; the policy's refusal, a blank
    reason or an already decided request come back as a message and nothing changes."""
    return _with_text(
        request,
        pk,
        approval.reject,
        field="reason",
        done=_("Request #%(id)s rejected."),
        blank=_("Request #%(id)s was not rejected: give a reason."),
    )


@require_POST
def vmrequest_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel (the requester or a decider, while submitted or approved) with an optional ``note``;
    frees any reservation. 404 when not visible, the policy's refusal as a message otherwise."""
    return _with_text(request, pk, approval.cancel, done=_("Request #%(id)s cancelled."))


@require_POST
def vmrequest_release(request: HttpRequest, pk: int) -> HttpResponse:
    """End a provisioning or running VM early (the requester or a decider) with an optional
    ``note``: the request moves to deleting and the worker deletes the VMI (enqueued on commit).
    404 when not visible, the policy's refusal as a message otherwise; any other status is a warning."""
    return _with_text(
        request, pk, approval.release, done=_("Request #%(id)s released; the VM is being deleted.")
    )


@require_POST
def vmrequest_terminate(request: HttpRequest, pk: int) -> HttpResponse:
    """An approver's forced stop of a provisioning or running VM, with a required ``reason``;
    the worker deletes the VMI (enqueued on commit). 404 when not visible; the policy's refusal,
    a blank reason or another status come back as a message and nothing changes."""
    return _with_text(
        request,
        pk,
        approval.terminate,
        field="reason",
        done=_("Request #%(id)s terminated; the VM is being deleted."),
        blank=_("Request #%(id)s was not terminated: give a reason."),
    )


def _with_text(
    request: HttpRequest,
    pk: int,
    service: Callable[[VMRequest, Any, str], None],
    *,
    done: str,
    field: str = "note",
    blank: str | None = None,
) -> HttpResponse:
    """Run ``service(req, user, text)`` (reject, cancel, release, terminate) with the POSTed
    ``field`` (stripped): 404 when not visible; the policy's refusal as a message
    (``_refused``); with ``blank`` (%(id)s), the service's ``ValueError`` for a blank text is an
    error; a refused transition a warning; ``done`` (%(id)s) on success. Back where it came from."""
    req = _visible_or_404(request, pk)
    text = request.POST.get(field, "").strip()
    try:
        service(req, request.user, text)
    except NotAllowed as exc:
        return _refused(request, req, exc)
    except ValueError:
        if blank is None:
            raise
        messages.error(request, blank % {"id": req.pk})
    except TransitionError as exc:
        messages.warning(request, str(exc))
    else:
        messages.success(request, done % {"id": req.pk})
    return _back(request, req)


def _days(value: str) -> int:
    """The POSTed number of days, or 0 when it is not a whole number (the service then refuses it
    with its "1 to N days" message, after its own permission check)."""
    try:
        return int(value.strip())
    except ValueError:
        return 0


@require_POST
def vmrequest_extend(request: HttpRequest, pk: int) -> HttpResponse:
    """The requester of a running VM asks for ``days`` more (1 … what the team's maximum lease
    leaves in total), with a ``reason``; an approver decides. 404 when not visible; the policy's
    refusal (not the requester, one already pending, the lease at the maximum) or a bad number of
    days come back as a message and nothing changes."""
    req = _visible_or_404(request, pk)
    days = _days(request.POST.get("days", ""))
    reason = request.POST.get("reason", "").strip()
    try:
        approval.request_extension(req, request.user, days, reason)
    except NotAllowed as exc:
        return _refused(request, req, exc, _("Request #%(id)s: no extension requested. %(why)s"))
    except TransitionError as exc:
        status = VMRequestStatus(exc.current).label if exc.current in VMRequestStatus.values else exc.current
        messages.warning(
            request,
            _("Request #%(id)s is %(status)s; only the lease of a running VM can be extended.")
            % {"id": req.pk, "status": status},
        )
    except ValueError as exc:
        messages.error(
            request, _("Request #%(id)s: no extension requested. %(why)s") % {"id": req.pk, "why": exc}
        )
    else:
        messages.success(
            request,
            ngettext(
                "Request #%(id)s: %(days)s more day asked for; an approver decides.",
                "Request #%(id)s: %(days)s more days asked for; an approver decides.",
                days,
            )
            % {"id": req.pk, "days": days},
        )
    return _back(request, req)


def _decide_extension(request: HttpRequest, pk: int, *, approve: bool) -> HttpResponse:
    req = _visible_or_404(request, pk)
    note = request.POST.get("note", "").strip()
    days = req.extension_days_requested
    try:
        approval.decide_extension(req, request.user, approve=approve, note=note)
    except NotAllowed as exc:
        return _refused(request, req, exc, _("Request #%(id)s: %(why)s"))
    except ValueError as exc:
        messages.error(request, _("Request #%(id)s: %(why)s") % {"id": req.pk, "why": exc})
    else:
        if approve:
            end = local_datetime(req.lease_end) if req.lease_end else ""
            messages.success(
                request,
                ngettext(
                    "Request #%(id)s: lease extended by %(days)s day, to %(end)s.",
                    "Request #%(id)s: lease extended by %(days)s days, to %(end)s.",
                    days or 0,
                )
                % {"id": req.pk, "days": days, "end": end},
            )
        else:
            messages.success(request, _("Request #%(id)s: lease extension refused.") % {"id": req.pk})
    return _back(request, req)


@require_POST
def vmrequest_extension_approve(request: HttpRequest, pk: int) -> HttpResponse:
    """Grant the pending lease extension (approvers, not the requester) with an optional
    ``note``: the lease end moves by the requested days and the expiry warning re-arms. 404 when
    not visible; the policy's refusal (also: none pending, over the team's maximum) comes back as
    a message and nothing changes."""
    return _decide_extension(request, pk, approve=True)


@require_POST
def vmrequest_extension_reject(request: HttpRequest, pk: int) -> HttpResponse:
    """Refuse the pending lease extension (approvers, not the requester) with an optional
    ``note``; the lease end stays. 404 when not visible; the policy's refusal (also: none
    pending) comes back as a message and nothing changes."""
    return _decide_extension(request, pk, approve=False)


@require_POST
def vmrequest_retry(request: HttpRequest, pk: int) -> HttpResponse:
    """Approve a failed request again (approvers, not the requester) with an optional ``note``:
    re-checks capacity and quota, reserves anew and enqueues provisioning on commit. 404 when not
    visible; the policy's refusal or a request that no longer fits come back as a message and
    nothing changes."""
    return _approve_or_retry(
        request,
        pk,
        approval.retry,
        refused=_("Request #%(id)s was not retried: %(why)s"),
        done=_("Request #%(id)s approved again. %(where)s"),
    )


def _approve_or_retry(
    request: HttpRequest, pk: int, service: Callable[..., Placement], *, refused: str, done: str
) -> HttpResponse:
    """Run ``approval.approve`` or ``approval.retry`` (same checks, same outcomes) with the POSTed
    ``note``: 404 when not visible; the policy's refusal as a message (``_refused``); a request
    that no longer fits is an error (``refused`` with the reasons), a lost race a warning;
    ``done`` with where it will run on success."""
    req = _visible_or_404(request, pk)
    note = request.POST.get("note", "").strip()
    try:
        placement = service(req, request.user, note)
    except NotAllowed as exc:
        return _refused(request, req, exc)
    except ApprovalRefused as exc:
        messages.error(request, refused % {"id": req.pk, "why": " ".join(exc.verdict.problems())})
    except TransitionError as exc:
        messages.warning(request, str(exc))
    else:
        messages.success(request, done % {"id": req.pk, "where": placement.describe()})
    return _back(request, req)
