"""The API's JSON parser: the one JSON body reader (64 KiB, nesting, the string rule)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.parsers import BaseParser

from memoryadmin.memory.jsonbody import body_read, json_parse, stream_chunks


class LimitedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        if stream is None:
            return {}
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        # Domain errors (413 over the limit, 400 naming the field) reach the
        # exception handler as they are.
        return json_parse(body_read(stream_chunks(stream), declared=declared))
