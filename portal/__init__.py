"""The GPU VM portal Django project."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
