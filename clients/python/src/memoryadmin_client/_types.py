"""The JSON shapes the memoryadmin API answers with, as TypedDicts."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Environment = Literal["development", "production"]
AgentWrites = Literal["enabled", "disabled", "review"]
ProposalState = Literal["pending", "approved", "rejected", "expired"]


class Writer(TypedDict):
    kind: Literal["owner", "agent"]
    sessionId: NotRequired[str]


class DocumentEntry(TypedDict):
    id: str
    title: str
    summary: str
    agentWrites: AgentWrites
    revision: str
    bytes: int
    maxBytes: int
    updatedAt: str
    writer: Writer
    deleted: NotRequired[bool]  # asOf lists only
    currentRevision: NotRequired[str | None]  # asOf lists only
    # Search results only: escaped HTML with the matching words in <mark>.
    snippet: NotRequired[str]


class SearchHit(DocumentEntry):
    resource: str


class SearchPage(TypedDict):
    documents: list[SearchHit]
    nextCursor: str | None


class Document(DocumentEntry):
    text: str


class DocumentPage(TypedDict):
    documents: list[DocumentEntry]
    nextCursor: str | None


class RestoreAsOfItem(TypedDict):
    documentId: str
    action: Literal["restore", "unchanged", "deleted", "created_since", "conflict", "absent"]
    restoreRevision: str | None
    currentRevision: str | None
    revision: str | None


class RestoreAsOf(TypedDict):
    asOf: str
    dryRun: bool
    documents: list[RestoreAsOfItem]


class RevertItem(TypedDict):
    resource: str
    documentId: str
    action: Literal["restore", "conflict", "unchanged", "deleted"]
    currentRevision: str | None
    restoreRevision: str | None
    revision: str | None
    merged: str | None


class SessionRevert(TypedDict):
    sessionId: str
    dryRun: bool
    documents: list[RevertItem]


class VersionReader(TypedDict):
    recallId: str
    sessionId: str
    agent: str
    createdAt: str


class VersionReaders(TypedDict):
    readers: list[VersionReader]


class Proposal(TypedDict):
    id: str
    resource: str
    documentId: str
    state: ProposalState
    text: str
    summary: str | None
    bytes: int
    baseRevision: str
    currentRevision: str | None
    sessionId: str
    agent: str
    recallId: str
    callId: str
    createdAt: str
    expiresAt: str
    decidedAt: str | None
    decidedBy: str
    reason: str
    appliedRevision: str | None


class ProposalPage(TypedDict):
    proposals: list[Proposal]
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


class ProviderRecord(TypedDict):
    id: str
    text: str
    createdAt: str | None
    updatedAt: str | None
    metadata: dict[str, Any]  # providerExternalId: the provider's own id


class ProviderRecordPage(TypedDict):
    records: list[ProviderRecord]
    nextCursor: str | None


class ProviderRecordWrite(TypedDict):
    status: Literal["stored", "queued", "deleted"]
    record: NotRequired[ProviderRecord]
    records: NotRequired[list[ProviderRecord]]
    id: NotRequired[str]
    operation: NotRequired[str]  # the open operation while the provider has it queued
    providerOperation: NotRequired[str]


class ProviderRecordChange(TypedDict):
    action: str
    text: str | None
    previousText: NotRequired[str | None]
    at: str | None


class Webhook(TypedDict):
    id: int
    url: str
    events: list[str]
    description: str
    active: bool
    createdAt: str


class NewWebhook(Webhook):
    secret: str  # the signing secret, shown this once


class WebhookDelivery(TypedDict):
    id: int
    eventId: str
    event: str
    state: Literal["pending", "sending", "delivered", "failed"]
    attempts: int
    responseCode: int | None
    error: str
    createdAt: str
    lastAttemptAt: str | None
    nextAttemptAt: str | None
    deliveredAt: str | None


class WebhookDeliveryPage(TypedDict):
    deliveries: list[WebhookDelivery]
    nextCursor: str | None


class Binding(TypedDict):
    resource: str
    scope: Literal["document", "collection", "namespace"]
    id: NotRequired[str]
    access: Literal["read", "read-write"]
    partition: NotRequired[str]
    search: NotRequired[bool]
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


# What the client's session and topic calls return (`created` is the client's own).


class CreatedSession(TypedDict):
    """POST /sessions' answer, and whether this call created the session."""

    session: Session
    deployment: Deployment
    # False when the idempotency key had already created this session.
    created: bool


class EnsuredDocument(TypedDict):
    document: Document
    # False when the document already existed (and was left as it was).
    created: bool


class StartedSession(TypedDict):
    document: EnsuredDocument
    session: CreatedSession


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


class RecallRecord(TypedDict):
    id: str
    createdAt: str
    use: list[str]
    memory: dict[str, Projection]


class RecallPage(TypedDict):
    recalls: list[RecallRecord]
    nextCursor: str | None


class Recall(TypedDict):
    recallId: str
    memory: dict[str, Projection]
    tools: list[ToolDefinition]


class Operation(TypedDict):
    """An asynchronous provider operation, tracked until its provider confirms where it ended."""

    id: str
    kind: Literal[
        "accepted_write", "uncertain_write", "cancelled_write", "containment_undo", "erasure_delete"
    ]
    state: Literal["queued", "partial", "succeeded", "failed", "dead", "discarded"]
    resource: str
    namespace: str
    sessionId: str | None
    principal: str
    deploymentId: str
    providerOperation: str
    # What the write was: add, update or delete of an external provider's records ("" for
    # an http provider's declared tool), the model's tool and call, the recall the call
    # answered ("" for an owner's write), the record it changed.
    action: Literal["add", "update", "delete", ""]
    tool: str
    callId: str
    recallId: str
    recordId: str
    attempts: int
    maxAttempts: int
    lastError: str
    deadlineAt: str
    nextCheckAt: str | None
    createdAt: str
    updatedAt: str
    finishedAt: str | None


class OperationPage(TypedDict):
    operations: list[Operation]
    nextCursor: str | None


class AuditEntry(TypedDict):
    id: int
    createdAt: str
    actor: str
    action: str
    environment: str | None
    resource: str | None
    document: str | None
    revision: str | None
    detail: dict[str, Any]


class AuditPage(TypedDict):
    entries: list[AuditEntry]
    nextCursor: str | None


class ImportedDocument(TypedDict):
    resource: str
    id: str
    status: Literal["created", "skipped", "failed"]
    reason: Literal["exists", "deleted", "missing-resource", "invalid"] | None
    message: str


class ImportReport(TypedDict):
    dryRun: bool
    created: int
    skipped: int
    failed: int
    documents: list[ImportedDocument]


class Redaction(TypedDict):
    at: str
    by: str
    reason: str


class Origin(TypedDict):
    actor: NotRequired[str]
    sessionId: NotRequired[str]
    recallId: NotRequired[str]
    callId: NotRequired[str]
    proposalId: NotRequired[str]


class Version(TypedDict):
    revision: str
    writer: Writer
    origin: Origin
    bytes: int
    title: str
    summary: str
    agentWrites: Literal["enabled", "disabled"]
    action: str
    createdAt: str
    redacted: Redaction | None
    text: NotRequired[str]
