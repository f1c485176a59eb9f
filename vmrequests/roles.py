"""The portal's roles: Django groups plus one custom permission.

- ``analysts``: may request VMs (every signed-in user may, the group documents intent).
- ``approvers``: hold ``vmrequests.approve_vmrequest`` and decide requests.
- admins: Django superusers.
Both groups and the permission are created by migration ``vmrequests.0001_roles``. What each
role may do to a given request (and why not) is ``vmrequests.policy``, not decided here.
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
