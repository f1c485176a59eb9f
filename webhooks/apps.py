from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WebhooksConfig(AppConfig):
    """Outbound webhooks: endpoints, events, deliveries and their attempt log."""

    name = "webhooks"
    verbose_name = _("Webhooks")

    def ready(self) -> None:
        """Connect the receivers of ``vmrequests.models.request_transitioned`` (sent after each
        transition commits) and of ``gpuinventory.signals.sync_failed`` / ``sync_recovered``
        (sent after a sync run is saved). The receivers never raise into the sender."""
        from gpuinventory.models import SyncRun
        from gpuinventory.signals import sync_failed, sync_recovered
        from vmrequests.models import VMRequest, request_transitioned
        from webhooks import events

        # dispatch_uids kept from when these lived in vmrequests (one connection per receiver).
        request_transitioned.connect(
            events.on_request_transitioned,
            sender=VMRequest,
            dispatch_uid="vmrequests.webhooks.request_transitioned",
        )
        sync_failed.connect(
            events.on_sync_failed, sender=SyncRun, dispatch_uid="vmrequests.webhooks.sync_failed"
        )
        sync_recovered.connect(
            events.on_sync_recovered, sender=SyncRun, dispatch_uid="vmrequests.webhooks.sync_recovered"
        )
