"""Provisioning: turn an approved request into a running VMI, re-profile vGPU nodes safely,
follow the VMI, end leases. Celery tasks (``vmrequests/tasks.py``) are thin wrappers over these.

Every step is idempotent, so a redelivered message (``acks_late``; a worker killed mid-task) or a
retry repeats nothing harmful:

- the VMI name is fixed at submission; "already exists" carrying our request-ID label is adopted;
  without it, it is a conflict reported on the request;
- the re-profile remembers in the ``Reservation`` when the label was patched and what it was, so a
  retry waits instead of patching again;
- status changes are compare-and-swap model methods; a step that loses just stops.

Waiting (for the vGPU Device Manager) never sleeps in a worker: the step raises ``Wait`` and the
task retries itself with a countdown. Transient Kubernetes errors (``K8sTransientError``)
propagate for the task's bounded retry with backoff; permanent ones (403, 404 namespace, 422) fail
the request at once with the API server's message.

Sources: DOMAIN.md §3 (what a vGPU config change does, states pending/success/failed), §5.3
(VMI GPU fields, display off for vGPU), §5.4 (phases, ``PodScheduled=False/Unschedulable``,
``Synchronized=False/FailedCreate``), pitfalls 2, 11, 12, 13.

One job per module: ``outcome`` (``Outcome``, ``Wait``, failing a request), ``manifest`` (the VMI
and its cloud-init), ``reprofile`` (the vGPU config change), ``create`` (``provision``),
``reconcile`` (the beat's reconcile, unschedulable messages, orphans), ``watch`` (the VMI watch
loop) and ``lease`` (deleting the VMI of an ended lease). The public names are re-exported here:
callers and the tasks write ``provisioning.provision(...)``.
"""

from __future__ import annotations

from portal.labels import MANAGED_BY as MANAGED_BY_LABEL
from portal.labels import MANAGED_BY_VALUE as MANAGED_BY
from portal.labels import REQUEST_ID as REQUEST_LABEL
from vmrequests.provisioning.create import provision
from vmrequests.provisioning.lease import delete_vmi_of
from vmrequests.provisioning.manifest import cloud_init_user_data, connect_instructions, vmi_manifest
from vmrequests.provisioning.outcome import Outcome, Wait
from vmrequests.provisioning.reconcile import explain_unschedulable, reconcile, reconcile_request
from vmrequests.provisioning.reprofile import REPROFILE_POLL_SECONDS
from vmrequests.provisioning.watch import follow_vmis, reconcile_vmi_event

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "REPROFILE_POLL_SECONDS",
    "REQUEST_LABEL",
    "Outcome",
    "Wait",
    "cloud_init_user_data",
    "connect_instructions",
    "delete_vmi_of",
    "explain_unschedulable",
    "follow_vmis",
    "provision",
    "reconcile",
    "reconcile_request",
    "reconcile_vmi_event",
    "vmi_manifest",
]
