"""``/api/v1/me/``: who the caller is, their teams and what they may do.

Teams, roles and the request permissions are this app's, so the view is too (it was
``portal/api/views.py``); ``vmrequests/api/urls.py`` mounts it at the same path and URL name
(``api:me``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.schema import problem_responses
from portal.models import ApiToken
from vmrequests.api.creation import SUBMIT_FOR_OTHERS
from vmrequests.api.serializers import with_caller_roles
from vmrequests.roles import APPROVE_PERMISSION, roles_of
from vmrequests.validation import user_teams

MeSerializer = inline_serializer(
    "Me",
    {
        "username": serializers.CharField(),
        "full_name": serializers.CharField(),
        "email": serializers.CharField(),
        "roles": serializers.ListField(child=serializers.CharField()),
        "teams": serializers.ListField(
            child=inline_serializer(
                "MeTeam",
                {
                    "slug": serializers.CharField(),
                    "name": serializers.CharField(),
                    "member": serializers.BooleanField(),
                    "approver": serializers.BooleanField(),
                },
            )
        ),
        "permissions": inline_serializer(
            "MePermissions",
            {
                "request_vms": serializers.BooleanField(),
                "approve": serializers.BooleanField(),
                "submit_for_others": serializers.BooleanField(),
                "admin": serializers.BooleanField(),
            },
        ),
        "token": inline_serializer(
            "MeToken",
            {
                "name": serializers.CharField(),
                "prefix": serializers.CharField(),
                "scopes": serializers.ListField(child=serializers.CharField()),
                "expiry": serializers.DateTimeField(allow_null=True),
            },
            allow_null=True,
        ),
    },
)


class MeView(APIView):
    """The caller: identity, roles (admin/approver/analyst), teams, permissions, and the token
    used (``null`` for a browser session)."""

    @extend_schema(summary="Who am I", responses={200: MeSerializer, **problem_responses(401, 403, 429)})
    def get(self, request: Request) -> Response:
        """Return the caller's profile (see the class docstring)."""
        user: Any = request.user
        teams = []
        for team in with_caller_roles(user_teams(user), user):
            teams.append(
                {
                    "slug": team.slug,
                    "name": team.name,
                    "member": any(m.pk == user.pk for m in team.members.all()),
                    "approver": any(a.pk == user.pk for a in team.approvers.all()),
                }
            )
        token = request.auth if isinstance(request.auth, ApiToken) else None
        return Response(
            {
                "username": user.get_username(),
                "full_name": user.get_full_name(),
                "email": user.email,
                "roles": roles_of(user),
                "teams": teams,
                "permissions": {
                    "request_vms": bool(teams) or user.is_superuser,
                    "approve": user.has_perm(APPROVE_PERMISSION),
                    "submit_for_others": user.has_perm(SUBMIT_FOR_OTHERS),
                    "admin": user.is_superuser,
                },
                "token": (
                    {
                        "name": token.name,
                        "prefix": token.token_key,
                        "scopes": token.scopes,
                        "expiry": token.expiry,
                    }
                    if token is not None
                    else None
                ),
            }
        )
