from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class VmrequestsConfig(AppConfig):
    """What people asked for: teams, images, VM requests, approvals, audit events."""

    name = "vmrequests"
    verbose_name = _("VM requests")
