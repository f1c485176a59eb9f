from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The project package as an app: shared templates tags, tasks and management commands."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Register the domain metrics (``portal.metrics``) with Prometheus and connect the
        session policy's sign-in receiver (``portal.session_policy``)."""
        from portal import metrics, session_policy  # noqa: F401 (session_policy: its @receiver)

        metrics.register()
