"""Ending a lease: delete the VMI of a request in ``deleting``."""

from __future__ import annotations

from portal import k8s
from vmrequests.choices import VMRequestStatus
from vmrequests.provisioning.outcome import Outcome, _load
from vmrequests.provisioning.reconcile import _reconcile_deleting


def delete_vmi_of(request_id: int) -> Outcome:
    """Delete the VMI of a request in ``deleting``; mark it deleted when already gone."""
    req = _load(request_id)
    if req.status != VMRequestStatus.DELETING:
        return Outcome(req.pk, "skipped", req.status)
    existed = k8s.delete_vmi(req.vmi_namespace, req.vmi_name)
    if not existed:
        return _reconcile_deleting(req, None)
    return Outcome(req.pk, "deleting")
