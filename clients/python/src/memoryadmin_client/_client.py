"""`Client` and `AsyncClient`: the operations of `_ops` over blocking or async HTTP.

Both retry a request that is answered 429 or 503 (nothing was done: a rate
limit, a provider cap, a database outage), waiting as `Retry-After` says, at
most `retries` times and never longer than `max_retry_wait` seconds at once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import suppress
from email.utils import parsedate_to_datetime
from functools import wraps
from types import TracebackType
from typing import Any, Concatenate, Self

import anyio
import httpx

from memoryadmin_client import _ops as ops
from memoryadmin_client._ops import ApiError, Defaults, Op, Request
from memoryadmin_client._types import AuditEntry, DocumentEntry, Environment, Event

RETRY_STATUSES = (429, 503)


def retry_delay(response: httpx.Response, attempt: int, *, max_wait: float) -> float | None:
    """Seconds to wait before retrying this response, or None when it should not be retried."""
    if response.status_code not in RETRY_STATUSES:
        return None
    raw = response.headers.get("Retry-After", "").strip()
    delay = 0.25 * 2**attempt
    if not raw.isascii():
        raw = ""  # "¹" and "٣" pass isdigit() but are no seconds: as if absent
    if raw.isdigit():
        delay = float(raw)
    elif raw:
        with suppress(TypeError, ValueError):
            delay = parsedate_to_datetime(raw).timestamp() - time.time()
    delay = max(delay, 0.0)
    return delay if delay <= max_wait else None


def _send_args(request: Request) -> dict[str, Any]:
    return {
        "params": request.params,
        "json": request.json,
        "content": request.content,
        "headers": request.headers,
    }


class _Base[HttpT: (httpx.Client, httpx.AsyncClient)](Defaults):
    _http: HttpT

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        project: str | None = None,
        environment: Environment = "development",
        timeout: float = 10.0,
        retries: int = 3,
        max_retry_wait: float = 30.0,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`transport` replaces httpx's own (a sync one for Client, async for AsyncClient)."""
        super().__init__(project=project, environment=environment)
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self._http = self._open(
            base_url=base_url.rstrip("/") + "/api/managed-agents/",
            headers={"x-api-key": api_key, "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def _open(self, **options: Any) -> HttpT:
        raise NotImplementedError

    def _delay(self, response: httpx.Response, attempt: int) -> float | None:
        if attempt >= self.retries:
            return None
        return retry_delay(response, attempt, max_wait=self.max_retry_wait)


def _sync[**P, T](
    op: Callable[Concatenate[Defaults, P], Op[T]],
) -> Callable[Concatenate[Client, P], T]:
    @wraps(op)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(op(self, *args, **kwargs))

    return method


def _async[**P, T](
    op: Callable[Concatenate[Defaults, P], Op[T]],
) -> Callable[Concatenate[AsyncClient, P], Awaitable[T]]:
    @wraps(op)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(op(self, *args, **kwargs))

    return method


class Client(_Base[httpx.Client]):
    """The API over blocking HTTP.

    with Client("http://127.0.0.1:8000", api_key, project="demo") as client:
        document = client.get_document("notes", "workshop")
    """

    def _open(self, **options: Any) -> httpx.Client:
        return httpx.Client(**options)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, request: Request) -> httpx.Response:
        attempt = 0
        while True:
            response = self._http.request(request.method, request.path, **_send_args(request))
            delay = self._delay(response, attempt)
            if delay is None:
                return response
            time.sleep(delay)
            attempt += 1

    def _run[T](self, op: Op[T]) -> T:
        try:
            request = next(op)
            while True:
                response = self._send(request)
                if response.is_error:
                    request = op.throw(ApiError.of(response))
                else:
                    request = op.send(response)
        except StopIteration as done:
            result: T = done.value
            return result

    memory_inventory = _sync(ops.memory_inventory)
    list_api_keys = _sync(ops.list_api_keys)
    create_api_key = _sync(ops.create_api_key)
    revoke_api_key = _sync(ops.revoke_api_key)
    rotate_api_key = _sync(ops.rotate_api_key)
    get_document = _sync(ops.get_document)
    create_document = _sync(ops.create_document)
    replace_document = _sync(ops.replace_document)
    patch_document = _sync(ops.patch_document)
    delete_document = _sync(ops.delete_document)
    list_documents = _sync(ops.list_documents)
    restore_as_of = _sync(ops.restore_as_of)
    version_readers = _sync(ops.version_readers)
    list_proposals = _sync(ops.list_proposals)
    approve_proposal = _sync(ops.approve_proposal)
    reject_proposal = _sync(ops.reject_proposal)
    restore_version = _sync(ops.restore_version)
    redact_version = _sync(ops.redact_version)
    search_memory = _sync(ops.search_memory)
    list_audit = _sync(ops.list_audit)
    export_memory = _sync(ops.export_memory)
    import_memory = _sync(ops.import_memory)
    list_records = _sync(ops.list_records)
    create_record = _sync(ops.create_record)
    get_record = _sync(ops.get_record)
    update_record = _sync(ops.update_record)
    delete_record = _sync(ops.delete_record)
    record_history = _sync(ops.record_history)
    list_webhooks = _sync(ops.list_webhooks)
    create_webhook = _sync(ops.create_webhook)
    get_webhook = _sync(ops.get_webhook)
    update_webhook = _sync(ops.update_webhook)
    rotate_webhook_secret = _sync(ops.rotate_webhook_secret)
    delete_webhook = _sync(ops.delete_webhook)
    list_webhook_deliveries = _sync(ops.list_webhook_deliveries)
    redeliver_webhook = _sync(ops.redeliver_webhook)
    ensure_document = _sync(ops.ensure_document)
    create_deployment = _sync(ops.create_deployment)
    list_deployments = _sync(ops.list_deployments)
    get_deployment = _sync(ops.get_deployment)
    promote_deployment = _sync(ops.promote_deployment)
    create_session = _sync(ops.create_session)
    get_session = _sync(ops.get_session)
    list_sessions = _sync(ops.list_sessions)
    end_session = _sync(ops.end_session)
    session_events = _sync(ops.session_events)
    recall = _sync(ops.recall)
    list_recalls = _sync(ops.list_recalls)
    revert_session = _sync(ops.revert_session)
    tool_call = _sync(ops.tool_call)
    cancel = _sync(ops.cancel)
    list_operations = _sync(ops.list_operations)
    get_operation = _sync(ops.get_operation)
    retry_operation = _sync(ops.retry_operation)
    discard_operation = _sync(ops.discard_operation)
    start_session_on_document = _sync(ops.start_session_on_document)

    def iter_documents(
        self, resource: str, *, project: str | None = None, environment: Environment | None = None
    ) -> Iterator[DocumentEntry]:
        cursor: str | None = None
        while True:
            page = self.list_documents(
                resource, cursor=cursor, project=project, environment=environment
            )
            yield from page["documents"]
            cursor = page["nextCursor"]
            if cursor is None:
                return

    def iter_audit(self, **filters: Any) -> Iterator[AuditEntry]:
        """Every audit entry matching `filters` (those of `list_audit`), newest first."""
        cursor: str | None = None
        while True:
            page = self.list_audit(**filters, cursor=cursor)
            yield from page["entries"]
            cursor = page["nextCursor"]
            if cursor is None:
                return

    def iter_session_events(self, session_id: str, *, after: int = 0) -> Iterator[Event]:
        """Every event after `after` that exists now, in order."""
        while True:
            page = self.session_events(session_id, after=after)
            yield from page["events"]
            if page["nextAfter"] is None:
                return
            after = page["nextAfter"]


class AsyncClient(_Base[httpx.AsyncClient]):
    """The same API as `Client`, each call awaited.

    async with AsyncClient("http://127.0.0.1:8000", api_key, project="demo") as client:
        recall = await client.recall(session_id, use=["notes"])
    """

    def _open(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(**options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, request: Request) -> httpx.Response:
        attempt = 0
        while True:
            response = await self._http.request(request.method, request.path, **_send_args(request))
            delay = self._delay(response, attempt)
            if delay is None:
                return response
            await anyio.sleep(delay)
            attempt += 1

    async def _run[T](self, op: Op[T]) -> T:
        try:
            request = next(op)
            while True:
                response = await self._send(request)
                if response.is_error:
                    request = op.throw(ApiError.of(response))
                else:
                    request = op.send(response)
        except StopIteration as done:
            result: T = done.value
            return result

    memory_inventory = _async(ops.memory_inventory)
    list_api_keys = _async(ops.list_api_keys)
    create_api_key = _async(ops.create_api_key)
    revoke_api_key = _async(ops.revoke_api_key)
    rotate_api_key = _async(ops.rotate_api_key)
    get_document = _async(ops.get_document)
    create_document = _async(ops.create_document)
    replace_document = _async(ops.replace_document)
    patch_document = _async(ops.patch_document)
    delete_document = _async(ops.delete_document)
    list_documents = _async(ops.list_documents)
    restore_as_of = _async(ops.restore_as_of)
    version_readers = _async(ops.version_readers)
    list_proposals = _async(ops.list_proposals)
    approve_proposal = _async(ops.approve_proposal)
    reject_proposal = _async(ops.reject_proposal)
    restore_version = _async(ops.restore_version)
    redact_version = _async(ops.redact_version)
    search_memory = _async(ops.search_memory)
    list_audit = _async(ops.list_audit)
    export_memory = _async(ops.export_memory)
    import_memory = _async(ops.import_memory)
    list_records = _async(ops.list_records)
    create_record = _async(ops.create_record)
    get_record = _async(ops.get_record)
    update_record = _async(ops.update_record)
    delete_record = _async(ops.delete_record)
    record_history = _async(ops.record_history)
    list_webhooks = _async(ops.list_webhooks)
    create_webhook = _async(ops.create_webhook)
    get_webhook = _async(ops.get_webhook)
    update_webhook = _async(ops.update_webhook)
    rotate_webhook_secret = _async(ops.rotate_webhook_secret)
    delete_webhook = _async(ops.delete_webhook)
    list_webhook_deliveries = _async(ops.list_webhook_deliveries)
    redeliver_webhook = _async(ops.redeliver_webhook)
    ensure_document = _async(ops.ensure_document)
    create_deployment = _async(ops.create_deployment)
    list_deployments = _async(ops.list_deployments)
    get_deployment = _async(ops.get_deployment)
    promote_deployment = _async(ops.promote_deployment)
    create_session = _async(ops.create_session)
    get_session = _async(ops.get_session)
    list_sessions = _async(ops.list_sessions)
    end_session = _async(ops.end_session)
    session_events = _async(ops.session_events)
    recall = _async(ops.recall)
    list_recalls = _async(ops.list_recalls)
    revert_session = _async(ops.revert_session)
    tool_call = _async(ops.tool_call)
    cancel = _async(ops.cancel)
    list_operations = _async(ops.list_operations)
    get_operation = _async(ops.get_operation)
    retry_operation = _async(ops.retry_operation)
    discard_operation = _async(ops.discard_operation)
    start_session_on_document = _async(ops.start_session_on_document)

    async def iter_documents(
        self, resource: str, *, project: str | None = None, environment: Environment | None = None
    ) -> AsyncIterator[DocumentEntry]:
        cursor: str | None = None
        while True:
            page = await self.list_documents(
                resource, cursor=cursor, project=project, environment=environment
            )
            for entry in page["documents"]:
                yield entry
            cursor = page["nextCursor"]
            if cursor is None:
                return

    async def iter_audit(self, **filters: Any) -> AsyncIterator[AuditEntry]:
        """Every audit entry matching `filters` (those of `list_audit`), newest first."""
        cursor: str | None = None
        while True:
            page = await self.list_audit(**filters, cursor=cursor)
            for entry in page["entries"]:
                yield entry
            cursor = page["nextCursor"]
            if cursor is None:
                return

    async def iter_session_events(self, session_id: str, *, after: int = 0) -> AsyncIterator[Event]:
        """Every event after `after` that exists now, in order."""
        while True:
            page = await self.session_events(session_id, after=after)
            for event in page["events"]:
                yield event
            if page["nextAfter"] is None:
                return
            after = page["nextAfter"]
