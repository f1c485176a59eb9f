"""Create an API token for a user and print it once (it is stored hashed and cannot be shown again).

Usage: ``manage.py create_api_token USERNAME [--days N]``. The token authenticates REST API calls as
that user (``Authorization: Token <token>``) until it expires. Revoke tokens in the admin
(Knox › Auth tokens) or by deleting the user's tokens.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from knox.models import AuthToken


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it once."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="validity in days (default PORTAL_API_TOKEN_TTL_DAYS)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get(username=options["username"], is_active=True)
        except user_model.DoesNotExist:
            raise CommandError(f"no active user {options['username']!r}") from None
        days = options["days"] or settings.PORTAL_API_TOKEN_TTL_DAYS
        if not 1 <= days <= 3650:
            raise CommandError("--days must be between 1 and 3650")
        instance, token = AuthToken.objects.create(user=user, expiry=timedelta(days=days))
        self.stdout.write(f"token for {user.get_username()} (expires {instance.expiry:%Y-%m-%d %H:%M} UTC):")
        self.stdout.write(token)
