"""Hindsight: the self-hosted Hindsight HTTP API, in the 0.8 dialect spec 004 pins.

Followed: vectorize-io/hindsight tag v0.8.0,
`hindsight-api-slim/hindsight_api/api/http.py` and the engine's
`list_memory_units` / `get_memory_unit` / `get_observation_history`. Every
route lives under `/v1/default/banks/{bank_id}`:

- retain: `POST .../memories` `{"items": [{"content", "document_id"}], "async": true}`,
  answering `{"success", "bank_id", "items_count", "async": true, "operation_id"}` (no
  memory ids: the facts are extracted from the content, in the background). Retains are
  always asynchronous: a server with `HINDSIGHT_API_RETAIN_BATCH_ENABLED=true` answers
  400 to every `"async": false`, and a synchronous retain waits for the extraction,
  which outlives a call's deadline. An answer without an operation (`"async": false`)
  was retained during the request: stored;
- operation: `GET .../operations/{operation_id}` (`api_get_operation_status`, the
  engine's `get_operation_status`): `{"operation_id", "status", "error_message", ...}`,
  status `pending` or `processing` while it runs, then `completed`, `failed` (the error
  message, then `\n\nTraceback:` and the worker's traceback) or `cancelled`; an
  operation the bank does not have (deleted with its bank) is `not_found`, still 200;
- recall: `POST .../memories/recall` `{"query", "max_tokens"}`, answering
  `{"results": [{"id", "text", "type", "mentioned_at", "document_id", ...}]}`;
- list: `GET .../memories/list?limit=&offset=`, answering `{"items", "total", "limit",
  "offset"}`, most recent first;
- get: `GET .../memories/{id}` (404 `{"detail": "Memory unit '{id}' not found"}` when
  unknown), with `document_id`;
- history: `GET .../memories/{id}/history` (observations have one; facts answer `[]`);
- delete: 0.8 deletes memories only with their document,
  `DELETE .../documents/{document_id}` (`{"memory_units_deleted"}`; 404
  `{"detail": "Document not found"}` when unknown).

A route the server does not have is FastAPI's own 404, `{"detail": "Not Found"}`,
which names no memory.

Memory units are the records. Each text saved through memoryadmin is retained
as its own document, so forgetting one of its facts forgets that text's facts
together. 0.8.0 cannot edit a memory: update is not supported. A retain is an
accepted write until its operation completes (the durable operation store
reconciles it); the facts it made appear in the list, as retain names none.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.inputs import whole_number
from memoryadmin.external.base import (
    PAGE_SIZE,
    ExternalProvider,
    OperationState,
    Pending,
    Remote,
    RemoteStore,
    _scope_normalize,
    path_segment,
    text_at,
)
from memoryadmin.external.urls import LOOPBACK_CLEARTEXT
from memoryadmin.memory.providers import NotSupported, Result

KIND = "hindsight"
RECALL_MAX_TOKENS = 4096
DOCUMENT_PREFIX = "memoryadmin-"
RUNNING = {"pending", "processing"}
# How a failed operation's error message ends: the worker's traceback, for Hindsight's own.
TRACEBACK = "\n\nTraceback:"
# The 404 details of a memory unit, or a document, the bank does not have.
MISSING_DETAIL = re.compile(r"Memory unit '.*' not found|Document not found", re.DOTALL)


def remote_of(item: dict[str, Any]) -> Remote:
    """A memory unit of an answer; its id as answered (checked before it is mapped)."""
    metadata: dict[str, Any] = {}
    for source, name in (
        ("fact_type", "factType"),
        ("type", "factType"),
        ("document_id", "documentId"),
    ):
        if item.get(source):
            metadata[name] = item[source]
    when = item.get("mentioned_at") or item.get("date") or None
    text = item.get("text")
    return Remote(
        external_id=item.get("id", ""),
        text=text if isinstance(text, str) else "",
        created_at=when,
        updated_at=when,
        metadata=metadata,
    )


class HindsightStore(RemoteStore):
    def says_missing(self, body: Any) -> bool:
        return MISSING_DETAIL.fullmatch(text_at(body, "detail")) is not None

    @property
    def bank(self) -> str:
        bank = self.scope({"bank": self.config["bankId"]})["bank"]
        return f"/v1/default/banks/{self.segment(bank, operation='bank')}"

    def _remotes(self, items: Any, operation: str) -> list[Remote]:
        return [
            remote_of(item) for item in self.objects(items, operation=operation, what="memories")
        ]

    def add(self, text: str) -> list[Remote] | Pending:
        body = {
            "items": [{"content": text, "document_id": DOCUMENT_PREFIX + uuid.uuid4().hex}],
            "async": True,
        }
        data = self.send(
            "POST", f"{self.bank}/memories", operation="retain", retryable=False, body=body
        )
        if not isinstance(data, dict) or data.get("success") is not True:
            raise self.invalid("retain", "the retain did not succeed")
        operation = data.get("operation_id")
        if data.get("async") is False and operation is None:
            # Retained during the request; retain reports no memory ids: the facts it
            # extracted appear in the list.
            return []
        if not isinstance(operation, str) or not operation:
            raise self.invalid("retain", "no operation_id")
        return Pending(operation=operation, kind="add")

    def poll(self, operation: str) -> OperationState:
        data = self.send(
            "GET",
            f"{self.bank}/operations/{self.segment(operation, operation='operation')}",
            operation="operation",
            retryable=True,
        )
        status = data.get("status") if isinstance(data, dict) else None
        if status in RUNNING:
            return OperationState(done=False)
        if status == "completed":
            return OperationState(done=True)
        if status == "failed":
            error = str(data.get("error_message") or "").split(TRACEBACK, 1)[0].strip()
            return OperationState(done=True, failed=True, error=error)
        if status == "cancelled":
            return OperationState(done=True, failed=True, error="Hindsight cancelled the retain.")
        if status == "not_found":
            return OperationState(
                done=True,
                failed=True,
                error="Hindsight no longer knows the retain (was its bank deleted?).",
            )
        raise self.invalid("operation", f"unknown status {status!r}")

    def search(self, query: str, limit: int) -> list[Remote]:
        body = {"query": query, "max_tokens": RECALL_MAX_TOKENS}
        data = self.send(
            "POST", f"{self.bank}/memories/recall", operation="recall", retryable=True, body=body
        )
        results = data.get("results") if isinstance(data, dict) else None
        return self._remotes(results, "recall")[:limit]

    def page(self, token: str | None) -> tuple[list[Remote], str | None]:
        offset = whole_number(token) or 0
        params = {"limit": str(PAGE_SIZE), "offset": str(offset)}
        data = self.send(
            "GET", f"{self.bank}/memories/list", operation="list", retryable=True, params=params
        )
        if not isinstance(data, dict) or not isinstance(data.get("total"), int):
            raise self.invalid("list", "no total")
        remotes = self._remotes(data.get("items"), "list")
        end = offset + len(remotes)
        return remotes, (str(end) if remotes and end < data["total"] else None)

    def get(self, external_id: str) -> Remote | None:
        data = self.found(
            f"{self.bank}/memories/{self.segment(external_id, operation='get')}", operation="get"
        )
        return None if data is None else remote_of(data)

    def delete(self, external_id: str) -> None:
        remote = self.get(external_id)
        if remote is None:
            return None
        document = remote.metadata.get("documentId")
        if not document:
            raise NotSupported(
                "Hindsight 0.8 deletes memories only together with their document; this one "
                "has none."
            )
        self.send(
            "DELETE",
            f"{self.bank}/documents/{self.segment(str(document), operation='delete_document')}",
            operation="delete_document",
            retryable=True,
            missing_ok=True,
        )
        return None

    def history(self, external_id: str) -> list[Result]:
        data = self.send(
            "GET",
            f"{self.bank}/memories/{self.segment(external_id, operation='history')}/history",
            operation="history",
            retryable=True,
            missing_ok=True,
        )
        if data is None:
            raise NotFound("The record no longer exists at the provider.")
        return [
            {
                "action": "update",
                "text": None,
                "previousText": item.get("previous_text"),
                "at": item.get("changed_at"),
            }
            for item in self.objects(data, operation="history", what="changes")
        ]

    def update(self, external_id: str, text: str) -> Remote:
        raise NotSupported("Hindsight 0.8 cannot edit a memory; forget it and add the new text.")


class HindsightProvider(ExternalProvider):
    kind = KIND
    url_rule = LOOPBACK_CLEARTEXT
    store_class = HindsightStore
    fields = {"bankId"}
    add_visibility = (
        "The provider accepts the write (status accepted) and extracts facts from the text "
        "in the background; they appear in recall once extracted."
    )

    def settings_normalize(self, provider: dict[str, Any], at: str) -> dict[str, Any]:
        scope = _scope_normalize(
            {"bankId": provider.get("bankId", "{namespace}")}, at, allowed={"bankId"}
        )
        try:
            # A namespace is never `.` or `..`; a fixed bank may not be either.
            path_segment(scope["bankId"])
        except ValueError:
            raise InvalidRequest(f"{at}.bankId cannot be '.' or '..'.") from None
        return {"bankId": scope["bankId"]}
