"""The reproductions of issue #13's "who may do what" findings, now fixed, and the policy's
reasons and settings (vmrequests/policy.py). The full table is test_vmrequest_policy_table.py."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.utils import formats, timezone

from tests.factories import portal_user
from tests.unit.api.conftest import api, post
from tests.vmrequest_factories import request_form_inventory, request_world, stored_request
from vmrequests import approval, policy
from vmrequests.models import VMRequest

pytestmark = pytest.mark.django_db

SELF = "You filed this request: another approver must decide it."
ONLY = "Needs another approver: you are the team's only approver."


@pytest.fixture
def w(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``request_world`` on ``request_form_inventory`` (3 free A100s on p1); tasks not sent."""
    from vmrequests import tasks

    monkeypatch.setattr(tasks.provision, "delay", lambda pk: None)
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: None)
    request_form_inventory()
    return request_world()


def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def forms(html: str, pk: int) -> list[str]:
    return re.findall(rf'method="post" action="/requests/{pk}/([a-z/]+)/"', html.split("<main>", 1)[1])


def notes(html: str) -> list[str]:
    """The notes explaining missing buttons, HTML entities decoded."""
    return [unescape(n) for n in re.findall(r'<li class="action-note">(.*?)</li>', html)]


def running(req: VMRequest, **fields: Any) -> VMRequest:
    VMRequest.objects.filter(pk=req.pk).update(
        status="running", node_name="p1", lease_end=timezone.now() + timedelta(days=7), **fields
    )
    return VMRequest.objects.select_related("team").get(pk=req.pk)


# --- an approver's own request -----------------------------------------------------------------


def test_the_only_approver_sees_a_note_not_an_approve_button_on_their_own_request(w: Any) -> None:
    # Reproduction: apa (quant's only approver) saw Approve on his own request, in the queue and
    # on the page, clicked it and got a bare 403.
    own = stored_request(w.quant, w.apa, w.image)
    page = browser(w.apa).get(f"/requests/{own.pk}/").content.decode()
    assert (forms(page, own.pk), notes(page)) == (["cancel"], [ONLY])
    queue = browser(w.apa).get("/requests/queue/").content.decode()
    item = re.search(rf'id="request-{own.pk}">(.*?)</article>', queue, re.S)
    assert item is not None
    assert (forms("<main>" + item.group(1), own.pk), notes(item.group(1))) == ([], [ONLY])
    response = browser(w.apa).post(f"/requests/{own.pk}/approve/")
    assert (response.status_code, response["Location"]) == (302, f"/requests/{own.pk}/")
    assert [(m.level_tag, str(m)) for m in get_messages(response.wsgi_request)] == [("error", ONLY)]
    assert VMRequest.objects.get(pk=own.pk).status == "submitted"


def test_with_another_approver_the_note_says_who_decides(w: Any) -> None:
    amy = portal_user("approver", "amy")
    w.quant.approvers.add(amy)
    own = stored_request(w.quant, w.apa, w.image)
    page = browser(w.apa).get(f"/requests/{own.pk}/").content.decode()
    assert notes(page) == [SELF]
    page = browser(amy).get(f"/requests/{own.pk}/").content.decode()
    assert (forms(page, own.pk), notes(page)) == (["approve", "reject", "cancel"], [])


def test_an_approver_cannot_grant_their_own_extension_or_retry_their_own_failure(w: Any) -> None:
    # Reproduction: the self-approval rule lived in approve() only; apa granted his own lease
    # extensions again and again and retried his own failed request.
    own = running(stored_request(w.quant, w.apa, w.image), extension_days_requested=3)
    text = "This is your own lease: another approver must decide the extension."
    for _ in range(2):
        with pytest.raises(policy.NotAllowed, match=f"^{re.escape(text)}$"):
            approval.decide_extension(own, w.apa, approve=True)
    assert VMRequest.objects.get(pk=own.pk).lease_extended_days == 0
    body = post(api(w.apa), f"/api/v1/vm-requests/{own.pk}/extension-decision/", {"approve": True}).json()
    assert (body["status"], body["detail"]) == (403, text)
    VMRequest.objects.filter(pk=own.pk).update(status="failed")
    with pytest.raises(
        policy.NotAllowed, match=r"^You filed this request: another approver must retry it\.$"
    ):
        approval.retry(VMRequest.objects.get(pk=own.pk), w.apa)
    approval.retry(VMRequest.objects.get(pk=own.pk), w.root)  # someone else may
    assert VMRequest.objects.get(pk=own.pk).status == "approved"


def test_admins_are_refused_self_approval_too(w: Any, settings: Any) -> None:
    own = stored_request(w.quant, w.root, w.image)
    assert policy.decision_for(w.root, own, "approve") == policy.Refused(SELF, "rule")
    settings.PORTAL_ALLOW_SELF_APPROVAL = True
    assert policy.decision_for(w.root, own, "approve") == policy.Allowed()


@pytest.mark.parametrize(
    ("action", "status", "extra"),
    [
        ("approve", "submitted", {}),
        ("reject", "submitted", {}),
        ("retry", "failed", {}),
        ("extension_approve", "running", {"extension_days_requested": 3}),
        ("extension_deny", "running", {"extension_days_requested": 3}),
    ],
)
def test_the_setting_allows_self_approval_everywhere(
    w: Any, settings: Any, action: str, status: str, extra: dict[str, Any]
) -> None:
    settings.PORTAL_ALLOW_SELF_APPROVAL = True
    own = stored_request(w.quant, w.apa, w.image)
    VMRequest.objects.filter(pk=own.pk).update(
        status=status, lease_end=timezone.now() + timedelta(days=2), **extra
    )
    own = VMRequest.objects.select_related("team").get(pk=own.pk)
    assert policy.allowed_actions(w.apa, own)[action] == policy.Allowed()
    path, body = {
        "approve": ("approve", {}),
        "reject": ("reject", {"reason": "changed my mind"}),
        "retry": ("retry", {}),
        "extension_approve": ("extension-decision", {"approve": True}),
        "extension_deny": ("extension-decision", {"approve": False}),
    }[action]
    assert post(api(w.apa), f"/api/v1/vm-requests/{own.pk}/{path}/", body).status_code == 200


# --- the lease cap is the team's maximum in total ------------------------------------------------


def test_extensions_are_capped_in_total_not_each(w: Any) -> None:
    # Reproduction: a 7-day lease of a team with "at most 30 days" was extended twice (30 + 30)
    # to 67 days, and the page still said "Lease 7 days".
    req = running(w.r_ana)
    start_end = req.lease_end
    assert start_end is not None
    with pytest.raises(ValueError, match=r"^Ask for 1 to 23 days: .* this lease already has 7\.$"):
        approval.request_extension(req, w.ana, 30, "a month more")
    approval.request_extension(req, w.ana, 20, "three weeks")
    approval.decide_extension(VMRequest.objects.get(pk=req.pk), w.apa, approve=True)
    req = VMRequest.objects.select_related("team").get(pk=req.pk)
    assert (req.lease_extended_days, req.lease_total_days, req.extension_days_left()) == (20, 27, 3)
    with pytest.raises(ValueError, match=r"^Ask for 1 to 3 days: .* this lease already has 27\.$"):
        approval.request_extension(req, w.ana, 30, "again")
    approval.request_extension(req, w.ana, 3, "the last days")
    req = VMRequest.objects.select_related("team").get(pk=req.pk)
    page = browser(w.apa).get(f"/requests/{req.pk}/").content.decode()
    new_end = start_end + timedelta(days=23)
    shown = formats.date_format(timezone.localtime(new_end), "DATETIME_FORMAT")
    assert f'<button type="submit" class="primary">Extend by 3 days, to {shown} UTC</button>' in page
    approval.decide_extension(req, w.apa, approve=True)
    req = VMRequest.objects.select_related("team").get(pk=req.pk)
    assert (req.lease_end, req.lease_total_days) == (new_end, 30)
    refusal = "The lease is already at the team's maximum of 30 days in total."
    assert policy.decision_for(w.ana, req, "extend") == policy.Refused(refusal, "rule")
    page = browser(w.ana).get(f"/requests/{req.pk}/").content.decode()
    assert "extend" not in forms(page, req.pk)
    assert refusal in notes(page)
    assert "7 days <span" in page and "(30 days in total with the extensions)" in page
    assert (
        "30 days in total: 7 days asked for, 23 days granted by extensions. "
        '<span class="hint">The team\'s maximum is 30 days in total; 0 days left to extend.</span>'
    ) in page


def test_a_pending_extension_over_a_lowered_maximum_cannot_be_granted(w: Any) -> None:
    req = running(w.r_ana, extension_days_requested=20)
    w.quant.max_lease_days = 14
    w.quant.save()
    req = VMRequest.objects.select_related("team").get(pk=req.pk)
    text = (
        "Granting 20 more days would make the lease 27 days long, over the team's maximum of 14 days "
        "in total (7 days are left)."
    )
    assert policy.decision_for(w.apa, req, "extension_approve") == policy.Refused(text, "rule")
    with pytest.raises(policy.NotAllowed, match=re.escape(text)):
        approval.decide_extension(req, w.apa, approve=True)
    page = browser(w.apa).get(f"/requests/{req.pk}/").content.decode()
    assert (forms(page, req.pk), notes(page)) == (["extension/reject", "terminate"], [text])
    approval.decide_extension(req, w.apa, approve=False)  # refusing it still works
    assert VMRequest.objects.get(pk=req.pk).extension_days_requested is None


# --- shape of the answer -------------------------------------------------------------------------


def test_allowed_actions_lists_every_action_in_declaration_order(w: Any) -> None:
    answer = policy.allowed_actions(w.ana, w.r_ana)
    assert list(answer) == [
        "approve",
        "reject",
        "cancel",
        "release",
        "terminate",
        "retry",
        "extend",
        "extension_approve",
        "extension_deny",
    ]
    assert answer["cancel"] == policy.Allowed()
    assert answer["approve"] == policy.Refused("You are not an approver of team Quant.", "role")
    assert answer["release"] == policy.Refused(
        f"Request #{w.r_ana.pk} is submitted; it cannot be deleted.", "status"
    )


def test_check_raises_one_exception_type(w: Any) -> None:
    with pytest.raises(policy.NotAllowed) as caught:
        policy.check(w.tim, w.r_ana, "approve")
    assert (str(caught.value), caught.value.is_conflict) == ("You are not an approver of team Quant.", False)
    with pytest.raises(policy.NotAllowed) as caught:
        policy.check(w.ana, w.r_ana, "release")
    assert caught.value.is_conflict is True
    assert (caught.value.current, caught.value.action) == ("submitted", "start_deletion")  # type: ignore[attr-defined]


def test_an_anonymous_user_is_asked_to_sign_in(w: Any) -> None:
    from django.contrib.auth.models import AnonymousUser

    assert policy.decision_for(AnonymousUser(), w.r_ana, "cancel") == policy.Refused("Sign in first.", "role")
