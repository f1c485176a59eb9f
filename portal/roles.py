"""The signed-in user's roles as the project's own pages show them, asked of the apps.

Roles are defined by the apps (``vmrequests/roles.py``: admin, approver, analyst). Each app's
``roles`` module (found by :func:`portal.discovery.app_modules`) may offer:

- ``roles_of(user) -> list[str]``: role names in display order;
- ``may_use_approve_scope(user) -> bool``: whether the user may hold an API token with the
  ``approve`` scope.
"""

from __future__ import annotations

from typing import Any

from portal.discovery import app_modules


def roles_of(user: Any) -> list[str]:
    """The role names every app gives ``user``, in app order, without duplicates.

    Returns:
        E.g. ``["admin", "approver"]``; ``[]`` for an anonymous user.
    """
    names: list[str] = []
    for module in app_modules("roles"):
        for role in getattr(module, "roles_of", lambda _user: [])(user):
            if role not in names:
                names.append(role)
    return names


def may_use_approve_scope(user: Any) -> bool:
    """True when an app says ``user`` may hold a token with the ``approve`` scope (vmrequests:
    an approver of some team, or a holder of ``vmrequests.approve_vmrequest``)."""
    if not getattr(user, "is_authenticated", False):
        return False
    return any(
        bool(module.may_use_approve_scope(user))
        for module in app_modules("roles")
        if hasattr(module, "may_use_approve_scope")
    )
