"""The real settings module, imported in a fresh process with a given environment.

Malformed values must stop ``manage.py`` at start-up with ImproperlyConfigured naming the
variable; production mode must pass ``check --deploy`` with no warnings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "PORTAL_ENV": "production",
    "SECRET_KEY": "k" * 20 + "-ProductionSecretKeyForTheDeployCheck-0123456789",
    "ALLOWED_HOSTS": "portal.example.com",
}


def run_manage(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_"))}
    base.update({"PORTAL_VAR_DIR": str(tmp_path / "var"), **env})
    for name in ("SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"):
        if name not in env:
            base.pop(name, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"PORTAL_ENV": "staging"}, "PORTAL_ENV='staging' must be one of: development, production"),
        ({"CELERY_BROKER_URL": "amqp://guest@localhost//"}, "only redis:// or rediss://"),
        ({"DATABASE_URL": "mysql://u:p@localhost/portal"}, "unsupported scheme 'mysql'"),
        ({"PORTAL_KUBE_TIMEOUT": "ten"}, "PORTAL_KUBE_TIMEOUT='ten' is not an integer"),
        ({"PORTAL_KUBECONFIG": "/nonexistent/kubeconfig"}, "is not a readable file"),
        ({"PORTAL_METRICS_ALLOWED_CIDRS": "everyone"}, "'everyone' is not an IP network"),
        ({"PORTAL_ENV": "production", "ALLOWED_HOSTS": "x"}, "SECRET_KEY must be set"),
        ({**PRODUCTION_ENV, "ALLOWED_HOSTS": ""}, "ALLOWED_HOSTS must be set"),
        ({**PRODUCTION_ENV, "DEBUG": "true"}, "DEBUG must be false when PORTAL_ENV=production"),
        ({**PRODUCTION_ENV, "SECRET_KEY": "short"}, "at least 50 characters"),
        (
            {"PORTAL_API_TOKEN_TTL_DAYS": "400"},
            "PORTAL_API_TOKEN_TTL_DAYS=400 is above PORTAL_API_TOKEN_MAX_DAYS=365",
        ),
        ({"PORTAL_SESSION_IDLE_MINUTES": "0"}, "PORTAL_SESSION_IDLE_MINUTES=0 is below the minimum 1"),
    ],
)
def test_malformed_values_fail_at_startup(tmp_path: Path, env: dict[str, str], message: str) -> None:
    result = run_manage(tmp_path, env, "check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_production_mode_passes_the_deploy_check_with_no_warnings(tmp_path: Path) -> None:
    result = run_manage(tmp_path, PRODUCTION_ENV, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_development_defaults_use_sqlite_and_the_file_broker(tmp_path: Path) -> None:
    code = (
        "from django.conf import settings as s;"
        "print(s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, s.DEBUG, s.PRODUCTION,"
        " s.CELERY_BROKER_TRANSPORT_OPTIONS['data_folder_in'])"
    )
    env = {"DATABASE_URL": "", "CELERY_BROKER_URL": ""}
    result = run_manage(tmp_path, env, "shell", "--no-imports", "-c", code)
    assert result.returncode == 0, result.stderr
    var = (tmp_path / "var").resolve()
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "portalfs://localhost/",
        "True",
        "False",
        str(var / "broker" / "queue"),
    ]


def test_production_sessions_end_with_the_browser(tmp_path: Path) -> None:
    """#14 finding 9: in production the session cookie has no Max-Age (ends with the browser)."""
    code = (
        "from django.conf import settings as s; "
        "print(s.SESSION_EXPIRE_AT_BROWSER_CLOSE, s.SESSION_COOKIE_AGE, s.PORTAL_SESSION_IDLE_MINUTES)"
    )
    production = run_manage(tmp_path, PRODUCTION_ENV, "shell", "--no-imports", "-c", code)
    assert production.stdout.split() == ["True", "43200", "60"], production.stderr
    tuned = run_manage(
        tmp_path,
        {
            **PRODUCTION_ENV,
            "PORTAL_SESSION_EXPIRE_AT_BROWSER_CLOSE": "false",
            "PORTAL_SESSION_MAX_HOURS": "8",
        },
        "shell",
        "--no-imports",
        "-c",
        code,
    )
    assert tuned.stdout.split() == ["False", "28800", "60"], tuned.stderr
