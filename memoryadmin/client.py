"""A small typed Python client for the memoryadmin HTTP API.

    from memoryadmin.client import Client

    with Client("http://127.0.0.1:8000", api_key, project="demo") as client:
        started = client.start_session_on_document(
            agent="support-bot",
            resource="notes",
            document_id="workshop",
            document={"title": "Workshop notes"},
            idempotency_key="topic/workshop/1",
        )
        recall = client.recall(started.session["id"], use=["notes"])

Every failure of the API raises `ApiError` with the status, the error code and
message of the server's error envelope.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, NotRequired, TypedDict, cast

import httpx

from memoryadmin.agents.topics import topic_session_key

Environment = Literal["development", "production"]


class Writer(TypedDict):
    kind: Literal["owner", "agent"]
    sessionId: NotRequired[str]


class DocumentEntry(TypedDict):
    id: str
    title: str
    summary: str
    agentWrites: Literal["enabled", "disabled"]
    revision: str
    bytes: int
    maxBytes: int
    updatedAt: str
    writer: Writer


class Document(DocumentEntry):
    text: str


class DocumentPage(TypedDict):
    documents: list[DocumentEntry]
    nextCursor: str | None


class Deployment(TypedDict):
    id: str
    projectId: str
    agent: str
    memory: list[dict[str, Any]]
    activeIn: list[str]
    createdAt: str


class ApiKey(TypedDict):
    id: int
    name: str
    prefix: str
    scope: str
    readOnly: bool
    createdAt: str
    lastUsedAt: str | None
    revokedAt: str | None


class NewApiKey(ApiKey):
    secret: str  # the key itself, shown this once


class Binding(TypedDict):
    resource: str
    scope: Literal["document", "collection", "namespace"]
    id: NotRequired[str]
    access: Literal["read", "read-write"]
    partition: NotRequired[str]
    writable: bool


class Session(TypedDict):
    id: str
    projectId: str
    agentId: str
    agent: str
    environment: Environment
    deploymentId: str
    status: Literal["active", "ended"]
    labels: dict[str, str]
    memory: list[Binding]
    createdAt: str
    endedAt: str | None


class SessionPage(TypedDict):
    sessions: list[Session]
    nextCursor: str | None


class Event(TypedDict):
    seq: int
    type: str
    createdAt: str
    data: dict[str, Any]


class EventPage(TypedDict):
    events: list[Event]
    nextAfter: int | None


class Source(TypedDict):
    id: str
    title: str
    revision: str
    updatedAt: str


class Projection(TypedDict):
    text: str
    sources: list[Source]
    writable: bool


class ToolDefinition(TypedDict):
    name: str
    description: str
    inputSchema: dict[str, Any]


class Recall(TypedDict):
    recallId: str
    memory: dict[str, Projection]
    tools: list[ToolDefinition]


class ApiError(Exception):
    """The API answered with an error envelope (or something that is not JSON)."""

    def __init__(
        self, status: int, code: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}


class DocumentDeleted(ApiError):
    """The document id was deleted; ids are reserved forever."""


@dataclass(frozen=True)
class CreatedSession:
    session: Session
    deployment: Deployment
    # False when the idempotency key had already created this session.
    created: bool


@dataclass(frozen=True)
class EnsuredDocument:
    document: Document
    # False when the document already existed (and was left as it was).
    created: bool


@dataclass(frozen=True)
class StartedSession:
    document: EnsuredDocument
    session: CreatedSession


def _if_match(revision: str) -> str:
    """A revision as If-Match wants it; an ETag kept verbatim passes unchanged."""
    return revision if revision.startswith('"') else f'"{revision}"'


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        project: str | None = None,
        environment: Environment = "development",
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.project = project
        self.environment: Environment = environment
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/managed-agents/",
            headers={"x-api-key": api_key, "Accept": "application/json"},
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> Client:
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

    # Plumbing.

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        response = self._http.request(
            method, path, params=_drop_none(params or {}), json=json, headers=headers
        )
        if response.is_error:
            raise self._error(response)
        return response

    @staticmethod
    def _error(response: httpx.Response) -> ApiError:
        try:
            error = response.json()["error"]
            return ApiError(
                response.status_code, error["code"], error["message"], error.get("details")
            )
        except (ValueError, KeyError, TypeError):
            return ApiError(response.status_code, "http_error", response.text[:200])

    def _project(self, project: str | None) -> str:
        chosen = project or self.project
        if chosen is None:
            raise ValueError("Pass project=... here or to Client(...).")
        return chosen

    def _memory_path(self, project: str | None, resource: str, doc_id: str | None = None) -> str:
        path = f"projects/{self._project(project)}/memory/{resource}/documents"
        return path if doc_id is None else f"{path}/{doc_id}"

    def _env(self, environment: Environment | None) -> dict[str, str]:
        return {"environment": environment or self.environment}

    # Projects and memory resources.

    def memory_inventory(
        self, *, project: str | None = None, environment: Environment | None = None
    ) -> list[dict[str, Any]]:
        path = f"projects/{self._project(project)}/memory"
        return cast(
            list[dict[str, Any]],
            self._request("GET", path, params=self._env(environment)).json()["resources"],
        )

    # API keys of a project (needs a read-write key of that project).

    def list_api_keys(self, *, project: str | None = None) -> list[ApiKey]:
        path = f"projects/{self._project(project)}/api-keys"
        return cast(list[ApiKey], self._request("GET", path).json()["apiKeys"])

    def create_api_key(
        self, *, name: str = "", read_only: bool = False, project: str | None = None
    ) -> NewApiKey:
        path = f"projects/{self._project(project)}/api-keys"
        body = {"name": name, "readOnly": read_only}
        return cast(NewApiKey, self._request("POST", path, json=body).json())

    def revoke_api_key(self, key_id: int | str, *, project: str | None = None) -> ApiKey:
        path = f"projects/{self._project(project)}/api-keys/{key_id}/revoke"
        return cast(ApiKey, self._request("POST", path).json())

    def rotate_api_key(
        self, key_id: int | str, *, grace_seconds: int = 0, project: str | None = None
    ) -> NewApiKey:
        """A new key like the old one; the old one keeps working for grace_seconds."""
        path = f"projects/{self._project(project)}/api-keys/{key_id}/rotate"
        body = {"graceSeconds": grace_seconds}
        return cast(NewApiKey, self._request("POST", path, json=body).json())

    # Documents.

    def get_document(
        self,
        resource: str,
        doc_id: str,
        *,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> Document:
        path = self._memory_path(project, resource, doc_id)
        return cast(Document, self._request("GET", path, params=self._env(environment)).json())

    def create_document(
        self,
        resource: str,
        doc_id: str,
        *,
        title: str,
        text: str | None = None,
        summary: str | None = None,
        agent_writes: Literal["enabled", "disabled"] | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> Document:
        """Creates a document; 412 (ApiError) when the id exists or was deleted."""
        body = _drop_none(
            {"title": title, "text": text, "summary": summary, "agentWrites": agent_writes}
        )
        response = self._request(
            "PUT",
            self._memory_path(project, resource, doc_id),
            params=self._env(environment),
            json=body,
            headers={"If-None-Match": "*"},
        )
        return cast(Document, response.json())

    def replace_document(
        self,
        resource: str,
        doc_id: str,
        *,
        revision: str,
        text: str,
        summary: str | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> Document:
        """Replaces text (and summary when given) if `revision` is still current."""
        response = self._request(
            "PUT",
            self._memory_path(project, resource, doc_id),
            params=self._env(environment),
            json=_drop_none({"text": text, "summary": summary}),
            headers={"If-Match": _if_match(revision)},
        )
        return cast(Document, response.json())

    def patch_document(
        self,
        resource: str,
        doc_id: str,
        *,
        revision: str,
        title: str | None = None,
        agent_writes: Literal["enabled", "disabled"] | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> Document:
        response = self._request(
            "PATCH",
            self._memory_path(project, resource, doc_id),
            params=self._env(environment),
            json=_drop_none({"title": title, "agentWrites": agent_writes}),
            headers={"If-Match": _if_match(revision)},
        )
        return cast(Document, response.json())

    def delete_document(
        self,
        resource: str,
        doc_id: str,
        *,
        revision: str,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> None:
        self._request(
            "DELETE",
            self._memory_path(project, resource, doc_id),
            params=self._env(environment),
            headers={"If-Match": _if_match(revision)},
        )

    def list_documents(
        self,
        resource: str,
        *,
        cursor: str | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> DocumentPage:
        params = {**self._env(environment), "cursor": cursor}
        response = self._request("GET", self._memory_path(project, resource), params=params)
        return cast(DocumentPage, response.json())

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

    # Deployments.

    def create_deployment(
        self,
        agent: str,
        memory: list[dict[str, Any]],
        *,
        promote: Environment | None = None,
        project: str | None = None,
    ) -> Deployment:
        body = _drop_none({"agent": agent, "memory": memory, "promote": promote})
        path = f"projects/{self._project(project)}/deployments"
        return cast(Deployment, self._request("POST", path, json=body).json())

    def list_deployments(
        self, *, agent: str | None = None, project: str | None = None
    ) -> list[Deployment]:
        path = f"projects/{self._project(project)}/deployments"
        response = self._request("GET", path, params={"agent": agent})
        return cast(list[Deployment], response.json()["deployments"])

    def get_deployment(self, deployment_id: str, *, project: str | None = None) -> Deployment:
        path = f"projects/{self._project(project)}/deployments/{deployment_id}"
        return cast(Deployment, self._request("GET", path).json())

    def promote_deployment(
        self, deployment_id: str, environment: Environment, *, project: str | None = None
    ) -> Deployment:
        path = f"projects/{self._project(project)}/deployments/{deployment_id}/promote"
        response = self._request("POST", path, json={"environment": environment})
        return cast(Deployment, response.json())

    # Sessions.

    def create_session(
        self,
        *,
        agent: str,
        idempotency_key: str,
        memory: Mapping[str, Mapping[str, str]] | None = None,
        deployment_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> CreatedSession:
        """Creates a session, or returns the one `idempotency_key` already created.

        `agent` is `<agent>` (in this client's environment) or `<agent>@<environment>`.
        """
        agent_id = agent if "@" in agent else f"{agent}@{environment or self.environment}"
        body = _drop_none(
            {
                "agentId": agent_id,
                "projectId": self._project(project),
                "deploymentId": deployment_id,
                "memory": dict(memory) if memory is not None else None,
                "labels": dict(labels) if labels is not None else None,
            }
        )
        response = self._request(
            "POST", "sessions", json=body, headers={"Idempotency-Key": idempotency_key}
        )
        data = response.json()
        return CreatedSession(
            session=cast(Session, data["session"]),
            deployment=cast(Deployment, data["deployment"]),
            created=response.status_code == 201,
        )

    def get_session(self, session_id: str) -> Session:
        return cast(Session, self._request("GET", f"sessions/{session_id}").json())

    def list_sessions(
        self,
        *,
        agent: str | None = None,
        status: Literal["active", "ended"] | None = None,
        cursor: str | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> SessionPage:
        params = {
            **self._env(environment),
            "projectId": self._project(project),
            "agent": agent,
            "status": status,
            "cursor": cursor,
        }
        return cast(SessionPage, self._request("GET", "sessions", params=params).json())

    def end_session(self, session_id: str) -> Session:
        return cast(Session, self._request("POST", f"sessions/{session_id}/end").json())

    def session_events(self, session_id: str, *, after: int = 0) -> EventPage:
        response = self._request("GET", f"sessions/{session_id}/events", params={"after": after})
        return cast(EventPage, response.json())

    def iter_session_events(self, session_id: str, *, after: int = 0) -> Iterator[Event]:
        """Every event after `after` that exists now, in order."""
        while True:
            page = self.session_events(session_id, after=after)
            yield from page["events"]
            if page["nextAfter"] is None:
                return
            after = page["nextAfter"]

    # The runtime, as an agent host uses it.

    def recall(
        self,
        session_id: str,
        *,
        use: list[str] | tuple[str, ...] = (),
        input_text: str | None = None,
    ) -> Recall:
        """Recalls every bound resource before a model request; `use` selects the tools."""
        body = {"use": list(use), "input": {"text": input_text}}
        response = self._request("POST", f"sessions/{session_id}/memory/recall", json=body)
        return cast(Recall, response.json())

    def tool_call(
        self,
        session_id: str,
        *,
        recall_id: str,
        name: str,
        arguments: Mapping[str, Any],
        call_id: str | None = None,
    ) -> dict[str, Any]:
        """Runs one of the model's memory tool calls and returns its result."""
        body = {
            "recallId": recall_id,
            "callId": call_id or "call_" + secrets.token_hex(8),
            "name": name,
            "arguments": dict(arguments),
        }
        response = self._request("POST", f"sessions/{session_id}/memory/tool-calls", json=body)
        return cast(dict[str, Any], response.json()["result"])

    # The two steps of opening a topic: its document, then a session on it.

    def ensure_document(
        self,
        resource: str,
        doc_id: str,
        *,
        title: str | None = None,
        text: str | None = None,
        summary: str | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> EnsuredDocument:
        """Creates the document unless it exists; an existing one is left as it is."""
        try:
            document = self.create_document(
                resource,
                doc_id,
                title=title or doc_id,
                text=text,
                summary=summary,
                project=project,
                environment=environment,
            )
            return EnsuredDocument(document=document, created=True)
        except ApiError as exc:
            if exc.status != 412:
                raise
        try:
            document = self.get_document(resource, doc_id, project=project, environment=environment)
            return EnsuredDocument(document=document, created=False)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise DocumentDeleted(
                404, "document_deleted", f"Document '{doc_id}' was deleted; use a new id."
            ) from exc

    def start_session_on_document(
        self,
        *,
        agent: str,
        resource: str,
        document_id: str,
        idempotency_key: str,
        document: Mapping[str, str] | None = None,
        access: Literal["read", "read-write"] = "read-write",
        memory: Mapping[str, Mapping[str, str]] | None = None,
        labels: Mapping[str, str] | None = None,
        deployment_id: str | None = None,
        project: str | None = None,
        environment: Environment | None = None,
    ) -> StartedSession:
        """Creates the document (if new) and a session bound to it; safe to retry.

        `document` may carry title, text and summary for a new document. A
        deleted id raises DocumentDeleted before any session is created.
        """
        fields = dict(document or {})
        unknown = set(fields) - {"title", "text", "summary"}
        if unknown:
            raise ValueError(f"document takes title, text and summary, not {sorted(unknown)}.")
        ensured = self.ensure_document(
            resource, document_id, project=project, environment=environment, **fields
        )
        bindings = {
            **(memory or {}),
            resource: {"scope": "document", "id": document_id, "access": access},
        }
        created = self.create_session(
            agent=agent,
            idempotency_key=topic_session_key(idempotency_key),
            memory=bindings,
            deployment_id=deployment_id,
            labels=labels,
            project=project,
            environment=environment,
        )
        return StartedSession(document=ensured, session=created)
