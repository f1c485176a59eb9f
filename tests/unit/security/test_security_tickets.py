"""#14 finding 3: ticket squatting and the cross-team oracle.

Before: ``ticket_source`` + ``ticket_id`` were unique across the portal, so any analyst could
file ``servicenow``/``RITM0012345`` first; the ticketing system's real request then got 409, and
the 409 told an analyst of another team that the ticket existed. Now a ticket identifies a
request **per filing account** (the ``submitted_by`` account, else the requester): one account's
tickets never collide with another's, so nothing can be squatted and nothing about another
account's tickets is revealed.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import IntegrityError, transaction

from tests.unit.api.conftest import api, create_body, post, problem
from vmrequests.models import VMRequest

URL = "/api/v1/vm-requests/"
TICKET = {"ticket_source": "servicenow", "ticket_id": "RITM0012345"}


@pytest.fixture
def svc(world: Any) -> User:
    """``servicenow``: the ticketing system's account (in no team, may file for others)."""
    user = User.objects.create_user("servicenow")
    user.user_permissions.add(Permission.objects.get(codename="submit_for_others"))
    return user


def _created(response: Any) -> VMRequest:
    assert response.status_code == 201, response.content
    return VMRequest.objects.get(pk=response.json()["id"])


def test_an_analyst_cannot_squat_the_ticketing_systems_ticket(world: Any, svc: User) -> None:
    squat = _created(post(api(world.olga), URL, create_body(team="research", **TICKET)))
    real = _created(post(api(svc), URL, create_body(requested_for="ana", **TICKET)))
    assert real.pk != squat.pk
    assert (real.requester, real.submitted_by, real.ticket_id) == (world.ana, svc, "RITM0012345")
    # The ticketing system's retry still finds its own request.
    again = post(api(svc), URL, create_body(requested_for="ana", **TICKET))
    assert (again.status_code, again.json()["id"]) == (200, real.pk)


def test_no_oracle_for_another_teams_ticket(world: Any) -> None:
    """olga (research) learns nothing of ana's (quant) ticket: her request is simply created."""
    _created(post(api(world.ana), URL, create_body(**TICKET)))
    response = post(api(world.olga), URL, create_body(team="research", **TICKET))
    mine = _created(response)
    assert b"may not see" not in response.content
    assert (mine.requester, mine.team.slug) == (world.olga, "research")


def test_the_filing_account_still_gets_409_for_other_content(world: Any, svc: User) -> None:
    first = _created(post(api(svc), URL, create_body(requested_for="ana", **TICKET)))
    body = problem(
        post(api(svc), URL, create_body(requested_for="ana", device_count=1, **TICKET)),
        409,
        "duplicate-ticket",
    )
    assert (body["differing_fields"], body["existing_request"]) == (["device_count"], first.pk)


def test_the_browser_form_ticket_is_per_account_too(world: Any) -> None:
    """The validator's duplicate check (shared by the form) looks at the filing account only."""
    from vmrequests.validation import ticket_taken

    _created(post(api(world.ana), URL, create_body(**TICKET)))
    assert ticket_taken(world.ana, "servicenow", "RITM0012345") is True
    assert ticket_taken(world.tim, "servicenow", "RITM0012345") is False
    assert ticket_taken(world.ana, "jira", "RITM0012345") is False


def test_database_constraint_is_per_filing_account(world: Any, svc: User) -> None:
    """Two requests of one account with one ticket cannot both be stored; another account's can."""
    base = VMRequest.objects.get(pk=world.r_ana.pk)
    VMRequest.objects.filter(pk=base.pk).update(**TICKET)

    def copy(**fields: Any) -> None:
        VMRequest.objects.create(
            team=base.team,
            requester=fields.pop("requester", base.requester),
            image=base.image,
            mode=base.mode,
            resource_name=base.resource_name,
            device_count=1,
            cpu_cores=2,
            memory_gib=8,
            lease_days=1,
            ssh_public_key=base.ssh_public_key,
            justification="copy",
            **TICKET,
            **fields,
        )

    copy(requester=world.tim)  # tim's own ticket: another account
    copy(requester=world.tim, submitted_by=svc)  # filed by the ticketing system for tim
    with pytest.raises(IntegrityError), transaction.atomic():
        copy(requester=world.ana)  # ana filed it herself already
    with pytest.raises(IntegrityError), transaction.atomic():
        copy(requester=world.ana, submitted_by=svc)  # the ticketing system filed it for tim already
    assert VMRequest.objects.filter(ticket_id="RITM0012345").count() == 3
