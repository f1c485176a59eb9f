"""Ending a lease: delete the VMI of a request in ``deleting``."""

from __future__ import annotations

from django.utils.translation import gettext as _

from vmrequests.choices import VMRequestStatus
from vmrequests.models import TransitionError
from vmrequests.provisioning.outcome import Outcome, _load
from vmrequests.provisioning.ownership import Deletion, delete_own_vmi
from vmrequests.provisioning.reconcile import _reconcile_deleting


def delete_vmi_of(request_id: int) -> Outcome:
    """Delete the VMI of a request in ``deleting``; mark it deleted when already gone.

    A VMI of the request's name that is not the portal's for this request (``ownership``) is
    left alone and the request is marked deleted with a timeline entry saying so.

    Returns:
        ``Outcome`` with action ``deleting`` (delete accepted), ``deleted`` (nothing of ours
        there), ``foreign_left`` (someone else's VMI of that name, untouched), ``skipped`` (not
        ``deleting``) or ``lost``.

    Raises:
        k8s.K8sTransientError: the API server is unreachable (the task retries).
    """
    req = _load(request_id)
    if req.status != VMRequestStatus.DELETING:
        return Outcome(req.pk, "skipped", req.status)
    done = delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name)
    if done is Deletion.GONE:
        return _reconcile_deleting(req, None)
    if done is Deletion.FOREIGN:
        message = _(
            "The request had no VirtualMachineInstance. The VirtualMachineInstance %(ns)s/%(name)s was "
            "not created by the portal for this request and was left alone."
        ) % {"ns": req.vmi_namespace, "name": req.vmi_name}
        try:
            req.mark_deleted(message=message)
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
        return Outcome(req.pk, "foreign_left")
    return Outcome(req.pk, "deleting")
