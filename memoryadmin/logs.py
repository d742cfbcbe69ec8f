"""Logs: one JSON object per line on standard output.

Every request is logged once when it finishes (`request_finished`, or `request_failed`
with the traceback, or with the reason of a 503 while the database cannot serve) by
`RequestLogMiddleware`, with its request id, the client's address, method and path
(never the query string), status, duration, project, and the API key's prefix or the
user. Bodies, headers and query strings are never logged: they
carry keys, passwords and document text. Other log lines written while a request runs
carry its request id and address too (`merge_request`, before structlog's context
variables).

The request line is built as one dict and handed to the logging handlers only when its
level is enabled; the JSON is rendered once, by the handler's formatter. The lines name
no thread, process name or asyncio task, so records do not look them up (`logging_config`).

Imported by the settings (no Django models here).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import orjson
import structlog
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.signals import got_request_exception
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse

from memoryadmin.core.addresses import client_address
from memoryadmin.core.users import user_if_read

_second: tuple[int, str] = (0, "")


def utc_timestamp(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """`timestamp`: the time in UTC, ISO 8601 to the microsecond (`...T06:19:19.576902Z`).
    The date and time of day are formatted once a second."""
    global _second
    now = time.time()
    second = int(now)
    if _second[0] != second:
        _second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    event_dict["timestamp"] = f"{_second[1]}.{int((now - second) * 1e6):06d}Z"
    return event_dict


# The request being served: its id and the client's address (RequestLogMiddleware).
_request: ContextVar[dict[str, Any] | None] = ContextVar("memoryadmin_request", default=None)


def merge_request(logger: Any, method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """`request_id` and `ip` of the request this line is written in, if any. One
    context variable set once a request, not one per field as structlog's binding."""
    context = _request.get()
    if context is not None:
        for key, value in context.items():
            event_dict.setdefault(key, value)
    return event_dict


def new_request_id() -> str:
    """A random UUID, version 4, as text: 16 random bytes with the version and variant
    bits set, formatted without building a `uuid.UUID` (a seventh of the cost)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


SHARED_PROCESSORS: list[Any] = [
    merge_request,
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_logger_name,
    structlog.stdlib.add_log_level,
    utc_timestamp,
]

REQUEST_LOGGER = "memoryadmin.request"


def _dumps(value: dict[str, Any], default: Callable[[Any], Any]) -> str:
    try:
        return orjson.dumps(value, default=default).decode()
    except TypeError:
        # An unpaired surrogate or a key that is not a string: escaped as json does.
        return json.dumps(value, default=default)


_RENDER: list[Any] = [
    # The traceback as text: no local variables, which may hold secrets.
    structlog.processors.format_exc_info,
    structlog.processors.JSONRenderer(serializer=_dumps),
]


class JsonFormatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter, which also takes the request log's lines as they come:
    rendered once, by `request_log`, with the same processors."""

    def format(self, record: logging.LogRecord) -> str:
        if record.__dict__.get("rendered"):
            return record.getMessage()
        return super().format(record)


def logging_config(level: str) -> dict[str, Any]:
    """The LOGGING setting: structlog's and the standard library's records as JSON.

    No line names the thread, process name or asyncio task that wrote it, so the
    standard library's records skip finding them out (its documented switches). The
    process id stays: gunicorn's own log lines show it."""
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # type: ignore[attr-defined]
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
                "()": JsonFormatter,
                "foreign_pre_chain": SHARED_PROCESSORS,
                "processors": [
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *_RENDER,
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
            # Failed requests are logged by RequestLogMiddleware; Django would log 4xx again.
            "django.request": {"level": "ERROR"},
            "django.server": {"level": "ERROR"},
            # Provider calls are counted in metrics and logged when they fail.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }


def _path(request: HttpRequest) -> str:
    return f"{request.method} {request.path}"


def who(request: HttpRequest) -> dict[str, Any]:
    """The project of the route, and the API key (prefix) or user behind the request."""
    fields: dict[str, Any] = {}
    match = getattr(request, "resolver_match", None)
    if match is not None and match.kwargs.get("p"):
        fields["project"] = match.kwargs["p"]
    user = user_if_read(request)  # one never looked at: finding it out would cost a query
    key = getattr(user, "key", None)
    if key is not None:
        fields["key"] = key.prefix
    elif user is not None and user.is_authenticated:
        fields["user"] = user.get_username()
    return fields


_logger = logging.getLogger(REQUEST_LOGGER)
_METHODS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
}


def request_log(level: int, event: str, **fields: Any) -> None:
    """One line of the request log, if its level is enabled.

    The event dict gets what structlog's chain would add (context variables, logger
    name, level, timestamp) and is rendered once, as the formatter would, for every
    handler (`JsonFormatter`); no caller lookup, no second chain.
    """
    if not _logger.isEnabledFor(level):
        return
    method = _METHODS[level]
    event_dict: dict[str, Any] = {"event": event, **fields}
    for processor in SHARED_PROCESSORS:
        event_dict = processor(_logger, method, event_dict)
    for processor in _RENDER:
        event_dict = processor(_logger, method, event_dict)
    record = _logger.makeRecord(_logger.name, level, __file__, 0, event_dict, (), None)
    record.rendered = True
    _logger.handle(record)


_STATUS_LEVELS = {4: logging.WARNING, 5: logging.ERROR}


def _status_level(status: int) -> int:
    return _STATUS_LEVELS.get(status // 100, logging.INFO)


def _finished_fields(request: HttpRequest) -> dict[str, Any]:
    fields = {"request": _path(request), **who(request)}
    started = getattr(request, "_log_started", None)
    if started is not None:
        fields["duration_ms"] = round((time.perf_counter() - started) * 1000, 2)
    return fields


def _streamed(content: Iterator[bytes], context: dict[str, Any]) -> Iterator[bytes]:
    """A streamed body logs when it has been sent (or failed, or was stopped at its
    deadline: a download past its seconds, memory/exportzip.py), with its request's ids."""
    token = _request.set(context)
    try:
        request_log(logging.DEBUG, "streaming_started")
        try:
            yield from content
        except TimeoutError as exc:
            request_log(logging.WARNING, "streaming_stopped", reason=str(exc))
            raise
        except Exception as exc:
            request_log(logging.ERROR, "streaming_failed", exc_info=exc)
            raise
        request_log(logging.INFO, "streaming_finished")
    finally:
        _request.reset(token)


class RequestLogMiddleware:
    """Gives each request its id and address and logs it once, when it finishes.

    The id is new for each request, or the proxy's `X-Request-ID` with
    `MEMORYADMIN_TRUST_REQUEST_ID`. An unhandled error logs `request_failed` with the
    traceback instead (`got_request_exception`); one that the database is away or a
    statement ran past its bound, answered 503, as a warning with its reason in one line.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.trust_request_id = settings.MEMORYADMIN_TRUST_REQUEST_ID
        got_request_exception.connect(_request_failed, dispatch_uid=REQUEST_LOGGER)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request._log_started = time.perf_counter()  # type: ignore[attr-defined]
        request_id = self.trust_request_id and request.META.get("HTTP_X_REQUEST_ID")
        context = {"request_id": request_id or new_request_id(), "ip": client_address(request)}
        token = _request.set(context)
        try:
            if _logger.isEnabledFor(logging.DEBUG):
                agent = request.META.get("HTTP_USER_AGENT")
                request_log(
                    logging.DEBUG, "request_started", request=_path(request), user_agent=agent
                )
            response = self.get_response(request)
            if not request.__dict__.pop("_log_failed", False):
                request_log(
                    _status_level(response.status_code),
                    "request_finished",
                    code=response.status_code,
                    **_finished_fields(request),
                )
                if isinstance(response, StreamingHttpResponse) and not response.is_async:
                    response.streaming_content = _streamed(response.streaming_content, context)
            return response
        finally:
            _request.reset(token)


def _request_failed(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    # Settings import this module.
    from memoryadmin.core.dbstate import database_unavailable, unavailable_reason

    exception = sys.exc_info()[1]
    if request is None or isinstance(exception, (Http404, PermissionDenied)):
        return  # answered as usual, and logged as `request_finished`
    if request.__dict__.get("_log_failed"):
        return
    request._log_failed = True  # type: ignore[attr-defined]
    fields = _finished_fields(request)
    if exception is not None and database_unavailable(exception):
        # Answered 503 by the error pages (errorpages.py): the database is away, or a
        # statement ran past its bound. Not the code's fault: a warning, its reason in one
        # line, no traceback.
        reason = unavailable_reason(exception)
        request_log(logging.WARNING, "request_failed", code=503, error=reason, **fields)
        return
    request_log(logging.ERROR, "request_failed", code=500, exc_info=exception, **fields)
