"""``manage.py sync_inventory``: one inventory sync in the foreground."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from gpuinventory.choices import SyncStatus
from gpuinventory.sync import run_sync, summary_line


class Command(BaseCommand):
    """Run one sync; print ``sync ok: ...`` (exit 0), else ``sync failed: <reason>`` /
    ``sync skipped: ...`` on stderr (exit 1)."""

    help = "Read the cluster once and update the GPU inventory (exit code 1 when the sync fails)."

    def handle(self, *args: Any, **options: Any) -> None:
        run = run_sync("command")
        line = summary_line(run)
        if run.status != SyncStatus.SUCCESS:
            raise CommandError(line)
        for warning in run.warnings:
            self.stderr.write(f"warning: {warning.get('code')} {warning.get('params')}")
        self.stdout.write(line)
