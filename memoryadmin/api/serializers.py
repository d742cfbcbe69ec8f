"""Input serializers (strict: unknown fields and wrong types are 400) and
output shapes for the schema. Output bodies are built as plain dicts by
`memoryadmin.memory.representations`, the one source of each shape;
tests/test_shapes.py checks these shapes (and the client's TypedDicts) against it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.validators import MaxLengthValidator, ProhibitNullCharactersValidator
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from memoryadmin.core.environments import Environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.strings import string_breaks_rule


class StrictCharField(serializers.CharField):
    """A string, exactly as sent: no coercion from numbers, no trimming."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictSerializer(serializers.Serializer):
    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValidationError({"non_field_errors": ["The body must be a JSON object."]})
        unknown = set(data) - set(self.fields)
        if unknown:
            raise ValidationError(
                {"non_field_errors": [f"Unknown fields: {', '.join(sorted(unknown))}."]}
            )
        return super().to_internal_value(data)


def validated(serializer_class: type[StrictSerializer], request: Request) -> dict[str, Any]:
    data = request.data
    plain = _plain_fields(serializer_class)
    if plain is not None and type(data) is dict and _plainly_valid(plain, data):
        # What the serializer would return, without building one (a hot path:
        # DRF copies every field per instance). Anything else goes through it,
        # so every refusal is the serializer's own.
        return {name: data[name] for name in plain if name in data}
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# A check of one value: True when the field would take it as it is.
type Check = Callable[[Any], bool]
# {field: (required, check)} of a serializer whose every field has such a check and
# which has no validation of its own; None for any other.
type PlainFields = dict[str, tuple[bool, Check]]


@functools.cache
def _plain_fields(serializer_class: type[StrictSerializer]) -> PlainFields | None:
    if serializer_class.validate is not serializers.Serializer.validate:
        return None
    plain: PlainFields = {}
    for name, field in serializer_class().fields.items():
        check = _plain_check(field)
        if (
            check is None
            or hasattr(serializer_class, f"validate_{name}")
            or field.read_only
            or field.default is not serializers.empty  # the serializer would fill it in
        ):
            return None
        plain[name] = (field.required, check)
    return plain


def _plain_check(field: serializers.Field[Any, Any, Any, Any]) -> Check | None:
    """A field's check, for strict strings (their rules: no NUL, no surrogates, the
    blank, null and maximum length the field allows), plain string choices, lists
    of such strings, JSON values, and nested serializers of such fields; None for any
    other."""
    rules = [v for v in field.validators if not isinstance(v, _STRING_RULE)]
    if type(field) is StrictCharField and not field.min_length:
        if any(
            not (isinstance(v, MaxLengthValidator) and v.limit_value == field.max_length)
            for v in rules
        ):
            return None
        blank, null, most = field.allow_blank, field.allow_null, field.max_length

        def string(value: Any) -> bool:
            if value is None:
                return null
            return (
                isinstance(value, str)
                and (blank or value != "")
                and (most is None or len(value) <= most)
                and not string_breaks_rule(value)
            )

        return string
    if rules:
        return None
    if type(field) is serializers.JSONField and not field.binary:
        # A value of the request's parsed JSON body, which the field takes as it is: its
        # check (that the value encodes as JSON) always passes for one (a JSON body holds
        # nothing else); only a null is the field's to refuse.
        null = field.allow_null
        return lambda value: value is not None or null
    if isinstance(field, AgentWritesField) and not (field.allow_blank or field.allow_null):
        choices = frozenset(field.choices)
        return lambda value: isinstance(value, str) and value in choices
    if (
        type(field) is serializers.ListField
        and field.allow_empty
        and not field.allow_null
        and field.min_length is None
        and field.max_length is None
    ):
        child = _plain_check(field.child)
        if child is None:
            return None
        return lambda value: type(value) is list and all(child(item) for item in value)
    if isinstance(field, StrictSerializer) and not field.allow_null:
        nested = _plain_fields(type(field))
        if nested is None:
            return None
        return lambda value: type(value) is dict and _plainly_valid(nested, value)
    return None


# The rules every string field has (a length limit is a validator of its own): the
# project's one string rule (memoryadmin.core.strings), no NUL, no lone surrogate.
_STRING_RULE = (ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)


def _plainly_valid(plain: PlainFields, data: dict[str, Any]) -> bool:
    if not data.keys() <= plain.keys():
        return False
    for name, (required, check) in plain.items():
        if name not in data:
            if required:
                return False
        elif not check(data[name]):
            return False
    return True


class AgentWritesField(serializers.ChoiceField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=["enabled", "disabled", "review"], **kwargs)


class DocumentCreateInput(StrictSerializer):
    title = StrictCharField()
    text = StrictCharField(required=False)
    summary = StrictCharField(required=False)
    agentWrites = AgentWritesField(required=False)


class DocumentReplaceInput(StrictSerializer):
    text = StrictCharField()
    summary = StrictCharField(required=False)


class DocumentPatchInput(StrictSerializer):
    title = StrictCharField(required=False)
    agentWrites = AgentWritesField(required=False)


class ProviderSchema(serializers.Serializer):
    kind = serializers.CharField(
        help_text="A registered kind: document, http, mem0-oss, mem0-platform, "
        "vertex-memory-bank, hindsight (docs/providers.md)."
    )
    maxBytes = serializers.IntegerField(min_value=1, max_value=16384, required=False)
    connection = serializers.JSONField(
        required=False, help_text="http: origin, methods, pathPrefix, headers (secret refs)."
    )
    path = serializers.CharField(required=False, help_text="http: the endpoint path.")
    tools = serializers.JSONField(
        required=False, help_text="http: up to 8 tools {name, description, access, input}."
    )
    baseUrl = serializers.CharField(required=False, help_text="External providers: the API.")
    headers = serializers.JSONField(
        required=False, help_text="External providers: headers (secret references)."
    )
    scope = serializers.JSONField(
        required=False, help_text='mem0-*, vertex: {"user_id": "{namespace}"} and fixed values.'
    )


class DeclarationSchema(serializers.Serializer):
    id = serializers.CharField()
    description = serializers.CharField()
    provider = ProviderSchema(required=False)


class DeploymentCreateInput(StrictSerializer):
    agent = StrictCharField(allow_blank=False)
    memory = serializers.ListField(child=serializers.JSONField())
    promote = serializers.ChoiceField(choices=Environment.values, required=False)


class PromoteInput(StrictSerializer):
    environment = serializers.ChoiceField(choices=Environment.values)


# Output shapes, for the schema only.


class WriterOutput(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["owner", "agent"])
    sessionId = serializers.CharField(required=False)


class DocumentEntryOutput(serializers.Serializer):
    id = serializers.CharField()
    title = serializers.CharField()
    summary = serializers.CharField()
    agentWrites = AgentWritesField()
    revision = serializers.CharField()
    bytes = serializers.IntegerField()
    maxBytes = serializers.IntegerField()
    updatedAt = serializers.DateTimeField()
    writer = WriterOutput()
    deleted = serializers.BooleanField(
        required=False, help_text="asOf lists only: the document was deleted since."
    )
    currentRevision = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="asOf lists only: the revision now (null when deleted since).",
    )
    snippet = serializers.CharField(
        required=False,
        help_text="Search results only: where the document matched, as escaped HTML with "
        "the matching words in <mark>.",
    )


class SearchHitOutput(DocumentEntryOutput):
    resource = serializers.CharField()


class SearchPageOutput(serializers.Serializer):
    documents = SearchHitOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class DocumentOutput(DocumentEntryOutput):
    text = serializers.CharField()


class DocumentPageOutput(serializers.Serializer):
    documents = DocumentEntryOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class OriginOutput(serializers.Serializer):
    actor = serializers.CharField(
        required=False,
        help_text="Absent on versions written before provenance was recorded. "
        'Who wrote: "user:<name>", "key:<prefix>", "cli:<os user>" or "agent:<session>".',
    )
    sessionId = serializers.CharField(required=False)
    recallId = serializers.CharField(required=False)
    callId = serializers.CharField(required=False)
    proposalId = serializers.CharField(required=False, help_text="The approved proposal.")


class RedactionOutput(serializers.Serializer):
    at = serializers.DateTimeField()
    by = serializers.CharField()
    reason = serializers.CharField()


class RedactInput(StrictSerializer):
    reason = StrictCharField(help_text="Why; kept in the audit log. 1-500 characters.")


class VersionOutput(serializers.Serializer):
    revision = serializers.CharField()
    writer = WriterOutput()
    origin = OriginOutput()
    bytes = serializers.IntegerField()
    title = serializers.CharField()
    summary = serializers.CharField()
    agentWrites = AgentWritesField()
    action = serializers.CharField()
    createdAt = serializers.DateTimeField()
    redacted = RedactionOutput(
        allow_null=True,
        help_text="Set when the version was redacted: its title, summary and text are a marker.",
    )
    text = serializers.CharField(required=False)


class VersionPageOutput(serializers.Serializer):
    versions = VersionOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class ProposalApproveInput(StrictSerializer):
    text = StrictCharField(required=False, help_text="The approver's edit of the proposed text.")
    summary = StrictCharField(required=False)


class ProposalRejectInput(StrictSerializer):
    reason = StrictCharField(allow_blank=False)


class ProposalOutput(serializers.Serializer):
    id = serializers.CharField()
    resource = serializers.CharField()
    documentId = serializers.CharField()
    state = serializers.ChoiceField(choices=["pending", "approved", "rejected", "expired"])
    text = serializers.CharField()
    summary = serializers.CharField(allow_null=True, help_text="null: the summary is kept.")
    bytes = serializers.IntegerField()
    baseRevision = serializers.CharField(help_text="The revision the agent read.")
    currentRevision = serializers.CharField(
        allow_null=True, help_text="The document's revision now; null once it is deleted."
    )
    sessionId = serializers.CharField()
    agent = serializers.CharField()
    recallId = serializers.CharField()
    callId = serializers.CharField()
    createdAt = serializers.DateTimeField()
    expiresAt = serializers.DateTimeField()
    decidedAt = serializers.DateTimeField(allow_null=True)
    decidedBy = serializers.CharField()
    reason = serializers.CharField()
    appliedRevision = serializers.CharField(
        allow_null=True, help_text="The document revision an approval wrote."
    )


class ProposalPageOutput(serializers.Serializer):
    proposals = ProposalOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class AuditEntryOutput(serializers.Serializer):
    id = serializers.IntegerField()
    createdAt = serializers.DateTimeField()
    actor = serializers.CharField(help_text="`key:<prefix>`, `user:<name>` or `cli:<os user>`.")
    action = serializers.CharField()
    environment = serializers.CharField(allow_null=True)
    resource = serializers.CharField(allow_null=True)
    document = serializers.CharField(allow_null=True)
    revision = serializers.CharField(allow_null=True)
    detail = serializers.DictField()


class AuditPageOutput(serializers.Serializer):
    entries = AuditEntryOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class ImportedDocumentOutput(serializers.Serializer):
    resource = serializers.CharField()
    id = serializers.CharField()
    status = serializers.ChoiceField(choices=["created", "skipped", "failed"])
    reason = serializers.ChoiceField(
        choices=["exists", "deleted", "missing-resource", "invalid"], allow_null=True
    )
    message = serializers.CharField()


class ImportReportOutput(serializers.Serializer):
    created = serializers.IntegerField()
    skipped = serializers.IntegerField()
    failed = serializers.IntegerField()
    documents = ImportedDocumentOutput(many=True)
    dryRun = serializers.BooleanField()


class ResourceOutput(serializers.Serializer):
    id = serializers.CharField()
    provider = ProviderSchema()
    declared = serializers.BooleanField()
    documents = serializers.IntegerField()


class InventoryOutput(serializers.Serializer):
    resources = ResourceOutput(many=True)


class ProjectOutput(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    createdAt = serializers.DateTimeField()


class ProjectListOutput(serializers.Serializer):
    projects = ProjectOutput(many=True)


class DeploymentOutput(serializers.Serializer):
    id = serializers.CharField()
    projectId = serializers.CharField()
    agent = serializers.CharField()
    memory = DeclarationSchema(many=True)
    activeIn = serializers.ListField(child=serializers.CharField())
    createdAt = serializers.DateTimeField()


class DeploymentListOutput(serializers.Serializer):
    deployments = DeploymentOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class ErrorBody(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField(
        required=False,
        help_text="Present when the error names what it is about, e.g. field, bytes and "
        "maxBytes of memory_limit_exceeded, or the binding of a session error.",
    )


class ErrorOutput(serializers.Serializer):
    error = ErrorBody()


def require_query_string(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    if value is not None and value == "":
        raise InvalidRequest(f"{name} must not be empty.")
    return value


class StrictBooleanField(serializers.BooleanField):
    """JSON true or false only: no "yes", 1 or "false"."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only: no strings, floats or booleans."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class ApiKeyCreateInput(StrictSerializer):
    name = StrictCharField(required=False, max_length=200)
    readOnly = StrictBooleanField(required=False, default=False)


class ApiKeyRotateInput(StrictSerializer):
    graceSeconds = StrictIntegerField(
        required=False,
        default=0,
        min_value=0,
        help_text="How long the old key keeps working (default 0: it stops now).",
    )


class ApiKeyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    prefix = serializers.CharField(help_text="The first characters of the key, to recognise it.")
    scope = serializers.CharField(help_text="The project the key reaches.")
    readOnly = serializers.BooleanField()
    createdAt = serializers.DateTimeField()
    lastUsedAt = serializers.DateTimeField(
        allow_null=True, help_text="Refreshed at most once a minute."
    )
    revokedAt = serializers.DateTimeField(
        allow_null=True, help_text="When the key stopped (or, after a rotation, stops) working."
    )


class ApiKeyListOutput(serializers.Serializer):
    apiKeys = ApiKeyOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class ApiKeyCreatedOutput(ApiKeyOutput):
    secret = serializers.CharField(help_text="The key itself: shown this once, never again.")


class OperationOutput(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.ChoiceField(
        choices=[
            "accepted_write",
            "uncertain_write",
            "cancelled_write",
            "containment_undo",
            "erasure_delete",
        ]
    )
    state = serializers.ChoiceField(
        choices=["queued", "partial", "succeeded", "failed", "dead", "discarded"]
    )
    resource = serializers.CharField()
    namespace = serializers.CharField()
    sessionId = serializers.CharField(allow_null=True)
    principal = serializers.CharField()
    deploymentId = serializers.CharField()
    providerOperation = serializers.CharField()
    action = serializers.ChoiceField(
        choices=["add", "update", "delete", ""],
        help_text="What the write was (records of external providers); empty for a declared "
        "tool of an http provider, which `tool` names.",
    )
    tool = serializers.CharField(help_text="The model's tool that made it; empty for owners.")
    callId = serializers.CharField()
    recallId = serializers.CharField(
        help_text="The recall a session's write answered (the model's tool call was made "
        "in answer to it); empty for owners and for operations of no call."
    )
    recordId = serializers.CharField(
        help_text="The record the write changed (update, delete); empty for an add."
    )
    attempts = serializers.IntegerField()
    maxAttempts = serializers.IntegerField()
    lastError = serializers.CharField()
    deadlineAt = serializers.DateTimeField()
    nextCheckAt = serializers.DateTimeField(allow_null=True)
    createdAt = serializers.DateTimeField()
    updatedAt = serializers.DateTimeField()
    finishedAt = serializers.DateTimeField(allow_null=True)


class OperationPageOutput(serializers.Serializer):
    operations = OperationOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class RestoreAsOfInput(StrictSerializer):
    asOf = StrictCharField(allow_blank=False, help_text="ISO 8601 time.")
    documents = serializers.ListField(
        child=StrictCharField(allow_blank=False),
        required=False,
        max_length=1000,
        help_text="Document ids (default: every document of the resource).",
    )
    dryRun = StrictBooleanField(required=False, default=False)


class RestoreAsOfItemOutput(serializers.Serializer):
    documentId = serializers.CharField()
    action = serializers.ChoiceField(
        choices=[
            "restore",
            "unchanged",
            "deleted",
            "created_since",
            "conflict",
            "absent",
            "redacted",
        ]
    )
    restoreRevision = serializers.CharField(allow_null=True)
    currentRevision = serializers.CharField(allow_null=True)
    revision = serializers.CharField(allow_null=True, help_text="The revision a restore wrote.")


class RestoreAsOfOutput(serializers.Serializer):
    asOf = serializers.DateTimeField()
    dryRun = serializers.BooleanField()
    documents = RestoreAsOfItemOutput(many=True)


class RecordInput(StrictSerializer):
    text = StrictCharField()


class RecordOutput(serializers.Serializer):
    id = serializers.CharField()
    text = serializers.CharField()
    createdAt = serializers.CharField(allow_null=True)
    updatedAt = serializers.CharField(allow_null=True)
    metadata = serializers.JSONField(help_text="Holds providerExternalId, the provider's own id.")


class RecordPageOutput(serializers.Serializer):
    records = RecordOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class RecordWriteOutput(serializers.Serializer):
    status = serializers.ChoiceField(choices=["stored", "queued", "deleted"])
    record = RecordOutput(required=False)
    records = RecordOutput(many=True, required=False)
    id = serializers.CharField(required=False)
    operation = serializers.CharField(
        required=False, help_text="The open operation (memory/operations) while it is queued."
    )
    providerOperation = serializers.CharField(
        required=False, help_text="The provider's name for it: an event id, an LRO name."
    )


class RecordChangeOutput(serializers.Serializer):
    action = serializers.CharField()
    text = serializers.CharField(allow_null=True)
    previousText = serializers.CharField(allow_null=True, required=False)
    at = serializers.CharField(allow_null=True)


class RecordHistoryOutput(serializers.Serializer):
    history = RecordChangeOutput(many=True)


class VersionReaderOutput(serializers.Serializer):
    recallId = serializers.CharField()
    sessionId = serializers.CharField()
    agent = serializers.CharField()
    createdAt = serializers.DateTimeField()


class VersionReadersOutput(serializers.Serializer):
    readers = VersionReaderOutput(many=True)


class ErasureInput(StrictSerializer):
    match = serializers.JSONField(
        help_text='{"text": "<exact text, 8+ characters>"} or '
        '{"documents": [{"resource": ..., "id": ...}]} (1-100).'
    )
    dryRun = StrictBooleanField(
        required=False, default=False, help_text="Count what would be erased; change nothing."
    )
    reason = StrictCharField(help_text="Why; kept in the receipt. 1-500 characters.")


class ErasureCountsOutput(serializers.Serializer):
    dryRun = serializers.BooleanField()
    places = serializers.DictField(child=serializers.IntegerField())
    copies = serializers.IntegerField()
    maxCopies = serializers.IntegerField()


class ErasureOutput(serializers.Serializer):
    id = serializers.CharField()
    dryRun = serializers.BooleanField()
    createdAt = serializers.CharField()
    actor = serializers.CharField()
    reason = serializers.CharField()
    match = serializers.DictField()
    places = serializers.DictField(child=serializers.IntegerField())
    copies = serializers.IntegerField()
    complete = serializers.BooleanField()
    receipt = serializers.DictField(help_text="The signed receipt: {receipt, signature}.")


class ErasurePageOutput(serializers.Serializer):
    erasures = ErasureOutput(many=True)
    nextCursor = serializers.CharField(allow_null=True)


class ErasureKeyOutput(serializers.Serializer):
    algorithm = serializers.CharField()
    keyId = serializers.CharField()
    publicKey = serializers.CharField(help_text="The 32-byte Ed25519 public key, base64.")
    pem = serializers.CharField()
