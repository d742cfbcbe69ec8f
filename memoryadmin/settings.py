"""Settings for memoryadmin, read from environment variables.

`DATABASE_URL` selects the database (unset: a SQLite file under `var/`).
`DJANGO_SECRET_KEY` signs cursors and sessions and `MEMORYADMIN_PARTITION_SECRET`
derives provider partition keys: both are required with `DJANGO_DEBUG` off.
In development (`DJANGO_DEBUG=1`, or `MEMORYADMIN_DEV_SECRETS=1` for the test
suite) a missing secret key is generated once and kept in `var/secret-key`; on a
development checkout (`development_checkout()`) manage.py uses the one found there.
docs/deploy.md lists every variable.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import os
import secrets
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from memoryadmin.core.rates import parse_rate
from memoryadmin.files import private_dir, private_file
from memoryadmin.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MEMORYADMIN_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def _env_number[T: (int, float)](name: str, default: T, kind: type[T], what: str) -> T:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return kind(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be {what}, not {raw!r}") from exc


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    value = _env_number(name, default, int, "an integer")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {value}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, not {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    value = _env_number(name, default, float, "a number")
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name} must be a finite number, not {value}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum:g}, not {value:g}")
    return value


def var_dir() -> Path:
    """`var/`, readable by this user only: it holds secrets and SQLite files."""
    return private_dir(VAR_DIR)


def required_secret(name: str, generate: bool) -> str:
    configured = os.environ.get(name, "")
    if configured or generate:
        return configured
    raise ImproperlyConfigured(
        f"{name} must be set when DJANGO_DEBUG is off: every instance must share it "
        "(see docs/deploy.md). On a development checkout, `make run` once sets up var/, "
        "whose secrets manage.py then uses."
    )


def proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """`X-Forwarded-Proto` or `X-Forwarded-Proto=https`: the header a TLS-terminating
    proxy sets (and strips from client requests) and the value that means HTTPS."""
    if not raw.strip():
        return None
    name, _, value = raw.partition("=")
    return "HTTP_" + name.strip().upper().replace("-", "_"), value.strip() or "https"


def env_networks(name: str) -> list[str]:
    """Comma-separated CIDR ranges (`127.0.0.0/8,::1/128`), normalised; empty when unset."""
    ranges = []
    for item in env_list(name, []):
        try:
            ranges.append(str(ipaddress.ip_network(item, strict=True)))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"{name} must be comma-separated CIDR ranges such as 127.0.0.0/8,::1/128; "
                f"{item!r} is not one ({exc})"
            ) from exc
    return ranges


def development_checkout() -> bool:
    """Whether this process is manage.py of a checkout where `make run` has run (its
    generated key is in `var/secret-key`) with none of DJANGO_DEBUG, DJANGO_SECRET_KEY
    and MEMORYADMIN_PARTITION_SECRET set: then its secrets are those of var/, as under
    `make run`. The production servers (gunicorn, the ASGI app) never are, nor is any
    process configured for production (a secret, or DJANGO_DEBUG=0, set)."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    configured = ("DJANGO_DEBUG", "DJANGO_SECRET_KEY", "MEMORYADMIN_PARTITION_SECRET")
    return (
        main is not None
        and Path(main).resolve() == BASE_DIR / "manage.py"
        and not any(os.environ.get(name) for name in configured)
        and (VAR_DIR / "secret-key").is_file()
    )


def secret_key(generate: bool) -> str:
    configured = required_secret("DJANGO_SECRET_KEY", generate)
    if configured:
        return configured
    # A development key generated once, so that signed cursors and logins
    # survive restarts without anyone having to configure anything.
    path = var_dir() / "secret-key"
    private_file(path, secrets.token_urlsafe(50) + "\n")
    return path.read_text().strip()


def sqlite_path(raw: str) -> Path | str:
    """The SQLite file (a Path: created private at the end of the settings), or what
    SQLite is given as it is (`:memory:`, a file in no existing folder)."""
    if not raw:
        return VAR_DIR / "memoryadmin.sqlite3"
    if raw == ":memory:" or not Path(raw).parent.is_dir():
        return raw
    return Path(raw)


def serves_requests(argv: list[str]) -> bool:
    """Whether this process serves requests: gunicorn's workers (gunicorn.conf.py marks
    them with MEMORYADMIN_SERVES_REQUESTS), `manage.py runserver` and `manage.py mcp
    --http`. The worker and every other command (exports, imports, migrations, erasures)
    do not."""
    if os.environ.get("MEMORYADMIN_SERVES_REQUESTS") == "1":
        return True
    command, rest = argv[1:2], argv[2:]
    return command == ["runserver"] or (
        command == ["mcp"] and any(arg == "--http" or arg.startswith("--http=") for arg in rest)
    )


def statement_timeout_seconds(argv: list[str]) -> float:
    """How long one database statement of a request may run (PostgreSQL cancels it past
    that, and the request is answered 503): MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS, 30 s by
    default, 0 for none; in processes that serve requests only (`serves_requests`)."""
    seconds = env_float("MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS", 30.0, minimum=0)
    return seconds if serves_requests(argv) else 0.0


def database_from_url(url: str | None, *, statement_timeout: float = 0.0) -> dict[str, Any]:
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": sqlite_path(""),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    parts = urlsplit(url)
    if parts.scheme in {"postgres", "postgresql"}:
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        # An unreachable server fails a request within seconds instead of hanging it.
        options.setdefault("connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT", 3))
        if statement_timeout > 0:
            # Set when the connection is made, not per request; the URL's own `options`
            # come after it, so a statement_timeout there wins.
            bound = f"-c statement_timeout={max(1, round(statement_timeout * 1000))}"
            options["options"] = f"{bound} {options.get('options', '')}".strip()
        if env_bool("DATABASE_PREPARED", True):
            # The server binds parameters and psycopg prepares a statement a connection
            # runs twice (the hot paths' few queries), so PostgreSQL stops planning it
            # on every request. Off behind a pooler that cannot keep prepared
            # statements (PgBouncer in transaction mode).
            options.setdefault("server_side_binding", True)
            options.setdefault("prepare_threshold", 2)
        if env_bool("DATABASE_POOL", True):
            from memoryadmin.core.dbpool import pool_check

            options["pool"] = {
                "min_size": env_int("DATABASE_POOL_MIN", 1),
                "max_size": env_int("DATABASE_POOL_MAX", 20),
                "timeout": env_float("DATABASE_POOL_TIMEOUT", 3.0),
                # Checked when taken, unless checked within the last second.
                "check": pool_check,
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            # Pooled connections are checked when taken (at most once a second each,
            # core/dbpool.py), so after an outage a dead one is replaced instead of
            # failing a request.
            "CONN_HEALTH_CHECKS": True,
            "NAME": unquote(parts.path.lstrip("/")) or "postgres",
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": options,
        }
    if parts.scheme == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": sqlite_path(unquote(parts.path)),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL must start with postgres://, postgresql:// or sqlite://, not {parts.scheme}://"
    )


DEBUG = env_bool("DJANGO_DEBUG", False)
# Development and the test suite generate what is missing, and manage.py on a development
# checkout uses what `make run` generated; production must configure it.
DEV_SECRETS = DEBUG or env_bool("MEMORYADMIN_DEV_SECRETS", development_checkout())
SECRET_KEY = secret_key(DEV_SECRETS)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "memoryadmin.memory",
    "memoryadmin.api",
    "memoryadmin.agents",
    "memoryadmin.web",
    "memoryadmin.providers",
    "memoryadmin.external",
    "memoryadmin.refprovider",
    "memoryadmin.demo",
    "memoryadmin.runner",
    "memoryadmin.webhooks",
    "memoryadmin.incidents",
    "memoryadmin.erasures",
    "django_tasks_db",
]

MIDDLEWARE = [
    "memoryadmin.metrics.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before sessions and users are loaded: they read cookies and the path.
    "memoryadmin.api.middleware.RequestDoorMiddleware",
    "memoryadmin.logs.RequestLogMiddleware",
    "memoryadmin.api.middleware.KeyUsageMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    # PAGE_MIDDLEWARE, on page routes only (API routes authenticate by key).
    "memoryadmin.api.middleware.PageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Django's, with the policy built once per process (memoryadmin/api/middleware.py).
    "memoryadmin.api.middleware.ContentSecurityPolicyMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]
PAGE_MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A route's 405 as the site's error page, not a blank one.
    "memoryadmin.web.middleware.MethodNotAllowedPages",
]

# django-axes first: it refuses a locked-out login before a password is hashed.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    # Django's ModelBackend, reading the signed-in user with SQL built once.
    "memoryadmin.web.auth.UserBackend",
]

ROOT_URLCONF = "memoryadmin.urls"
WSGI_APPLICATION = "memoryadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "memoryadmin.web.template_backend.DjangoTemplates",
        # The alias Django's own backend has, which libraries look templates up by (DRF
        # renders an HTML view's error from a string with `engines["django"]`).
        "NAME": "django",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# How long one statement of a request may run on PostgreSQL (statement_timeout, set as
# each connection is made): in processes that serve requests only, never in the worker
# or a command. 0 is none. A download's statements may run MEMORYADMIN_EXPORT_SECONDS.
MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS = statement_timeout_seconds(sys.argv)
DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL"), statement_timeout=MEMORYADMIN_STATEMENT_TIMEOUT_SECONDS
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# Static files: in production `manage.py collectstatic` writes compressed copies with
# content-hashed names into STATIC_ROOT and whitenoise serves them with far-future
# caching; in development they are served from the source folders as they are.
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", VAR_DIR / "static"))
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

SESSION_COOKIE_SECURE = not DEBUG and env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_FAILURE_VIEW = "memoryadmin.web.views.errors.csrf_failure"
SESSION_COOKIE_HTTPONLY = True
# Django's database sessions, read with SQL built once (memoryadmin/web/sessions.py).
SESSION_ENGINE = "memoryadmin.web.sessions"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
# HTTPS: off by default (a fresh checkout serves plain HTTP on loopback); the production
# environment in docs/deploy.md turns them on. Probes and scrapers may use plain HTTP.
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", ""))
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# The Memory page: Django auth logins, scripts and styles only from our own static files.
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:home"
LOGOUT_REDIRECT_URL = "web:login"
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# The management API parses JSON itself (with its own 64 KiB limit), so this
# only guards form posts.
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["memoryadmin.api.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["memoryadmin.api.auth.HasApiKey"],
    "DEFAULT_PARSER_CLASSES": ["memoryadmin.api.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["memoryadmin.api.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "memoryadmin.api.renderers.ContentNegotiation",
    "EXCEPTION_HANDLER": "memoryadmin.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_THROTTLE_CLASSES": ["memoryadmin.api.throttling.ApiKeyRateThrottle"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "memoryadmin management API",
    "DESCRIPTION": "Document memory, deployments and sessions for AI agents.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "memoryadmin.api.schema.tag_by_area",
    ],
    "ENUM_NAME_OVERRIDES": {"EnvironmentEnum": "memoryadmin.core.environments.Environment.values"},
    # The schema and its reference page are public documentation.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
}

# HTTP memory providers. Partition keys are derived from this secret (unset:
# from SECRET_KEY, so rotating that key would move every partition). The
# reference provider accepts this bearer token (unset: derived from SECRET_KEY).
MEMORYADMIN_PARTITION_SECRET = required_secret("MEMORYADMIN_PARTITION_SECRET", DEV_SECRETS)
REFERENCE_PROVIDER_TOKEN = os.environ.get("REFERENCE_PROVIDER_TOKEN", "")


def erasure_signing_key(generate: bool) -> str:
    """The Ed25519 key that signs erasure receipts: 32 random bytes, base64. Set in
    production (every instance the same; docs/deploy.md); in development generated once
    into var/. Unset in production, erasures refuse to run (503) and nothing else changes."""
    configured = os.environ.get("MEMORYADMIN_ERASURE_SIGNING_KEY", "").strip()
    if configured or not generate:
        return configured
    path = var_dir() / "erasure-signing-key"
    private_file(path, base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
    return path.read_text().strip()


MEMORYADMIN_ERASURE_SIGNING_KEY = erasure_signing_key(DEV_SECRETS)
# The copies one erasure may change (documents, versions, proposals, recalls, audit
# entries, webhook payloads, external records); past it the erasure is refused (413).
MEMORYADMIN_ERASURE_MAX_COPIES = env_int("MEMORYADMIN_ERASURE_MAX_COPIES", 5000, minimum=1)
# Each provider operation's time across all its attempts; the protocol specifies
# 10 seconds and providers read it from `deadlineAt`; a recall's providers share
# one. Not read from the environment.
MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 10.0
# The request threads of one server process: gunicorn.conf.py exports its own
# thread count (1 for sync workers); elsewhere (runserver, the test server) 4.
MEMORYADMIN_REQUEST_THREADS = env_int("MEMORYADMIN_REQUEST_THREADS", 4, minimum=1)
# Requests of one project that may wait on providers at once in one process
# (each holds a request thread); 0, the default, is half the threads, so one
# project's slow provider leaves the other half to everyone else. Beyond it, 429
# and Retry-After at once. All projects together hold at most all threads but one.
# (`manage.py worker` and `manage.py mcp --http` count their own threads.)
MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT = env_int(
    "MEMORYADMIN_PROVIDER_REQUESTS_PER_PROJECT", 0, minimum=0
)
# Provider calls (recall or tool) one project may have in flight at once in
# one server process, counting the parallel calls of a recall (each on a
# thread of its own); beyond it, calls are refused at once with 429.
MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT = env_int(
    "MEMORYADMIN_PROVIDER_CONCURRENCY_PER_PROJECT", 8, minimum=1
)
# Name lookups of outbound calls (providers, token exchanges, webhooks) one project may
# have running at once in one process, each on a thread of its own so that a call stops
# waiting at its deadline; a lookup its call gave up on counts until it ends. Past it, the
# project's next lookup waits for one to end, within its call's deadline.
MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = env_int(
    "MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT", 8, minimum=1
)
# Name lookups of all projects together running at once in one process (the threads
# they hold), by default four projects' shares; a project's share is at most half of it.
# Past it, the next lookup waits for one to end, within its caller's deadline.
MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS = env_int(
    "MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS",
    4 * MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT,
    minimum=2,
)
# Provider origins must reach public addresses only; these non-public ranges
# are allowed as well (`make run` allows loopback for the demo's provider).
MEMORYADMIN_PROVIDER_ALLOW = env_networks("MEMORYADMIN_PROVIDER_ALLOW")
# A PEM file of extra certificate authorities trusted for external providers
# (a Mem0 or Hindsight server behind a private CA); public roots stay trusted.
MEMORYADMIN_PROVIDER_CA_FILE = os.environ.get("MEMORYADMIN_PROVIDER_CA_FILE", "").strip()

# The MCP server (`manage.py mcp`): its database and provider work runs on this
# many threads, each holding at most one database connection while it works. By
# default as many as Python's thread pools take for waiting work (the usable
# cores plus 4, at most 32), and no more than the database pool's connections.
_db_pool = DATABASES["default"]["OPTIONS"].get("pool")
MEMORYADMIN_MCP_THREADS = env_int(
    "MEMORYADMIN_MCP_THREADS",
    min(
        32,
        (getattr(os, "process_cpu_count", os.cpu_count)() or 1) + 4,
        _db_pool.get("max_size", 32) if isinstance(_db_pool, dict) else 32,
    ),
    minimum=1,
)
# The threads one project may hold or wait for at once: half by default, so one
# project's slow provider leaves the other half to everyone else. Beyond it, a
# call is refused at once (429 `rate_limited`, retryAfter).
MEMORYADMIN_MCP_THREADS_PER_PROJECT = env_int(
    "MEMORYADMIN_MCP_THREADS_PER_PROJECT", max(1, MEMORYADMIN_MCP_THREADS // 2), minimum=1
)

# One JSON object per line on standard output (memoryadmin/logs.py). Requests are
# logged once, when they finish; `request_started` is debug-level. Users are logged
# by name, API keys by prefix.
LOGGING = logging_config(os.environ.get("LOG_LEVEL", "INFO").upper())
# Behind a proxy, its X-Request-ID is kept, so its logs and ours share the id.
MEMORYADMIN_TRUST_REQUEST_ID = env_bool("MEMORYADMIN_TRUST_REQUEST_ID", False)

# Prometheus metrics at /metrics for scrapers sending this bearer token (unset: 404).
MEMORYADMIN_METRICS_TOKEN = os.environ.get("MEMORYADMIN_METRICS_TOKEN", "")

# The shared cache: API key look-ups, rate limits and last-used marks. With
# several instances, REDIS_URL must point every instance at one Redis.
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CACHES = {
        "default": {
            # Django's, with one client per pool and one-trip counters.
            "BACKEND": "memoryadmin.core.rediscache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": os.environ.get("MEMORYADMIN_CACHE_PREFIX", "memoryadmin"),
        }
    }
else:
    # Django's local-memory cache, with one-step counters.
    CACHES = {"default": {"BACKEND": "memoryadmin.core.localcache.LocalCache"}}


# Background jobs (memoryadmin/runner, docs/operations.md) ride on Django's tasks
# framework. "database" (the default) keeps the queue in the database, no broker;
# "rq" puts it on Redis (MEMORYADMIN_TASKS_REDIS_URL, else REDIS_URL); "immediate"
# runs each task where it is enqueued. `manage.py worker` runs them.
MEMORYADMIN_TASKS = os.environ.get("MEMORYADMIN_TASKS", "database").strip() or "database"
# The queue this installation's jobs use: installations sharing a Redis need one each.
MEMORYADMIN_TASKS_QUEUE = os.environ.get("MEMORYADMIN_TASKS_QUEUE", "").strip() or "default"
if MEMORYADMIN_TASKS == "database":
    TASKS: dict[str, dict[str, Any]] = {
        "default": {
            "BACKEND": "django_tasks_db.DatabaseBackend",
            "QUEUES": [MEMORYADMIN_TASKS_QUEUE],
        }
    }
elif MEMORYADMIN_TASKS == "rq":
    INSTALLED_APPS.append("django_rq")
    TASKS = {
        "default": {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": [MEMORYADMIN_TASKS_QUEUE]}
    }
    _tasks_redis = os.environ.get("MEMORYADMIN_TASKS_REDIS_URL", "") or REDIS_URL
    if not _tasks_redis:
        raise ImproperlyConfigured(
            "MEMORYADMIN_TASKS=rq needs MEMORYADMIN_TASKS_REDIS_URL or REDIS_URL"
        )
    RQ_QUEUES = {MEMORYADMIN_TASKS_QUEUE: {"URL": _tasks_redis, "DEFAULT_TIMEOUT": 600}}
elif MEMORYADMIN_TASKS == "immediate":
    TASKS = {
        "default": {
            "BACKEND": "django.tasks.backends.immediate.ImmediateBackend",
            "QUEUES": [MEMORYADMIN_TASKS_QUEUE],
        }
    }
else:
    raise ImproperlyConfigured(
        f"MEMORYADMIN_TASKS must be database, rq or immediate, not {MEMORYADMIN_TASKS!r}"
    )
# Open provider operations (accepted or uncertain writes): checked with a pause
# doubling from the backoff, at most MAX_ATTEMPTS times and until the deadline;
# then they are dead letters.
MEMORYADMIN_OPERATION_BACKOFF_SECONDS = env_float(
    "MEMORYADMIN_OPERATION_BACKOFF_SECONDS", 10.0, minimum=0
)
MEMORYADMIN_OPERATION_MAX_ATTEMPTS = env_int("MEMORYADMIN_OPERATION_MAX_ATTEMPTS", 12, minimum=1)
MEMORYADMIN_OPERATION_DEADLINE_SECONDS = env_int(
    "MEMORYADMIN_OPERATION_DEADLINE_SECONDS", 86400, minimum=1
)
# The threads of one `manage.py worker` (jobs run concurrently), and how many of
# them one project's jobs may hold at once: half by default, so one project's slow
# receivers or providers leave the other half to everyone else.
MEMORYADMIN_WORKER_THREADS = env_int("MEMORYADMIN_WORKER_THREADS", 4, minimum=1)
MEMORYADMIN_WORKER_JOBS_PER_PROJECT = env_int(
    "MEMORYADMIN_WORKER_JOBS_PER_PROJECT", max(1, MEMORYADMIN_WORKER_THREADS // 2), minimum=1
)
# The database task backend's results of finished tasks (one a job's attempt; the job
# keeps the record): removed by the workers this many hours after they finished.
MEMORYADMIN_TASK_RESULTS_KEEP_HOURS = env_int("MEMORYADMIN_TASK_RESULTS_KEEP_HOURS", 24, minimum=1)
# How long the workers keep what is finished (runner/housekeeping.py), in days after it
# finished; 0 keeps it for ever, and more than ten years is for ever in all but name (and
# past the dates a database keeps). Delivered and failed webhook deliveries, from their
# last attempt; provider operations that succeeded, failed or were discarded, from when
# they did (dead letters are kept until an owner retries or discards them); finished
# jobs that no delivery or operation refers to (theirs go with them).
KEEP_DAYS_MAX = 3650
MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = env_int(
    "MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS", 30, minimum=0, maximum=KEEP_DAYS_MAX
)
MEMORYADMIN_OPERATIONS_KEEP_DAYS = env_int(
    "MEMORYADMIN_OPERATIONS_KEEP_DAYS", 30, minimum=0, maximum=KEEP_DAYS_MAX
)
MEMORYADMIN_JOBS_KEEP_DAYS = env_int(
    "MEMORYADMIN_JOBS_KEEP_DAYS", 30, minimum=0, maximum=KEEP_DAYS_MAX
)
# A running job whose worker shows no sign of life for this long is run again.
MEMORYADMIN_JOB_LEASE_SECONDS = env_int("MEMORYADMIN_JOB_LEASE_SECONDS", 300, minimum=1)
# The pause before a failed job's next attempt doubles from this, up to an hour.
MEMORYADMIN_JOB_BACKOFF_SECONDS = env_float("MEMORYADMIN_JOB_BACKOFF_SECONDS", 5.0, minimum=0)
# Webhook deliveries (docs/webhooks.md): how long a receiver has to answer, the
# pause before a failed delivery's next attempt (doubling, up to an hour), and
# how many attempts it gets before it is kept as failed. The timeout sets the delivery's
# lease (twice it plus 30 s), so a negative one gave a lease passed when it was taken.
MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS = env_float(
    "MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS", 10.0, minimum=1
)
MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = env_float(
    "MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS", 10.0, minimum=0
)
MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS = env_int("MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1)


def env_rate(name: str, default: str) -> str:
    """A rate such as `600/minute` (memoryadmin/core/rates.py)."""
    raw = os.environ.get(name, "").strip() or default
    try:
        parse_rate(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must look like 600/minute, not {raw!r}") from None
    return raw


# API keys: how long a process may trust a cached key look-up. A key revoked by
# one process stops working in the others within this many seconds. Without
# Redis every worker process has a cache of its own that a revocation elsewhere
# cannot clear, so look-ups are not cached unless this is set.
MEMORYADMIN_API_KEY_CACHE_SECONDS = env_int(
    "MEMORYADMIN_API_KEY_CACHE_SECONDS", 5 if REDIS_URL else 0
)
if not 0 <= MEMORYADMIN_API_KEY_CACHE_SECONDS <= 5:
    raise ImproperlyConfigured("MEMORYADMIN_API_KEY_CACHE_SECONDS must be between 0 and 5")
# `make bench` only: serves floor views (one bare SQL statement) beside the API.
MEMORYADMIN_BENCH_FLOORS = env_bool("MEMORYADMIN_BENCH_FLOORS", False)
# Requests per API key, counted in the shared cache (so across instances).
MEMORYADMIN_API_RATE = env_rate("MEMORYADMIN_API_RATE", "1200/minute")
# Requests of all a project's keys together, counted the same way: however many keys a
# project makes (up to 100), it cannot take more of the servers than this.
MEMORYADMIN_PROJECT_API_RATE = env_rate("MEMORYADMIN_PROJECT_API_RATE", "6000/minute")
# Requests for a project's pages per signed-in person, and of all a project's people
# together (a project may invite any number), counted the same way in windows of their
# own: a project past its API rate can still be managed from its pages.
MEMORYADMIN_PAGE_RATE = env_rate("MEMORYADMIN_PAGE_RATE", "600/minute")
MEMORYADMIN_PROJECT_PAGE_RATE = env_rate("MEMORYADMIN_PROJECT_PAGE_RATE", "3000/minute")

# Logins: a user name or an address is locked out after this many failures
# in a row, until the cool-off ends or `manage.py axes_reset` clears it.
AXES_FAILURE_LIMIT = env_int("MEMORYADMIN_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("MEMORYADMIN_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "memoryadmin/locked_out.html"
AXES_VERBOSE = False
# Behind reverse proxies, the client's address comes from X-Forwarded-For
# (memoryadmin.core.addresses.client_address; request logs show the same address).
MEMORYADMIN_PROXY_COUNT = env_int("MEMORYADMIN_PROXY_COUNT", 0)
AXES_CLIENT_IP_CALLABLE = "memoryadmin.core.addresses.client_address"

# How long an agent's proposal waits for a decision before it expires.
MEMORYADMIN_PROPOSAL_TTL_HOURS = env_int("MEMORYADMIN_PROPOSAL_TTL_HOURS", 24 * 7, minimum=1)

# An import over the API (memoryadmin/memory/imports.py): at most this many documents,
# all of it within this many seconds, else it is refused and creates nothing.
MEMORYADMIN_IMPORT_DOCUMENTS_MAX = env_int("MEMORYADMIN_IMPORT_DOCUMENTS_MAX", 5000, minimum=1)
MEMORYADMIN_IMPORT_SECONDS = env_float("MEMORYADMIN_IMPORT_SECONDS", 60.0, minimum=1)
# A download of a project's data (an export, page and API; the Audit page's log): one of
# each per project at a time, each streaming within this many seconds (it holds a request
# thread, a database connection and, an export, a snapshot while it streams).
MEMORYADMIN_EXPORT_SECONDS = env_float("MEMORYADMIN_EXPORT_SECONDS", 600.0, minimum=1)

# The file system last: settings refused above (a missing secret, a malformed value)
# leave nothing behind, no var/ and no empty database file. SQLite gives its journal
# and WAL files the mode of the database file, so that is made private first.
var_dir()
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
if isinstance(DATABASES["default"]["NAME"], Path):
    private_file(DATABASES["default"]["NAME"])
