"""Email notifications (vmrequests/notifications.py): who gets which mail, what it says, and
that a failing mail backend never breaks a transition."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core import mail
from django.core.mail.backends.base import BaseEmailBackend
from django.utils import timezone

from tests.factories import portal_user, stored_node, stored_resource
from vmrequests import approval, notifications
from vmrequests.approval import RequestSpec
from vmrequests.models import AutoApprovalRule, Team, VmImage, VMRequest

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
A100 = "nvidia.com/GA100_A100_PCIE_40GB"


class BrokenBackend(BaseEmailBackend):
    """A mail backend whose server is down."""

    def send_messages(self, email_messages: Any) -> int:
        raise ConnectionRefusedError("mail server down")


@pytest.fixture(autouse=True)
def _stable_setup(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.TIME_ZONE = "UTC"
    settings.LANGUAGE_CODE = "en"
    settings.PORTAL_BASE_URL = "https://gpu.example.com"
    settings.DEFAULT_FROM_EMAIL = "GPU Portal <gpu-portal@example.com>"
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def user(role: str, username: str, email: str, first: str = "", last: str = "", **fields: Any) -> Any:
    u = portal_user(role, username)
    u.email, u.first_name, u.last_name = email, first, last
    for k, v in fields.items():
        setattr(u, k, v)
    u.save()
    return u


@pytest.fixture
def world() -> dict[str, Any]:
    """Team Quant: requester alice (email), approvers bob (email, permission), root (superuser),
    dave (no permission), erin (permission, no email), ivan (inactive); frank approves Research."""
    quant = Team.objects.create(name="Quant", slug="quant", namespace="team-quant")
    research = Team.objects.create(name="Research", slug="research", namespace="team-research")
    w = {
        "quant": quant,
        "alice": user("analyst", "alice", "alice@example.com", "Alice", "Smith"),
        "nomail": user("analyst", "nomail", ""),
        "bob": user("approver", "bob", "bob@example.com", "Bob", "Jones"),
        "root": user("admin", "root", "root@example.com"),
        "dave": user("analyst", "dave", "dave@example.com"),
        "erin": user("approver", "erin", ""),
        "ivan": user("approver", "ivan", "ivan@example.com", is_active=False),
        "frank": user("approver", "frank", "frank@example.com"),
    }
    quant.members.add(w["alice"], w["nomail"])
    quant.approvers.add(w["bob"], w["root"], w["dave"], w["erin"], w["ivan"])
    research.approvers.add(w["frank"])
    w["image"] = VmImage.objects.create(
        name="Ubuntu 22.04", image="quay.io/containerdisks/ubuntu:22.04", os="Ubuntu", login_user="ubuntu"
    )
    node = stored_node("p1", "vm-passthrough", gpu_model="A100 PCIe 40GB", gpu_count=4)
    stored_resource(node, A100, 4, model="A100 PCIe 40GB", pci_device_id="20f1", permitted=True)
    return w


def submit(w: dict[str, Any], requester: str = "alice", **fields: Any) -> VMRequest:
    values: dict[str, Any] = {
        "team": w["quant"],
        "mode": "passthrough",
        "resource_name": A100,
        "vgpu_type": "",
        "gpu_model": "A100 PCIe 40GB",
        "device_count": 2,
        "cpu_cores": 8,
        "memory_gib": 32,
        "image": w["image"],
        "ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq alice@laptop",
        "lease_days": 7,
        "justification": "Fine-tune <llama> & evaluate",
    }
    values.update(fields)
    return approval.submit(RequestSpec(**values), w[requester])


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Any:
    """Run on-commit callbacks (the signal) when the block ends, as a real commit would."""
    return django_capture_on_commit_callbacks


def sent() -> list[tuple[list[str], str]]:
    return [(m.to, str(m.subject)) for m in mail.outbox]


def test_new_request_mails_the_teams_approvers(world: dict[str, Any], on_commit: Any) -> None:
    with on_commit(execute=True):
        req = submit(world)
    assert sent() == [
        (["bob@example.com"], f"New GPU VM request #{req.pk} from Alice Smith (team Quant)"),
        (["root@example.com"], f"New GPU VM request #{req.pk} from Alice Smith (team Quant)"),
    ]
    message = mail.outbox[0]
    assert message.from_email == "GPU Portal <gpu-portal@example.com>"
    assert message.body == (
        f"Alice Smith asks for a GPU VM for team Quant (request #{req.pk}). It waits for your decision.\n"
        "\n"
        f"GPU: {A100} × 2 (passthrough (whole GPU))\n"
        "CPU cores: 8\n"
        "Memory: 32 GiB\n"
        "Image: Ubuntu 22.04\n"
        "Lease: 7 days\n"
        "\n"
        "Justification:\n"
        "Fine-tune <llama> & evaluate\n"
        "\n"
        f"Approve or reject it here: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_new_request_mail_shows_the_ticket(world: dict[str, Any], on_commit: Any) -> None:
    with on_commit(execute=True):
        submit(world, ticket_source="jira", ticket_id="OPS-7", device_count=1, lease_days=1)
    assert "Lease: 1 day\nTicket: jira OPS-7\n" in mail.outbox[0].body


def test_mail_goes_out_only_after_commit(world: dict[str, Any], on_commit: Any) -> None:
    with on_commit(execute=False) as callbacks:
        submit(world)
    assert mail.outbox == []
    for callback in callbacks:
        callback()
    assert len(mail.outbox) == 2


def test_no_approver_with_an_email_mails_the_admins(world: dict[str, Any], on_commit: Any) -> None:
    # erin may decide but has no address, dave has an address but not the permission
    world["quant"].approvers.set([world["erin"], world["dave"]])
    with on_commit(execute=True):
        req = submit(world)
    assert sent() == [(["root@example.com"], f"New GPU VM request #{req.pk} from Alice Smith (team Quant)")]
    assert VMRequest.objects.get(pk=req.pk).status == "submitted"


# --- who is told of a new request: only those who can act (policy.decision_for "approve") -------


def test_the_only_approvers_own_request_goes_to_the_admins_not_to_them(
    world: dict[str, Any], on_commit: Any
) -> None:
    # Reproduction: bob, the team's only approver, filed a request; the "waits for your decision"
    # mail went to bob alone, who may not decide it.
    world["quant"].approvers.set([world["bob"]])
    world["quant"].members.add(world["bob"])
    with on_commit(execute=True):
        req = submit(world, "bob")
    assert sent() == [(["root@example.com"], f"New GPU VM request #{req.pk} from Bob Jones (team Quant)")]
    assert [u.username for u in notifications.decider_recipients(req)] == ["root"]


def test_an_approvers_own_request_goes_to_the_other_approvers(world: dict[str, Any], on_commit: Any) -> None:
    with on_commit(execute=True):
        req = submit(world, "bob")
    # bob is left out (self-approval); root is a team approver here and may decide it
    assert sent() == [(["root@example.com"], f"New GPU VM request #{req.pk} from Bob Jones (team Quant)")]


def test_an_admins_own_request_is_not_mailed_to_them(world: dict[str, Any], on_commit: Any) -> None:
    world["quant"].approvers.set([world["root"]])
    with on_commit(execute=True):
        req = submit(world, "root")
    assert (sent(), notifications.decider_recipients(req)) == ([], [])


def test_with_self_approval_allowed_the_only_approver_is_told(
    world: dict[str, Any], on_commit: Any, settings: Any
) -> None:
    settings.PORTAL_ALLOW_SELF_APPROVAL = True
    world["quant"].approvers.set([world["bob"]])
    with on_commit(execute=True):
        req = submit(world, "bob")
    assert sent() == [(["bob@example.com"], f"New GPU VM request #{req.pk} from Bob Jones (team Quant)")]


def test_every_recipient_can_approve_per_the_policy(world: dict[str, Any], on_commit: Any) -> None:
    from vmrequests import policy

    with on_commit(execute=True):
        req = submit(world)
    recipients = notifications.decider_recipients(req)
    assert [u.username for u in recipients] == ["bob", "root"]
    assert all(policy.decision_for(u, req, "approve") for u in recipients)
    refused = [u.username for u in (world["dave"], world["alice"], world["frank"], world["ivan"])]
    assert [u for u in refused if policy.decision_for(world[u], req, "approve")] == []


def test_approved_mail(world: dict[str, Any], on_commit: Any) -> None:
    req = submit(world)
    with on_commit(execute=True):
        approval.approve(req, world["bob"], "Enjoy; release it when done.")
    assert sent() == [(["alice@example.com"], f"Your GPU VM request #{req.pk} was approved")]
    assert mail.outbox[0].body == (
        f"Your GPU VM request #{req.pk} ({A100} × 2) was approved by Bob Jones.\n"
        "\n"
        "Note: Enjoy; release it when done.\n"
        "\n"
        f"The GPU devices are reserved for you. The VM alice-vm-{req.pk} is being created in namespace "
        "team-quant; you will get another email when it runs.\n"
        "\n"
        f"Follow it here: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_auto_approved_mail(world: dict[str, Any], on_commit: Any) -> None:
    AutoApprovalRule.objects.create(team=world["quant"], mode="passthrough", max_devices=2)
    with on_commit(execute=True):
        req = submit(world)
    assert VMRequest.objects.get(pk=req.pk).status == "approved"
    # Approved by the rule before the "submitted" signal: approvers are not asked to decide.
    assert [m.to for m in mail.outbox] == [["alice@example.com"]]
    assert mail.outbox[0].subject == f"Your GPU VM request #{req.pk} was approved"
    assert mail.outbox[0].body.startswith(
        f"Your GPU VM request #{req.pk} ({A100} × 2) was approved automatically by your team's policy.\n\n"
        "Note: Auto-approved by rule: passthrough (whole GPU) up to 2 device(s)\n\nThe GPU devices"
    )


def test_rejected_mail(world: dict[str, Any], on_commit: Any) -> None:
    req = submit(world)
    with on_commit(execute=True):
        approval.reject(req, world["bob"], "Use the shared cluster.")
    assert sent() == [(["alice@example.com"], f"Your GPU VM request #{req.pk} was rejected")]
    assert mail.outbox[0].body == (
        f"Your GPU VM request #{req.pk} ({A100} × 2) was rejected by Bob Jones.\n"
        "\n"
        "Reason: Use the shared cluster.\n"
        "\n"
        f"Details: https://gpu.example.com/requests/{req.pk}/\n"
    )


def provisioning(w: dict[str, Any], requester: str = "alice") -> VMRequest:
    req = submit(w, requester)
    approval.approve(req, w["bob"])
    req.start_provisioning()
    return req


def test_running_mail(world: dict[str, Any], on_commit: Any) -> None:
    req = provisioning(world)
    with on_commit(execute=True):
        req.mark_running("p1", "10.244.1.7")
    assert sent() == [(["alice@example.com"], f"Your GPU VM alice-vm-{req.pk} is running")]
    assert mail.outbox[0].body == (
        f"Your GPU VM alice-vm-{req.pk} (request #{req.pk}) is running.\n"
        "\n"
        "Node: p1\n"
        "IP address: 10.244.1.7\n"
        "Namespace: team-quant\n"
        "Lease end: 2026-12-08 09:00 UTC\n"
        "\n"
        "Log in with the SSH key you gave:\n"
        f"    virtctl ssh ubuntu@vmi/alice-vm-{req.pk} -n team-quant\n"
        "\n"
        f"Details: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_running_mail_without_an_ip(world: dict[str, Any], on_commit: Any) -> None:
    req = provisioning(world)
    with on_commit(execute=True):
        req.mark_running("p1", None)
    assert "IP address: not reported yet\n" in mail.outbox[0].body


def test_failed_mail(world: dict[str, Any], on_commit: Any) -> None:
    req = provisioning(world)
    with on_commit(execute=True):
        req.mark_failed("No node could schedule the VM: 0/3 nodes are available: 3 Insufficient GPUs.")
    assert sent() == [(["alice@example.com"], f"Your GPU VM request #{req.pk} failed")]
    assert mail.outbox[0].body == (
        f"Your GPU VM alice-vm-{req.pk} (request #{req.pk}) failed.\n"
        "\n"
        "Reason: No node could schedule the VM: 0/3 nodes are available: 3 Insufficient GPUs.\n"
        "\n"
        f"Its GPU devices are released. Details: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_deleted_mail(world: dict[str, Any], on_commit: Any) -> None:
    req = provisioning(world)
    req.mark_running("p1", "10.244.1.7")
    mail.outbox.clear()
    with on_commit(execute=True):
        req.start_deletion("expired")
    assert mail.outbox == []
    with on_commit(execute=True):
        VMRequest.objects.get(pk=req.pk).mark_deleted()
    assert sent() == [(["alice@example.com"], f"Your GPU VM alice-vm-{req.pk} was deleted")]
    assert mail.outbox[0].body == (
        f"Your GPU VM alice-vm-{req.pk} (request #{req.pk}) was deleted.\n"
        "\n"
        "Reason: lease expired\n"
        "\n"
        f"Its GPU devices are released. Details: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_no_mail_for_cancel_and_start_provisioning(world: dict[str, Any], on_commit: Any) -> None:
    req = submit(world)
    approval.approve(req, world["bob"])
    other = submit(world)
    with on_commit(execute=True):
        req.start_provisioning()
        approval.cancel(other, world["alice"])
    assert mail.outbox == []


def test_requester_without_email_gets_nothing(world: dict[str, Any], on_commit: Any) -> None:
    req = provisioning(world, "nomail")
    with on_commit(execute=True):
        req.mark_running("p1", "10.244.1.7")
        req.mark_failed("node lost")
    assert mail.outbox == []
    assert notifications.send_lease_warning(req) is False


def test_lease_warning(world: dict[str, Any]) -> None:
    req = provisioning(world)
    req.mark_running("p1", "10.244.1.7")
    mail.outbox.clear()
    assert notifications.send_lease_warning(req) is True
    assert sent() == [
        (["alice@example.com"], f"The lease of your GPU VM alice-vm-{req.pk} ends on 2026-12-08 09:00 UTC")
    ]
    assert mail.outbox[0].body == (
        f"The lease of your GPU VM alice-vm-{req.pk} (request #{req.pk}) ends on 2026-12-08 09:00 UTC. "
        "The VM will then be deleted, with everything on its disks.\n"
        "\n"
        "Copy what you need off the VM before then, or release it early: "
        f"https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_a_failing_mail_backend_never_breaks_a_transition(
    world: dict[str, Any], on_commit: Any, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.MAILERS = {"default": {"BACKEND": f"{__name__}.BrokenBackend"}}
    caplog.set_level(logging.ERROR, logger="vmrequests.notifications")
    with on_commit(execute=True):
        req = submit(world)
    with on_commit(execute=True):
        approval.approve(req, world["bob"])
    req.refresh_from_db()
    assert req.status == "approved"
    assert list(req.events.values_list("action", flat=True)) == ["submit", "approve"]
    assert notifications.send_lease_warning(req) is False
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("vmrequests.notifications", "ERROR", f"email for request #{req.pk} (submit) not sent"),
        ("vmrequests.notifications", "ERROR", f"email for request #{req.pk} (approve) not sent"),
        ("vmrequests.notifications", "ERROR", f"lease warning for request #{req.pk} not sent"),
    ]
    assert all(r.exc_info is not None and r.exc_info[0] is ConnectionRefusedError for r in caplog.records)
    assert mail.outbox == []


@pytest.mark.django_db(transaction=True)
def test_no_decision_mail_for_an_auto_approved_request_outside_a_transaction(world: dict[str, Any]) -> None:
    # Reproduction: in autocommit (a view without ATOMIC_REQUESTS) the "submitted" signal ran as
    # soon as submit's own transaction closed, before the rule approved the request, and every
    # approver was asked to decide a request that was already approved.
    AutoApprovalRule.objects.create(team=world["quant"], mode="passthrough", max_devices=2)
    req = submit(world)
    assert VMRequest.objects.get(pk=req.pk).status == "approved"
    assert sent() == [(["alice@example.com"], f"Your GPU VM request #{req.pk} was approved")]


def test_terminate_mail_carries_the_approvers_reason(
    world: dict[str, Any], on_commit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vmrequests import tasks

    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: None)
    req = provisioning(world)
    req.mark_running("p1", "10.244.1.7")
    with on_commit(execute=True):
        approval.terminate(req, world["bob"], "Over the quarter's GPU budget; ask again in January.")
        VMRequest.objects.get(pk=req.pk).mark_deleted()
    assert sent()[-1] == (["alice@example.com"], f"Your GPU VM alice-vm-{req.pk} was deleted")
    assert mail.outbox[-1].body == (
        f"Your GPU VM alice-vm-{req.pk} (request #{req.pk}) was deleted.\n"
        "\n"
        "Reason: terminated by an approver\n"
        "Terminated by Bob Jones, who wrote:\n"
        "Over the quarter's GPU budget; ask again in January.\n"
        "\n"
        f"Its GPU devices are released. Details: https://gpu.example.com/requests/{req.pk}/\n"
    )


def test_terminate_mail_in_chinese(
    world: dict[str, Any], on_commit: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from vmrequests import tasks

    settings.LANGUAGE_CODE = "zh-hans"
    monkeypatch.setattr(tasks.delete_vmi, "delay", lambda pk: None)
    req = provisioning(world)
    req.mark_running("p1", "10.244.1.7")
    with on_commit(execute=True):
        approval.terminate(req, world["bob"], "预算用完")
        VMRequest.objects.get(pk=req.pk).mark_deleted()
    body = mail.outbox[-1].body
    assert "由 Bob Jones 终止，其理由为：\n预算用完\n" in body
    assert "Terminated" not in body
