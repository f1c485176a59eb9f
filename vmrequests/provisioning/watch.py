"""Following the portal's VMIs with a watch (``manage.py watch_vmis``): each change is reconciled as
it happens."""

from __future__ import annotations

import threading

from portal import k8s
from portal.labels import MANAGED_SELECTOR
from portal.labels import REQUEST_ID as REQUEST_LABEL
from vmrequests.models import VMRequest
from vmrequests.provisioning.outcome import Outcome, log
from vmrequests.provisioning.reconcile import FOLLOWED, reconcile, reconcile_request


def reconcile_vmi_event(event: k8s.VmiEvent) -> Outcome | None:
    """Reconcile the request a watched VMI belongs to (its request-ID label), at once.

    A ``DELETED`` event reconciles with "no VMI". Events of VMIs whose request is not live (or
    whose name does not match the request's) are ignored (None).
    """
    raw = event.vmi.labels.get(REQUEST_LABEL, "")
    if not raw.isdigit():
        return None
    req = (
        VMRequest.objects.filter(
            pk=int(raw), vmi_namespace=event.vmi.namespace, vmi_name=event.vmi.name, status__in=FOLLOWED
        )
        .select_related("image", "team", "requester")
        .first()
    )
    if req is None:
        return None
    return reconcile_request(req, None if event.type == "DELETED" else event.vmi)


def follow_vmis(stop: threading.Event, watch_seconds: int = 60) -> None:
    """Watch the portal's VMIs and reconcile each change as it happens (``manage.py watch_vmis``).

    The beat-driven ``reconcile`` stays for what time alone changes (timeouts, leases, requeue);
    this loop removes its polling delay from "VMI Running → request running". Each round: LIST
    (and one full ``reconcile``), then WATCH from the list's ``resourceVersion`` until the
    server-side timeout, continuing from the last event's version; a broken or expired watch
    starts a new round after a short backoff. Ends when ``stop`` is set (checked between events
    and at least every ``watch_seconds``).
    """
    selector = MANAGED_SELECTOR
    backoff = 1.0
    while not stop.is_set():
        try:
            _vmis, version = k8s.list_vmis_labelled_with_version(selector)
            reconcile()
            backoff = 1.0
            while not stop.is_set():
                for event in k8s.watch_vmis(selector, version, watch_seconds):
                    version = event.vmi.resource_version or version
                    try:
                        reconcile_vmi_event(event)
                    except k8s.K8sTransientError:
                        raise
                    except k8s.K8sError as exc:
                        log.error(
                            "reconcile of a VMI event failed",
                            extra={"vmi": event.vmi.name, "error": str(exc)},
                        )
                    if stop.is_set():
                        return
        except k8s.K8sError as exc:
            log.warning("VMI watch restarting in %.0f s: %s", backoff, exc)
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)
