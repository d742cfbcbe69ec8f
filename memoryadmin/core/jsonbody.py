"""The one reader of JSON bodies, for every body that crosses the network.

The management API's requests, the reference provider's requests and the
memory providers' responses are all read here: at most BODY_MAX_BYTES
(counted as they arrive, so a body without a length is bounded too), strict
UTF-8, no NaN or Infinity, nesting at most NESTING_MAX levels and the string
rule of memoryadmin.core.strings.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from memoryadmin.core.errors import DomainError, InvalidRequest, LimitExceeded
from memoryadmin.core.inputs import whole_number
from memoryadmin.core.strings import NESTING_MAX, strings_check

# The largest body read from the network, either way (the specification's 64 KiB).
BODY_MAX_BYTES = 64 * 1024
CHUNK_BYTES = 16 * 1024


class EncodedBody(DomainError):
    """A body in a content coding: 415, answered with `Accept-Encoding: identity`."""

    status = 415
    code = "unsupported_media_type"

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "Accept-Encoding": "identity"}


def content_coding_check(coding: str | None) -> None:
    """Refuses (EncodedBody) a request whose Content-Encoding is other than identity: no
    door decodes gzip or any other coding, and such a body read as it is would be another
    body (or none that parses), so it is refused before it is read."""
    if coding is None:
        return
    if all(part.strip().lower() in {"", "identity"} for part in coding.split(",")):
        return
    raise EncodedBody(
        f"Content-Encoding {coding.strip()!r} is not accepted: send the body uncompressed."
    )


def too_large(size: int, limit: int = BODY_MAX_BYTES) -> LimitExceeded:
    return LimitExceeded(
        f"The body is over {limit} bytes.", field="body", bytes=size, max_bytes=limit
    )


def stream_chunks(stream: IO[bytes] | Any) -> Iterator[bytes]:
    """The chunks of a request's body (a file-like object: anything with read(size)) until
    its end. A read that fails is the client's body that could not be read (the server's
    reader: a chunk size that is not hexadecimal, a chunk without its line end; the
    connection closed or reset before the body's end; or the client sending nothing more
    for GUNICORN_CLIENT_TIMEOUT, memoryadmin/serving.py): InvalidRequest, 400."""
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except Exception as exc:
            raise InvalidRequest(
                "body: the body could not be read (a malformed chunk, the connection"
                " closed before its end, or nothing more sent for too long)."
            ) from exc
        if not chunk:
            return
        yield chunk


def declared_check(declared: str | int | None, limit: int) -> None:
    """Refuses (LimitExceeded, 413) a body whose Content-Length is over `limit`. A
    length that is not ASCII digits is as none: the body is counted as it arrives."""
    size = whole_number(str(declared or "").strip(), clamp=True)
    if size is not None and size > limit:
        raise too_large(size, limit)


def body_read(
    chunks: Iterable[bytes], *, declared: str | int | None = None, limit: int = BODY_MAX_BYTES
) -> bytes:
    """All of a body, refused (LimitExceeded, 413) as soon as it is known to be over `limit`.

    `declared` is the Content-Length, when there is one: a body declared too
    large is refused before a byte of it is read.
    """
    declared_check(declared, limit)
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            raise too_large(len(data), limit)
    return bytes(data)


# An integer past 64 bits is a float to orjson (an exact integer to the standard library),
# and anything with 19 digits in a row may be one. Found by mapping each byte to "0" (an
# ASCII digit) or " " and searching for 19 zeros: a tenth of the time of the pattern
# `[0-9]{19}`.
_DIGITS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"0" * 19


def long_number(data: str | bytes) -> bool:
    """Whether `data` holds 19 ASCII digits in a row (a text's UTF-8; an unpaired
    surrogate is encoded as any other code point beyond ASCII)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    return _LONG_RUN in raw.translate(_DIGITS)


# What `orjson_read` gives where orjson does not read a text as the standard library does.
UNREAD = object()


def orjson_read(data: str | bytes) -> Any:
    """`data` read by orjson (several times faster), where it reads as the standard
    library does; `UNREAD` where it might not (a long integer) or refuses it (the standard
    library then reads it, or words the error as it always has: an unpaired surrogate,
    a number past a double, NaN, invalid UTF-8, a byte order mark)."""
    if long_number(data):
        return UNREAD
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return UNREAD


def json_parse(raw: bytes) -> Any:
    """The JSON document in `raw`; InvalidRequest (400) naming the problem otherwise."""
    data = orjson_read(raw)
    if data is UNREAD:
        data = _standard_read(raw)
    strings_check(data)
    return data


def _standard_read(raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest("The body is not valid JSON: it is not UTF-8.") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise _too_deep() from exc
    except ValueError as exc:
        raise InvalidRequest(f"The body is not valid JSON: {exc}") from exc


def _too_deep() -> InvalidRequest:
    return InvalidRequest(
        f"body: JSON may nest at most {NESTING_MAX} levels deep.", details={"field": "body"}
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
