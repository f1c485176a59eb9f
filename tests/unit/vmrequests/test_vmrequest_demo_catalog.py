"""``create_demo_catalog``: demo teams, images, quotas and the auto-approval rule."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from vmrequests.models import AutoApprovalRule, GpuQuota, Team, VmImage

pytestmark = pytest.mark.django_db


def test_creates_teams_images_quotas_and_is_idempotent() -> None:
    call_command("create_demo_users", password="demo-Password-1")
    call_command("create_demo_catalog")
    call_command("create_demo_catalog")
    assert list(Team.objects.values_list("slug", "namespace", "default_lease_days", "max_lease_days")) == [
        ("quant", "team-quant", 7, 30),
        ("research", "team-research", 14, 60),
    ]
    quant = Team.objects.get(slug="quant")
    assert sorted(quant.members.values_list("username", flat=True)) == ["analyst", "approver"]
    assert list(quant.approvers.values_list("username", flat=True)) == ["approver"]
    assert sorted(GpuQuota.objects.filter(team=quant).values_list("mode", "gpu", "max_devices")) == [
        ("", "", 4),
        ("vgpu", "", 3),
    ]
    assert VmImage.objects.count() == 3
    assert VmImage.objects.get(name="Ubuntu 22.04").image == "quay.io/containerdisks/ubuntu:22.04"
    rule = AutoApprovalRule.objects.get()
    assert (rule.team.slug, rule.mode, rule.max_devices, rule.max_vgpu_framebuffer_gb) == (
        "research",
        "vgpu",
        1,
        Decimal("8.0"),
    )


def test_refused_in_production(settings: object) -> None:
    settings.PRODUCTION = True  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="PORTAL_ENV=production"):
        call_command("create_demo_catalog")
    assert Team.objects.count() == 0
