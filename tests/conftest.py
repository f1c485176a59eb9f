"""Shared pytest configuration for all tiers.

The dev-cluster plugin provides the session fixtures ``devcluster``, ``k8s_api`` and
``k8s_namespace``; it starts the real kube-apiserver only when a test asks for one.
"""

pytest_plugins = ["devcluster.pytest_plugin"]


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings: pytest.FixtureRequest) -> None:
    """MD5 for test users: the default PBKDF2 costs ~1 s per user on the 2-core CI machine.
    Production keeps Django's default hashers (portal/settings.py)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # type: ignore[attr-defined]
