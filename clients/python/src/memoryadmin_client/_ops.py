"""Every API operation, written once, without I/O.

An operation is a generator: it yields the `Request`s it needs and receives
each `httpx.Response` back (an error response is thrown into it as `ApiError`),
then returns its result. `Client` drives operations with blocking I/O,
`AsyncClient` with `await`; neither repeats what an operation does.
"""

from __future__ import annotations

import json
import re
import secrets
import warnings
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import quote

import httpx

from memoryadmin_client._types import (
    AgentWrites,
    ApiKey,
    AuditPage,
    CreatedSession,
    Deployment,
    Document,
    DocumentPage,
    EnsuredDocument,
    Environment,
    EventPage,
    ImportReport,
    NewApiKey,
    NewWebhook,
    Operation,
    OperationPage,
    Proposal,
    ProposalPage,
    ProposalState,
    ProviderRecord,
    ProviderRecordChange,
    ProviderRecordPage,
    ProviderRecordWrite,
    Recall,
    RecallPage,
    RestoreAsOf,
    SearchPage,
    Session,
    SessionPage,
    SessionRevert,
    StartedSession,
    Version,
    VersionReaders,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryPage,
)

TOPIC_KEY_MAX = 248
# The session's key is this plus ":session": 1-256 printable ASCII characters.
_TOPIC_KEY = re.compile(rf"[\x20-\x7e]{{1,{TOPIC_KEY_MAX}}}")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None


type Op[T] = Generator[Request, httpx.Response, T]


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

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        try:
            error = response.json()["error"]
            return cls(response.status_code, error["code"], error["message"], error.get("details"))
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, "http_error", response.text[:200])


class DocumentDeleted(ApiError):
    """The document id was deleted; ids are reserved forever."""


class _Result(dict[str, Any]):
    """A result of the client's own (CreatedSession, EnsuredDocument, StartedSession):
    a plain dict, as the TypedDict says, whose keys may still be read as attributes, as
    when these were dataclasses (deprecated: `result.session` warns; read
    `result["session"]`)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(name) from None
        warnings.warn(
            f"reading .{name} of a client result is deprecated: use [{name!r}]",
            DeprecationWarning,
            stacklevel=2,
        )
        return value


def topic_session_key(idempotency_key: str) -> str:
    """The session Idempotency-Key derived from a topic's key (as the server's CLI does);
    ValueError for a key the session could not take (too long, not printable ASCII)."""
    if not _TOPIC_KEY.fullmatch(idempotency_key):
        raise ValueError(f"idempotency keys are 1-{TOPIC_KEY_MAX} printable ASCII characters.")
    return f"{idempotency_key}:session"


def if_match(revision: str | Mapping[str, Any]) -> str:
    """If-Match for a revision, an ETag kept verbatim, or a document as read."""
    if isinstance(revision, Mapping):
        revision = str(revision["revision"])
    return revision if revision.startswith('"') else f'"{revision}"'


def _seg(value: str | int) -> str:
    """One segment of a request's path, percent-encoded: an id an application took from
    its users (`x?environment=production`, `x#y`, `..`) reaches the server as that id,
    which refuses it, never as another path or query. An id holding '/' is a ValueError:
    a server decodes `%2F` back into '/' before it routes the path, so `x/versions` would
    reach another route (document x's versions, answered as if they were a document), and
    no id has one."""
    text = str(value)
    if not text:
        raise ValueError("An id in a request's path cannot be empty.")
    if "/" in text:
        raise ValueError(f"An id in a request's path cannot hold '/': {text!r}.")
    if text in (".", ".."):
        return text.replace(".", "%2E")  # kept as they are, a URL resolves them away
    return quote(text, safe="")


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _every_page(path: str, params: Mapping[str, Any], field: str) -> Op[list[Any]]:
    """The `field` entries of every page of a list, its `nextCursor` followed to the last."""
    found: list[Any] = []
    cursor: str | None = None
    while True:
        page = (yield Request("GET", path, _drop_none({**params, "cursor": cursor}))).json()
        found.extend(page[field])
        cursor = page.get("nextCursor")
        if not cursor:
            return found


class Defaults:
    """The project and environment calls use unless they name their own."""

    def __init__(self, *, project: str | None, environment: Environment) -> None:
        self.project = project
        self.environment: Environment = environment

    def _project(self, project: str | None) -> str:
        chosen = project or self.project
        if chosen is None:
            raise ValueError("Pass project=... here or to the client.")
        return chosen

    def _root(self, project: str | None) -> str:
        """The path of the project's routes."""
        return f"projects/{_seg(self._project(project))}"

    def _env(self, environment: Environment | None) -> dict[str, str]:
        return {"environment": environment or self.environment}

    def _docs(self, project: str | None, resource: str, doc_id: str | None = None) -> str:
        path = f"{self._root(project)}/memory/{_seg(resource)}/documents"
        return path if doc_id is None else f"{path}/{_seg(doc_id)}"


Revision = str | Mapping[str, Any]


# Projects, memory resources and API keys.


def memory_inventory(
    c: Defaults, *, project: str | None = None, environment: Environment | None = None
) -> Op[list[dict[str, Any]]]:
    path = f"{c._root(project)}/memory"
    response = yield Request("GET", path, c._env(environment))
    return cast(list[dict[str, Any]], response.json()["resources"])


def list_api_keys(c: Defaults, *, project: str | None = None) -> Op[list[ApiKey]]:
    """Every key of the project, newest first, revoked ones included: the pages followed."""
    path = f"{c._root(project)}/api-keys"
    return cast(list[ApiKey], (yield from _every_page(path, {}, "apiKeys")))


def create_api_key(
    c: Defaults, *, name: str = "", read_only: bool = False, project: str | None = None
) -> Op[NewApiKey]:
    path = f"{c._root(project)}/api-keys"
    response = yield Request("POST", path, json={"name": name, "readOnly": read_only})
    return cast(NewApiKey, response.json())


def revoke_api_key(c: Defaults, key_id: int | str, *, project: str | None = None) -> Op[ApiKey]:
    response = yield Request("POST", f"{c._root(project)}/api-keys/{_seg(key_id)}/revoke")
    return cast(ApiKey, response.json())


def rotate_api_key(
    c: Defaults, key_id: int | str, *, grace_seconds: int = 0, project: str | None = None
) -> Op[NewApiKey]:
    """A new key like the old one; the old one keeps working for grace_seconds."""
    path = f"{c._root(project)}/api-keys/{_seg(key_id)}/rotate"
    response = yield Request("POST", path, json={"graceSeconds": grace_seconds})
    return cast(NewApiKey, response.json())


# Documents.


def get_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    response = yield Request("GET", c._docs(project, resource, doc_id), c._env(environment))
    return cast(Document, response.json())


def create_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    title: str,
    text: str | None = None,
    summary: str | None = None,
    agent_writes: AgentWrites | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    """Creates a document; 412 (ApiError) when the id exists or was deleted."""
    body = _drop_none(
        {"title": title, "text": text, "summary": summary, "agentWrites": agent_writes}
    )
    response = yield Request(
        "PUT", c._docs(project, resource, doc_id), c._env(environment), body, {"If-None-Match": "*"}
    )
    return cast(Document, response.json())


def replace_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    revision: Revision,
    text: str,
    summary: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    """Replaces text (and summary when given) if `revision` is still current.

    `revision` is a revision, an ETag as sent, or the document as last read;
    a stale one raises ApiError 412.
    """
    response = yield Request(
        "PUT",
        c._docs(project, resource, doc_id),
        c._env(environment),
        _drop_none({"text": text, "summary": summary}),
        {"If-Match": if_match(revision)},
    )
    return cast(Document, response.json())


def patch_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    revision: Revision,
    title: str | None = None,
    agent_writes: AgentWrites | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    response = yield Request(
        "PATCH",
        c._docs(project, resource, doc_id),
        c._env(environment),
        _drop_none({"title": title, "agentWrites": agent_writes}),
        {"If-Match": if_match(revision)},
    )
    return cast(Document, response.json())


def delete_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    revision: Revision,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[None]:
    yield Request(
        "DELETE",
        c._docs(project, resource, doc_id),
        c._env(environment),
        headers={"If-Match": if_match(revision)},
    )


def list_documents(
    c: Defaults,
    resource: str,
    *,
    cursor: str | None = None,
    as_of: str | None = None,
    q: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[DocumentPage]:
    """A page of documents, newest first; `as_of` (ISO 8601) lists the resource as it was
    then; `q` searches it (ranked hits with snippets)."""
    params = _drop_none({**c._env(environment), "cursor": cursor, "asOf": as_of, "q": q})
    response = yield Request("GET", c._docs(project, resource), params)
    return cast(DocumentPage, response.json())


def version_readers(
    c: Defaults,
    resource: str,
    doc_id: str,
    revision: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[VersionReaders]:
    """The sessions whose recalls showed this version to a model, newest first."""
    path = f"{c._docs(project, resource, doc_id)}/versions/{_seg(revision)}/readers"
    response = yield Request("GET", path, c._env(environment))
    return cast(VersionReaders, response.json())


def restore_as_of(
    c: Defaults,
    resource: str,
    *,
    as_of: str,
    documents: list[str] | None = None,
    dry_run: bool = False,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[RestoreAsOf]:
    """Restores documents (default: all of the resource) to their text at `as_of`."""
    body = _drop_none({"asOf": as_of, "documents": documents, "dryRun": dry_run})
    path = f"{c._root(project)}/memory/{_seg(resource)}/restore"
    response = yield Request("POST", path, c._env(environment), body)
    return cast(RestoreAsOf, response.json())


# Review of agent writes (deciding needs a read-write key).


def _proposals(c: Defaults, project: str | None, proposal_id: str | None = None) -> str:
    path = f"{c._root(project)}/memory/proposals"
    return path if proposal_id is None else f"{path}/{_seg(proposal_id)}"


def list_proposals(
    c: Defaults,
    *,
    state: ProposalState = "pending",
    resource: str | None = None,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProposalPage]:
    params = _drop_none(
        {**c._env(environment), "state": state, "resource": resource, "cursor": cursor}
    )
    response = yield Request("GET", _proposals(c, project), params)
    return cast(ProposalPage, response.json())


def approve_proposal(
    c: Defaults,
    proposal_id: str,
    *,
    revision: Revision,
    text: str | None = None,
    summary: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    """Writes the proposal (or `text`, your edit of it) over the document's current
    `revision`; ApiError 412 (details: currentRevision, merged) when it moved."""
    response = yield Request(
        "POST",
        _proposals(c, project, proposal_id) + "/approve",
        c._env(environment),
        _drop_none({"text": text, "summary": summary}),
        {"If-Match": if_match(revision)},
    )
    return cast(Document, response.json())


def restore_version(
    c: Defaults,
    resource: str,
    doc_id: str,
    version: str,
    *,
    revision: Revision,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Document]:
    """Makes version `version` (a revision from the history) current again, as a new
    version, if `revision` is still current (a stale one raises ApiError 412)."""
    response = yield Request(
        "POST",
        f"{c._docs(project, resource, doc_id)}/versions/{_seg(version)}/restore",
        c._env(environment),
        headers={"If-Match": if_match(revision)},
    )
    return cast(Document, response.json())


def reject_proposal(
    c: Defaults,
    proposal_id: str,
    *,
    reason: str,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Proposal]:
    response = yield Request(
        "POST",
        _proposals(c, project, proposal_id) + "/reject",
        c._env(environment),
        {"reason": reason},
    )
    return cast(Proposal, response.json())


def redact_version(
    c: Defaults,
    resource: str,
    doc_id: str,
    version: str,
    *,
    reason: str,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Version]:
    """Replaces an old version's title, summary and text with a marker, for good (409
    for the current version); `reason` goes into the audit log."""
    response = yield Request(
        "POST",
        f"{c._docs(project, resource, doc_id)}/versions/{_seg(version)}/redact",
        c._env(environment),
        json={"reason": reason},
    )
    return cast(Version, response.json())


def search_memory(
    c: Defaults,
    q: str,
    *,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[SearchPage]:
    """Ranked hits over every document resource of the environment, 50 a page."""
    params = _drop_none({**c._env(environment), "q": q, "cursor": cursor})
    response = yield Request("GET", f"{c._root(project)}/memory/search", params)
    return cast(SearchPage, response.json())


# The audit log, export and import.


def list_audit(
    c: Defaults,
    *,
    resource: str | None = None,
    document: str | None = None,
    actor: str | None = None,
    action: str | None = None,
    since: str | None = None,
    until: str | None = None,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[AuditPage]:
    """One page of the audit log, newest first; `since`/`until` are ISO 8601 times."""
    params = {
        **c._env(environment),
        "resource": resource,
        "document": document,
        "actor": actor,
        "action": action,
        "since": since,
        "until": until,
        "cursor": cursor,
    }
    path = f"{c._root(project)}/audit"
    response = yield Request("GET", path, _drop_none(params))
    return cast(AuditPage, response.json())


def export_memory(
    c: Defaults,
    *,
    resources: list[str] | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[bytes]:
    """The export zip (the Memory page's download) of every or the chosen resources."""
    params = _drop_none({**c._env(environment), "resource": resources})
    response = yield Request("POST", f"{c._root(project)}/memory/export", params)
    return response.content


def import_memory(
    c: Defaults,
    archive: bytes,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ImportReport]:
    """Creates the documents of an export zip whose ids are free; never overwrites."""
    response = yield Request(
        "POST",
        f"{c._root(project)}/memory/import",
        c._env(environment),
        headers={"Content-Type": "application/zip"},
        content=archive,
    )
    return cast(ImportReport, response.json())


# Records of resources whose provider keeps them elsewhere (Mem0, Vertex AI Memory
# Bank, Hindsight): always within one namespace, the partition a session binds.


def _records(c: Defaults, project: str | None, resource: str, record_id: str | None = None) -> str:
    path = f"{c._root(project)}/memory/{_seg(resource)}/records"
    return path if record_id is None else f"{path}/{_seg(record_id)}"


def _in_namespace(c: Defaults, namespace: str, environment: Environment | None) -> dict[str, Any]:
    """The query parameters naming a record's environment and namespace."""
    return {**c._env(environment), "namespace": namespace}


def list_records(
    c: Defaults,
    resource: str,
    namespace: str,
    *,
    q: str | None = None,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProviderRecordPage]:
    """The namespace's records in the provider's order; with `q`, its search (one page)."""
    params = _drop_none({**_in_namespace(c, namespace, environment), "q": q, "cursor": cursor})
    response = yield Request("GET", _records(c, project, resource), params)
    return cast(ProviderRecordPage, response.json())


def create_record(
    c: Defaults,
    resource: str,
    namespace: str,
    text: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProviderRecordWrite]:
    """Adds a record: status "stored", or "queued" while the provider works on it."""
    params = _in_namespace(c, namespace, environment)
    path = _records(c, project, resource)
    response = yield Request("POST", path, params, json={"text": text})
    return cast(ProviderRecordWrite, response.json())


def get_record(
    c: Defaults,
    resource: str,
    namespace: str,
    record_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProviderRecord]:
    params = _in_namespace(c, namespace, environment)
    response = yield Request("GET", _records(c, project, resource, record_id), params)
    return cast(ProviderRecord, response.json())


def update_record(
    c: Defaults,
    resource: str,
    namespace: str,
    record_id: str,
    text: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProviderRecordWrite]:
    params = _in_namespace(c, namespace, environment)
    path = _records(c, project, resource, record_id)
    response = yield Request("PATCH", path, params, json={"text": text})
    return cast(ProviderRecordWrite, response.json())


def delete_record(
    c: Defaults,
    resource: str,
    namespace: str,
    record_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[ProviderRecordWrite]:
    params = _in_namespace(c, namespace, environment)
    response = yield Request("DELETE", _records(c, project, resource, record_id), params)
    return cast(ProviderRecordWrite, response.json())


def record_history(
    c: Defaults,
    resource: str,
    namespace: str,
    record_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[list[ProviderRecordChange]]:
    """The record's changes as the provider keeps them (not_supported where it keeps none)."""
    params = _in_namespace(c, namespace, environment)
    path = f"{_records(c, project, resource, record_id)}/history"
    response = yield Request("GET", path, params)
    return cast(list[ProviderRecordChange], response.json()["history"])


# Webhooks.


def _webhooks(c: Defaults, project: str | None, webhook_id: int | str | None = None) -> str:
    path = f"{c._root(project)}/webhooks"
    return path if webhook_id is None else f"{path}/{_seg(webhook_id)}"


def list_webhooks(c: Defaults, *, project: str | None = None) -> Op[list[Webhook]]:
    response = yield Request("GET", _webhooks(c, project))
    return cast(list[Webhook], response.json()["webhooks"])


def create_webhook(
    c: Defaults,
    url: str,
    events: list[str],
    *,
    description: str = "",
    project: str | None = None,
) -> Op[NewWebhook]:
    """Registers an endpoint; the result's `secret` signs its deliveries and is shown once."""
    body = {"url": url, "events": events, "description": description}
    response = yield Request("POST", _webhooks(c, project), json=body)
    return cast(NewWebhook, response.json())


def get_webhook(c: Defaults, webhook_id: int | str, *, project: str | None = None) -> Op[Webhook]:
    response = yield Request("GET", _webhooks(c, project, webhook_id))
    return cast(Webhook, response.json())


def update_webhook(
    c: Defaults,
    webhook_id: int | str,
    *,
    url: str | None = None,
    events: list[str] | None = None,
    description: str | None = None,
    active: bool | None = None,
    project: str | None = None,
) -> Op[Webhook]:
    """Changes what is given; `active=False` pauses it (deliveries wait), True resumes."""
    body = _drop_none({"url": url, "events": events, "description": description, "active": active})
    response = yield Request("PATCH", _webhooks(c, project, webhook_id), json=body)
    return cast(Webhook, response.json())


def rotate_webhook_secret(
    c: Defaults, webhook_id: int | str, *, project: str | None = None
) -> Op[NewWebhook]:
    response = yield Request("POST", f"{_webhooks(c, project, webhook_id)}/rotate-secret")
    return cast(NewWebhook, response.json())


def delete_webhook(c: Defaults, webhook_id: int | str, *, project: str | None = None) -> Op[None]:
    yield Request("DELETE", _webhooks(c, project, webhook_id))
    return None


def list_webhook_deliveries(
    c: Defaults,
    webhook_id: int | str,
    *,
    state: str | None = None,
    cursor: str | None = None,
    project: str | None = None,
) -> Op[WebhookDeliveryPage]:
    """One page of the endpoint's deliveries, newest first."""
    params = _drop_none({"state": state, "cursor": cursor})
    path = f"{_webhooks(c, project, webhook_id)}/deliveries"
    response = yield Request("GET", path, params)
    return cast(WebhookDeliveryPage, response.json())


def redeliver_webhook(
    c: Defaults, webhook_id: int | str, delivery_id: int | str, *, project: str | None = None
) -> Op[WebhookDelivery]:
    """Sends a delivered or failed delivery again (same event id and body)."""
    path = f"{_webhooks(c, project, webhook_id)}/deliveries/{_seg(delivery_id)}/redeliver"
    response = yield Request("POST", path)
    return cast(WebhookDelivery, response.json())


# Deployments.


def create_deployment(
    c: Defaults,
    agent: str,
    memory: list[dict[str, Any]],
    *,
    promote: Environment | None = None,
    project: str | None = None,
) -> Op[Deployment]:
    body = _drop_none({"agent": agent, "memory": memory, "promote": promote})
    response = yield Request("POST", f"{c._root(project)}/deployments", json=body)
    return cast(Deployment, response.json())


def list_deployments(
    c: Defaults, *, agent: str | None = None, project: str | None = None
) -> Op[list[Deployment]]:
    """Every deployment (of `agent`), newest first: the pages followed to the last."""
    path = f"{c._root(project)}/deployments"
    return cast(list[Deployment], (yield from _every_page(path, {"agent": agent}, "deployments")))


def get_deployment(
    c: Defaults, deployment_id: str, *, project: str | None = None
) -> Op[Deployment]:
    response = yield Request("GET", f"{c._root(project)}/deployments/{_seg(deployment_id)}")
    return cast(Deployment, response.json())


def promote_deployment(
    c: Defaults, deployment_id: str, environment: Environment, *, project: str | None = None
) -> Op[Deployment]:
    path = f"{c._root(project)}/deployments/{_seg(deployment_id)}/promote"
    response = yield Request("POST", path, json={"environment": environment})
    return cast(Deployment, response.json())


# Sessions.


def create_session(
    c: Defaults,
    *,
    agent: str,
    idempotency_key: str,
    memory: Mapping[str, Mapping[str, str]] | None = None,
    deployment_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[CreatedSession]:
    """Creates a session, or returns the one `idempotency_key` already created.

    `agent` is `<agent>` (in this client's environment) or `<agent>@<environment>`.
    """
    agent_id = agent if "@" in agent else f"{agent}@{environment or c.environment}"
    body = _drop_none(
        {
            "agentId": agent_id,
            "projectId": c._project(project),
            "deploymentId": deployment_id,
            "memory": dict(memory) if memory is not None else None,
            "labels": dict(labels) if labels is not None else None,
        }
    )
    response = yield Request(
        "POST", "sessions", json=body, headers={"Idempotency-Key": idempotency_key}
    )
    data = response.json()
    created = response.status_code == 201
    result = _Result(session=data["session"], deployment=data["deployment"], created=created)
    return cast(CreatedSession, result)


def get_session(c: Defaults, session_id: str) -> Op[Session]:
    response = yield Request("GET", f"sessions/{_seg(session_id)}")
    return cast(Session, response.json())


def list_sessions(
    c: Defaults,
    *,
    agent: str | None = None,
    status: Literal["active", "ended"] | None = None,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[SessionPage]:
    params = {
        **c._env(environment),
        "projectId": c._project(project),
        "agent": agent,
        "status": status,
        "cursor": cursor,
    }
    response = yield Request("GET", "sessions", _drop_none(params))
    return cast(SessionPage, response.json())


def end_session(c: Defaults, session_id: str) -> Op[Session]:
    response = yield Request("POST", f"sessions/{_seg(session_id)}/end")
    return cast(Session, response.json())


def session_events(c: Defaults, session_id: str, *, after: int = 0) -> Op[EventPage]:
    response = yield Request("GET", f"sessions/{_seg(session_id)}/events", {"after": after})
    return cast(EventPage, response.json())


# The runtime, as an agent host uses it.


def revert_session(c: Defaults, session_id: str, *, dry_run: bool = False) -> Op[SessionRevert]:
    """Undoes what the session wrote where nobody wrote after it; `dry_run` only plans."""
    body = {"dryRun": dry_run}
    response = yield Request("POST", f"sessions/{_seg(session_id)}/revert", json=body)
    return cast(SessionRevert, response.json())


def list_recalls(c: Defaults, session_id: str, *, cursor: str | None = None) -> Op[RecallPage]:
    """What the model was given: the session's recalls, newest first."""
    response = yield Request(
        "GET", f"sessions/{_seg(session_id)}/recalls", _drop_none({"cursor": cursor})
    )
    return cast(RecallPage, response.json())


def recall(
    c: Defaults,
    session_id: str,
    *,
    use: list[str] | tuple[str, ...] = (),
    input_text: str | None = None,
    request_id: str | None = None,
) -> Op[Recall]:
    """Recalls every bound resource before a model request; `use` selects the tools.

    With `request_id` (the model request's id), a retry of the same request gets the
    recall accepted for it back, and the recall can be cancelled by that id.
    """
    body: dict[str, Any] = {"use": list(use), "input": {"text": input_text}}
    if request_id is not None:
        body["requestId"] = request_id
    response = yield Request("POST", f"sessions/{_seg(session_id)}/memory/recall", json=body)
    return cast(Recall, response.json())


def tool_call(
    c: Defaults,
    session_id: str,
    *,
    recall_id: str,
    name: str,
    arguments: Mapping[str, Any],
    call_id: str | None = None,
) -> Op[dict[str, Any]]:
    """Runs one of the model's memory tool calls and returns its result."""
    body = {
        "recallId": recall_id,
        "callId": call_id or "call_" + secrets.token_hex(8),
        "name": name,
        "arguments": dict(arguments),
    }
    response = yield Request(
        "POST",
        f"sessions/{_seg(session_id)}/memory/tool-calls",
        content=_model_json(body),
        headers={"Content-Type": "application/json"},
    )
    return cast(dict[str, Any], response.json()["result"])


def _model_json(body: Any) -> bytes:
    """A body holding what a model wrote, encoded whatever it holds, so that the server
    judges it (and refuses it as a malformed tool call) rather than the client failing
    to send it: an unpaired surrogate, which UTF-8 cannot carry, goes as its JSON
    escape; NaN and Infinity as Python writes them, which is not JSON."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


def cancel(
    c: Defaults, session_id: str, *, request_id: str | None = None, call_id: str | None = None
) -> Op[None]:
    """Cancels an in-flight recall (by its request id) or tool call (by its call id)."""
    body = _drop_none({"requestId": request_id, "callId": call_id})
    yield Request("POST", f"sessions/{_seg(session_id)}/memory/cancel", json=body)


# Provider operations: accepted and uncertain writes, and dead letters.


def list_operations(
    c: Defaults,
    *,
    state: str | None = None,
    resource: str | None = None,
    session_id: str | None = None,
    cursor: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[OperationPage]:
    """One page of operations, newest first; `state="open"` for queued and partial ones."""
    params = {
        **c._env(environment),
        **_drop_none(
            {"state": state, "resource": resource, "session": session_id, "cursor": cursor}
        ),
    }
    path = f"{c._root(project)}/memory/operations"
    response = yield Request("GET", path, params)
    return cast(OperationPage, response.json())


def get_operation(
    c: Defaults,
    operation_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Operation]:
    """One operation: where a write answered `queued` (its `operation`) stands now."""
    path = f"{c._root(project)}/memory/operations/{_seg(operation_id)}"
    response = yield Request("GET", path, c._env(environment))
    return cast(Operation, response.json())


def _dead_letter(
    c: Defaults, operation_id: str, action: str, project: str | None, env: Environment | None
) -> Op[Operation]:
    path = f"{c._root(project)}/memory/operations/{_seg(operation_id)}/{action}"
    response = yield Request("POST", path, c._env(env))
    return cast(Operation, response.json())


def retry_operation(
    c: Defaults,
    operation_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Operation]:
    """Checks a dead letter again from the start."""
    return (yield from _dead_letter(c, operation_id, "retry", project, environment))


def discard_operation(
    c: Defaults,
    operation_id: str,
    *,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[Operation]:
    """Sets a dead letter aside; it stays listed as discarded."""
    return (yield from _dead_letter(c, operation_id, "discard", project, environment))


# The two steps of opening a topic: its document, then a session on it.


def ensure_document(
    c: Defaults,
    resource: str,
    doc_id: str,
    *,
    title: str | None = None,
    text: str | None = None,
    summary: str | None = None,
    project: str | None = None,
    environment: Environment | None = None,
) -> Op[EnsuredDocument]:
    """Creates the document unless it exists; an existing one is left as it is."""
    where: dict[str, Any] = {"project": project, "environment": environment}
    try:
        document = yield from create_document(
            c, resource, doc_id, title=title or doc_id, text=text, summary=summary, **where
        )
        return cast(EnsuredDocument, _Result(document=document, created=True))
    except ApiError as exc:
        if exc.status != 412:
            raise
    try:
        document = yield from get_document(c, resource, doc_id, **where)
        return cast(EnsuredDocument, _Result(document=document, created=False))
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise DocumentDeleted(
            404, "document_deleted", f"Document '{doc_id}' was deleted; use a new id."
        ) from exc


def start_session_on_document(
    c: Defaults,
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
) -> Op[StartedSession]:
    """Creates the document (if new) and a session bound to it; safe to retry.

    `document` may carry title, text and summary for a new document. A
    deleted id raises DocumentDeleted before any session is created.
    """
    fields = dict(document or {})
    unknown = set(fields) - {"title", "text", "summary"}
    if unknown:
        raise ValueError(f"document takes title, text and summary, not {sorted(unknown)}.")
    # Before the document: a key the session cannot take must leave nothing behind.
    session_key = topic_session_key(idempotency_key)
    ensured = yield from ensure_document(
        c, resource, document_id, project=project, environment=environment, **fields
    )
    bindings = {
        **(memory or {}),
        resource: {"scope": "document", "id": document_id, "access": access},
    }
    created = yield from create_session(
        c,
        agent=agent,
        idempotency_key=session_key,
        memory=bindings,
        deployment_id=deployment_id,
        labels=labels,
        project=project,
        environment=environment,
    )
    return cast(StartedSession, _Result(document=ensured, session=created))
