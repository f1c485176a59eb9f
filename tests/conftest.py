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


@pytest.fixture(autouse=True)
def _no_foreign_vmis(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``vmrequests.vm_names`` asks the cluster whether a chosen VM name is a VMI the portal did not
    create, and refuses the name when it cannot ask. A test without the dev cluster has none to
    ask: there the question answers "no foreign VMI". Tests using ``portal_cluster`` ask the real
    dev cluster; ``test_vmrequest_validation.py`` puts the real function back over a fake one."""
    if "portal_cluster" in request.fixturenames:
        return
    from vmrequests import vm_names

    monkeypatch.setattr(vm_names, "foreign_vmi_named", lambda namespace, name: False)
