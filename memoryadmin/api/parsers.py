"""A JSON parser that refuses bodies over the mutation limit before parsing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser

from memoryadmin.memory.limits import BODY_MAX_BYTES


class BodyTooLarge(APIException):
    status_code = 413
    default_detail = f"The request body is over {BODY_MAX_BYTES} bytes."
    default_code = "memory_limit_exceeded"


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
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        if length and length.isdigit() and int(length) > BODY_MAX_BYTES:
            raise BodyTooLarge()
        raw = stream.read(BODY_MAX_BYTES + 1)
        if len(raw) > BODY_MAX_BYTES:
            raise BodyTooLarge()
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ParseError(f"The body is not valid JSON: {exc}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
