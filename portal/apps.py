from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The project package as an app: shared templates tags, tasks and management commands."""

    name = "portal"
    verbose_name = "Portal"

    def ready(self) -> None:
        """Register the apps' domain metrics (each app's ``metrics.COLLECTORS``, ``portal.metrics``)
        and connect the receivers of the sign-in counters (``portal.auth_metrics``) and of the
        session policy (``portal.session_policy``)."""
        # auth_metrics and session_policy: imported for their @receiver functions.
        from portal import auth_metrics, metrics, session_policy  # noqa: F401

        metrics.register()
