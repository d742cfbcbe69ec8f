"""The API's parsers: the one JSON body reader (64 KiB, nesting, the string rule) and
the export zip of an import."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import IO, Any

from rest_framework.parsers import BaseParser

from memoryadmin.core.jsonbody import (
    body_read,
    declared_check,
    json_parse,
    stream_chunks,
    too_large,
)
from memoryadmin.memory.imports import upload_max


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


class ZipUploadParser(BaseParser):
    """An export zip, spooled to a temporary file as it arrives (constant memory),
    refused with 413 once it is over the largest zip an import may hold (`upload_max`)."""

    media_type = "application/zip"

    def parse(
        self,
        stream: IO[bytes] | None,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        spool = tempfile.SpooledTemporaryFile(max_size=1024 * 1024)  # noqa: SIM115 (the view closes it)
        if stream is None:
            return spool
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        limit = upload_max()
        declared_check(declared, limit)
        size = 0
        for chunk in stream_chunks(stream):
            size += len(chunk)
            if size > limit:
                spool.close()
                raise too_large(size, limit)
            spool.write(chunk)
        spool.seek(0)
        return spool
