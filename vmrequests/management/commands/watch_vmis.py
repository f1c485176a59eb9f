"""Watch the portal's VirtualMachineInstances and reconcile their requests as they change.

Usage: ``manage.py watch_vmis`` (one process; ``make run`` and docker-compose start it). Runs
until SIGINT/SIGTERM. See ``vmrequests.provisioning.follow_vmis``.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand

from vmrequests.provisioning import follow_vmis


class Command(BaseCommand):
    help = "Watch the portal's VMIs and reconcile each change at once (Ctrl-C stops)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--watch-seconds",
            type=int,
            default=10,
            help="server-side watch timeout (s); also bounds how long a stop takes",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()

        def _stop(signum: int, frame: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        self.stdout.write(
            "watching VirtualMachineInstances labelled app.kubernetes.io/managed-by=gpu-vm-portal"
        )
        follow_vmis(stop, watch_seconds=options["watch_seconds"])
