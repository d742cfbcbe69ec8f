"""The API's one renderer and its content negotiation.

Every API response is JSON. The body is encoded with orjson, as DRF's JSONRenderer
would write it (compact, UTF-8, U+2028 and U+2029 escaped, times and other
non-JSON values through DRF's encoder); anything orjson refuses (an integer past
64 bits, a key that is not a string, an indent asked for) is left to DRF's renderer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import orjson
from rest_framework import renderers
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.request import Request
from rest_framework.utils.encoders import JSONEncoder

# DRF's encoder, for what orjson hands back: datetimes (DRF's form: milliseconds, Z),
# dates, times, decimals, lazy strings, querysets.
_default = JSONEncoder().default
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


class JSONRenderer(renderers.JSONRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        plain = (accepted_media_type is None or ";" not in accepted_media_type) and not (
            renderer_context and renderer_context.get("indent")
        )
        if plain:
            try:
                body = orjson.dumps(data, default=_default, option=_OPTIONS)
            except orjson.JSONEncodeError:
                pass
            else:
                # As DRF's renderer: JSON may hold them, JavaScript strings may not.
                # Both begin with the byte 0xE2: one pass of memchr over the body finds
                # none in most, where two three-byte searches take ten times as long (a
                # 2 KB body: 0.3 against 3 us; a recall of eight documents: 3 against 25).
                if b"\xe2" in body and (b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body):
                    body = body.replace(b"\xe2\x80\xa8", b"\\u2028")
                    body = body.replace(b"\xe2\x80\xa9", b"\\u2029")
                return body
        return super().render(data, accepted_media_type, renderer_context)


class _AcceptOnly(DefaultContentNegotiation):
    """DRF's negotiation by the Accept header alone, without the `format` override."""

    settings = SimpleNamespace(URL_FORMAT_OVERRIDE=None)  # type: ignore[assignment]  # its one setting read


_accept_only = _AcceptOnly()


class ContentNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, answered at once in the common case: one renderer and an Accept
    header that is absent, `*/*` or the renderer's own type, which DRF would answer with
    that renderer and its type too.

    For a view of one renderer (every API view: JSON) `?format=` has nothing to choose
    between, and DRF answered a name other than `json` with 404, as if the document did
    not exist: it is ignored there, as any other query parameter a route does not read.
    Views of several renderers (the schema: YAML or JSON) keep it."""

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[renderers.BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[renderers.BaseRenderer, str]:
        if isinstance(renderers, list) and len(renderers) == 1 and format_suffix is None:
            renderer = renderers[0]
            accept = request._request.META.get("HTTP_ACCEPT")
            if accept in (None, "*/*", renderer.media_type):
                return renderer, renderer.media_type
            return _accept_only.select_renderer(request, renderers)
        return super().select_renderer(request, renderers, format_suffix)
