"""The new-request form (``/requests/new/``) and its dependent part (``/requests/new/gpu-options/``).

GET shows the form; POST validates it (``VMRequestForm``, an adapter over
``vmrequests.validation.validate``) and submits the spec through ``approval.submit``. The part of the
form that depends on team, mode, image and GPU (GPU options with live free counts, count limit,
CPU/memory defaults, lease bounds) is ``{% partialdef dependent %}`` of the page template: htmx
posts the whole form to ``vmrequest_gpu_options`` on every change of those fields and swaps the
partial in; without JavaScript the "Refresh options" button (``name="refresh"``) re-renders the
whole page the same way. Both re-renders use an unbound form whose initial values are what was
typed, so nothing is lost and no validation error is shown before the user submits.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db import IntegrityError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from vmrequests import approval
from vmrequests.choices import VMRequestStatus
from vmrequests.forms import VMRequestForm, initial_from
from vmrequests.models import VMRequest
from vmrequests.notifications import decider_recipients

TEMPLATE = "vmrequests/vmrequest_add.html"


def _submitted_message(req: VMRequest) -> str:
    """What the requester is told after submitting ``req``: who the decision mail went to
    (``notifications.decider_recipients``, the one routing rule), or that nobody can decide it."""
    recipients = decider_recipients(req)
    values = {"id": req.pk, "team": req.team}
    if not recipients:
        return (
            _(
                "Request #%(id)s submitted. Nobody can decide it yet: %(team)s has no other approver "
                "and no admin has an e-mail address. Ask an admin to add an approver."
            )
            % values
        )
    if all(u.is_superuser and not req.team.approvers.filter(pk=u.pk).exists() for u in recipients):
        return (
            _(
                "Request #%(id)s submitted. No approver of %(team)s can decide it, so the portal's "
                "admins have been notified."
            )
            % values
        )
    return _("Request #%(id)s submitted. The approvers of %(team)s have been notified.") % values


def _admins() -> list[Any]:
    """Active superusers, whom a user in no team can ask to be added to one."""
    return list(get_user_model().objects.filter(is_superuser=True, is_active=True).order_by("username")[:5])


def _render(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_http_methods(["GET", "POST"])
def vmrequest_add(request: HttpRequest) -> HttpResponse:
    """Show the request form (GET), re-render it with fresh options (POST with ``refresh``),
    or validate and submit it (POST), then redirect to the new request's page.

    A user in no team gets a page saying whom to ask instead of the form (status 200).
    """
    if request.method == "POST" and "refresh" not in request.POST:
        form = VMRequestForm(request.user, data=request.POST)
        if not form.teams:
            return _render(request, TEMPLATE, {"no_team": True, "admins": _admins()})
        if form.is_valid():
            try:
                req = approval.submit(form.spec(), request.user)
            except IntegrityError:
                form.add_error(
                    None,
                    _(
                        "Another request took this VM name or ticket ID a moment ago. Change it and submit again."
                    ),
                )
            else:
                if req.status == VMRequestStatus.APPROVED:
                    messages.success(
                        request,
                        _("Request #%(id)s was approved by your team's policy; the VM is being prepared.")
                        % {"id": req.pk},
                    )
                else:
                    messages.success(request, _submitted_message(req))
                return HttpResponseRedirect(req.get_absolute_url())
    else:
        data = request.POST if request.method == "POST" else request.GET
        form = VMRequestForm(request.user, initial=initial_from(data))
        if not form.teams:
            return _render(request, TEMPLATE, {"no_team": True, "admins": _admins()})
    return _render(request, TEMPLATE, {"form": form})


@require_http_methods(["GET", "POST"])
def vmrequest_gpu_options(request: HttpRequest) -> HttpResponse:
    """The dependent part of the form for the values posted (htmx) or in the query string
    (plain GET): GPU options of the mode with free counts, the selected GPU's availability,
    count limit, CPU/memory defaults of the image, lease bounds of the team. Never validates."""
    data = request.POST if request.method == "POST" else request.GET
    form = VMRequestForm(request.user, initial=initial_from(data))
    return _render(request, f"{TEMPLATE}#dependent", {"form": form})
