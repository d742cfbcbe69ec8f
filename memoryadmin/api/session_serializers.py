"""Input serializers of the session routes, and their output shapes for the schema.

Output bodies are built by `memoryadmin.agents.representations`; tests/test_shapes.py
checks these shapes (and the client's TypedDicts) against what those functions return."""

from __future__ import annotations

from rest_framework import serializers

from memoryadmin.agents.services.runtime import INPUT_TEXT_MAX_BYTES
from memoryadmin.agents.services.sessions import AGENT_REFS
from memoryadmin.api.serializers import (
    DeploymentOutput,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
)
from memoryadmin.core.environments import Environment


class SessionCreateInput(StrictSerializer):
    agentId = StrictCharField(allow_blank=False)
    deploymentId = StrictCharField(required=False, allow_blank=False)
    projectId = StrictCharField(required=False, allow_blank=False)
    # Checked by the service, so that every binding problem is reported as
    # invalid_memory_binding naming the binding.
    memory = serializers.JSONField(required=False)
    labels = serializers.JSONField(required=False)


class RecallInputText(StrictSerializer):
    # Its size is checked by the runtime, as every door's recall input is.
    text = StrictCharField(
        required=False,
        allow_null=True,
        help_text=f"What the model request is about; at most {INPUT_TEXT_MAX_BYTES} bytes "
        "(UTF-8, as JSON writes it), else 400 invalid_request.",
    )


class RecallInput(StrictSerializer):
    use = serializers.ListField(child=StrictCharField(allow_blank=False), required=False)
    input = RecallInputText(required=False)
    requestId = StrictCharField(
        required=False,
        allow_blank=False,
        max_length=256,
        help_text="The model request's id: a retry with the same id reuses the recall "
        "accepted for it; the same id with another body is 409 idempotency_conflict.",
    )


class ToolCallInput(StrictSerializer):
    recallId = StrictCharField(allow_blank=False)
    callId = StrictCharField(allow_blank=False, max_length=256)
    name = StrictCharField(allow_blank=False)
    # Checked by the tool, so that malformed arguments are invalid_tool_arguments.
    arguments = serializers.JSONField(required=False)


# Shapes for the schema only.


class BindingSchema(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["document", "collection", "namespace"])
    id = serializers.CharField(required=False, help_text="Document or namespace id.")
    access = serializers.ChoiceField(choices=["read", "read-write"], required=False)
    search = serializers.BooleanField(
        required=False, help_text="Collections only: offer the memory_search tool too."
    )


class SessionCreateSchema(serializers.Serializer):
    agentId = serializers.CharField(help_text=f"{AGENT_REFS}.")
    deploymentId = serializers.CharField(
        required=False, help_text="Pins a deployment; default: the agent's active one."
    )
    projectId = serializers.CharField(
        required=False, help_text="Required only for keys that reach every project."
    )
    memory = serializers.DictField(
        child=BindingSchema(), required=False, help_text="Bindings keyed by resource id (≤ 8)."
    )
    labels = serializers.DictField(child=serializers.CharField(), required=False)


class BindingOutput(serializers.Serializer):
    resource = serializers.CharField()
    scope = serializers.ChoiceField(choices=["document", "collection", "namespace"])
    id = serializers.CharField(required=False)
    access = serializers.ChoiceField(choices=["read", "read-write"])
    partition = serializers.CharField(
        required=False, help_text="Namespace bindings: the partition key at the provider."
    )
    search = serializers.BooleanField(
        required=False, help_text="Collections: true when the binding offers memory_search."
    )
    writable = serializers.BooleanField()


class SessionOutput(serializers.Serializer):
    id = serializers.CharField()
    projectId = serializers.CharField()
    agentId = serializers.CharField()
    agent = serializers.CharField()
    environment = serializers.ChoiceField(choices=Environment.values)
    deploymentId = serializers.CharField()
    status = serializers.ChoiceField(choices=["active", "ended"])
    labels = serializers.DictField(child=serializers.CharField())
    memory = BindingOutput(many=True)
    createdAt = serializers.DateTimeField()
    endedAt = serializers.DateTimeField(allow_null=True)


class SessionCreateOutput(serializers.Serializer):
    session = SessionOutput()
    deployment = DeploymentOutput()


class SessionPageOutput(serializers.Serializer):
    sessions = SessionOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class EventOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    type = serializers.ChoiceField(
        choices=["session.created", "memory.saved", "record.saved", "session.ended"]
    )
    createdAt = serializers.DateTimeField()
    # A schema-only shape, so shadowing Serializer.data is harmless.
    data = serializers.DictField(  # type: ignore[assignment]
        help_text="memory.saved: resource, documentId, revision, bytes. record.saved: "
        "resource, namespace, tool, callId, recallId, recordIds."
    )


class EventPageOutput(serializers.Serializer):
    events = EventOutput(many=True)
    nextAfter = serializers.IntegerField(
        allow_null=True, help_text="Pass as `after` for more; null when this page is the last."
    )


class SourceOutput(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    revision = serializers.CharField()
    updatedAt = serializers.DateTimeField()


class ProjectionOutput(serializers.Serializer):
    text = serializers.CharField()
    sources = SourceOutput(many=True)
    writable = serializers.BooleanField()


class ToolDefinitionOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    inputSchema = serializers.DictField(help_text="JSON Schema of the arguments.")


class RecallOutput(serializers.Serializer):
    recallId = serializers.CharField()
    memory = serializers.DictField(child=ProjectionOutput(), help_text="Keyed by resource id.")
    tools = ToolDefinitionOutput(many=True)


class CancelInput(StrictSerializer):
    requestId = StrictCharField(required=False, allow_blank=False, max_length=256)
    callId = StrictCharField(required=False, allow_blank=False, max_length=256)


class CancelOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["requested"])


class RecallRecordOutput(serializers.Serializer):
    id = serializers.CharField()
    createdAt = serializers.DateTimeField()
    use = serializers.ListField(child=serializers.CharField())
    memory = serializers.DictField(
        child=ProjectionOutput(), help_text="What the model was given, keyed by resource id."
    )


class RecallPageOutput(serializers.Serializer):
    recalls = RecallRecordOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class RevertInput(StrictSerializer):
    dryRun = StrictBooleanField(required=False, default=False)


class RevertDocumentOutput(serializers.Serializer):
    resource = serializers.CharField()
    documentId = serializers.CharField()
    action = serializers.ChoiceField(
        choices=["restore", "conflict", "unchanged", "deleted"],
        help_text="restore: the version before the session's first write is (or, in a dry "
        "run, would be) made current; conflict: others changed the document since, nothing "
        "is overwritten; unchanged: already as before; deleted: the document is gone.",
    )
    currentRevision = serializers.CharField(allow_null=True)
    restoreRevision = serializers.CharField(allow_null=True)
    revision = serializers.CharField(allow_null=True, help_text="The revision a restore wrote.")
    merged = serializers.CharField(
        allow_null=True,
        help_text="conflict: the session's changes undone on top of the current text, when "
        "they do not overlap what others changed.",
    )


class RevertOutput(serializers.Serializer):
    sessionId = serializers.CharField()
    dryRun = serializers.BooleanField()
    documents = RevertDocumentOutput(many=True)


class ToolCallOutput(serializers.Serializer):
    result = serializers.DictField(
        help_text="The tool's result, passed to the model unchanged: saved, proposed "
        "(a document under review), conflict, rejected, a document, or a page of documents."
    )
