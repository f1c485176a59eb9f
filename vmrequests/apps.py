from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VmrequestsConfig(AppConfig):
    """What people asked for: teams, images, VM requests, approvals, audit events."""

    name = "vmrequests"
    verbose_name = _("VM requests")

    def ready(self) -> None:
        """Connect the notifications' receiver of ``request_transitioned`` (sent after each
        transition commits). The webhooks app connects its own (``webhooks/apps.py``)."""
        from vmrequests import notifications
        from vmrequests.models import VMRequest, request_transitioned

        request_transitioned.connect(
            notifications.on_request_transitioned,
            sender=VMRequest,
            dispatch_uid="vmrequests.notifications",
        )
