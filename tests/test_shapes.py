"""Each response shape has one source, its representation function; the schema's output
serializers and the client's TypedDicts are checked against what those functions return,
through real API responses."""

from __future__ import annotations

import json
import types
from typing import (
    Any,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

import pytest
from rest_framework import serializers
from rest_framework.test import APIClient

import memoryadmin_client as sdk
from memoryadmin.api import secret_views as provider_views
from memoryadmin.api import serializers as api_shapes
from memoryadmin.api import session_serializers as agent_shapes
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.refprovider.declaration import TOKEN_SECRET_NAME, reference_declaration
from tests.helpers import DEV, DOCS, MANIFEST_MEMORY, streamed

SESSIONS = "/api/managed-agents/sessions"
PROJECT = "/api/managed-agents/projects/acme"


def schema_mismatches(value: Any, field: serializers.Field, path: str = "$") -> list[str]:
    """Where `value` does not have the shape the schema's serializer declares."""
    if value is None:
        return [] if field.allow_null else [f"{path}: null"]
    if isinstance(field, serializers.ListSerializer):
        child = field.child
        assert child is not None
        return _each(value, list, path, lambda v, p: schema_mismatches(v, child, p))
    if isinstance(field, serializers.Serializer):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        required = {name for name, f in field.fields.items() if f.required}
        problems = [
            f"{path}.{k}: not in the schema" for k in sorted(set(value) - set(field.fields))
        ]
        problems += [f"{path}.{k}: missing" for k in sorted(required - set(value))]
        for key in set(value) & set(field.fields):
            problems += schema_mismatches(value[key], field.fields[key], f"{path}.{key}")
        return problems
    if isinstance(field, serializers.ListField):
        return _each(value, list, path, lambda v, p: schema_mismatches(v, field.child, p))
    if isinstance(field, serializers.DictField):
        if isinstance(field.child, serializers.Serializer | serializers.ListSerializer):
            return _each(value, dict, path, lambda v, p: schema_mismatches(v, field.child, p))
        return [] if isinstance(value, dict) else [f"{path}: not an object"]
    if isinstance(field, serializers.ChoiceField):
        return [] if value in field.choices else [f"{path}: {value!r} not a declared choice"]
    if isinstance(field, serializers.JSONField):
        return []
    kinds: dict[type[serializers.Field], type | tuple[type, ...]] = {
        serializers.BooleanField: bool,
        serializers.IntegerField: int,
        serializers.DateTimeField: str,
        serializers.CharField: str,
    }
    kind = next(k for cls, k in kinds.items() if isinstance(field, cls))
    return [] if isinstance(value, kind) else [f"{path}: {value!r} is not {kind}"]


def type_mismatches(value: Any, hint: Any, path: str = "$") -> list[str]:
    """Where `value` does not have the shape the client's type declares."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return []
    if origin in (Union, types.UnionType):
        each = [type_mismatches(value, arg, path) for arg in args]
        return [] if any(not p for p in each) else min(each, key=len)
    if value is None:
        return [] if hint is type(None) else [f"{path}: null"]
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        hints = get_type_hints(hint)
        problems = [f"{path}.{k}: not in {hint.__name__}" for k in sorted(set(value) - set(hints))]
        problems += [f"{path}.{k}: missing" for k in sorted(required_keys(hint) - set(value))]
        for key in set(value) & set(hints):
            problems += type_mismatches(value[key], hints[key], f"{path}.{key}")
        return problems
    if origin is Literal:
        return [] if value in args else [f"{path}: {value!r} not one of {args}"]
    if origin is list:
        return _each(value, list, path, lambda v, p: type_mismatches(v, args[0], p))
    if origin is dict:
        return _each(value, dict, path, lambda v, p: type_mismatches(v, args[1], p))
    ok = isinstance(value, hint) and not (hint is int and isinstance(value, bool))
    return [] if ok else [f"{path}: {value!r} is not {hint.__name__}"]


def _each(
    value: Any, kind: type[list[Any]] | type[dict[Any, Any]], path: str, check: Any
) -> list[str]:
    if not isinstance(value, kind):
        return [f"{path}: not a {kind.__name__}"]
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [problem for key, item in items for problem in check(item, f"{path}[{key}]")]


def required_keys(typed: Any) -> set[str]:
    # Read from the annotations: the client's postponed annotations hide NotRequired
    # from __required_keys__.
    hints = get_type_hints(typed, include_extras=True)
    return {key for key, hint in hints.items() if get_origin(hint) is not NotRequired}


def keys_of(shape: type[serializers.Serializer]) -> tuple[set[str], set[str]]:
    fields = shape().fields
    return set(fields), {name for name, f in fields.items() if f.required}


# Every shape the API answers with, by the schema serializer and client type that
# describe it.
PAIRS = [
    (api_shapes.WriterOutput, sdk.Writer),
    (api_shapes.DocumentEntryOutput, sdk.DocumentEntry),
    (api_shapes.DocumentOutput, sdk.Document),
    (api_shapes.DocumentPageOutput, sdk.DocumentPage),
    (api_shapes.DeploymentOutput, sdk.Deployment),
    (agent_shapes.BindingOutput, sdk.Binding),
    (agent_shapes.SessionOutput, sdk.Session),
    (agent_shapes.SessionPageOutput, sdk.SessionPage),
    (agent_shapes.EventOutput, sdk.Event),
    (agent_shapes.EventPageOutput, sdk.EventPage),
    (agent_shapes.SourceOutput, sdk.Source),
    (agent_shapes.ProjectionOutput, sdk.Projection),
    (agent_shapes.ToolDefinitionOutput, sdk.ToolDefinition),
    (agent_shapes.RecallOutput, sdk.Recall),
    (api_shapes.OperationOutput, sdk.Operation),
    (api_shapes.OperationPageOutput, sdk.OperationPage),
    (api_shapes.ProposalOutput, sdk.Proposal),
    (agent_shapes.RecallRecordOutput, sdk.RecallRecord),
    (api_shapes.RestoreAsOfOutput, sdk.RestoreAsOf),
    (api_shapes.VersionReadersOutput, sdk.VersionReaders),
    (api_shapes.VersionReaderOutput, sdk.VersionReader),
    (agent_shapes.RevertOutput, sdk.SessionRevert),
    (agent_shapes.RevertDocumentOutput, sdk.RevertItem),
    (api_shapes.RestoreAsOfItemOutput, sdk.RestoreAsOfItem),
    (agent_shapes.RecallPageOutput, sdk.RecallPage),
    (api_shapes.ProposalPageOutput, sdk.ProposalPage),
    (api_shapes.AuditEntryOutput, sdk.AuditEntry),
    (api_shapes.SearchHitOutput, sdk.SearchHit),
    (api_shapes.VersionOutput, sdk.Version),
    (api_shapes.RedactionOutput, sdk.Redaction),
    (api_shapes.SearchPageOutput, sdk.SearchPage),
    (api_shapes.AuditPageOutput, sdk.AuditPage),
    (api_shapes.ImportedDocumentOutput, sdk.ImportedDocument),
    (api_shapes.ImportReportOutput, sdk.ImportReport),
]


@pytest.mark.parametrize(("shape", "typed"), PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_schema_and_client_name_the_same_keys(shape: Any, typed: Any) -> None:
    fields, required = keys_of(shape)
    assert fields == set(get_type_hints(typed))
    assert required == required_keys(typed)


def post(api: APIClient, path: str, body: Any, **headers: Any) -> Any:
    return api.post(path, data=json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def responses(api: APIClient, project: Project) -> dict[str, Any]:
    """One real response of every route, keyed by what it is."""
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[
            *MANIFEST_MEMORY,
            reference_declaration(
                resource_id="facts", base_url="http://127.0.0.1:9", description="Facts."
            ),
        ],
        promote="development",
        actor="test",
    )
    secret_set(
        project=project,
        environment="development",
        name=TOKEN_SECRET_NAME,
        value="t",
        origins=["http://127.0.0.1:9"],
        server_level=True,
        actor="t",
    )
    seen: dict[str, Any] = {}

    def keep(name: str, response: Any, status: int = 200) -> Any:
        assert response.status_code == status, response.content
        seen[name] = response.json()
        return seen[name]

    created = keep(
        "document",
        api.put(
            f"{DOCS}/workshop{DEV}",
            data=json.dumps({"title": "Workshop", "text": "Node 22.", "summary": "Runtime."}),
            content_type="application/json",
            HTTP_IF_NONE_MATCH="*",
        ),
        201,
    )
    memory = {
        "notes": {"scope": "document", "id": "workshop", "access": "read-write"},
        "kb": {"scope": "collection"},
    }
    body = {"agentId": "support-bot@development", "memory": memory}
    started = keep("session_create", post(api, SESSIONS, body, HTTP_IDEMPOTENCY_KEY="s1"), 201)
    session = f"{SESSIONS}/{started['session']['id']}"
    recall = keep("recall", post(api, f"{session}/memory/recall", {"use": ["notes", "kb"]}))
    call = {
        "recallId": recall["recallId"],
        "callId": "c1",
        "name": "memory_save",
        "arguments": {"memory": "notes", "text": "Node 24."},
    }
    keep("tool_call", post(api, f"{session}/memory/tool-calls", call))
    keep("document_by_agent", api.get(f"{DOCS}/workshop{DEV}"))
    keep("document_list", api.get(f"{DOCS}{DEV}"))
    now = {"environment": "development", "asOf": "2999-01-01T00:00:00Z"}
    keep("document_list_as_of", api.get(DOCS, now))
    restore = f"{PROJECT}/memory/notes/restore{DEV}"
    keep("restore_as_of", post(api, restore, {"asOf": "2000-01-01T00:00:00Z", "dryRun": True}))
    keep("versions", api.get(f"{DOCS}/workshop/versions{DEV}"))
    keep("versions_with_text", api.get(f"{DOCS}/workshop/versions{DEV}&include=text"))
    keep("session", api.get(session))
    keep("recalls", api.get(f"{session}/recalls"))
    read = api.get(f"{DOCS}/workshop{DEV}").json()["revision"]
    keep("readers", api.get(f"{DOCS}/workshop/versions/{read}/readers{DEV}"))
    keep("revert", post(api, f"{session}/revert", {"dryRun": True}))
    # A save under review: a proposal, listed, then rejected.
    revision = api.get(f"{DOCS}/workshop{DEV}").json()["revision"]
    api.patch(
        f"{DOCS}/workshop{DEV}",
        data=json.dumps({"agentWrites": "review"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{revision}"',
    )
    recall = post(api, f"{session}/memory/recall", {"use": ["notes"]}).json()
    call = {**call, "recallId": recall["recallId"], "callId": "c2"}
    proposed = post(api, f"{session}/memory/tool-calls", call).json()["result"]
    assert proposed["status"] == "proposed"
    keep("proposals", api.get(f"{PROJECT}/memory/proposals{DEV}"))
    rejected = f"{PROJECT}/memory/proposals/{proposed['proposalId']}/reject{DEV}"
    keep("proposal_reject", post(api, rejected, {"reason": "No."}))
    # A namespace binding (never recalled here: its provider is not running).
    body = {
        "agentId": "support-bot@development",
        "memory": {"facts": {"scope": "namespace", "id": "team", "access": "read-write"}},
    }
    keep("session_namespace", post(api, SESSIONS, body, HTTP_IDEMPOTENCY_KEY="s2"), 201)
    keep("session_list", api.get(f"{SESSIONS}{DEV}"))
    keep("events", api.get(f"{session}/events"))
    keep("session_end", post(api, f"{session}/end", {}))
    keep("projects", api.get("/api/managed-agents/projects"))
    keep("project", api.get(PROJECT))
    keep("deployments", api.get(f"{PROJECT}/deployments"))
    keep("deployment", api.get(f"{PROJECT}/deployments/{started['deployment']['id']}"))
    keep("inventory", api.get(f"{PROJECT}/memory{DEV}"))
    keep("secrets", api.get(f"{PROJECT}/secrets{DEV}"))
    keep("audit", api.get(f"{PROJECT}/audit{DEV}"))
    keep("document_search", api.get(f"{DOCS}{DEV}&q=node"))
    keep("search", api.get(f"{PROJECT}/memory/search{DEV}&q=node"))
    exported = streamed(api.post(f"{PROJECT}/memory/export{DEV}"))
    imported = api.post(
        f"{PROJECT}/memory/import{DEV}", data=exported, content_type="application/zip"
    )
    keep("import", imported)
    too_big = {"text": "a" * 9000}
    revision = api.get(f"{DOCS}/workshop{DEV}").json()["revision"]
    put = api.put(
        f"{DOCS}/workshop{DEV}",
        data=json.dumps(too_big),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{revision}"',
    )
    keep("error_with_details", put, 413)
    keep("error", api.get(f"{DOCS}/nothing{DEV}"), 404)
    assert created["writer"] == {"kind": "owner"}
    return seen


SCHEMA = {
    "document": api_shapes.DocumentOutput,
    "document_by_agent": api_shapes.DocumentOutput,
    "document_list": api_shapes.DocumentPageOutput,
    "document_list_as_of": api_shapes.DocumentPageOutput,
    "restore_as_of": api_shapes.RestoreAsOfOutput,
    "versions": api_shapes.VersionPageOutput,
    "versions_with_text": api_shapes.VersionPageOutput,
    "session_create": agent_shapes.SessionCreateOutput,
    "session": agent_shapes.SessionOutput,
    "session_namespace": agent_shapes.SessionCreateOutput,
    "session_list": agent_shapes.SessionPageOutput,
    "session_end": agent_shapes.SessionOutput,
    "events": agent_shapes.EventPageOutput,
    "recall": agent_shapes.RecallOutput,
    "tool_call": agent_shapes.ToolCallOutput,
    "projects": api_shapes.ProjectListOutput,
    "project": api_shapes.ProjectOutput,
    "deployments": api_shapes.DeploymentListOutput,
    "deployment": api_shapes.DeploymentOutput,
    "inventory": api_shapes.InventoryOutput,
    "proposals": api_shapes.ProposalPageOutput,
    "recalls": agent_shapes.RecallPageOutput,
    "readers": api_shapes.VersionReadersOutput,
    "revert": agent_shapes.RevertOutput,
    "proposal_reject": api_shapes.ProposalOutput,
    "secrets": provider_views.SecretListOutput,
    "error_with_details": api_shapes.ErrorOutput,
    "error": api_shapes.ErrorOutput,
    "audit": api_shapes.AuditPageOutput,
    "import": api_shapes.ImportReportOutput,
    "document_search": api_shapes.DocumentPageOutput,
    "search": api_shapes.SearchPageOutput,
}

CLIENT = {
    "document": sdk.Document,
    "document_by_agent": sdk.Document,
    "document_list": sdk.DocumentPage,
    "document_list_as_of": sdk.DocumentPage,
    "restore_as_of": sdk.RestoreAsOf,
    "session": sdk.Session,
    "session_list": sdk.SessionPage,
    "session_end": sdk.Session,
    "events": sdk.EventPage,
    "recall": sdk.Recall,
    "deployment": sdk.Deployment,
    "proposals": sdk.ProposalPage,
    "recalls": sdk.RecallPage,
    "readers": sdk.VersionReaders,
    "revert": sdk.SessionRevert,
    "proposal_reject": sdk.Proposal,
    "audit": sdk.AuditPage,
    "import": sdk.ImportReport,
    "document_search": sdk.DocumentPage,
    "search": sdk.SearchPage,
}


def test_every_response_matches_its_schema(responses: dict[str, Any]) -> None:
    assert set(responses) == set(SCHEMA)
    problems = {name: schema_mismatches(body, SCHEMA[name]()) for name, body in responses.items()}
    assert {name: p for name, p in problems.items() if p} == {}


def test_every_response_matches_its_client_type(responses: dict[str, Any]) -> None:
    problems = {name: type_mismatches(responses[name], typed) for name, typed in CLIENT.items()}
    for name in ("session_create", "session_namespace"):
        created = responses[name]
        problems[name] = type_mismatches(created["session"], sdk.Session) + type_mismatches(
            created["deployment"], sdk.Deployment
        )
    assert {name: p for name, p in problems.items() if p} == {}


def test_the_samples_reach_every_optional_key(responses: dict[str, Any]) -> None:
    """The checks above see each optional key present at least once."""
    bindings = responses["session"]["memory"] + responses["session_namespace"]["session"]["memory"]
    assert {b["scope"] for b in bindings} == {"document", "collection", "namespace"}
    assert any("partition" in b for b in bindings)
    assert any("id" in b for b in bindings)
    assert any("id" not in b for b in bindings)
    assert responses["document_by_agent"]["writer"]["kind"] == "agent"
    assert "text" in responses["versions_with_text"]["versions"][0]
    assert "text" not in responses["versions"]["versions"][0]
    assert "details" in responses["error_with_details"]["error"]
    assert "snippet" in responses["document_search"]["documents"][0]
    assert "snippet" not in responses["document_list"]["documents"][0]
    assert "details" not in responses["error"]["error"]
    assert responses["session_end"]["endedAt"] is not None


def test_the_checks_catch_a_drifted_shape(responses: dict[str, Any]) -> None:
    drifted = dict(responses["document"], extra=1)
    del drifted["revision"]
    assert schema_mismatches(drifted, api_shapes.DocumentOutput()) == [
        "$.extra: not in the schema",
        "$.revision: missing",
    ]
    assert type_mismatches(drifted, sdk.Document) == [
        "$.extra: not in Document",
        "$.revision: missing",
    ]
