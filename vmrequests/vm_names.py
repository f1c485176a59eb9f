"""The rules for a VM name an analyst chooses (moved out of ``validation.py``, which calls them).

A chosen name is a DNS-1123 label (``models.dns1123_label_validator``) of at most
:data:`MAX_NAME_LENGTH` characters and:

- is not shaped like a generated name (``alice-vm-42``, ``models.vmi_name_for``): ``reserved``;
- is not the VMI name of a live request in the team's namespace: ``name_taken``;
- is not the name of a VMI in that namespace the portal did not create (a hand-made one; issue
  #14 finding 1): ``foreign_vmi``. The cluster is asked through
  ``vmrequests.provisioning.ownership.foreign_vmi_named``; when it cannot be asked the name is
  refused (``cluster_unreachable``): a name that might be someone else's VMI is never accepted.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from portal import k8s
from vmrequests.choices import LIVE_STATES
from vmrequests.models import Team, VMRequest
from vmrequests.provisioning.ownership import foreign_vmi_named

#: Longest VM name an analyst may choose (the VMI name is at most 63 characters).
MAX_NAME_LENGTH = 40
#: Generated VMI names look like ``alice-vm-42`` (``models.vmi_name_for``): reserved.
GENERATED_NAME = re.compile(r"-vm-\d+\Z")


def name_problem(name: str, team: Team | None) -> tuple[str, str] | None:
    """The first rule a well-formed chosen ``name`` breaks in ``team``'s namespace, or None.

    Args:
        name: a DNS-1123 label already checked for shape and length.
        team: the request's team; None (not resolved) checks only the reserved shape.

    Returns:
        ``(code, message)`` with code ``reserved``, ``name_taken``, ``foreign_vmi`` or
        ``cluster_unreachable`` (the message is translated), or None when the name is free.
    """
    if GENERATED_NAME.search(name):
        return "reserved", _("Names ending in -vm-<number> are reserved for generated names; choose another.")
    if team is None:
        return None
    values = {"name": name, "ns": team.namespace}
    live = VMRequest.objects.filter(
        vmi_name=name, vmi_namespace=team.namespace, status__in=sorted(LIVE_STATES)
    )
    if live.exists():
        return "name_taken", _(
            "A VM named %(name)s already exists (or is requested) in namespace %(ns)s."
        ) % values
    try:
        foreign = foreign_vmi_named(team.namespace, name)
    except k8s.K8sError:
        text = _(
            "The cluster could not be asked whether namespace %(ns)s already has a VirtualMachineInstance "
            "named %(name)s; try again in a minute or leave the name empty."
        )
        return "cluster_unreachable", text % values
    if foreign:
        text = _(
            "Namespace %(ns)s already has a VirtualMachineInstance named %(name)s that the portal did not "
            "create; choose another name."
        )
        return "foreign_vmi", text % values
    return None
