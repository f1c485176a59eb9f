from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VmrequestsConfig(AppConfig):
    """What people asked for: teams, images, VM requests, approvals, audit events, webhooks."""

    name = "vmrequests"
    verbose_name = _("VM requests")

    def ready(self) -> None:
        """Connect the receivers of ``request_transitioned`` (sent after each transition commits:
        notifications and webhooks) and of ``gpuinventory.signals.sync_failed`` (sent after a
        failed sync run is saved: webhooks). The webhook receivers never raise into the sender."""
        from gpuinventory.models import SyncRun
        from gpuinventory.signals import sync_failed, sync_recovered
        from vmrequests import notifications
        from vmrequests.models import VMRequest, request_transitioned
        from vmrequests.webhooks import events as webhook_events

        request_transitioned.connect(
            notifications.on_request_transitioned,
            sender=VMRequest,
            dispatch_uid="vmrequests.notifications",
        )
        request_transitioned.connect(
            webhook_events.on_request_transitioned,
            sender=VMRequest,
            dispatch_uid="vmrequests.webhooks.request_transitioned",
        )
        sync_failed.connect(
            webhook_events.on_sync_failed, sender=SyncRun, dispatch_uid="vmrequests.webhooks.sync_failed"
        )
        sync_recovered.connect(
            webhook_events.on_sync_recovered,
            sender=SyncRun,
            dispatch_uid="vmrequests.webhooks.sync_recovered",
        )
