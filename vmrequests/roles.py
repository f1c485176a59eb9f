"""The portal's roles: Django groups plus one custom permission.

- ``analysts``: may request VMs (every signed-in user may, the group documents intent).
- ``approvers``: hold ``vmrequests.approve_vmrequest`` and decide requests.
- admins: Django superusers.
Both groups and the permission are created by migration ``vmrequests.0001_roles``. What each
role may do to a given request (and why not) is ``vmrequests.policy``, not decided here.
The project's pages (home, API token form) ask ``roles_of`` and ``may_use_approve_scope``
through ``portal.roles``, which finds this module by its name.
"""

from __future__ import annotations

from typing import Any

ANALYSTS_GROUP = "analysts"
APPROVERS_GROUP = "approvers"
APPROVE_PERMISSION = "vmrequests.approve_vmrequest"


def roles_of(user: Any) -> list[str]:
    """Return the role names of ``user`` in display order: ``admin``, ``approver``, ``analyst``.

    Args:
        user: a Django user (anonymous users have no roles).
    """
    if not getattr(user, "is_authenticated", False):
        return []
    roles = []
    if user.is_superuser:
        roles.append("admin")
    if user.has_perm(APPROVE_PERMISSION):
        roles.append("approver")
    if user.groups.filter(name=ANALYSTS_GROUP).exists():
        roles.append("analyst")
    return roles


def may_use_approve_scope(user: Any) -> bool:
    """True when ``user`` may hold an API token with the ``approve`` scope: an approver of some
    team (``Team.approvers``) or a holder of ``vmrequests.approve_vmrequest``. The token form asks
    it through ``portal.roles``."""
    if not getattr(user, "is_authenticated", False):
        return False
    return bool(user.has_perm(APPROVE_PERMISSION) or user.approver_of.exists())
