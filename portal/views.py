"""Project-level pages: the home page with the signed-in user's roles."""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.shortcuts import render
from django.templatetags.static import static

from portal.roles import roles_of


def home(request: HttpRequest) -> HttpResponse:
    """The landing page after login: who you are, your roles and where to go next."""
    return render(request, "portal/home.html", {"roles": roles_of(request.user)})


@login_not_required
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Browsers ask for ``/favicon.ico`` whatever the page says: send them to the SVG icon."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))
