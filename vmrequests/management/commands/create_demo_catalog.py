"""Create (or update) the demo teams, VM images, GPU quotas and an auto-approval rule.

Used by ``make run`` after ``create_demo_users``. Idempotent: running it again updates the same
rows. Refused when ``PORTAL_ENV=production`` (real teams and images are managed in the admin).

Teams match the dev cluster's demo namespaces (devcluster/specs/demo.yaml): ``Quant`` →
``team-quant``, ``Research`` → ``team-research``. The containerDisk images are the public
KubeVirt ``quay.io/containerdisks/*`` images.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from vmrequests.choices import VMMode
from vmrequests.models import AutoApprovalRule, GpuQuota, Team, VmImage

#: (name, containerDisk image, OS, login user, min GiB, default cores, default GiB)
DEMO_IMAGES = (
    ("Ubuntu 22.04", "quay.io/containerdisks/ubuntu:22.04", "Ubuntu 22.04 LTS", "ubuntu", 2, 8, 32),
    ("Fedora 40", "quay.io/containerdisks/fedora:40", "Fedora 40", "fedora", 2, 4, 16),
    ("CentOS Stream 9", "quay.io/containerdisks/centos-stream:9", "CentOS Stream 9", "cloud-user", 2, 4, 16),
)

#: (name, slug, namespace, default lease days, max lease days, quotas [(mode, gpu, max)])
DEMO_TEAMS = (
    ("Quant", "quant", "team-quant", 7, 30, [("", "", 4), (VMMode.VGPU, "", 3)]),
    ("Research", "research", "team-research", 14, 60, [("", "", 6), (VMMode.PASSTHROUGH, "", 3)]),
)


class Command(BaseCommand):
    help = "Create or update the demo teams, images, quotas and auto-approval rule (not in production)."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("the demo catalog is not created when PORTAL_ENV=production")
        users = {
            u.username: u
            for u in get_user_model().objects.filter(username__in=["analyst", "approver", "admin"])
        }
        for name, image, os_name, login, min_gib, cores, gib in DEMO_IMAGES:
            VmImage.objects.update_or_create(
                name=name,
                defaults={
                    "image": image,
                    "os": os_name,
                    "login_user": login,
                    "min_memory_gib": min_gib,
                    "default_cpu_cores": cores,
                    "default_memory_gib": gib,
                    "enabled": True,
                },
            )
        for name, slug, namespace, default_days, max_days, quotas in DEMO_TEAMS:
            team, _ = Team.objects.update_or_create(
                slug=slug,
                defaults={
                    "name": name,
                    "namespace": namespace,
                    "default_lease_days": default_days,
                    "max_lease_days": max_days,
                },
            )
            team.members.add(*[u for key, u in users.items() if key in {"analyst", "approver"}])
            if "approver" in users:
                team.approvers.add(users["approver"])
            for mode, gpu, limit in quotas:
                GpuQuota.objects.update_or_create(
                    team=team, mode=mode, gpu=gpu, defaults={"max_devices": limit}
                )
        research = Team.objects.get(slug="research")
        AutoApprovalRule.objects.update_or_create(
            team=research,
            mode=VMMode.VGPU,
            defaults={
                "max_devices": 1,
                "max_vgpu_framebuffer_gb": Decimal("8"),
                "max_lease_days": 14,
                "enabled": True,
            },
        )
        self.stdout.write(
            f"Demo catalog: {VmImage.objects.count()} images, teams "
            + ", ".join(f"{t.name} ({t.namespace})" for t in Team.objects.order_by("name"))
        )
