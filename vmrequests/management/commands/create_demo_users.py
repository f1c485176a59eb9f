"""Create (or reset) the demo users ``analyst``, ``approver`` and ``admin`` and print their passwords.

Used by ``make run`` only. Each run sets fresh random passwords, so the printed ones are
always the valid ones. Refused when ``PORTAL_ENV=production``.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from vmrequests.roles import ANALYSTS_GROUP, APPROVERS_GROUP

DEMO_USERS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("analyst", (ANALYSTS_GROUP,), False),
    ("approver", (ANALYSTS_GROUP, APPROVERS_GROUP), False),
    ("admin", (), True),
)


class Command(BaseCommand):
    help = "Create or reset the demo users (analyst, approver, admin) with new random passwords."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--password",
            help="use this password for all three instead of random ones (e.g. for screenshots)",
        )

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        if settings.PRODUCTION:
            raise CommandError("demo users are not created when PORTAL_ENV=production")
        user_model = get_user_model()
        lines = []
        for username, groups, superuser in DEMO_USERS:
            password = options["password"] or secrets.token_urlsafe(12)
            user, _ = user_model.objects.get_or_create(username=username)
            user.is_staff = superuser
            user.is_superuser = superuser
            user.email = f"{username}@example.com"
            user.set_password(password)
            user.save()
            user.groups.set(Group.objects.filter(name__in=groups))
            lines.append(f"  {username:<9} {password}")
        self.stdout.write("Demo users (user / password):\n" + "\n".join(lines))
