"""``provision``: make an approved request real, (re-profile the node,) create the VMI."""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext as _

from gpuinventory.models import Reservation
from gpuinventory.reservations import reservation_of
from portal import k8s
from vmrequests.choices import EventAction, VMRequestStatus
from vmrequests.models import TransitionError, VMRequest
from vmrequests.provisioning.manifest import vmi_manifest
from vmrequests.provisioning.outcome import Outcome, Wait, _fail, _load
from vmrequests.provisioning.ownership import delete_own_vmi, is_own
from vmrequests.provisioning.reprofile import _reprofile, _reprofile_refused


def provision(request_id: int) -> Outcome:
    """Make an approved request real: (re-profile,) create the VMI. Idempotent.

    Returns:
        ``Outcome`` with action ``created``, ``adopted``, ``failed``, ``lost`` (another worker or
        person moved the request) or ``skipped`` (not approved/provisioning).

    Raises:
        Wait: the vGPU Device Manager is still working; run again after ``countdown``.
        k8s.K8sTransientError: the API server is unreachable or overloaded; retry with backoff.
    """
    req = _load(request_id)
    if req.status == VMRequestStatus.APPROVED:
        try:
            req.start_provisioning()
        except TransitionError as exc:
            return Outcome(req.pk, "lost", str(exc))
    elif req.status != VMRequestStatus.PROVISIONING:
        return Outcome(req.pk, "skipped", req.status)
    if req.vmi_created_at is not None:
        return Outcome(req.pk, "skipped", "VMI already created")
    reservation = reservation_of(req.holder)
    if reservation is None:
        return _fail(
            req, _("The devices reserved at approval are gone; an approver must approve the request again.")
        )
    if reservation.reprofile_config and not reservation.reprofile_done:
        try:
            outcome = _reprofile(req, reservation)
        except Wait:
            # Show activity, so reconcile does not enqueue a second worker for a long re-profile.
            VMRequest.objects.filter(pk=req.pk).update(updated=timezone.now())
            raise
        except k8s.K8sTransientError:
            raise
        except k8s.K8sError as exc:
            return _reprofile_refused(req, reservation, exc)
        if outcome is not None:
            return outcome
    return _create_vmi(req, reservation)


def _create_vmi(req: VMRequest, res: Reservation) -> Outcome:
    resource = res.resource_name or req.resource_name
    # Always pinned to the reserved node: the reservation promised devices THERE, and an unpinned
    # VMI could land on a node the capacity service still counts as free (or one promised to a
    # re-profile for another request).
    pin = res.node.name
    body = vmi_manifest(req, resource, pin)
    try:
        k8s.create_vmi(req.vmi_namespace, body)
        action, message = "created", _("Created VirtualMachineInstance %(ns)s/%(name)s.")
    except k8s.K8sConflict:
        refused = _adopt(req)
        if refused is not None:
            return refused
        action, message = (
            "adopted",
            _("VirtualMachineInstance %(ns)s/%(name)s already existed for this request; adopted."),
        )
    except k8s.K8sNotFound as exc:
        return _fail(
            req,
            _(
                "Namespace %(ns)s does not exist in the cluster (or KubeVirt is not installed). An admin must "
                "create it or correct the team's namespace; then an approver can retry."
            )
            % {"ns": req.vmi_namespace},
            data={"error": str(exc), "kind": type(exc).__name__},
        )
    except (k8s.K8sInvalid, k8s.K8sForbidden) as exc:
        return _fail(
            req,
            _("Kubernetes refused the VirtualMachineInstance: %(error)s") % {"error": exc},
            data={"error": str(exc), "kind": type(exc).__name__},
        )
    now = timezone.now()
    won = VMRequest.objects.filter(pk=req.pk, status=VMRequestStatus.PROVISIONING).update(vmi_created_at=now)
    if not won:
        # Released, terminated or failed while the VMI was being created: do not leave it behind.
        delete_own_vmi(req.pk, req.vmi_namespace, req.vmi_name)
        return Outcome(req.pk, "lost", "the request moved on while its VMI was created; VMI deleted")
    req.vmi_created_at = now
    req.record(
        EventAction.PROGRESS,
        message % {"ns": req.vmi_namespace, "name": req.vmi_name},
        actor_label="worker",
        data={"vmi": f"{req.vmi_namespace}/{req.vmi_name}", "resource": resource, "pinned_to": pin},
    )
    return Outcome(req.pk, action)


def _adopt(req: VMRequest) -> Outcome | None:
    """A VMI of the request's name exists (409): None when it is this request's (adopt it), the
    failed outcome when it is someone else's.

    Raises:
        k8s.K8sTransientError: it vanished meanwhile, or it is this request's previous VMI still
            being deleted: retry.
    """
    existing = k8s.get_vmi(req.vmi_namespace, req.vmi_name)
    if existing is None:
        raise k8s.K8sTransientError("the conflicting VMI disappeared; retrying") from None
    if is_own(req.pk, existing) and existing.deleting:
        # Ours, but from before a retry and still being finalised: adopting it would follow a
        # VMI about to vanish. Create ours once it is gone.
        raise k8s.K8sTransientError(
            "the previous VMI of this request is still being deleted; retrying"
        ) from None
    if not is_own(req.pk, existing):
        return _fail(
            req,
            _(
                "A VirtualMachineInstance named %(name)s already exists in namespace %(ns)s and was not "
                "created by the portal for this request. An approver must remove or rename it."
            )
            % {"name": req.vmi_name, "ns": req.vmi_namespace},
        )
    return None
