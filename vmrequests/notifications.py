"""Email notifications of VM requests, sent through Django's default mailer (``EMAIL_URL``).

Who gets what (issue "VM requests and approvals", docs/configuration.md "Email"):

- a new request (``submit``): the approvers of the request's team who have an email address and
  the ``vmrequests.approve_vmrequest`` permission, one message each;
- ``approve`` / ``auto_approve`` / ``reject`` / ``mark_running`` / ``mark_failed`` /
  ``mark_deleted``, and the lease warning (``send_lease_warning``, called by the lease task):
  the requester, when they have an email address.

``on_request_transitioned`` listens to ``vmrequests.models.request_transitioned``, which is sent
after the transition's transaction commits (connected in ``VmrequestsConfig.ready``). Subjects
and bodies are rendered in ``settings.LANGUAGE_CODE`` (the recipients' own language is not
known); bodies come from ``templates/vmrequests/email/<name>.txt``. Links are absolute, built on
``settings.PORTAL_BASE_URL``. A mail that cannot be sent is logged (logger
``vmrequests.notifications``) and swallowed: it never breaks the status change that caused it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, mailers
from django.template.loader import render_to_string
from django.utils import dateformat, timezone
from django.utils.translation import gettext as _
from django.utils.translation import override

from vmrequests.choices import DeletionReason, EventAction, VMRequestStatus
from vmrequests.models import VMRequest, VMRequestEvent
from vmrequests.roles import APPROVE_PERMISSION

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


def _message(name: str, req: VMRequest, to: str, extra: dict[str, Any] | None = None) -> EmailMessage:
    """Render mail ``name`` for ``req`` to one address, in ``settings.LANGUAGE_CODE``."""
    with override(settings.LANGUAGE_CODE):
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
    return EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [to])


def _send(messages: Iterable[EmailMessage]) -> int:
    """Send ``messages`` through the default mailer (``settings.MAILERS``), one connection.

    Returns:
        How many were sent. Raises whatever the mail backend raises.
    """
    batch = list(messages)
    if not batch:
        return 0
    return mailers.default.send_messages(batch) or 0


def approver_addresses(req: VMRequest) -> list[str]:
    """Email addresses of the approvers of ``req``'s team who may decide it: active, with an
    email address and the approve permission (directly, by group, or as superuser). Sorted."""
    users = req.team.approvers.exclude(email="").order_by("email")
    return [u.email for u in users if u.has_perm(APPROVE_PERMISSION)]


def notify_approvers(req: VMRequest) -> int:
    """Mail every approver of the team about a new request (``approver_addresses``).

    Returns:
        Messages sent. Raises whatever the mail backend raises.
    """
    return _send(_message("new_request", req, to) for to in approver_addresses(req))


def _requester_extra(name: str, req: VMRequest, event: VMRequestEvent | None) -> dict[str, Any]:
    """Context of the requester's mail ``name`` beyond the common keys (inside ``override``)."""
    if name in {"approved", "rejected"}:
        by = event.actor_display if event is not None else (_person(req.decided_by) if req.decided_by else "")
        return {"by": by, "by_policy": req.decided_by_policy, "note": req.decision_note}
    if name == "running":
        return {"ssh": ssh_command(req), "ip": req.ip_address or ""}
    if name == "deleted":
        reason = req.deletion_reason
        return {"reason": DeletionReason(reason).label if reason in DeletionReason.values else ""}
    return {}


def notify_requester(req: VMRequest, name: str, event: VMRequestEvent | None = None) -> int:
    """Mail the requester mail ``name`` (``REQUESTER_MAILS`` values or ``"lease_warning"``).

    Returns:
        1 when sent, 0 when the requester has no email address. Raises whatever the backend raises.
    """
    if not req.requester.email:
        return 0
    with override(settings.LANGUAGE_CODE):
        extra = _requester_extra(name, req, event)
    return _send([_message(name, req, req.requester.email, extra)])


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
