"""Settings for memoryadmin, read from environment variables.

`DATABASE_URL` selects the database (unset: a SQLite file under `var/`).
`DJANGO_SECRET_KEY` signs cursors and sessions (unset: a key generated once
and kept in `var/secret-key`). `DJANGO_DEBUG=1` turns on debug mode.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

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


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


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


def secret_key() -> str:
    configured = os.environ.get("DJANGO_SECRET_KEY")
    if configured:
        return configured
    # A development key generated once, so that signed cursors and logins
    # survive restarts without anyone having to configure anything.
    path = VAR_DIR / "secret-key"
    if path.exists():
        return path.read_text().strip()
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    path.write_text(key + "\n")
    path.chmod(0o600)
    return key


def database_from_url(url: str | None) -> dict[str, Any]:
    if not url:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "memoryadmin.sqlite3",
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    parts = urlsplit(url)
    if parts.scheme in {"postgres", "postgresql"}:
        options: dict[str, Any] = dict(parse_qsl(parts.query))
        if env_bool("DATABASE_POOL", True):
            options["pool"] = {
                "min_size": env_int("DATABASE_POOL_MIN", 1),
                "max_size": env_int("DATABASE_POOL_MAX", 20),
                "timeout": 10,
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
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
            "NAME": unquote(parts.path) or VAR_DIR / "memoryadmin.sqlite3",
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL must start with postgres://, postgresql:// or sqlite://, not {parts.scheme}://"
    )


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = secret_key()
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
    "memoryadmin.memory",
    "memoryadmin.api",
    "memoryadmin.agents",
    "memoryadmin.web",
    "memoryadmin.providers",
    "memoryadmin.refprovider",
    "memoryadmin.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "memoryadmin.urls"
WSGI_APPLICATION = "memoryadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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

DATABASES = {"default": database_from_url(os.environ.get("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

SESSION_COOKIE_SECURE = not DEBUG and env_bool("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

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
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "memoryadmin.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
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
    "ENUM_NAME_OVERRIDES": {
        "EnvironmentEnum": "memoryadmin.memory.environments.Environment.values"
    },
    # The schema and its reference page are public documentation.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
}

# HTTP memory providers. Partition keys are derived from this secret (unset:
# from SECRET_KEY, so rotating that key would move every partition). The
# reference provider accepts this bearer token (unset: derived from SECRET_KEY).
MEMORYADMIN_PARTITION_SECRET = os.environ.get("MEMORYADMIN_PARTITION_SECRET", "")
REFERENCE_PROVIDER_TOKEN = os.environ.get("REFERENCE_PROVIDER_TOKEN", "")
# Each provider operation's time across all its attempts; the protocol specifies
# 10 seconds and providers read it from `deadlineAt`. Not read from the environment.
MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 10.0
# Provider origins must reach public addresses only; these non-public ranges
# are allowed as well (`make run` allows loopback for the demo's provider).
MEMORYADMIN_PROVIDER_ALLOW = env_networks("MEMORYADMIN_PROVIDER_ALLOW")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
