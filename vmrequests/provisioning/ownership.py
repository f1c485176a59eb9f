"""Which VirtualMachineInstances are the portal's, and the one way the portal deletes one.

A VMI is the portal's for a request when it carries both labels the portal writes on every VMI
it creates (``portal/labels.py``): ``app.kubernetes.io/managed-by=gpu-vm-portal`` and
``gpu-vm-portal.io/request-id=<the request's primary key>``. Anything else in a team namespace,
e.g. a VMI a person made by hand with the same name, is never deleted (issue #14 finding 1).
The delete itself carries the checked object's uid as a precondition, so a VMI replaced between
the read and the delete is not touched either.
"""

from __future__ import annotations

from enum import StrEnum

from portal import k8s
from portal.labels import MANAGED_BY, MANAGED_BY_VALUE, REQUEST_ID
from vmrequests.provisioning.outcome import log


class Deletion(StrEnum):
    """What :func:`delete_own_vmi` did."""

    #: The delete of the request's own VMI was accepted (KubeVirt finalises it).
    DELETED = "deleted"
    #: There is no VMI of that name.
    GONE = "gone"
    #: A VMI of that name exists but is not this request's: left alone.
    FOREIGN = "foreign"


def is_own(request_id: int, vmi: k8s.VmiInfo) -> bool:
    """True when ``vmi`` carries the portal's managed-by label and ``request-id=<request_id>``."""
    labels = vmi.labels
    return labels.get(MANAGED_BY) == MANAGED_BY_VALUE and labels.get(REQUEST_ID) == str(request_id)


def delete_own_vmi(request_id: int, namespace: str, name: str, vmi: k8s.VmiInfo | None = None) -> Deletion:
    """Delete the VMI ``namespace/name`` only if it is request ``request_id``'s.

    Args:
        request_id: the ``VMRequest`` primary key the VMI must be labelled with.
        namespace, name: where the request's VMI would be (``vmi_namespace``, ``vmi_name``).
        vmi: the VMI as just read (e.g. from reconcile's LIST); None: read it here (one GET).

    Returns:
        :class:`Deletion`: ``DELETED``, ``GONE`` (nothing of that name) or ``FOREIGN`` (not the
        portal's for this request; nothing sent).

    Raises:
        k8s.K8sTransientError: the API server is unreachable, or the object was replaced between
            the read and the delete (uid precondition failed): check again.
        k8s.K8sForbidden: the worker may not read or delete VMIs there.
    """
    if vmi is None:
        vmi = k8s.get_vmi(namespace, name)
        if vmi is None:
            return Deletion.GONE
    if not is_own(request_id, vmi):
        log.warning(
            "left a VMI alone that is not the request's",
            extra={"request_id": request_id, "vmi": f"{namespace}/{name}", "labels": dict(vmi.labels)},
        )
        return Deletion.FOREIGN
    try:
        existed = k8s.delete_vmi(namespace, name, vmi.uid)
    except k8s.K8sConflict as exc:
        raise k8s.K8sTransientError(f"VMI {namespace}/{name} was replaced meanwhile; checking again") from exc
    return Deletion.DELETED if existed else Deletion.GONE


def foreign_vmi_named(namespace: str, name: str) -> bool:
    """True when a VMI ``namespace/name`` exists that the portal did not create (no managed-by
    label): a request may not take that name (validation's name rule asks this).

    Raises:
        k8s.K8sError: the cluster could not be asked (not configured, unreachable, forbidden);
            the caller refuses the name rather than guess.
    """
    vmi = k8s.get_vmi(namespace, name)
    return vmi is not None and vmi.labels.get(MANAGED_BY) != MANAGED_BY_VALUE
