"""The one way out: every outbound call of the server (memory providers of every kind,
their token exchanges, webhook deliveries) is sent here.

`outbound()` gives the call its client: connections only to addresses the egress rule
allows, checked on every connection, each name looked up within the call's deadline and
its project's share of lookups (core/egress.py); TLS trusting public roots and
`MEMORYADMIN_PROVIDER_CA_FILE`; no redirect followed; no proxy or certificate taken from
the environment. `Outbound.send` is one attempt within one overall deadline, reading at
most a limit of body as it arrives (a peer sending a byte at a time is cut at the
deadline; a compressed body is inflated a piece at a time, so the limit holds for what it
inflates to, and a few bytes that inflate to gigabytes are cut at the limit; one whose
stream ends before its end is a transport failure, as a body cut by a reset is), and says
what came back as a `Reply`, never an exception. Retries, secrets and
what a failure means are the callers' (a provider's protocol, a webhook's backoff).
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from memoryadmin.core.errors import DomainError, LimitExceeded
from memoryadmin.core.inputs import whole_number
from memoryadmin.core.jsonbody import body_read, json_parse
from memoryadmin.core.watchdog import cut_at

if TYPE_CHECKING:
    import httpx

    from memoryadmin.core.egress import EgressTransport

RETRYABLE_STATUSES = {408, 429}
# A longer Retry-After counts as this many seconds (RFC 9111's largest delta-seconds).
RETRY_AFTER_MAX = 2**31


def _no_headers() -> httpx.Headers:
    # httpx is imported by the first call out, not when a kind or an app registers.
    import httpx

    return httpx.Headers()


@dataclass
class Reply:
    """What one call got back: an HTTP answer, or why there is none."""

    status: int | None = None
    headers: httpx.Headers = field(default_factory=_no_headers)
    body: bytes = b""
    # "timeout" or "transport" when no complete answer arrived, "refused" when the
    # egress rule stopped the connection before it was attempted, "cancelled" when
    # the caller cancelled.
    failure: str | None = None
    failure_kind: str = ""
    # The answer's body was over the limit it was read with (and not kept).
    oversize: bool = False
    attempts: int = 1

    @property
    def retryable(self) -> bool:
        if self.failure is not None:
            return self.failure in {"timeout", "transport"}
        assert self.status is not None
        return self.status in RETRYABLE_STATUSES or 500 <= self.status <= 599

    def json(self, *, suffixed: bool = False) -> Any:
        """The body's JSON document; ValueError naming the problem otherwise.

        The content type must be application/json, or with `suffixed` any
        `+json` type (application/problem+json).
        """
        media = self.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/json" and not (suffixed and media.endswith("+json")):
            raise ValueError(f"the content type is {media or 'missing'}, not application/json")
        try:
            return json_parse(self.body)
        except DomainError as exc:
            # The reader speaks to API callers; here the peer is at fault.
            raise ValueError(exc.message[:1].lower() + exc.message[1:].rstrip(".")) from exc


class Outbound:
    """A client for one call (and its retries): see `outbound()`."""

    def __init__(self, client: httpx.Client, transport: EgressTransport) -> None:
        self.client = client
        self.transport = transport

    def send(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str],
        deadline: float,
        limit: int,
        params: dict[str, str] | None = None,
        content: bytes | None = None,
    ) -> Reply:
        """One attempt: sends the request and reads the answer, within what is left of
        the deadline (`time.monotonic()`) and up to `limit` bytes of body.

        Socket timeouts count per read, so a peer sending its headers or body a byte at a
        time could outlast them: the connection is closed at the deadline, and the reply
        is then a timeout.
        """
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Reply(failure="timeout")
        with cut_at(deadline, self.transport.abort) as watched:
            stream = self.client.stream(
                method, url, params=params, content=content, headers=headers, timeout=remaining
            )
            reply = _read(stream, deadline=deadline, limit=limit)
        if watched.fired:
            return Reply(failure="timeout")
        return reply

    def abort(self) -> None:
        """Stops the attempt in flight at once, and any later one (the caller cancelled)."""
        self.transport.abort()


@contextlib.contextmanager
def outbound(*, project: str) -> Iterator[Outbound]:
    """The client of one outbound call made for `project`: the egress rule on every
    connection, name lookups within the deadline and the project's share of them, TLS
    with public roots and the operator's private CA (`MEMORYADMIN_PROVIDER_CA_FILE`), no
    redirects followed, nothing read from the environment (proxies, certificates)."""
    import httpx

    from memoryadmin.core.egress import egress_transport

    transport = egress_transport(project)
    with httpx.Client(
        transport=transport,
        follow_redirects=False,
        trust_env=False,
        # The codings `_inflated` reads, whatever else httpx could.
        headers={"Accept-Encoding": ", ".join(_INFLATERS)},
    ) as client:
        yield Outbound(client, transport)


class _Late(Exception):
    """The deadline passed while an answer was still arriving."""


def _until(deadline: float, chunks: Iterator[bytes]) -> Iterator[bytes]:
    for chunk in chunks:
        yield chunk
        # An answer that trickles in must still end by the deadline.
        if time.monotonic() > deadline:
            raise _Late()


# What a body is inflated by a piece at a time, at most this many bytes a piece.
INFLATED_PIECE = 64 * 1024
# Content codings read, and the zlib window bits of each: gzip; deflate (RFC 9110: the
# zlib format; a bare deflate stream, as some servers send, is read as well).
_INFLATERS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


def _codings(headers: httpx.Headers) -> list[str]:
    """The content codings of a body, in the order they were applied; an unknown one
    is left as it is (as httpx does), `x-gzip` is gzip."""
    codings = []
    for value in headers.get_list("content-encoding", split_commas=True):
        coding = value.strip().lower()
        coding = "gzip" if coding == "x-gzip" else coding
        if coding in _INFLATERS:
            codings.append(coding)
    return codings


def _inflate(chunks: Iterator[bytes], coding: str, deadline: float) -> Iterator[bytes]:
    """`chunks` inflated from `coding` in pieces of at most INFLATED_PIECE bytes, so that
    whoever reads them holds no more than they take; zlib errors are httpx's
    DecodingError, as if httpx had decoded the body, and so is a stream that ends before
    its end (its last block, its trailer): a body cut short is no answer, whatever its
    first part inflated to (httpx takes it for whole)."""
    import httpx

    inflater = zlib.decompressobj(_INFLATERS[coding])
    first = True
    for chunk in chunks:
        if not chunk:
            continue
        data = chunk
        while True:
            try:
                piece = inflater.decompress(data, INFLATED_PIECE)
            except zlib.error as exc:
                if not (first and coding == "deflate"):
                    raise httpx.DecodingError(f"the {coding} body is corrupt") from exc
                # Not the zlib format: a bare deflate stream.
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                first = False
                continue
            first = False
            if piece:
                yield piece
            # A layer that inflates to nothing still ends by the deadline.
            if time.monotonic() > deadline:
                raise _Late()
            data = inflater.unconsumed_tail
            if inflater.eof or (not data and len(piece) < INFLATED_PIECE):
                break
        if inflater.eof:
            # What follows the end of the stream is not part of the body (as httpx).
            return
    if first:
        return  # not a byte came (a 204, a 304): an empty body, nothing to inflate
    raise httpx.DecodingError(f"the {coding} body ends before its stream does")


def _inflated(chunks: Iterator[bytes], codings: list[str], deadline: float) -> Iterator[bytes]:
    """A body as received (`chunks`) with its content codings undone, last applied first."""
    for coding in reversed(codings):
        chunks = _inflate(chunks, coding, deadline)
    return chunks


def _read(
    stream: contextlib.AbstractContextManager[httpx.Response], *, deadline: float, limit: int
) -> Reply:
    """Opens `stream` (the request is sent) and reads its answer."""
    import httpx

    from memoryadmin.core.egress import egress_refusal

    try:
        with stream as response:
            reply = Reply(status=response.status_code, headers=response.headers)
            declared = response.headers.get("content-length")
            # Read raw and inflated here: httpx inflates each chunk whole, however
            # far beyond the limit it goes.
            body = _inflated(response.iter_raw(), _codings(response.headers), deadline)
            try:
                reply.body = body_read(_until(deadline, body), declared=declared, limit=limit)
            except LimitExceeded:
                reply.oversize = True
            except _Late:
                return Reply(failure="timeout")
            return reply
    except httpx.TimeoutException:
        return Reply(failure="timeout")
    except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
        # UnicodeError: a header value the request cannot carry (HTTP headers are bytes);
        # the callers check theirs, and an answer is never an exception, whoever missed one.
        refused = egress_refusal(exc)
        if refused is not None:
            return Reply(failure="refused", failure_kind=str(refused))
        # The exception's text may quote the request; only its kind is kept.
        return Reply(failure="transport", failure_kind=type(exc).__name__)


def retry_after(headers: httpx.Headers) -> float | None:
    """A valid Retry-After (delta-seconds or HTTP-date) in seconds, else None: a
    malformed one (Unicode digits, a sign, a fraction) is as if there were none."""
    raw = headers.get("retry-after", "").strip()
    if not raw or not raw.isascii():  # an HTTP-date's int() would read Unicode digits too
        return None
    seconds = whole_number(raw, maximum=RETRY_AFTER_MAX, clamp=True)
    if seconds is not None:
        return float(seconds)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
