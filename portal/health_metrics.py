"""The Kubernetes API's state as last seen by ``/readyz``, exported in ``/metrics``.

``/readyz`` no longer fails when the API server does not answer (a blink would take every web pod
out of the Service); it records what it saw here instead, so an alert can fire on
``gpu_portal_kubernetes_api_state{state="fail"} == 1``.

- ``gpu_portal_kubernetes_api_state{state}``: 1 for the state of the last check (``ok``,
  ``fail`` or ``not_configured``), 0 for the other two; all 0 before the first check.
- ``gpu_portal_kubernetes_api_last_check_timestamp_seconds``: Unix time of that check (0 before).
"""

from __future__ import annotations

import time

from prometheus_client import Gauge

STATES = ("ok", "fail", "not_configured")

KUBERNETES_API_STATE = Gauge(
    "gpu_portal_kubernetes_api_state",
    "State of the Kubernetes API at the last /readyz check of this process (1 = current state).",
    ["state"],
)
KUBERNETES_API_LAST_CHECK = Gauge(
    "gpu_portal_kubernetes_api_last_check_timestamp_seconds",
    "Unix time of the last /readyz check of the Kubernetes API in this process.",
)
for _state in STATES:
    KUBERNETES_API_STATE.labels(state=_state).set(0)


def record_kubernetes_state(state: str) -> None:
    """Make ``state`` (one of ``STATES``; anything else counts as ``fail``) the current one."""
    current = state if state in STATES else "fail"
    for name in STATES:
        KUBERNETES_API_STATE.labels(state=name).set(1 if name == current else 0)
    KUBERNETES_API_LAST_CHECK.set(time.time())
