"""Create an API token for a user and print it once (it is stored hashed and cannot be shown again).

Usage: ``manage.py create_api_token USERNAME [--days N] [--name NAME] [--scope read|write|approve ...]``.
``--scope`` repeats (default ``read`` only); ``--name`` defaults to ``cli``. The token
authenticates REST API calls as that user (``Authorization: Token <token>``) with those scopes
until it expires. Users revoke their tokens at ``/account/tokens/``, admins in the admin
(Portal › API tokens).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.models import ApiToken, TokenScope, max_token_days


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
        parser.add_argument("--name", default="cli", help='a label for the token (default "cli")')
        parser.add_argument(
            "--scope",
            action="append",
            choices=TokenScope.values,
            dest="scopes",
            help="a scope to grant; repeat for several (default: read)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get(username=options["username"], is_active=True)
        except user_model.DoesNotExist:
            raise CommandError(f"no active user {options['username']!r}") from None
        days = settings.PORTAL_API_TOKEN_TTL_DAYS if options["days"] is None else options["days"]
        if not 1 <= days <= max_token_days():
            raise CommandError(f"--days must be between 1 and {max_token_days()} (PORTAL_API_TOKEN_MAX_DAYS)")
        name = str(options["name"]).strip()
        if not name or len(name) > 100:
            raise CommandError("--name must be 1 to 100 characters")
        scopes = options["scopes"] or [TokenScope.READ.value]
        try:
            instance, token = ApiToken.issue(user, name, scopes, days)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"token for {user.get_username()} (expires {instance.expiry:%Y-%m-%d %H:%M} UTC):")
        self.stdout.write(token)
