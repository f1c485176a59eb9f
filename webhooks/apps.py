from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WebhooksConfig(AppConfig):
    """Outbound webhooks: admin-managed endpoints, events, deliveries and their attempt log."""

    name = "webhooks"
    verbose_name = _("Webhooks")

    def ready(self) -> None:
        """Connect the receivers of ``request_transitioned`` and ``sync_failed`` (both sent after
        the change is saved; neither receiver ever raises into the sender)."""
        from gpuinventory.models import SyncRun
        from gpuinventory.signals import sync_failed
        from vmrequests.models import VMRequest, request_transitioned
        from webhooks import events

        request_transitioned.connect(
            events.on_request_transitioned, sender=VMRequest, dispatch_uid="webhooks.request_transitioned"
        )
        sync_failed.connect(events.on_sync_failed, sender=SyncRun, dispatch_uid="webhooks.sync_failed")
