"""Teams, quotas, the image catalog, VM requests and their timeline: one job per module.

- ``limits``: the size bounds and the DNS-1123 label rule the models share;
- ``teams``: ``Team`` and its ``GpuQuota`` rows;
- ``images``: ``VmImage``, the image catalog;
- ``rules``: ``AutoApprovalRule``;
- ``request``: ``VMRequest`` and its state machine (``_transition``, ``TransitionError``, the
  ``request_transitioned`` signal), ``vmi_name_for``;
- ``events``: ``VMRequestEvent``, the append-only timeline;
- ``idempotency``: ``IdempotencyKey`` of the API's create call.

Every name is imported here, so ``from vmrequests.models import X`` and Django's model discovery
(the app label ``vmrequests``, table names ``vmrequests_<model>``) stay as they were.
"""

from vmrequests.models.events import VMRequestEvent
from vmrequests.models.idempotency import IdempotencyKey
from vmrequests.models.images import VmImage
from vmrequests.models.limits import (
    DNS1123_LABEL,
    MAX_CPU_CORES,
    MAX_DEVICES,
    MAX_JUSTIFICATION_LENGTH,
    MAX_MEMORY_GIB,
    dns1123_label_validator,
)
from vmrequests.models.request import (
    PolicyRule,
    TransitionError,
    VMRequest,
    VMRequestQuerySet,
    request_transitioned,
    vmi_name_for,
)
from vmrequests.models.rules import AutoApprovalRule
from vmrequests.models.teams import GpuQuota, Team

__all__ = [
    "DNS1123_LABEL",
    "MAX_CPU_CORES",
    "MAX_DEVICES",
    "MAX_JUSTIFICATION_LENGTH",
    "MAX_MEMORY_GIB",
    "AutoApprovalRule",
    "GpuQuota",
    "IdempotencyKey",
    "PolicyRule",
    "Team",
    "TransitionError",
    "VMRequest",
    "VMRequestEvent",
    "VMRequestQuerySet",
    "VmImage",
    "dns1123_label_validator",
    "request_transitioned",
    "vmi_name_for",
]
