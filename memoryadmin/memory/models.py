"""Projects, keys, deployments, resources, documents, versions and the audit log."""

from __future__ import annotations

from datetime import datetime

from django.db import models
from django.db.models import Q

from memoryadmin.core.environments import Environment
from memoryadmin.memory.providers import keeps_documents


class WriterKind(models.TextChoices):
    OWNER = "owner"
    AGENT = "agent"


class Project(models.Model):
    id = models.CharField(primary_key=True, max_length=64)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    # How many erasures of the project have committed: advanced by each, in the
    # transaction that changes the copies (services/projects.py, `erasure_epoch_advance`). A
    # recall stores what it read only while the number it read with its memory stands.
    erasure_epoch = models.IntegerField(default=0, db_default=0)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.id


class ImportSlot(models.Model):
    """A project's one import at a time (memory/imports.py, `import_slot`): held by the
    import that wrote `token` until it gives it back or `until` passes (an import that
    died holding it frees it then). In the database, so every process and instance
    sharing it sees it, with or without a shared cache."""

    project = models.OneToOneField(
        Project, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    token = models.CharField(max_length=32)
    until = models.DateTimeField()

    def __str__(self) -> str:
        return f"import of {self.project_id} until {self.until}"


class ApiKey(models.Model):
    # null project: the key reaches every project.
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=16)
    hashed = models.CharField(max_length=64, unique=True)
    read_only = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set by revoke (now) or rotate (now + the grace period): the key stops
    # working at that moment.
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Refreshed at most once a minute, not on every request.
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}…"

    def can_reach(self, project_id: str) -> bool:
        return self.project_id is None or self.project_id == project_id

    def works_at(self, now: datetime) -> bool:
        """Whether the key still works at `now` (as `keys._live` selects such keys)."""
        return self.revoked_at is None or self.revoked_at > now


class Deployment(models.Model):
    id = models.CharField(primary_key=True, max_length=40)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="deployments")
    agent = models.CharField(max_length=64)
    # The normalised memory declarations, exactly as the deployment declared them.
    memory = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "agent", "-created_at"]),
            # The list's pages, newest first (the keyset's order).
            models.Index(fields=["project", "-created_at", "id"], name="deployment_history"),
        ]

    def __str__(self) -> str:
        return self.id


class ActiveDeployment(models.Model):
    """Which deployment of an agent is active in an environment."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE)
    environment = models.CharField(max_length=16, choices=Environment.choices)
    agent = models.CharField(max_length=64)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="activations")
    promoted_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "environment", "agent"], name="one_active_deployment_per_agent"
            )
        ]

    def __str__(self) -> str:
        return f"{self.agent}@{self.environment}: {self.deployment_id}"


class Resource(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="resources")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    resource_id = models.CharField(max_length=128)
    # A registered provider kind (memoryadmin/memory/providers.py); not a fixed
    # list, so adding a kind needs no migration.
    kind = models.CharField(max_length=32)
    max_bytes = models.PositiveIntegerField()
    description = models.TextField(blank=True)
    # Provider settings beyond maxBytes (for http providers: connection, path, tools).
    config = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "environment", "resource_id"], name="unique_resource"
            )
        ]
        ordering = ["resource_id"]

    def __str__(self) -> str:
        return f"{self.project_id}/{self.environment}/{self.resource_id}"

    @property
    def keeps_documents(self) -> bool:
        """Whether its provider kind keeps documents here (see memory/providers.py)."""
        return keeps_documents(self)

    @property
    def review_default(self) -> bool:
        """Whether the manifest sends agent writes of this resource's documents to review."""
        return bool(self.config.get("agentWrites") == "review")

    @property
    def review_policy(self) -> dict[str, object]:
        """Which writes review catches when it is the resource default (empty: all of them)."""
        policy = self.config.get("reviewPolicy") or {}
        return dict(policy)


class DocumentQuerySet(models.QuerySet["Document"]):
    def live(self) -> DocumentQuerySet:
        return self.filter(deleted=False)


class Document(models.Model):
    # Indexed by unique_document_id, which leads with it (every index costs each write).
    resource = models.ForeignKey(
        Resource, on_delete=models.CASCADE, related_name="documents", db_index=False
    )
    doc_id = models.CharField(max_length=128)
    title = models.CharField(max_length=240, blank=True)
    text = models.TextField(blank=True)
    summary = models.CharField(max_length=240, blank=True)
    agent_writes = models.BooleanField(default=True)
    # Agent saves become proposals: True on this document, False never, None as
    # the resource's manifest says. A freeze (agent_writes False) wins over both.
    agent_review = models.BooleanField(null=True, blank=True, default=None)
    revision = models.CharField(max_length=40)
    bytes = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField()
    writer_kind = models.CharField(max_length=8, choices=WriterKind.choices)
    writer_session_id = models.CharField(max_length=64, blank=True)
    deleted = models.BooleanField(default=False)
    created_at = models.DateTimeField()

    objects = DocumentQuerySet.as_manager()

    class Meta:
        constraints = [
            # Tombstones keep their row, so a deleted id can never be created again.
            models.UniqueConstraint(fields=["resource", "doc_id"], name="unique_document_id"),
        ]
        indexes = [
            # Serves the keyset order of the document list: updatedAt desc, then id asc.
            models.Index(
                "resource",
                models.F("updated_at").desc(),
                "doc_id",
                name="document_keyset",
                condition=Q(deleted=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.resource}/{self.doc_id}"


class DocumentVersion(models.Model):
    """One row per committed write of a document."""

    # Indexed by unique_version_revision and version_newest_first, which lead with it.
    document = models.ForeignKey(
        Document, on_delete=models.CASCADE, related_name="versions", db_index=False
    )
    revision = models.CharField(max_length=40)
    writer_kind = models.CharField(max_length=8, choices=WriterKind.choices)
    writer_session_id = models.CharField(max_length=64, blank=True)
    title = models.CharField(max_length=240, blank=True)
    summary = models.CharField(max_length=240, blank=True)
    text = models.TextField(blank=True)
    bytes = models.PositiveIntegerField(default=0)
    agent_writes = models.BooleanField(default=True)
    # What the write did: create, replace, patch, restore, save (agent), approve or review.
    action = models.CharField(max_length=16)
    # Where the write came from: the acting user, key or operating-system user,
    # and for agents their session, recall, tool call and approved proposal.
    origin = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    # Set once by a redaction, which replaced title, summary and text with a marker.
    redacted_at = models.DateTimeField(null=True, blank=True)
    # Database defaults: the version row is also written by raw INSERTs that name
    # only the columns they know (memoryadmin.memory.services.documents).
    redacted_by = models.CharField(max_length=200, blank=True, db_default="")
    redaction_reason = models.CharField(max_length=500, blank=True, db_default="")

    class Meta:
        indexes = [
            models.Index(fields=["document", "-id"], name="version_newest_first"),
            # What one agent session wrote (a session revert starts here).
            models.Index(
                fields=["writer_session_id"],
                name="version_by_session",
                condition=~Q(writer_session_id=""),
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["document", "revision"], name="unique_version_revision")
        ]

    def __str__(self) -> str:
        return f"{self.document_id}@{self.revision}"


class ProposalState(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ProposalQuerySet(models.QuerySet["Proposal"]):
    def in_state(self, state: str, *, now: datetime) -> ProposalQuerySet:
        """Expiry is a matter of time, not of a job: a pending proposal past its
        expiry is expired for every reader and can no longer be decided."""
        if state == ProposalState.PENDING:
            return self.filter(state=state, expires_at__gt=now)
        if state == ProposalState.EXPIRED:
            return self.filter(Q(state=state) | Q(state=ProposalState.PENDING, expires_at__lte=now))
        return self.filter(state=state)


class Proposal(models.Model):
    """An agent save held for an owner's decision instead of being written."""

    id = models.CharField(primary_key=True, max_length=40)
    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="proposals")
    state = models.CharField(
        max_length=8, choices=ProposalState.choices, default=ProposalState.PENDING
    )
    text = models.TextField(blank=True)
    # None: the save left the summary as it was; "" clears it, so the two differ.
    summary = models.CharField(max_length=240, null=True, blank=True)  # noqa: DJ001
    bytes = models.PositiveIntegerField(default=0)
    # The revision the agent read (from its recall).
    base_revision = models.CharField(max_length=40)
    session_id = models.CharField(max_length=40)
    agent = models.CharField(max_length=64, blank=True)
    recall_id = models.CharField(max_length=40, blank=True)
    call_id = models.CharField(max_length=256, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=500, blank=True)
    # The document revision the approval wrote.
    applied_revision = models.CharField(max_length=40, blank=True)

    objects = ProposalQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["document", "state", "-created_at"], name="proposal_by_document"),
            models.Index(fields=["state", "-created_at"], name="proposal_by_state"),
        ]

    def __str__(self) -> str:
        return self.id

    def state_at(self, now: datetime) -> str:
        if self.state == ProposalState.PENDING and self.expires_at <= now:
            return ProposalState.EXPIRED
        return self.state


class AuditEntry(models.Model):
    # null project: an action on something that spans projects (an all-projects key).
    # Indexed by audit_newest_first and audit_by_document, which lead with it.
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="audit_entries",
        db_index=False,
    )
    environment = models.CharField(max_length=16, blank=True)
    # Who acted: "user:<name>", "key:<prefix>" or "cli:<os user>".
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=64)
    resource_id = models.CharField(max_length=128, blank=True)
    document_id = models.CharField(max_length=128, blank=True)
    revision = models.CharField(max_length=40, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["project", "environment", "-id"], name="audit_newest_first"),
            models.Index(
                fields=["project", "environment", "resource_id", "document_id", "-id"],
                name="audit_by_document",
            ),
        ]
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.resource_id}/{self.document_id}"
