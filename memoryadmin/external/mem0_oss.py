"""Mem0 OSS: the self-hosted Mem0 REST server's unprefixed routes.

Followed: mem0ai/mem0 `server/main.py` (FastAPI "Mem0 REST APIs" 1.0.0, the
snapshot of 2026-08-22) and `mem0/memory/main.py`:

- add: `POST /memories` `{messages, user_id|agent_id|run_id, metadata, infer}`,
  answering `{"results": [{"id", "memory", "event"}]}`;
- search: `POST /search` `{query, filters, top_k}`, answering `{"results": [...]}`;
- list: `GET /memories?user_id=..&top_k=..`, answering `{"results": [...]}`;
- get: `GET /memories/{id}`, the memory or `null`;
- update: `PUT /memories/{id}` `{"text"}`, 404 when unknown;
- history: `GET /memories/{id}/history`, `[{"old_memory", "new_memory", "event", ...}]`;
- delete: `DELETE /memories/{id}`, 404 when unknown.

Authentication is the server's `X-API-Key` (or a bearer token): a declared
header referencing a secret. Errors are FastAPI's `{"detail": ...}`. An unknown memory
is a 404 only to update and delete, whose `ValueError("Memory with id ... not found")`
`_client_error` makes one; a route the server does not have is FastAPI's own 404,
`{"detail": "Not Found"}`, which says nothing of any memory.
"""

from __future__ import annotations

import re
from typing import Any

from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.inputs import whole_number
from memoryadmin.external.base import (
    PAGE_SIZE,
    ExternalProvider,
    Pending,
    Remote,
    RemoteStore,
    _scope_normalize,
    text_at,
)
from memoryadmin.external.urls import LOOPBACK_CLEARTEXT
from memoryadmin.memory.providers import Result

KIND = "mem0-oss"
ENTITY_FIELDS = {"user_id", "agent_id", "run_id"}
# The server lists at most this many memories of one scope (ALL_MEMORIES_LIMIT).
LIST_LIMIT = 1000
ADDED = {"ADD", "UPDATE"}
HISTORY_ACTIONS = {"ADD": "create", "UPDATE": "update", "DELETE": "delete"}
# The 404 detail of a memory the server does not have (`Memory.delete`, `_update_memory`).
MISSING_DETAIL = re.compile(
    r"Memory with id .+ not found(\. Please provide a valid 'memory_id')?", re.DOTALL
)


def remote_of(item: dict[str, Any]) -> Remote:
    """A memory of an answer; its id as answered (checked before it is mapped)."""
    text = item.get("memory")
    raw = item.get("metadata")
    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return Remote(
        external_id=item.get("id", ""),
        text=text if isinstance(text, str) else "",
        created_at=item.get("created_at"),
        updated_at=item.get("updated_at"),
        metadata=dict(metadata),
    )


def history_of(changes: list[dict[str, Any]]) -> list[Result]:
    """A memory's history answer (Mem0 OSS and the platform alike), oldest first."""
    return [
        {
            "action": HISTORY_ACTIONS.get(str(item.get("event")), str(item.get("event"))),
            "text": item.get("new_memory"),
            "previousText": item.get("old_memory"),
            "at": item.get("created_at"),
        }
        for item in changes
    ]


class Mem0OssStore(RemoteStore):
    # The server answers a memory it does not have with what `Memory.get` returns: null.
    missing_is_null = True

    def says_missing(self, body: Any) -> bool:
        return MISSING_DETAIL.fullmatch(text_at(body, "detail")) is not None

    @property
    def entities(self) -> dict[str, str]:
        return self.scope(self.config["scope"])

    def _memory(self, external_id: str, operation: str) -> str:
        return "/memories/" + self.segment(external_id, operation=operation)

    def _results(self, data: Any, operation: str) -> list[Remote]:
        items = data.get("results") if isinstance(data, dict) else data
        return [
            remote_of(item) for item in self.objects(items, operation=operation, what="results")
        ]

    def add(self, text: str) -> list[Remote]:
        body = {
            "messages": [{"role": "user", "content": text}],
            **self.entities,
            "infer": self.config["infer"],
        }
        data = self.send("POST", "/memories", operation="add", retryable=False, body=body)
        items = data.get("results") if isinstance(data, dict) else None
        results = self.objects(items, operation="add", what="results")
        # With inference on, the server may also report memories it deleted or left alone.
        return [remote_of(item) for item in results if item.get("event", "ADD") in ADDED]

    def search(self, query: str, limit: int) -> list[Remote]:
        body = {"query": query, "filters": self.entities, "top_k": limit}
        data = self.send("POST", "/search", operation="search", retryable=True, body=body)
        return self._results(data, "search")

    def page(self, token: str | None) -> tuple[list[Remote], str | None]:
        # The server has no pages: it answers up to its limit at once; ours are slices.
        offset = whole_number(token) or 0
        params = {**self.entities, "top_k": str(LIST_LIMIT)}
        data = self.send("GET", "/memories", operation="list", retryable=True, params=params)
        remotes = self._results(data, "list")
        end = offset + PAGE_SIZE
        return remotes[offset:end], (str(end) if end < len(remotes) else None)

    def get(self, external_id: str) -> Remote | None:
        data = self.found(self._memory(external_id, "get"), operation="get")
        if data is None or not self._in_scope(data):
            return None
        return remote_of(data)

    def _in_scope(self, item: dict[str, Any]) -> bool:
        # A record of another user or agent is not this namespace's, whatever its id.
        return all(item.get(key) in (None, value) for key, value in self.entities.items())

    def update(self, external_id: str, text: str) -> Remote | Pending:
        if self.get(external_id) is None:
            raise self._missing(external_id)
        self.send(
            "PUT",
            self._memory(external_id, "update"),
            operation="update",
            retryable=True,
            body={"text": text},
        )
        remote = self.get(external_id)
        if remote is None:
            raise self._missing(external_id)
        return remote

    def delete(self, external_id: str) -> None:
        if self.get(external_id) is None:
            return None
        self.send(
            "DELETE",
            self._memory(external_id, "delete"),
            operation="delete",
            retryable=True,
            missing_ok=True,
        )
        return None

    def history(self, external_id: str) -> list[Result]:
        data = self.send(
            "GET",
            self._memory(external_id, "history") + "/history",
            operation="history",
            retryable=True,
        )
        return history_of(self.objects(data, operation="history", what="changes"))

    def _missing(self, external_id: str) -> Exception:
        return NotFound("The record no longer exists at the provider.")


class Mem0OssProvider(ExternalProvider):
    kind = KIND
    url_rule = LOOPBACK_CLEARTEXT
    store_class = Mem0OssStore
    fields = {"scope", "infer"}

    def settings_normalize(self, provider: dict[str, Any], at: str) -> dict[str, Any]:
        scope = _scope_normalize(
            provider.get("scope", {"user_id": "{namespace}"}), f"{at}.scope", allowed=ENTITY_FIELDS
        )
        infer = provider.get("infer", False)
        if not isinstance(infer, bool):
            raise InvalidRequest(f"{at}.infer must be true or false.")
        return {"scope": scope, "infer": infer}
