"""Agent sessions, their memory bindings, recalls and events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models

from memoryadmin.core.environments import Environment
from memoryadmin.memory.models import Deployment, Project, Resource
from memoryadmin.runner.models import Job


class SessionStatus(models.TextChoices):
    ACTIVE = "active"
    ENDED = "ended"


class Scope(models.TextChoices):
    DOCUMENT = "document"
    COLLECTION = "collection"
    NAMESPACE = "namespace"


class Access(models.TextChoices):
    READ = "read"
    READ_WRITE = "read-write"


class SessionQuerySet(models.QuerySet["Session"]):
    def active(self) -> SessionQuerySet:
        return self.filter(status=SessionStatus.ACTIVE)


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sessions")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    agent = models.CharField(max_length=64)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="sessions")
    status = models.CharField(
        max_length=8, choices=SessionStatus.choices, default=SessionStatus.ACTIVE
    )
    labels = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=256)
    # sha256 of the creation inputs a reused key must repeat: agent,
    # deployment, environment and bindings.
    fingerprint = models.CharField(max_length=64)
    # The seq of the newest event; advanced under the session's row lock.
    last_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # Not a field: the bindings written with the session by this process (its create;
    # bindings never change after it), so that its answer lists them without reading
    # them back. None for a session read from the database.
    written_bindings: list[Binding] | None = None
    # Not a field: the project's erasure epoch, read in the statement that read the
    # session (services/sessions.py); a recall stores what it read only while it stands
    # (services/provenance.py). None for a session read otherwise.
    erasure_epoch: int | None = None

    objects = SessionQuerySet.as_manager()

    class Meta:
        constraints = [
            # Two concurrent creates with one key cannot both insert.
            models.UniqueConstraint(
                fields=["project", "idempotency_key"], name="unique_session_idempotency_key"
            ),
        ]
        indexes = [
            models.Index(
                "project",
                "environment",
                models.F("created_at").desc(),
                "id",
                name="session_newest_first",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    @property
    def is_active(self) -> bool:
        return self.status == SessionStatus.ACTIVE


class Binding(models.Model):
    """A session's admission to one resource; fixed after creation."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="bindings")
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="bindings")
    scope = models.CharField(max_length=16, choices=Scope.choices)
    # The document id (document scope) or the namespace id (namespace scope).
    target_id = models.CharField(max_length=128, blank=True)
    access = models.CharField(max_length=16, choices=Access.choices, default=Access.READ)
    # Collections only: whether the binding offers memory_search.
    search = models.BooleanField(default=False)
    # Not a field: a document binding's live document (None: missing) as its
    # DOCUMENT_FIELDS by name, set when read with the session for a recall; unset otherwise.
    bound_document: dict[str, Any] | None

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "resource"], name="one_binding_per_resource")
        ]
        indexes = [models.Index(fields=["resource", "target_id"], name="binding_by_target")]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.resource_id}"


class Recall(models.Model):
    """What one model request saw: the projection and the revisions behind it."""

    id = models.CharField(primary_key=True, max_length=40)
    # Looked up by recall_newest_first, whose first column it is.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="recalls", db_index=False
    )
    # The resources the render selected: their tools are the ones offered.
    use = models.JSONField(default=list)
    # {resource: {"text", "sources", "writable"}} as returned to the host.
    memory = models.JSONField(default=dict)
    # {resource: revision} for document bindings: the revision saves must match.
    revisions = models.JSONField(default=dict)
    # {resource: cursor} kept for providers that return one; never shown to the model.
    cursors = models.JSONField(default=dict, blank=True)
    # The model request it was accepted for: a retried request with the same id
    # reuses this recall; `fingerprint` is of the request body it was made from.
    request_id = models.CharField(max_length=256, blank=True, default="")
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["session", "-created_at"], name="recall_newest_first")]
        constraints = [
            models.UniqueConstraint(
                fields=["session", "request_id"],
                condition=~models.Q(request_id=""),
                name="unique_recall_request",
            )
        ]

    def __str__(self) -> str:
        return self.id


class RecallSource(models.Model):
    """A document revision a recall put in front of the model: which sessions read a
    version is a look-up by (resource, document, revision)."""

    # Written by the statement that writes its recall (recall_store), so no foreign key
    # check in the database: PostgreSQL plans that check once per connection, and a plan
    # made while the recalls table was small scans the whole table on every recall
    # (recall latency grew with every recall stored). Deletes cascade through the ORM.
    recall = models.ForeignKey(
        Recall, on_delete=models.CASCADE, related_name="sources", db_constraint=False
    )
    # Looked up by recall_source_by_revision, whose first column it is. The resource is
    # that of a binding the recall just read; no check in the database either (each
    # recall's commit locked every bound resource's row to check it). Deletes cascade
    # through the ORM.
    resource = models.ForeignKey(
        Resource, on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    doc_id = models.CharField(max_length=128)
    revision = models.CharField(max_length=40)

    class Meta:
        indexes = [
            models.Index(
                fields=["resource", "doc_id", "revision"], name="recall_source_by_revision"
            )
        ]

    def __str__(self) -> str:
        return f"{self.recall_id}: {self.doc_id}@{self.revision}"


class EventType(models.TextChoices):
    SESSION_CREATED = "session.created"
    MEMORY_SAVED = "memory.saved"
    # A write through an external or http provider's tool that the provider answered
    # (the records it stored): the evidence an incident's trace follows.
    RECORD_SAVED = "record.saved"
    SESSION_ENDED = "session.ended"


class SessionEvent(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    type = models.CharField(max_length=32, choices=EventType.choices)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="unique_event_seq"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.type}"


class OperationState(models.TextChoices):
    # Open: the provider has not confirmed a terminal state yet.
    QUEUED = "queued"
    PARTIAL = "partial"
    # Terminal.
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    # Attempts or time ran out: a dead letter, never taken for a success.
    DEAD = "dead"
    # A dead letter an owner set aside.
    DISCARDED = "discarded"


OPEN_OPERATION_STATES = (OperationState.QUEUED, OperationState.PARTIAL)
# Settled: where housekeeping removes them once their days have passed. A dead letter is
# not: it waits for an owner (retried, it is open again; discarded, settled).
SETTLED_OPERATION_STATES = (
    OperationState.SUCCEEDED,
    OperationState.FAILED,
    OperationState.DISCARDED,
)


class OperationKind(models.TextChoices):
    # A write the provider answered `accepted`: queued upstream.
    ACCEPTED_WRITE = "accepted_write"
    # A non-idempotent write whose reply was lost (timeout, transport failure).
    UNCERTAIN_WRITE = "uncertain_write"
    # A non-idempotent write cancelled while in flight.
    CANCELLED_WRITE = "cancelled_write"
    # An incident containment's undo of a record that the provider refused or did not
    # answer: recorded as a dead letter for an owner to settle.
    CONTAINMENT_UNDO = "containment_undo"
    # An erasure's delete of a record that the provider refused or did not answer.
    ERASURE_DELETE = "erasure_delete"


class OperationAction(models.TextChoices):
    # What a write of records that live with the provider was (blank for a declared
    # tool of an http provider: its `tool` names it).
    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"


class ProviderOperation(models.Model):
    """An asynchronous provider operation, tracked until the provider confirms where it ended."""

    id = models.CharField(primary_key=True, max_length=40)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="operations")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="operations")
    namespace = models.CharField(max_length=128, blank=True)
    # The principal: the session (and its agent) or the owner that caused it.
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="operations"
    )
    principal = models.CharField(max_length=200)
    deployment_id = models.CharField(max_length=40, blank=True)
    kind = models.CharField(max_length=32, choices=OperationKind.choices)
    # The provider's name for it (for http providers: the protocol's operationId).
    provider_operation = models.CharField(max_length=600)
    # What the write was: its action, the model's tool (and call, and the recall it
    # answered) that made it, and the record it changed (ours, `xm_...`; none for an
    # external add; the id an http provider's accepted write named), so an owner reading
    # a dead letter knows what to check and retry, and the session's `record.saved` can
    # be written when it succeeds.
    action = models.CharField(max_length=8, choices=OperationAction.choices, blank=True)
    tool = models.CharField(max_length=64, blank=True)
    call_id = models.CharField(max_length=256, blank=True)
    recall_id = models.CharField(max_length=40, blank=True, db_default="")
    record_id = models.CharField(max_length=128, blank=True)
    state = models.CharField(
        max_length=16, choices=OperationState.choices, default=OperationState.QUEUED
    )
    # The runner's job that checks it (its checks, their deadline, the next one).
    job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["project", "environment", "-created_at", "id"], name="operation_newest"
            ),
            models.Index(fields=["session", "state"], name="operation_session"),
            # Housekeeping's settled operations past their days.
            models.Index(fields=["state", "updated_at"], name="operation_settled"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.kind} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_OPERATION_STATES

    @property
    def attempts(self) -> int:
        return self.job.attempts if self.job is not None else 0

    @property
    def max_attempts(self) -> int:
        return self.job.max_attempts if self.job is not None else 0

    @property
    def deadline_at(self) -> datetime | None:
        return self.job.deadline_at if self.job is not None else None

    @property
    def next_check_at(self) -> datetime | None:
        return self.job.run_after if self.job is not None and self.is_open else None


class RecordDeleteClaim(models.Model):
    """A record's delete being sent to its provider: committed by the caller that then
    looks for an open delete of the record, sends one if there is none and records its
    operation, and removed after. The unique key keeps a second caller waiting until the
    first's claim is gone, so it finds the first's open operation instead of sending
    again; the table holds rows only while a delete is in flight (or a dead process's,
    taken over once older than the call's deadline and its margin)."""

    resource = models.ForeignKey(Resource, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=128)
    record_id = models.CharField(max_length=128)
    claimed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["resource", "namespace", "record_id"], name="record_delete_claim"
            )
        ]

    def __str__(self) -> str:
        return f"{self.resource_id}:{self.namespace}:{self.record_id}"
