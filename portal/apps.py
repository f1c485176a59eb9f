from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The project package as an app: shared templates tags, tasks and management commands."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Register the apps' domain metrics (each app's ``metrics.COLLECTORS``, ``portal.metrics``)."""
        from portal import metrics

        metrics.register()
