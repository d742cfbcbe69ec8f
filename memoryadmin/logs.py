"""Logs: one JSON object per line on standard output.

Every request is logged once when it finishes (`request_finished`, or `request_failed`
with the traceback) by django-structlog's middleware, with its request id, method and
path (never the query string), status, duration, project, and the API key's prefix or
the user. Bodies, headers and query strings are never logged: they carry keys,
passwords and document text.

Imported by the settings (no Django models here).
"""

from __future__ import annotations

import time
from typing import Any

import structlog
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty
from django_structlog import signals

SHARED_PROCESSORS: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def logging_config(level: str) -> dict[str, Any]:
    """The LOGGING setting: structlog's and the standard library's records as JSON."""
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *SHARED_PROCESSORS,
            structlog.stdlib.PositionalArgumentsFormatter(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": structlog.stdlib.ProcessorFormatter,
                "foreign_pre_chain": SHARED_PROCESSORS,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    # The traceback as text: no local variables, which may hold secrets.
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(),
                ],
            }
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stdout",
                "formatter": "json",
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Failed requests are logged by django-structlog; Django would log 4xx again.
            "django.request": {"level": "ERROR"},
            "django.server": {"level": "ERROR"},
            # Provider calls are counted in metrics and logged when they fail.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }


def _path(request: HttpRequest) -> str:
    return f"{request.method} {request.path}"


@receiver(signals.bind_extra_request_metadata)
def _started(request: HttpRequest, log_kwargs: dict[str, Any], **kwargs: Any) -> None:
    request._log_started = time.perf_counter()  # type: ignore[attr-defined]
    log_kwargs["request"] = _path(request)


def who(request: HttpRequest) -> dict[str, Any]:
    """The project of the route, and the API key (prefix) or user behind the request."""
    fields: dict[str, Any] = {}
    match = getattr(request, "resolver_match", None)
    if match is not None and match.kwargs.get("p"):
        fields["project"] = match.kwargs["p"]
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject) and user._wrapped is empty:
        user = None  # never looked at: finding it out would cost a query
    key = getattr(user, "key", None)
    if key is not None:
        fields["key"] = key.prefix
    elif user is not None and user.is_authenticated:
        fields["user"] = user.get_username()
    return fields


def _finished(request: HttpRequest, log_kwargs: dict[str, Any]) -> None:
    log_kwargs["request"] = _path(request)
    log_kwargs.update(who(request))
    started = getattr(request, "_log_started", None)
    if started is not None:
        log_kwargs["duration_ms"] = round((time.perf_counter() - started) * 1000, 2)


@receiver(signals.bind_extra_request_finished_metadata)
def _request_finished(
    request: HttpRequest, response: HttpResponse, log_kwargs: dict[str, Any], **kwargs: Any
) -> None:
    _finished(request, log_kwargs)


@receiver(signals.bind_extra_request_failed_metadata)
def _request_failed(
    request: HttpRequest,
    log_kwargs: dict[str, Any],
    exception: BaseException | None = None,
    **kwargs: Any,
) -> None:
    from memoryadmin.health import database_unavailable  # settings import this module

    _finished(request, log_kwargs)
    if database_unavailable(exception):
        # Answered 503 by the error pages (errorpages.py), not 500.
        log_kwargs["code"] = 503
