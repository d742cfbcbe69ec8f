"""Mem0 Platform: the hosted Mem0 API, with the v3 add/search/list pipeline spec 004 names.

Followed: mem0ai/mem0 `mem0/client/main.py` (MemoryClient) and `docs/openapi.json`
with `docs/api-reference/` (memory, events) and `docs/migration/platform-v2-to-v3.mdx`,
the snapshot of 2026-08-22. Authentication is `Authorization: Token <api key>`.

- add: `POST /v3/memories/add/` `{messages, user_id|agent_id|app_id|run_id, infer}`.
  memoryadmin adds with `infer: false` (direct import, docs/platform/features/
  direct-import.mdx): the platform stores the text as written during the request and
  answers `{"message", "status": "SUCCEEDED", "event_id", "results": [{"id", "data":
  {"memory"}, "event"}]}`, so the records are stored with their ids at once. An add the
  platform queues answers `{"event_id", "status": "PENDING"}`; its event
  (`GET /v1/event/{event_id}/`) goes PENDING, RUNNING, then SUCCEEDED (with the same
  `results`) or FAILED (with `error`);
- search: `POST /v3/memories/search/` `{query, filters, top_k}`: `{"results": [...]}`
  (entity ids only inside `filters`);
- list: `POST /v3/memories/?page=&page_size=` `{filters}`: `{count, next, previous, results}`;
- get, update, delete: `GET|PUT|DELETE /v1/memories/{id}/` (update body `{"text"}`;
  404 `{"error": "Memory not found!"}` when unknown: any other 404 names no memory);
- history: `GET /v1/memories/{id}/history/`: `[{"old_memory", "new_memory", "event", ...}]`.

The v3 routes take no `org_id` or `project_id` (docs/openapi.json lists none, and
MemoryClient stopped sending them: "resolved from API key"): a key reaches its own
project. A declaration's `orgId` and `projectId` are still sent as query parameters.
"""

from __future__ import annotations

import re
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
    text_at,
)
from memoryadmin.external.mem0_oss import history_of, remote_of
from memoryadmin.external.transport import Connection, secret_value
from memoryadmin.external.urls import HTTPS_ONLY
from memoryadmin.memory.providers import Result
from memoryadmin.providers.declarations import SECRET_NAME_RE

KIND = "mem0-platform"
ENTITY_FIELDS = {"user_id", "agent_id", "app_id", "run_id"}
# The platform reports a memory's run as `session_id`.
ANSWER_FIELDS = {
    "user_id": "user_id",
    "agent_id": "agent_id",
    "app_id": "app_id",
    "run_id": "session_id",
}
ID_RE = r"[A-Za-z0-9_-]{1,128}"
# The 404 error of a memory the platform does not have (docs/openapi.json).
MISSING_ERROR = re.compile(r"memory not found\W*", re.IGNORECASE)


class Mem0PlatformStore(RemoteStore):
    def says_missing(self, body: Any) -> bool:
        return MISSING_ERROR.fullmatch(text_at(body, "error")) is not None

    @property
    def entities(self) -> dict[str, str]:
        return self.scope(self.config["scope"])

    @property
    def filters(self) -> dict[str, Any]:
        # In key order: the same filters whichever database stored the declaration.
        entities = [{key: value} for key, value in sorted(self.entities.items())]
        return entities[0] if len(entities) == 1 else {"AND": entities}

    def _memory(self, external_id: str, operation: str) -> str:
        return f"/v1/memories/{self.segment(external_id, operation=operation)}/"

    def _results(self, data: Any, operation: str) -> list[Remote]:
        items = data.get("results") if isinstance(data, dict) else data
        return [
            remote_of(item) for item in self.objects(items, operation=operation, what="results")
        ]

    def add(self, text: str) -> list[Remote] | Pending:
        body = {"messages": [{"role": "user", "content": text}], **self.entities, "infer": False}
        data = self.send("POST", "/v3/memories/add/", operation="add", retryable=False, body=body)
        answered = isinstance(data, dict) and data.get("status") is not None
        state = self._event_state(data, "add") if answered else OperationState(done=False)
        if state.failed:
            reason = state.error or "no reason given"
            raise self.connection.failure(
                "provider_error", f"failed the add: {reason}", operation="add"
            )
        if state.done:
            return state.records
        event = data.get("event_id") if isinstance(data, dict) else None
        if not isinstance(event, str) or not event:
            raise self.invalid("add", "no event_id")
        return Pending(operation=event, kind="add")

    def poll(self, operation: str) -> OperationState:
        data = self.send(
            "GET",
            f"/v1/event/{self.segment(operation, operation='event')}/",
            operation="event",
            retryable=True,
        )
        return self._event_state(data, "event")

    def _event_state(self, data: Any, operation: str) -> OperationState:
        """Where an add stands, from its answer or its event (the same status and results)."""
        status = data.get("status") if isinstance(data, dict) else None
        if status in {"PENDING", "RUNNING"}:
            return OperationState(done=False)
        if status == "FAILED":
            return OperationState(done=True, failed=True, error=str(data.get("error") or ""))
        if status != "SUCCEEDED":
            raise self.invalid(operation, f"unknown status {status!r}")
        results = self.objects(data.get("results") or [], operation=operation, what="results")
        made = [
            Remote(
                external_id=item.get("id", ""), text=str((item.get("data") or {}).get("memory", ""))
            )
            for item in results
        ]
        return OperationState(done=True, records=made)

    def search(self, query: str, limit: int) -> list[Remote]:
        body = {"query": query, "filters": self.filters, "top_k": limit}
        data = self.send(
            "POST", "/v3/memories/search/", operation="search", retryable=True, body=body
        )
        return self._results(data, "search")

    def page(self, token: str | None) -> tuple[list[Remote], str | None]:
        page = whole_number(token, minimum=1) or 1
        params = {"page": str(page), "page_size": str(PAGE_SIZE)}
        data = self.send(
            "POST",
            "/v3/memories/",
            operation="list",
            retryable=True,
            params=params,
            body={"filters": self.filters},
        )
        remotes = self._results(data, "list")
        more = isinstance(data, dict) and bool(data.get("next"))
        return remotes, (str(page + 1) if more else None)

    def get(self, external_id: str) -> Remote | None:
        data = self.found(self._memory(external_id, "get"), operation="get")
        if data is None or not self._in_scope(data):
            return None
        return remote_of(data)

    def _in_scope(self, item: dict[str, Any]) -> bool:
        return all(
            item.get(ANSWER_FIELDS[key]) in (None, value) for key, value in self.entities.items()
        )

    def update(self, external_id: str, text: str) -> Remote:
        if self.get(external_id) is None:
            raise NotFound("The record no longer exists at the provider.")
        data = self.send(
            "PUT",
            self._memory(external_id, "update"),
            operation="update",
            retryable=True,
            body={"text": text},
        )
        if not isinstance(data, dict):
            raise self.invalid("update", "no memory in the answer")
        return remote_of(data)

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
            self._memory(external_id, "history") + "history/",
            operation="history",
            retryable=True,
            missing_ok=True,
        )
        if data is None:
            raise NotFound("The record no longer exists at the provider.")
        return history_of(self.objects(data, operation="history", what="changes"))


class Mem0PlatformProvider(ExternalProvider):
    kind = KIND
    url_rule = HTTPS_ONLY
    store_class = Mem0PlatformStore
    fields = {"apiKey", "orgId", "projectId", "scope"}
    default_base_url = "https://api.mem0.ai"
    add_visibility = (
        "The platform stores the text as written (status stored); should it queue the write "
        "instead (status accepted), it appears in recall once processed."
    )

    def settings_normalize(self, provider: dict[str, Any], at: str) -> dict[str, Any]:
        api_key = provider.get("apiKey")
        if (
            not isinstance(api_key, dict)
            or set(api_key) != {"secret"}
            or not isinstance(api_key["secret"], str)
            or not SECRET_NAME_RE.fullmatch(api_key["secret"])
        ):
            raise InvalidRequest(
                f'{at}.apiKey is required: a managed secret reference {{"secret": "NAME"}}.'
            )
        settings: dict[str, Any] = {
            "apiKey": {"secret": api_key["secret"]},
            "scope": _scope_normalize(
                provider.get("scope", {"user_id": "{namespace}"}),
                f"{at}.scope",
                allowed=ENTITY_FIELDS,
            ),
        }
        for name in ("orgId", "projectId"):
            value = provider.get(name)
            if value is None:
                continue
            if not isinstance(value, str) or not re.fullmatch(ID_RE, value):
                raise InvalidRequest(f"{at}.{name} must be 1-128 letters, digits, - or _.")
            settings[name] = value
        return settings

    def secret_headers(self, provider: dict[str, Any]) -> dict[str, Any]:
        return {**provider.get("headers", {}), "Authorization": provider["apiKey"]}

    def authorize(self, connection: Connection) -> None:
        config = connection.resource.config
        key = secret_value(
            connection,
            config["apiKey"]["secret"],
            origin=connection.origin,
            path=connection.base_path or "/",
        )
        connection.headers["Authorization"] = f"Token {key}"
        scoping = {"org_id": config.get("orgId"), "project_id": config.get("projectId")}
        connection.params = {k: v for k, v in scoping.items() if v}
