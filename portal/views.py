"""Project-level pages: the home page with the signed-in user's roles."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from vmrequests.roles import roles_of


def home(request: HttpRequest) -> HttpResponse:
    """The landing page after login: who you are, your roles and where to go next."""
    return render(request, "portal/home.html", {"roles": roles_of(request.user)})
