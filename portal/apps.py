from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The project package as an app: shared templates tags, tasks and management commands."""

    name = "portal"
    verbose_name = "Portal"
