"""Django settings for the GPU VM portal.

Every value comes from the environment (documented in ``docs/configuration.md`` and
``.env.example``). With nothing set, the portal runs on a laptop with embedded defaults:
SQLite and kombu's file-system broker under ``var/``. ``PORTAL_ENV=production`` turns on
the hardening that ``manage.py check --deploy`` asks for and makes the secrets mandatory.
Malformed values raise ``ImproperlyConfigured`` at start-up (see :mod:`portal.env`).
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from portal.env import Env

BASE_DIR = Path(__file__).resolve().parent.parent
env = Env()

PORTAL_ENV = env.choice("PORTAL_ENV", "development", ("development", "production"))
PRODUCTION = PORTAL_ENV == "production"
VAR_DIR = Path(env.str("PORTAL_VAR_DIR", str(BASE_DIR / "var"))).resolve()

# --- core -------------------------------------------------------------------------------
if PRODUCTION:
    SECRET_KEY = env.str("SECRET_KEY", required=True)
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise ImproperlyConfigured(
            "SECRET_KEY must be at least 50 characters with 5 distinct ones in production"
        )
else:
    SECRET_KEY = env.str("SECRET_KEY", "django-insecure-development-only-key-never-use-in-production")

DEBUG = env.bool("DEBUG", default=not PRODUCTION)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DEBUG must be false when PORTAL_ENV=production")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "[::1]"])
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS must be set when PORTAL_ENV=production (e.g. portal.example.com)"
    )
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_prometheus",
    "django_htmx",
    "django_filters",
    "django_tables2",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "portal",
    "gpuinventory",
    "vmrequests",
    "webhooks",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "portal.middleware.RequestIDMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "portal.session_policy.SessionPolicyMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last but the metrics: turns a locked-out sign-in into the lockout page (portal/login_throttle.py).
    "axes.middleware.AxesMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------
DATABASES = {"default": env.database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("PORTAL_DB_CONN_MAX_AGE", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # SQLite: take the write lock when a transaction begins, and wait for it (up to 20 s), so the
    # web process and a Celery worker serialise their writes (approvals, provisioning) instead of
    # failing with "database is locked" when a read transaction tries to upgrade.
    DATABASES["default"].setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- auth -------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes; portal/login_throttle.py, docs/security.md): the
# PORTAL_LOGIN_FAILURE_LIMIT-th failure of one username from one client address locks that
# pair out for PORTAL_LOGIN_LOCKOUT_MINUTES, on /login/ and /admin/login/ alike.
AUTHENTICATION_BACKENDS = [
    "portal.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
PORTAL_LOGIN_FAILURE_LIMIT = env.int("PORTAL_LOGIN_FAILURE_LIMIT", 5, minimum=1, maximum=100)
PORTAL_LOGIN_LOCKOUT_MINUTES = env.int("PORTAL_LOGIN_LOCKOUT_MINUTES", 15, minimum=1, maximum=24 * 60)
# Reverse proxies in front that append to X-Forwarded-For (portal/client_ip.py): 0 = none.
PORTAL_TRUSTED_PROXY_COUNT = env.int("PORTAL_TRUSTED_PROXY_COUNT", 0, minimum=0, maximum=5)
AXES_FAILURE_LIMIT = PORTAL_LOGIN_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=PORTAL_LOGIN_LOCKOUT_MINUTES)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_USERNAME_FORM_FIELD = "username"
AXES_CLIENT_IP_CALLABLE = "portal.client_ip.client_ip"
AXES_LOCKOUT_CALLABLE = "portal.login_throttle.lockout_response"
AXES_HTTP_RESPONSE_CODE = 429
# Successful sign-ins are not logged in the database (the access log would grow forever).
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"
# Session policy (portal/session_policy.py): signed out after PORTAL_SESSION_IDLE_MINUTES
# without a request and PORTAL_SESSION_MAX_HOURS after signing in, whatever the activity; in
# production the cookie also ends with the browser. The store keeps a session no longer.
PORTAL_SESSION_IDLE_MINUTES = env.int("PORTAL_SESSION_IDLE_MINUTES", 60, minimum=1, maximum=24 * 60)
PORTAL_SESSION_MAX_HOURS = env.int("PORTAL_SESSION_MAX_HOURS", 12, minimum=1, maximum=24 * 30)
SESSION_COOKIE_AGE = PORTAL_SESSION_MAX_HOURS * 3600
SESSION_EXPIRE_AT_BROWSER_CLOSE = env.bool("PORTAL_SESSION_EXPIRE_AT_BROWSER_CLOSE", default=PRODUCTION)

# --- i18n -------------------------------------------------------------------------------
# Django spells it zh-hans in settings and zh-Hans elsewhere: accept either case.
LANGUAGE_CODE = env.choice("LANGUAGE_CODE", "en", ("en", "zh-hans"), case_insensitive=True)
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env.str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- static files -----------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = not PRODUCTION
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}

# --- security ---------------------------------------------------------------------------
# Django 6 built-in Content Security Policy: no inline scripts or styles anywhere.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env.bool("PORTAL_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("PORTAL_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("PORTAL_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("PORTAL_HSTS_PRELOAD", default=True)
    # Health probes come over plain HTTP from the kubelet or compose: never redirect them.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if env.bool("PORTAL_BEHIND_TLS_PROXY", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Who may scrape /metrics (it is never open to the internet by default).
PORTAL_METRICS_ALLOWED_NETWORKS = env.networks("PORTAL_METRICS_ALLOWED_CIDRS", ["127.0.0.1/32", "::1/128"])

# /readyz waits at most this many seconds for its checks (portal/health.py).
PORTAL_READYZ_BUDGET = env.int("PORTAL_READYZ_BUDGET", 5, minimum=1, maximum=60)

# --- Kubernetes -------------------------------------------------------------------------
PORTAL_KUBECONFIG = env.raw("PORTAL_KUBECONFIG")
if PORTAL_KUBECONFIG and not Path(PORTAL_KUBECONFIG).is_file():
    raise ImproperlyConfigured(f"PORTAL_KUBECONFIG={PORTAL_KUBECONFIG!r} is not a readable file")
PORTAL_KUBE_CONTEXT = env.raw("PORTAL_KUBE_CONTEXT")
PORTAL_KUBE_TIMEOUT = env.int("PORTAL_KUBE_TIMEOUT", 10, minimum=1, maximum=300)
# Namespace of the GPU Operator: its vGPU Device Manager ConfigMap is read from here (DOMAIN.md §3).
PORTAL_GPU_OPERATOR_NAMESPACE = env.str("PORTAL_GPU_OPERATOR_NAMESPACE", "gpu-operator")

# --- inventory sync ---------------------------------------------------------------------
PORTAL_SYNC_INTERVAL = env.int("PORTAL_SYNC_INTERVAL", 30, minimum=5)

# --- provisioning (vmrequests/provisioning/, docs/provisioning.md) -------------------------
PORTAL_RECONCILE_INTERVAL = env.int("PORTAL_RECONCILE_INTERVAL", 5, minimum=1)
PORTAL_REPROFILE_TIMEOUT = env.int("PORTAL_REPROFILE_TIMEOUT", 600, minimum=10)
PORTAL_SCHEDULING_TIMEOUT = env.int("PORTAL_SCHEDULING_TIMEOUT", 900, minimum=10)
PORTAL_LEASE_WARNING_HOURS = env.int("PORTAL_LEASE_WARNING_HOURS", 24, minimum=0)
PORTAL_REQUEUE_AFTER = env.int("PORTAL_REQUEUE_AFTER", 60, minimum=1)

# --- who may do what (vmrequests/policy.py, docs/requests.md) -------------------------------
# Off: nobody (admins included) approves, retries or decides the lease extension of their own
# request; another approver must.
PORTAL_ALLOW_SELF_APPROVAL = env.bool("PORTAL_ALLOW_SELF_APPROVAL", default=False)

# --- outbound webhooks (webhooks/, docs/webhooks.md) ----------------------------
PORTAL_WEBHOOK_TIMEOUT = env.int("PORTAL_WEBHOOK_TIMEOUT", 10, minimum=1, maximum=60)
PORTAL_WEBHOOK_RETRY_BASE_SECONDS = env.int("PORTAL_WEBHOOK_RETRY_BASE_SECONDS", 30, minimum=1, maximum=3600)
PORTAL_WEBHOOK_MAX_ATTEMPTS = env.int("PORTAL_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1, maximum=20)

# --- Celery -----------------------------------------------------------------------------
_broker_url = env.raw("CELERY_BROKER_URL")
if _broker_url is None:
    # kombu's file-system transport with atomic message writes (portal/kombu_fs.py).
    from portal import kombu_fs

    kombu_fs.register()
    CELERY_BROKER_URL = f"{kombu_fs.SCHEME}://localhost/"
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),  # kombu's default is ./control
        "store_processed": False,
        # kombu polls the queue directory (default every 1 s); 30 ms keeps approval → VMI
        # creation snappy on a laptop for a negligible cost (benchmarks/provision_latency.py).
        "polling_interval": 0.03,
    }
    for _folder in ("queue", "processed", "control"):
        (_broker_dir / _folder).mkdir(parents=True, exist_ok=True)
elif _broker_url.split("://", 1)[0] in {"redis", "rediss"}:
    CELERY_BROKER_URL = _broker_url
    # Must exceed the hard time limit, or Redis redelivers a task that is still running.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
else:
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL={_broker_url!r}: only redis:// or rediss:// (or unset for the file broker)"
    )
# The cache holds API throttling counters; it must be shared by every web process, so it
# lives in Redis whenever Redis is the broker (process-local memory otherwise: development).
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CELERY_BROKER_URL}
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("PORTAL_TASK_SOFT_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + 30
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {
    "portal-heartbeat": {"task": "portal.heartbeat", "schedule": 60.0},
    # A message not started within one interval is dropped: the next one is already on its way.
    "gpuinventory-sync": {
        "task": "gpuinventory.sync",
        "schedule": float(PORTAL_SYNC_INTERVAL),
        "options": {"expires": float(PORTAL_SYNC_INTERVAL)},
    },
    "vmrequests-reconcile": {
        "task": "vmrequests.reconcile",
        "schedule": float(PORTAL_RECONCILE_INTERVAL),
        "options": {"expires": float(PORTAL_RECONCILE_INTERVAL)},
    },
    # Webhook deliveries whose message was lost (broker down, worker killed) are sent again.
    "vmrequests-webhook-sweep": {
        "task": "vmrequests.webhook_sweep",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
}

# --- email ------------------------------------------------------------------------------
# Notifications (vmrequests/notifications.py) go through Django's mail API (the default mailer);
# by default they are printed on the console. EMAIL_URL: smtp://user:password@host:port,
# smtp+tls://, smtp+ssl://, consolemail://, filemail:////dir, memorymail://, dummymail://
# (portal/env.py Env.mailer). Django 6.1's MAILERS replaces the deprecated EMAIL_* settings.
# Production defaults to an SMTP relay on localhost (Django's historical default): the console
# backend is a development-only backend that `check --deploy` refuses (mail.E001).
MAILERS = {"default": env.mailer("EMAIL_URL", "smtp://localhost:25" if PRODUCTION else "consolemail://")}
DEFAULT_FROM_EMAIL = SERVER_EMAIL = env.email_address("PORTAL_EMAIL_FROM", "gpu-portal@localhost")
# Links in emails: the portal's external URL, no trailing slash.
PORTAL_BASE_URL = env.http_url("PORTAL_BASE_URL", "http://127.0.0.1:8000")

# --- REST framework ---------------------------------------------------------------------
# Tokens: django-rest-knox (hashed storage, expiry). Token auth comes first so that an
# unauthenticated call gets 401 with "WWW-Authenticate: Token", not 403.
PORTAL_API_THROTTLE_RATE = env.str("PORTAL_API_THROTTLE_RATE", "600/min")
if not re.fullmatch(r"[1-9][0-9]*/(s|sec|m|min|h|hour|d|day)", PORTAL_API_THROTTLE_RATE):
    raise ImproperlyConfigured(
        f"PORTAL_API_THROTTLE_RATE={PORTAL_API_THROTTLE_RATE!r}: use <calls>/<s|min|hour|day>, e.g. 600/min"
    )
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "portal.api.auth.HasTokenScope",
    ],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.auth.ScopedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.auth.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"token": PORTAL_API_THROTTLE_RATE},
    "EXCEPTION_HANDLER": "portal.api.problems.exception_handler",
    # JSON bodies only: a form or multipart body is a 415, never half-parsed into defaults;
    # nesting deeper than 32 levels is a 400 (portal/api/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["portal.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": None,
}
# Longest validity a token may be given, however it is issued (page, admin, command).
PORTAL_API_TOKEN_MAX_DAYS = env.int("PORTAL_API_TOKEN_MAX_DAYS", 365, minimum=1, maximum=3650)
PORTAL_API_TOKEN_TTL_DAYS = env.int("PORTAL_API_TOKEN_TTL_DAYS", 90, minimum=1, maximum=3650)
if PORTAL_API_TOKEN_TTL_DAYS > PORTAL_API_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(
        f"PORTAL_API_TOKEN_TTL_DAYS={PORTAL_API_TOKEN_TTL_DAYS} is above "
        f"PORTAL_API_TOKEN_MAX_DAYS={PORTAL_API_TOKEN_MAX_DAYS}"
    )
KNOX_TOKEN_MODEL = "portal.ApiToken"  # noqa: S105 (a model label, not a secret)
# knox's own migrations create knox.AuthToken's table, which the swapped-in model never uses; its
# foreign key to auth_user breaks PostgreSQL's TRUNCATE in tests, and its migration 0001 would
# depend on portal's first migration. Without them knox has nothing to migrate.
MIGRATION_MODULES = {"knox": None}
REST_KNOX = {
    "TOKEN_TTL": timedelta(days=PORTAL_API_TOKEN_TTL_DAYS),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}

# --- logging ----------------------------------------------------------------------------
LOG_LEVEL = env.choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
PORTAL_LOG_FORMAT = env.choice("PORTAL_LOG_FORMAT", "json" if PRODUCTION else "text", ("json", "text"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "portal.middleware.RequestIDLogFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
        "text": {"format": "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": PORTAL_LOG_FORMAT,
            "filters": ["request_id"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Replace Django's own console handlers (DEFAULT_LOGGING) so each line is printed once.
        "django": {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False},
        "django.server": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        "kubernetes": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
    },
}

STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# --- OpenAPI (drf-spectacular; the schema is committed as docs/openapi.yaml) ---------------
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU VM Portal API",
    "DESCRIPTION": (
        "Request, approve and follow GPU virtual machines (KubeVirt VMIs with NVIDIA passthrough GPUs "
        "or vGPUs) and read the GPU inventory. Errors are RFC 9457 problem details "
        "(application/problem+json). See docs/api.md."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/schema/ for signed-in users and tokens only (CONVENTIONS: no AllowAny DRF view).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated", "portal.api.auth.HasTokenScope"],
    # Swagger UI and Redoc from local static files (air-gapped; CONVENTIONS "Views").
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Tags and operation IDs from the path after /api/v1/ (vm-requests, teams, images, me, inventory).
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # One component per choice set, named after it (the status appears as status, from_status, to_status).
    "ENUM_NAME_OVERRIDES": {
        "VMRequestStatusEnum": "vmrequests.choices.VMRequestStatus",
        "VMModeEnum": "vmrequests.choices.VMMode",
        "DeletionReasonEnum": "vmrequests.choices.DeletionReason",
        "EventActionEnum": "vmrequests.choices.EventAction",
        "WorkloadModeEnum": "gpuinventory.choices.WorkloadMode",
        "ModeSourceEnum": "gpuinventory.choices.ModeSource",
        "ResourceKindEnum": "gpuinventory.choices.ResourceKind",
        "SyncStatusEnum": "gpuinventory.choices.SyncStatus",
        "PermittedDeviceKindEnum": "gpuinventory.models.PermittedDevice.Kind",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.openapi.problem_content_type",
        "portal.api.openapi.database_neutral_integers",
    ],
}
