"""Email notifications of VM requests, sent through Django's default mailer (``EMAIL_URL``).

Who gets what (issue "VM requests and approvals", docs/configuration.md "Email"):

- a new request (``submit``) still waiting for a decision: those who can decide it, asked of the
  policy per candidate (``decider_recipients``: the team's approvers for whom
  ``policy.decision_for(user, req, "approve")`` is allowed, with an email address; never the
  requester for their own request). When none of them can (the requester is the team's only
  approver, or no approver has an address), the admins (active superusers with an address) who
  can. Nobody is mailed when a policy auto-approved the request;
- ``approve`` / ``auto_approve`` / ``reject`` / ``mark_running`` / ``mark_failed`` /
  ``mark_deleted`` (with the approver's reason when they terminated the VM), and the lease
  warning (``send_lease_warning``, called by the lease task): the requester, when they have an
  email address.

``on_request_transitioned`` listens to ``vmrequests.models.request_transitioned``, which is sent
after the transition's transaction commits (connected in ``VmrequestsConfig.ready``). Subjects
and bodies are rendered in the recipient's language (``recipient_language``: the portal stores
no per-user language, so ``settings.LANGUAGE_CODE``; English and Simplified Chinese catalogs);
bodies come from ``templates/vmrequests/email/<name>.txt``. Links are absolute, built on
``settings.PORTAL_BASE_URL``. A mail that cannot be sent is logged (logger
``vmrequests.notifications``) and swallowed: it never breaks the status change that caused it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage, mailers
from django.template.loader import render_to_string
from django.utils import dateformat, timezone
from django.utils.translation import gettext as _
from django.utils.translation import override

from vmrequests.choices import DeletionReason, EventAction, VMRequestStatus
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.policy import decision_for

log = logging.getLogger("vmrequests.notifications")

#: Event action → body template name of the mail to the requester.
REQUESTER_MAILS: dict[str, str] = {
    EventAction.APPROVE: "approved",
    EventAction.AUTO_APPROVE: "approved",
    EventAction.REJECT: "rejected",
    EventAction.MARK_RUNNING: "running",
    EventAction.MARK_FAILED: "failed",
    EventAction.MARK_DELETED: "deleted",
}

#: Timestamps in mails: ``2026-12-07 09:30 UTC`` (in ``settings.TIME_ZONE``).
DATETIME_FORMAT = "Y-m-d H:i T"


def request_url(req: VMRequest) -> str:
    """The absolute URL of the request's page, e.g. ``"http://127.0.0.1:8000/requests/42/"``."""
    return settings.PORTAL_BASE_URL + req.get_absolute_url()


def ssh_command(req: VMRequest) -> str:
    """How to log in: ``"virtctl ssh <login user>@vmi/<vmi name> -n <namespace>"``."""
    return f"virtctl ssh {req.image.login_user}@vmi/{req.vmi_name} -n {req.vmi_namespace}"


def _when(value: Any) -> str:
    """A timestamp in the portal's time zone (``DATETIME_FORMAT``), ``""`` for None."""
    return dateformat.format(timezone.localtime(value), DATETIME_FORMAT) if value else ""


def _person(user: Any) -> str:
    return str(user.get_full_name() or user.get_username())


def _subject(name: str, req: VMRequest) -> str:
    """The translated subject of mail ``name`` (call inside ``override``)."""
    params = {
        "id": req.pk,
        "vmi": req.vmi_name,
        "team": str(req.team),
        "user": _person(req.requester),
        "end": _when(req.lease_end),
    }
    subjects = {
        "new_request": _("New GPU VM request #%(id)s from %(user)s (team %(team)s)"),
        "approved": _("Your GPU VM request #%(id)s was approved"),
        "rejected": _("Your GPU VM request #%(id)s was rejected"),
        "running": _("Your GPU VM %(vmi)s is running"),
        "failed": _("Your GPU VM request #%(id)s failed"),
        "deleted": _("Your GPU VM %(vmi)s was deleted"),
        "lease_warning": _("The lease of your GPU VM %(vmi)s ends on %(end)s"),
    }
    return subjects[name] % params


def recipient_language(user: Any) -> str:
    """The language a mail to ``user`` is written in: ``settings.LANGUAGE_CODE`` (users have no
    stored language preference; the browser's choice is per session)."""
    return str(settings.LANGUAGE_CODE)


def _message(
    name: str, req: VMRequest, to: Any, extra: dict[str, Any] | None = None, language: str = ""
) -> EmailMessage:
    """Render mail ``name`` for ``req`` to user ``to`` (their address, their language unless
    ``language`` is given)."""
    with override(language or recipient_language(to)):
        context = {
            "req": req,
            "url": request_url(req),
            "requester": _person(req.requester),
            "team": str(req.team),
            "mode": req.get_mode_display(),
            "lease_end": _when(req.lease_end),
            **(extra or {}),
        }
        body = render_to_string(f"vmrequests/email/{name}.txt", context).strip() + "\n"
        subject = _subject(name, req)
    return EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [to.email])


def _send(messages: Iterable[EmailMessage]) -> int:
    """Send ``messages`` through the default mailer (``settings.MAILERS``), one connection.

    Returns:
        How many were sent. Raises whatever the mail backend raises.
    """
    batch = list(messages)
    if not batch:
        return 0
    return mailers.default.send_messages(batch) or 0


def decider_recipients(req: VMRequest) -> list[Any]:
    """Who the "waits for your decision" mail of ``req`` goes to: the active approvers of its
    team with an email address whom the policy allows to approve it now (not the requester:
    self-approval; not when it is no longer submitted, e.g. auto-approved), by address. When
    none, the active superusers with an address whom the policy allows (every admin but the
    requester). ``[]`` when no one can act."""
    team_approvers = req.team.approvers.filter(is_active=True).exclude(email="").order_by("email")
    users = [u for u in team_approvers if decision_for(u, req, "approve")]
    if users:
        return users
    admins = get_user_model().objects.filter(is_superuser=True, is_active=True).exclude(email="")
    return [u for u in admins.order_by("email") if decision_for(u, req, "approve")]


def notify_approvers(req: VMRequest) -> int:
    """Mail those who can decide the new request ``req`` (``decider_recipients``), one message
    each, in each recipient's language.

    Returns:
        Messages sent. Raises whatever the mail backend raises.
    """
    recipients = decider_recipients(req)
    if not recipients and req.status == VMRequestStatus.SUBMITTED:
        log.warning("nobody can decide request #%s; no mail sent", req.pk, extra={"vmrequest_id": req.pk})
    return _send(_message("new_request", req, user) for user in recipients)


def _termination(req: VMRequest) -> dict[str, Any]:
    """Who terminated ``req`` and the reason they typed (the ``start_deletion`` event)."""
    event = (
        VMRequestEvent.objects.filter(request=req, action=EventAction.START_DELETION)
        .select_related("actor")
        .order_by("-created", "-pk")
        .first()
    )
    if event is None:
        return {}
    return {"by": event.actor_display, "note": event.message}


def _requester_extra(name: str, req: VMRequest, event: VMRequestEvent | None) -> dict[str, Any]:
    """Context of the requester's mail ``name`` beyond the common keys (inside ``override``)."""
    if name in {"approved", "rejected"}:
        by = event.actor_display if event is not None else (_person(req.decided_by) if req.decided_by else "")
        return {"by": by, "by_policy": req.decided_by_policy, "note": req.decision_note}
    if name == "running":
        return {"ssh": ssh_command(req), "ip": req.ip_address or ""}
    if name == "deleted":
        reason = req.deletion_reason
        extra = {"reason": DeletionReason(reason).label if reason in DeletionReason.values else ""}
        if reason == DeletionReason.TERMINATED:
            extra.update(_termination(req))
        return extra
    return {}


def notify_requester(req: VMRequest, name: str, event: VMRequestEvent | None = None) -> int:
    """Mail the requester mail ``name`` (``REQUESTER_MAILS`` values or ``"lease_warning"``).

    Returns:
        1 when sent, 0 when the requester has no email address. Raises whatever the backend raises.
    """
    if not req.requester.email:
        return 0
    language = recipient_language(req.requester)
    with override(language):
        extra = _requester_extra(name, req, event)
    return _send([_message(name, req, req.requester, extra, language)])


def _fresh(req: VMRequest) -> VMRequest:
    """The request as committed, with what the mails show joined in (one query)."""
    return VMRequest.objects.select_related("requester", "team", "image", "decided_by").get(pk=req.pk)


def on_request_transitioned(sender: Any, request: VMRequest, event: VMRequestEvent, **kwargs: Any) -> None:
    """Receiver of ``request_transitioned``: send the mails of ``event.action``; log, never
    raise, when mail fails (the transition has already committed)."""
    action = str(event.action)
    if action != EventAction.SUBMIT and action not in REQUESTER_MAILS:
        return
    try:
        req = _fresh(request)
        if action == EventAction.SUBMIT:
            if req.status == VMRequestStatus.SUBMITTED:  # not when a rule already approved it
                notify_approvers(req)
        else:
            notify_requester(req, REQUESTER_MAILS[action], event)
    except Exception:
        log.exception(
            "email for request #%s (%s) not sent",
            request.pk,
            action,
            extra={"vmrequest_id": request.pk, "action": action},
        )


def send_lease_warning(req: VMRequest) -> bool:
    """Warn the requester that the lease of ``req`` ends at ``req.lease_end``.

    For the lease task (provisioning issue). Never raises on a mail failure: it is logged.

    Returns:
        True when the mail was sent; False when the requester has no email address or sending
        failed.
    """
    try:
        return notify_requester(_fresh(req), "lease_warning") == 1
    except Exception:
        log.exception(
            "lease warning for request #%s not sent",
            req.pk,
            extra={"vmrequest_id": req.pk, "action": "lease_warning"},
        )
        return False
