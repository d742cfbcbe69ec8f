"""Every change, through every door, is in the audit log exactly once, with its actor.

Each mutating route of the management API (every POST, PUT, PATCH and DELETE a view
answers) is asked once in a seeded world so that it succeeds: the entries written by that
request must be exactly the documented ones, each with the door's actor (`key:<prefix>`;
`agent:<session>` for an agent's save) and the project and environment of the change.
Asked first in a way that is refused (a read-only key, a stale revision), the same request
writes no entry. A route without a case here fails the sweep: a new door is audited from
its first day.

The Memory page is checked the same way: each page route that takes a POST (found from the
URL patterns: every one that does not answer 405) is sent its form once by an owner, writing
its entries as `user:<name>`; the same form sent by a viewer (or one refused otherwise: a
stale revision, a role short of the action) writes none.

The command line is checked the same way: each command that changes something writes its
entries as `cli:<operating system user>`.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation, Session
from memoryadmin.agents.services.records import record_seen
from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.core.cli import cli_actor
from memoryadmin.incidents.services.incidents import incident_create
from memoryadmin.memory.models import ApiKey, AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.asof import resource_restore_as_of
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import document_create, document_replace
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.webhooks.services import endpoint_create, endpoint_send_test
from tests.helpers import (
    MANIFEST_MEMORY,
    Keys,
    People,
    deploy_external,
    proposed_save,
    streamed,
    support_session,
    url_routes,
)

pytestmark = pytest.mark.django_db

API = "/api/managed-agents"
DEV = "?environment=development"
MUTATING = ("post", "put", "patch", "delete")

# One audit entry: (action, project, environment); the actor is the door's unless a
# fourth item names it.
Entry = tuple[str, ...]


@dataclass
class World:
    project: Project
    keys: Keys
    people: People
    notes: Resource
    request: Any
    prefix: str  # the read-write key's
    counter: list[int] = field(default_factory=lambda: [0])

    def name(self, stem: str) -> str:
        self.counter[0] += 1
        return f"{stem}-{self.counter[0]}"

    def document(self, doc_id: str = "", text: str = "Node 22.") -> Document:
        return document_create(
            resource=self.notes, doc_id=doc_id or self.name("doc"), title="T", text=text, actor="t"
        )

    def session(self) -> Session:
        """A support-bot session bound to notes/workshop (made here when missing)."""
        if not Document.objects.filter(resource=self.notes, doc_id="workshop").exists():
            self.document("workshop")
        return support_session(self.project, idempotency_key=self.name("ticket"))


@dataclass
class Asked:
    """One request of a case, and the entries it must write when it succeeds."""

    method: str
    url: str
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    expect: list[Entry] = field(default_factory=list)
    content_type: str = "application/json"
    status: int | None = None  # the success expected (any 2xx when None)
    # A request that is refused and must write nothing (default: the same asked with
    # a read-only key); None for none.
    refused: Asked | bool | None = True
    streamed: bool = False


def _new_entries(after: int) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(id__gt=after).order_by("id"))


def _watermark() -> int:
    last = AuditEntry.objects.order_by("-id").first()
    return last.id if last else 0


def _shape(entries: list[AuditEntry]) -> list[tuple[str, str, str | None, str]]:
    return sorted((e.action, e.actor, e.project_id, e.environment) for e in entries)


def _expected(expect: list[Entry], actor: str) -> list[tuple[str, str, str | None, str]]:
    rows = []
    for entry in expect:
        action, project, environment, *who = entry
        rows.append((action, who[0] if who else actor, project or None, environment))
    return sorted(rows)


def _api_send(client: APIClient, asked: Asked) -> Any:
    body = asked.body
    if body is not None and asked.content_type == "application/json":
        body = json.dumps(body)
    headers: dict[str, Any] = {
        f"HTTP_{k.upper().replace('-', '_')}": v for k, v in asked.headers.items()
    }
    response = client.generic(
        asked.method, asked.url, body or "", content_type=asked.content_type, **headers
    )
    if asked.streamed and response.status_code == 200:
        streamed(response)
    return response


# ---------------------------------------------------------------- the API's cases

API_CASES: dict[tuple[str, str], Callable[[World], Asked]] = {}


def api_case(method: str, route: str) -> Callable[[Callable[[World], Asked]], Any]:
    def register(make: Callable[[World], Asked]) -> Callable[[World], Asked]:
        API_CASES[(method, "api/managed-agents/" + route)] = make
        return make

    return register


DOC = "projects/<str:p>/memory/<str:r>/documents/<str:doc_id>"
ACME_DEV = ("acme", "development")


def _doc_url(doc_id: str, resource: str = "notes") -> str:
    return f"{API}/projects/acme/memory/{resource}/documents/{doc_id}{DEV}"


@api_case("PUT", DOC)
def _document_create(w: World) -> Asked:
    return Asked(
        "PUT",
        _doc_url(w.name("new")),
        {"title": "New", "text": "Fresh."},
        {"If-None-Match": "*"},
        [("document.create", *ACME_DEV)],
        status=201,
    )


@api_case("PATCH", DOC)
def _document_patch(w: World) -> Asked:
    document = w.document()
    return Asked(
        "PATCH",
        _doc_url(document.doc_id),
        {"title": "Renamed"},
        {"If-Match": f'"{document.revision}"'},
        [("document.patch", *ACME_DEV)],
        refused=Asked(
            "PATCH", _doc_url(document.doc_id), {"title": "R"}, {"If-Match": '"rev_stale"'}
        ),
    )


@api_case("DELETE", DOC)
def _document_delete(w: World) -> Asked:
    document = w.document()
    return Asked(
        "DELETE",
        _doc_url(document.doc_id),
        None,
        {"If-Match": f'"{document.revision}"'},
        [("document.delete", *ACME_DEV)],
        status=204,
    )


def _document_replace(w: World) -> Asked:
    document = w.document()
    return Asked(
        "PUT",
        _doc_url(document.doc_id),
        {"text": "Node 24."},
        {"If-Match": f'"{document.revision}"'},
        [("document.replace", *ACME_DEV)],
        refused=Asked("PUT", _doc_url(document.doc_id), {"text": "x"}, {"If-Match": '"rev_stale"'}),
    )


def _document_freeze(w: World) -> Asked:
    document = w.document()
    return Asked(
        "PATCH",
        _doc_url(document.doc_id),
        {"agentWrites": "disabled"},
        {"If-Match": f'"{document.revision}"'},
        [("document.freeze", *ACME_DEV)],
    )


def _session_body(w: World) -> dict[str, Any]:
    return {
        "agentId": "support-bot@development",
        "projectId": "acme",
        "memory": {"notes": {"scope": "collection"}},
    }


@api_case("POST", "sessions")
def _session_create(w: World) -> Asked:
    return Asked(
        "POST",
        f"{API}/sessions",
        _session_body(w),
        {"Idempotency-Key": w.name("ticket")},
        expect=[("session.create", *ACME_DEV)],
        status=201,
    )


@api_case("POST", "sessions/<str:session_id>/end")
def _session_end(w: World) -> Asked:
    session = w.session()
    return Asked(
        "POST", f"{API}/sessions/{session.id}/end", {}, expect=[("session.end", *ACME_DEV)]
    )


@api_case("POST", "sessions/<str:session_id>/revert")
def _session_revert(w: World) -> Asked:
    session = w.session()
    workshop = Document.objects.get(resource=w.notes, doc_id="workshop")
    recall_create(session=session, use=["notes"])
    document_replace(
        resource=w.notes,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="An agent's note.",
        actor=f"agent:{session.id}",
        writer=_agent_writer(session),
    )
    return Asked(
        "POST",
        f"{API}/sessions/{session.id}/revert",
        {},
        expect=[("session.revert", *ACME_DEV), ("document.restore", *ACME_DEV)],
    )


def _agent_writer(session: Session) -> Any:
    from memoryadmin.memory.services.documents import Writer

    return Writer(kind="agent", session_id=session.id)


@api_case("POST", "sessions/<str:session_id>/memory/recall")
def _recall(w: World) -> Asked:
    session = w.session()
    # A recall reads: no entry.
    return Asked("POST", f"{API}/sessions/{session.id}/memory/recall", {"use": ["notes"]})


@api_case("POST", "sessions/<str:session_id>/memory/tool-calls")
def _tool_call(w: World) -> Asked:
    session = w.session()
    recall = recall_create(session=session, use=["notes"])
    return Asked(
        "POST",
        f"{API}/sessions/{session.id}/memory/tool-calls",
        {
            "recallId": recall["recallId"],
            "callId": "call_1",
            "name": "memory_save",
            "arguments": {"memory": "notes", "text": "Node 24."},
        },
        # An agent's save is the session's, whichever key carried it.
        expect=[("document.save", *ACME_DEV, f"agent:{session.id}")],
    )


@api_case("POST", "sessions/<str:session_id>/memory/cancel")
def _cancel(w: World) -> Asked:
    session = w.session()
    # Asks a running request to stop: nothing changes that is audited.
    return Asked("POST", f"{API}/sessions/{session.id}/memory/cancel", {"requestId": "req_1"})


@api_case("POST", "projects/<str:p>/deployments")
def _deployment_create(w: World) -> Asked:
    return Asked(
        "POST",
        f"{API}/projects/acme/deployments",
        {"agent": "helper", "memory": [MANIFEST_MEMORY[0]], "promote": "production"},
        expect=[("deployment.create", "acme", ""), ("deployment.promote", "acme", "production")],
        status=201,
    )


@api_case("POST", "projects/<str:p>/deployments/<str:d>/promote")
def _deployment_promote(w: World) -> Asked:
    deployment = deployment_create(
        project=w.project, agent="support-bot", memory=MANIFEST_MEMORY, actor="t"
    )
    return Asked(
        "POST",
        f"{API}/projects/acme/deployments/{deployment.id}/promote",
        {"environment": "development"},
        expect=[("deployment.promote", *ACME_DEV)],
    )


@api_case("POST", "projects/<str:p>/memory/<str:r>/restore")
def _restore_as_of(w: World) -> Asked:
    document = w.document()
    as_of = timezone.now()
    document_replace(
        resource=w.notes,
        doc_id=document.doc_id,
        expected_revision=document.revision,
        text="Later.",
        actor="t",
    )
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/notes/restore{DEV}",
        {"asOf": as_of.isoformat(), "documents": [document.doc_id]},
        expect=[("resource.restore_as_of", *ACME_DEV), ("document.restore", *ACME_DEV)],
    )


def _records(w: World) -> tuple[Any, str]:
    mem0 = w.request.getfixturevalue("mem0_oss")
    if not Resource.objects.filter(project=w.project, resource_id="mem").exists():
        deploy_external(
            w.project,
            {
                "kind": "mem0-oss",
                "baseUrl": mem0.origin,
                "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
            },
            secrets_by_origin={mem0.origin: {"MEM0_KEY": "mem0-test-key"}},
        )
    return mem0, f"{API}/projects/acme/memory/mem/records"


def _record_id(w: World) -> str:
    mem0, url = _records(w)
    mem0.seed("Ships on Fridays.", user_id="team")
    listed = _api_client(w.keys.owner).get(f"{url}{DEV}&namespace=team")
    assert listed.status_code == 200, listed.content
    return str(listed.json()["records"][0]["id"])


@api_case("POST", "projects/<str:p>/memory/<str:r>/records")
def _record_create(w: World) -> Asked:
    _, url = _records(w)
    return Asked(
        "POST",
        f"{url}{DEV}&namespace=team",
        {"text": "Deploys need two reviews."},
        expect=[("record.create", *ACME_DEV)],
    )


@api_case("PATCH", "projects/<str:p>/memory/<str:r>/records/<str:rec>")
def _record_update(w: World) -> Asked:
    record = _record_id(w)
    _, url = _records(w)
    return Asked(
        "PATCH",
        f"{url}/{record}{DEV}&namespace=team",
        {"text": "Ships on Mondays."},
        expect=[("record.update", *ACME_DEV)],
    )


@api_case("DELETE", "projects/<str:p>/memory/<str:r>/records/<str:rec>")
def _record_delete(w: World) -> Asked:
    record = _record_id(w)
    _, url = _records(w)
    return Asked(
        "DELETE", f"{url}/{record}{DEV}&namespace=team", expect=[("record.delete", *ACME_DEV)]
    )


@api_case("POST", "projects/<str:p>/memory/incidents")
def _incident_create(w: World) -> Asked:
    session = w.session()
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/incidents{DEV}",
        {"title": "Poison", "source": {"session": session.id}},
        expect=[("incident.create", *ACME_DEV)],
        status=201,
    )


@api_case("POST", "projects/<str:p>/memory/incidents/<str:i>/contain")
def _incident_contain(w: World) -> Asked:
    session = w.session()
    incident = incident_create(
        project=w.project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=1,
        actor="t",
    )
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/incidents/{incident.id}/contain{DEV}",
        {"actions": ["endSessions"]},
        expect=[("incident.contain", *ACME_DEV), ("session.end", *ACME_DEV)],
    )


def _dead_letter(w: World) -> ProviderOperation:
    session = w.session()
    now = timezone.now()
    return ProviderOperation.objects.create(
        id=w.name("op"),
        project=w.project,
        environment="development",
        resource=w.notes,
        session=session,
        principal="t",
        kind="accepted_write",
        provider_operation="x",
        state="dead",
        created_at=now,
        updated_at=now,
        finished_at=now,
    )


@api_case("POST", "projects/<str:p>/memory/operations/<str:o>/retry")
def _operation_retry(w: World) -> Asked:
    operation = _dead_letter(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/operations/{operation.id}/retry{DEV}",
        {},
        expect=[("operation.retry", *ACME_DEV)],
    )


@api_case("POST", "projects/<str:p>/memory/operations/<str:o>/discard")
def _operation_discard(w: World) -> Asked:
    operation = _dead_letter(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/operations/{operation.id}/discard{DEV}",
        {},
        expect=[("operation.discard", *ACME_DEV)],
    )


def _proposal(w: World) -> tuple[str, Document]:
    w.session()  # workshop
    _, proposal = proposed_save(w.project, call_id=w.name("call"))
    return proposal, Document.objects.get(resource=w.notes, doc_id="workshop")


@api_case("POST", "projects/<str:p>/memory/proposals/<str:proposal_id>/approve")
def _proposal_approve(w: World) -> Asked:
    proposal, workshop = _proposal(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/proposals/{proposal}/approve{DEV}",
        {},
        {"If-Match": f'"{workshop.revision}"'},
        expect=[("proposal.approve", *ACME_DEV), ("document.approve", *ACME_DEV)],
    )


@api_case("POST", "projects/<str:p>/memory/proposals/<str:proposal_id>/reject")
def _proposal_reject(w: World) -> Asked:
    proposal, _ = _proposal(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/proposals/{proposal}/reject{DEV}",
        {"reason": "No."},
        expect=[("proposal.reject", *ACME_DEV)],
    )


def _old_version(w: World) -> tuple[Document, str]:
    document = w.document()
    old = document.revision
    document = document_replace(
        resource=w.notes,
        doc_id=document.doc_id,
        expected_revision=old,
        text="Later.",
        actor="t",
    )
    return document, old


@api_case("POST", DOC + "/versions/<str:revision>/restore")
def _version_restore(w: World) -> Asked:
    document, old = _old_version(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/notes/documents/{document.doc_id}/versions/{old}/restore{DEV}",
        None,
        {"If-Match": f'"{document.revision}"'},
        expect=[("document.restore", *ACME_DEV)],
    )


@api_case("POST", DOC + "/versions/<str:revision>/redact")
def _version_redact(w: World) -> Asked:
    document, old = _old_version(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/notes/documents/{document.doc_id}/versions/{old}/redact{DEV}",
        {"reason": "Leaked."},
        expect=[("version.redact", *ACME_DEV)],
    )


@api_case("POST", "projects/<str:p>/memory/export")
def _export(w: World) -> Asked:
    w.document()
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/export{DEV}",
        expect=[("memory.export", *ACME_DEV)],
        streamed=True,
        # A read-only key may export: refused is another project's key's.
        refused=Asked("POST", f"{API}/projects/acme/memory/export{DEV}&resource=nowhere"),
    )


def _export_zip(w: World) -> bytes:
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=w.keys.owner)
    w.document("imported")
    response = client.post(f"{API}/projects/acme/memory/export{DEV}")
    data = streamed(response)
    # Imported into production, where the document is free.
    return data


@api_case("POST", "projects/<str:p>/memory/import")
def _import(w: World) -> Asked:
    data = _export_zip(w)
    deployment_create(
        project=w.project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="production",
        actor="t",
    )
    url = f"{API}/projects/acme/memory/import?environment=production"
    return Asked(
        "POST",
        url,
        data,
        content_type="application/zip",
        expect=[("document.create", "acme", "production")],
    )


@api_case("POST", "projects/<str:p>/memory/erasures")
def _erasure(w: World) -> Asked:
    w.document(text="The password is hunter2-hunter2.")
    return Asked(
        "POST",
        f"{API}/projects/acme/memory/erasures{DEV}",
        {"match": {"text": "hunter2-hunter2"}, "reason": "Leaked."},
        expect=[("erasure.run", *ACME_DEV), ("document.erase", *ACME_DEV)],
        status=201,
    )


@api_case("POST", "projects/<str:p>/api-keys")
def _key_create(w: World) -> Asked:
    return Asked(
        "POST",
        f"{API}/projects/acme/api-keys",
        {"name": "ci"},
        expect=[("apikey.create", "acme", "")],
        status=201,
    )


@api_case("POST", "projects/<str:p>/api-keys/<str:k>/revoke")
def _key_revoke(w: World) -> Asked:
    key, _ = api_key_create(project_id="acme", name="old")
    return Asked(
        "POST",
        f"{API}/projects/acme/api-keys/{key.pk}/revoke",
        {},
        expect=[("apikey.revoke", "acme", "")],
    )


@api_case("POST", "projects/<str:p>/api-keys/<str:k>/rotate")
def _key_rotate(w: World) -> Asked:
    key, _ = api_key_create(project_id="acme", name="old")
    return Asked(
        "POST",
        f"{API}/projects/acme/api-keys/{key.pk}/rotate",
        {"graceSeconds": 60},
        expect=[("apikey.rotate", "acme", "")],
    )


@api_case("PUT", "projects/<str:p>/secrets/<str:name>")
def _secret_set(w: World) -> Asked:
    return Asked(
        "PUT",
        f"{API}/projects/acme/secrets/MEM0_KEY{DEV}",
        {"value": "s3cret", "origins": ["https://mem0.example.com"]},
        expect=[("secret.set", *ACME_DEV)],
    )


@api_case("DELETE", "projects/<str:p>/secrets/<str:name>")
def _secret_delete(w: World) -> Asked:
    secret_set(
        project=w.project,
        environment="development",
        name="OLD_KEY",
        value="v",
        origins=["https://mem0.example.com"],
        actor="t",
    )
    return Asked(
        "DELETE", f"{API}/projects/acme/secrets/OLD_KEY{DEV}", expect=[("secret.delete", *ACME_DEV)]
    )


def _endpoint(w: World) -> Any:
    endpoint, _ = endpoint_create(
        project=w.project,
        url="https://hooks.example.com/in",
        events=["document.updated"],
        actor="t",
    )
    return endpoint


@api_case("POST", "projects/<str:p>/webhooks")
def _webhook_create(w: World) -> Asked:
    return Asked(
        "POST",
        f"{API}/projects/acme/webhooks",
        {"url": "https://hooks.example.com/new", "events": ["document.created"]},
        expect=[("webhook.create", "acme", "")],
        status=201,
    )


@api_case("PATCH", "projects/<str:p>/webhooks/<str:w>")
def _webhook_update(w: World) -> Asked:
    endpoint = _endpoint(w)
    return Asked(
        "PATCH",
        f"{API}/projects/acme/webhooks/{endpoint.pk}",
        {"description": "CI"},
        expect=[("webhook.update", "acme", "")],
    )


@api_case("DELETE", "projects/<str:p>/webhooks/<str:w>")
def _webhook_delete(w: World) -> Asked:
    endpoint = _endpoint(w)
    return Asked(
        "DELETE",
        f"{API}/projects/acme/webhooks/{endpoint.pk}",
        expect=[("webhook.delete", "acme", "")],
        status=204,
    )


@api_case("POST", "projects/<str:p>/webhooks/<str:w>/rotate-secret")
def _webhook_rotate(w: World) -> Asked:
    endpoint = _endpoint(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/webhooks/{endpoint.pk}/rotate-secret",
        {},
        expect=[("webhook.rotate", "acme", "")],
    )


@api_case("POST", "projects/<str:p>/webhooks/<str:w>/test")
def _webhook_test(w: World) -> Asked:
    endpoint = _endpoint(w)
    return Asked(
        "POST",
        f"{API}/projects/acme/webhooks/{endpoint.pk}/test",
        {},
        expect=[("webhook.test", "acme", "")],
    )


@api_case("POST", "projects/<str:p>/webhooks/<str:w>/deliveries/<str:d>/redeliver")
def _webhook_redeliver(w: World) -> Asked:
    endpoint = _endpoint(w)
    delivery = endpoint_send_test(endpoint=endpoint, actor="t")
    type(delivery).objects.filter(pk=delivery.pk).update(state="failed")
    return Asked(
        "POST",
        f"{API}/projects/acme/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/redeliver",
        {},
        expect=[("webhook.redeliver", "acme", "")],
    )


# Requests of a route beyond its registered case: other changes the same door makes.
API_MORE = {
    "document.replace": _document_replace,
    "document.freeze": _document_freeze,
}


def _api_mutating_routes() -> set[tuple[str, str]]:
    found = set()
    for route, pattern, _ in url_routes():
        view = getattr(pattern.callback, "cls", None)
        if not route.startswith("api/managed-agents/") or view is None:
            continue
        for method in MUTATING:
            if hasattr(view, method):
                found.add((method.upper(), route))
    return found


def test_every_mutating_api_route_has_a_case() -> None:
    routes = _api_mutating_routes()
    assert len(routes) > 30, routes
    assert routes == set(API_CASES), (routes - set(API_CASES), set(API_CASES) - routes)


@pytest.fixture
def world(project: Project, keys: Keys, people: People, notes: Resource, request: Any) -> World:
    prefix = ApiKey.objects.get(prefix=keys.owner[:12]).prefix
    return World(project, keys, people, notes, request, prefix)


def _api_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=key)
    return client


def _check_api(w: World, asked: Asked) -> None:
    if asked.refused is not None:
        refused = asked if asked.refused is True else asked.refused
        assert isinstance(refused, Asked)
        key = w.keys.read_only if asked.refused is True else w.keys.owner
        before = _watermark()
        response = _api_send(_api_client(key), refused)
        assert response.status_code >= 400, (refused.url, response.status_code)
        assert _new_entries(before) == [], (refused.url, _shape(_new_entries(before)))
    before = _watermark()
    response = _api_send(_api_client(w.keys.owner), asked)
    content = b"" if asked.streamed else response.content[:300]
    if asked.status is not None:
        assert response.status_code == asked.status, (asked.url, response.status_code, content)
    else:
        assert 200 <= response.status_code < 300, (asked.url, response.status_code, content)
    written = _shape(_new_entries(before))
    assert written == _expected(asked.expect, f"key:{w.prefix}"), (asked.url, written)


@pytest.mark.parametrize(
    "case",
    [*sorted(API_CASES), *sorted(API_MORE)],
    ids=lambda c: c if isinstance(c, str) else f"{c[0]} {c[1].removeprefix('api/managed-agents/')}",
)
def test_api_change_is_audited_once_with_its_key(world: World, case: Any) -> None:
    make = API_MORE[case] if isinstance(case, str) else API_CASES[case]
    _check_api(world, make(world))


# ---------------------------------------------------------------- the command line

CLI = cli_actor()


def _cli_cases(w: World) -> dict[str, tuple[list[str], list[Entry], dict[str, Any]]]:
    """Each command that changes something: its arguments, its entries, call options."""
    document, old = _old_version(w)
    doc = document.doc_id
    other = w.document()
    session = w.session()
    endpoint = _endpoint(w)
    delivery = endpoint_send_test(endpoint=endpoint, actor="t")
    type(delivery).objects.filter(pk=delivery.pk).update(state="failed")
    key, _ = api_key_create(project_id="acme", name="old")
    key2, _ = api_key_create(project_id="acme", name="old2")
    secret_set(
        project=w.project,
        environment="development",
        name="OLD_KEY",
        value="v",
        origins=["https://mem0.example.com"],
        actor="t",
    )
    incident = incident_create(
        project=w.project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=1,
        actor="t",
    )
    manifest = w.request.getfixturevalue("tmp_path") / "manifest.json"
    manifest.write_text(json.dumps({"agent": "helper", "memory": [MANIFEST_MEMORY[0]]}))
    memory = ["memory", "--project", "acme"]
    text = {"stdin": io.StringIO("Typed.")}
    return {
        "memory create": (
            [*memory, "create", "notes", "cli-new", "--title", "N", "--text-stdin"],
            [("document.create", *ACME_DEV)],
            text,
        ),
        "memory edit": (
            [*memory, "edit", "notes", other.doc_id, "--text-stdin"],
            [("document.replace", *ACME_DEV)],
            text,
        ),
        "memory freeze": (
            [*memory, "freeze", "notes", other.doc_id],
            [("document.freeze", *ACME_DEV)],
            {},
        ),
        "memory review": ([*memory, "review", "notes", doc], [("document.review", *ACME_DEV)], {}),
        "memory redact": (
            [*memory, "redact", "notes", doc, old, "--reason", "Leaked.", "--yes"],
            [("version.redact", *ACME_DEV)],
            {},
        ),
        "memory remove": (
            [*memory, "remove", "notes", other.doc_id, "--yes"],
            [("document.delete", *ACME_DEV)],
            {},
        ),
        "memory export": (
            [*memory, "export", "--out", str(w.request.getfixturevalue("tmp_path") / "out")],
            [("memory.export", *ACME_DEV)],
            {},
        ),
        "createproject": (
            ["createproject", "initech", "--name", "Initech"],
            [("project.create", "initech", "")],
            {},
        ),
        "apikey create": (
            ["apikey", "create", "--project", "acme"],
            [("apikey.create", "acme", "")],
            {},
        ),
        "createapikey": (
            ["createapikey", "--project", "acme"],
            [("apikey.create", "acme", "")],
            {},
        ),
        "apikey revoke": (["apikey", "revoke", str(key.pk)], [("apikey.revoke", "acme", "")], {}),
        "apikey rotate": (["apikey", "rotate", str(key2.pk)], [("apikey.rotate", "acme", "")], {}),
        "deploy": (
            [
                "deploy",
                "--project",
                "acme",
                "--environment",
                "production",
                "--manifest",
                str(manifest),
            ],
            [("deployment.create", "acme", ""), ("deployment.promote", "acme", "production")],
            {},
        ),
        "grant": (
            ["grant", "sam", "acme", "--role", "viewer"],
            [("role.grant", "acme", "")],
            {},
        ),
        "grant --create": (
            ["grant", "newcomer", "acme", "--role", "viewer", "--create"],
            [("role.grant", "acme", ""), ("user.invite", "acme", "")],
            {},
        ),
        "grant --revoke": (
            ["grant", "vera", "acme", "--revoke"],
            [("role.revoke", "acme", "")],
            {},
        ),
        "session create": (
            [
                "session",
                "create",
                "--project",
                "acme",
                "--agent",
                "support-bot",
                "--memory",
                "notes",
            ],
            [("session.create", *ACME_DEV)],
            {},
        ),
        "session end": (["session", "end", session.id], [("session.end", *ACME_DEV)], {}),
        "incident trace": (
            ["incident", "--project", "acme", "trace", "--title", "T", "--session", session.id],
            [("incident.create", *ACME_DEV)],
            {},
        ),
        "incident contain": (
            ["incident", "--project", "acme", "contain", incident.id, "--action", "endSessions"],
            [("incident.contain", *ACME_DEV), ("session.end", *ACME_DEV)],
            {},
        ),
        "erasure run": (
            [
                "erasure",
                "run",
                "--project",
                "acme",
                "--text",
                "nobody-wrote-this",
                "--reason",
                "r",
                "--yes",
            ],
            [("erasure.run", *ACME_DEV)],
            {},
        ),
        "secret set": (
            ["secret", "set", "--project", "acme", "NEW_KEY", "--origin", "https://m.example.com"],
            [("secret.set", *ACME_DEV)],
            {"stdin": io.StringIO("value")},
        ),
        "secret delete": (
            ["secret", "delete", "--project", "acme", "OLD_KEY"],
            [("secret.delete", *ACME_DEV)],
            {},
        ),
        "webhook add": (
            [
                "webhook",
                "add",
                "--project",
                "acme",
                "--url",
                "https://hooks.example.com/x",
                "--event",
                "document.created",
            ],
            [("webhook.create", "acme", "")],
            {},
        ),
        "webhook update": (
            ["webhook", "update", "--project", "acme", str(endpoint.pk), "--pause"],
            [("webhook.update", "acme", "")],
            {},
        ),
        "webhook rotate": (
            ["webhook", "rotate", "--project", "acme", str(endpoint.pk)],
            [("webhook.rotate", "acme", "")],
            {},
        ),
        "webhook redeliver": (
            ["webhook", "redeliver", "--project", "acme", str(endpoint.pk), str(delivery.pk)],
            [("webhook.redeliver", "acme", "")],
            {},
        ),
    }


def _cli_approve(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    proposal, _ = _proposal(w)
    argv = ["memory", "--project", "acme", "approve", proposal]
    return argv, [("proposal.approve", *ACME_DEV), ("document.approve", *ACME_DEV)], {}


def _cli_reject(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    proposal, _ = _proposal(w)
    argv = ["memory", "--project", "acme", "reject", proposal, "--reason", "No."]
    return argv, [("proposal.reject", *ACME_DEV)], {}


def _cli_restore_as_of(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    document = w.document()
    as_of = timezone.now()
    document_replace(
        resource=w.notes,
        doc_id=document.doc_id,
        expected_revision=document.revision,
        text="Later.",
        actor="t",
    )
    argv = ["memory", "--project", "acme", "restore-as-of", "notes", "--as-of", as_of.isoformat()]
    argv += ["--document", document.doc_id]
    return argv, [("resource.restore_as_of", *ACME_DEV), ("document.restore", *ACME_DEV)], {}


def _cli_import(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    w.document("carried")
    out = w.request.getfixturevalue("tmp_path") / "export"
    call_command("memory", "--project", "acme", "export", "--out", str(out), stdout=io.StringIO())
    deployment_create(
        project=w.project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="production",
        actor="t",
    )
    argv = [
        "memory",
        "--project",
        "acme",
        "--environment",
        "production",
        "import",
        "--from",
        str(out),
    ]
    return argv, [("document.create", "acme", "production")], {}


def _cli_unfreeze(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    document = w.document()
    call_command(
        "memory", "--project", "acme", "freeze", "notes", document.doc_id, stdout=io.StringIO()
    )
    argv = ["memory", "--project", "acme", "unfreeze", "notes", document.doc_id]
    return argv, [("document.unfreeze", *ACME_DEV)], {}


def _cli_session_revert(w: World) -> tuple[list[str], list[Entry], dict[str, Any]]:
    asked = _session_revert(w)
    session_id = asked.url.split("/")[-2]
    return ["session", "revert", session_id], asked.expect, {}


CLI_MORE = {
    "memory approve": _cli_approve,
    "memory reject": _cli_reject,
    "memory restore-as-of": _cli_restore_as_of,
    "memory import": _cli_import,
    "memory unfreeze": _cli_unfreeze,
    "session revert": _cli_session_revert,
}

CLI_NAMES = [
    *CLI_MORE,
    "memory create",
    "memory edit",
    "memory freeze",
    "memory review",
    "memory redact",
    "memory remove",
    "memory export",
    "createproject",
    "apikey create",
    "createapikey",
    "apikey revoke",
    "apikey rotate",
    "deploy",
    "grant",
    "grant --create",
    "grant --revoke",
    "session create",
    "session end",
    "incident trace",
    "incident contain",
    "erasure run",
    "secret set",
    "secret delete",
    "webhook add",
    "webhook update",
    "webhook rotate",
    "webhook redeliver",
]


@pytest.mark.parametrize("name", CLI_NAMES)
def test_cli_change_is_audited_once_as_the_cli(world: World, name: str) -> None:
    made = CLI_MORE.get(name)
    argv, expect, options = made(world) if made else _cli_cases(world)[name]
    before = _watermark()
    call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO(), **options)
    written = _shape(_new_entries(before))
    assert written == _expected(expect, CLI), (name, written)


# ---------------------------------------------------------------- the Memory page's forms

PAGE = "/projects/acme/development"
ROUTE = "projects/<slug:p>/<env:e>/"
RES = ROUTE + "resources/<slug:r>/"
PAGE_DOC = RES + "documents/<str:d>/"


@dataclass
class Posted:
    """One form a page sends, and the entries it must write when it succeeds."""

    url: str
    data: Any = field(default_factory=dict)
    expect: list[Entry] = field(default_factory=list)
    status: int = 302  # a form that succeeds redirects, unless it answers a page or a file
    # A form that is refused and must write nothing (default: the same sent by a viewer,
    # who may change nothing); None for none.
    refused: Posted | bool | None = True
    streamed: bool = False
    # Who sends it: a persona's name for a refusal, a client of its own (signed in or
    # not), or None for the owner.
    client: Any = None


PAGE_CASES: dict[str, Callable[[World], Posted]] = {}


def page_case(route: str) -> Callable[[Callable[[World], Posted]], Any]:
    def register(make: Callable[[World], Posted]) -> Callable[[World], Posted]:
        PAGE_CASES[route] = make
        return make

    return register


def _page_doc(doc_id: str, tail: str = "", resource: str = "notes") -> str:
    return f"{PAGE}/resources/{resource}/documents/{doc_id}/{tail}"


@page_case(RES + "new/")
def _page_document_create(w: World) -> Posted:
    return Posted(
        f"{PAGE}/resources/notes/new/",
        {"doc_id": w.name("new"), "title": "New", "text": "Fresh.", "summary": ""},
        [("document.create", *ACME_DEV)],
    )


@page_case(PAGE_DOC + "edit/")
def _page_document_edit(w: World) -> Posted:
    document = w.document()
    form = {"revision": document.revision, "title": "T", "summary": "", "text": "Node 24."}
    return Posted(
        _page_doc(document.doc_id, "edit/"),
        form,
        [("document.replace", *ACME_DEV)],
        refused=Posted(_page_doc(document.doc_id, "edit/"), {**form, "revision": "rev_stale"}),
    )


@page_case(PAGE_DOC + "agent-writes/")
def _page_write_mode(w: World) -> Posted:
    document = w.document()
    return Posted(
        _page_doc(document.doc_id, "agent-writes/"),
        {"agentWrites": "review"},
        [("document.review", *ACME_DEV)],
    )


@page_case(PAGE_DOC + "freeze/")
def _page_freeze(w: World) -> Posted:
    document = w.document()
    return Posted(_page_doc(document.doc_id, "freeze/"), {}, [("document.freeze", *ACME_DEV)])


@page_case(PAGE_DOC + "unfreeze/")
def _page_unfreeze(w: World) -> Posted:
    document = w.document()
    documents_freeze(w, document.doc_id)
    return Posted(_page_doc(document.doc_id, "unfreeze/"), {}, [("document.unfreeze", *ACME_DEV)])


def documents_freeze(w: World, *doc_ids: str) -> None:
    from memoryadmin.memory.services.documents import documents_set_agent_writes

    documents_set_agent_writes(resource=w.notes, doc_ids=list(doc_ids), enabled=False, actor="t")


@page_case(PAGE_DOC + "delete/")
def _page_delete(w: World) -> Posted:
    document = w.document()
    form = {"revision": document.revision, "confirm_id": document.doc_id}
    return Posted(
        _page_doc(document.doc_id, "delete/"),
        form,
        [("document.delete", *ACME_DEV)],
        refused=Posted(_page_doc(document.doc_id, "delete/"), {**form, "revision": "rev_stale"}),
    )


@page_case(PAGE_DOC + "versions/<str:revision>/restore/")
def _page_version_restore(w: World) -> Posted:
    document, old = _old_version(w)
    return Posted(
        _page_doc(document.doc_id, f"versions/{old}/restore/"),
        {"revision": document.revision},
        [("document.restore", *ACME_DEV)],
    )


@page_case(PAGE_DOC + "versions/<str:revision>/redact/")
def _page_version_redact(w: World) -> Posted:
    document, old = _old_version(w)
    return Posted(
        _page_doc(document.doc_id, f"versions/{old}/redact/"),
        {"reason": "Leaked.", "confirm": "REDACT"},
        [("version.redact", *ACME_DEV)],
    )


@page_case(RES + "bulk/")
def _page_bulk(w: World) -> Posted:
    one, two = w.document(), w.document()
    return Posted(
        f"{PAGE}/resources/notes/bulk/",
        {
            "action": "freeze",
            "confirm": "yes",
            "doc": [f"{one.doc_id}:{one.revision}", f"{two.doc_id}:{two.revision}"],
        },
        [("document.freeze", *ACME_DEV), ("document.freeze", *ACME_DEV)],
    )


def _page_bulk_delete(w: World) -> Posted:
    one = w.document()
    return Posted(
        f"{PAGE}/resources/notes/bulk/",
        {"action": "delete", "confirm": "yes", "doc": [f"{one.doc_id}:{one.revision}"]},
        [("document.delete", *ACME_DEV)],
        # Support may freeze, not delete: refused as a whole.
        refused=Posted(
            f"{PAGE}/resources/notes/bulk/",
            {"action": "delete", "confirm": "yes", "doc": [f"{one.doc_id}:{one.revision}"]},
            client="support",
        ),
    )


def _page_bulk_export(w: World) -> Posted:
    one = w.document()
    return Posted(
        f"{PAGE}/resources/notes/bulk/",
        {"action": "export", "doc": [f"{one.doc_id}:{one.revision}"]},
        [("memory.export", *ACME_DEV)],
        status=200,
        streamed=True,
    )


@page_case(RES + "as-of/restore/")
def _page_restore_as_of(w: World) -> Posted:
    document = w.document()
    as_of = timezone.now()
    document_replace(
        resource=w.notes,
        doc_id=document.doc_id,
        expected_revision=document.revision,
        text="Later.",
        actor="t",
    )
    # The plan the page showed, which its form sends back.
    shown = resource_restore_as_of(
        resource=w.notes, as_of=as_of, doc_ids=[document.doc_id], dry_run=True, actor=""
    )
    return Posted(
        f"{PAGE}/resources/notes/as-of/restore/",
        {"asOf": as_of.isoformat(), "documents": [document.doc_id], "seen": shown.seen},
        [("resource.restore_as_of", *ACME_DEV), ("document.restore", *ACME_DEV)],
        status=200,
    )


RECORD = RES + "records/<str:rec>/"


@page_case(RES + "records/new/")
def _page_record_create(w: World) -> Posted:
    _records(w)
    return Posted(
        f"{PAGE}/resources/mem/records/new/",
        {"namespace": "team", "text": "Deploys need two reviews."},
        [("record.create", *ACME_DEV)],
    )


@page_case(RECORD + "edit/")
def _page_record_edit(w: World) -> Posted:
    record = _record_id(w)
    return Posted(
        f"{PAGE}/resources/mem/records/{record}/edit/",
        {
            "namespace": "team",
            "seen": record_seen("Ships on Fridays."),
            "text": "Ships on Mondays.",
        },
        [("record.update", *ACME_DEV)],
    )


@page_case(RECORD + "delete/")
def _page_record_delete(w: World) -> Posted:
    record = _record_id(w)
    return Posted(
        f"{PAGE}/resources/mem/records/{record}/delete/",
        {"namespace": "team", "seen": record_seen("Ships on Fridays.")},
        [("record.delete", *ACME_DEV)],
    )


@page_case(ROUTE + "export/")
def _page_export(w: World) -> Posted:
    w.document()
    return Posted(
        f"{PAGE}/export/",
        {"resources": ["notes", "kb"]},
        [("memory.export", *ACME_DEV)],
        status=200,
        streamed=True,
    )


@page_case(ROUTE + "erasures/")
def _page_erasure(w: World) -> Posted:
    w.document(text="The password is hunter2-hunter2.")
    form = {"text": "hunter2-hunter2", "documents": "", "reason": "Leaked."}
    return Posted(
        f"{PAGE}/erasures/",
        {**form, "erase": "1", "confirm": "ERASE"},
        [("erasure.run", *ACME_DEV), ("document.erase", *ACME_DEV)],
        # Support may preview, not erase.
        refused=Posted(
            f"{PAGE}/erasures/", {**form, "erase": "1", "confirm": "ERASE"}, client="support"
        ),
    )


def _page_erasure_preview(w: World) -> Posted:
    w.document(text="The password is hunter2-hunter2.")
    # A preview writes nothing.
    return Posted(
        f"{PAGE}/erasures/",
        {"text": "hunter2-hunter2", "documents": "", "reason": "Leaked."},
        status=200,
    )


@page_case(ROUTE + "import/")
def _page_import(w: World) -> Posted:
    data = _export_zip(w)
    deployment_create(
        project=w.project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="production",
        actor="t",
    )
    client = _page_client(w.people.owner)
    upload = io.BytesIO(data)
    upload.name = "export.zip"
    url = "/projects/acme/production/import/"
    before = _watermark()
    checked = client.post(url, {"export": upload})
    assert checked.status_code == 200, checked.content[:300]
    assert _new_entries(before) == []  # the dry run writes nothing
    return Posted(
        url,
        {"upload": checked.context["token"], "confirm": "yes"},
        [("document.create", "acme", "production")],
        client=client,
    )


@page_case(ROUTE + "webhooks/new/")
def _page_webhook_create(w: World) -> Posted:
    return Posted(
        f"{PAGE}/webhooks/new/",
        {"url": "https://hooks.example.com/new", "events": ["document.created"], "active": "on"},
        [("webhook.create", "acme", "")],
    )


@page_case(ROUTE + "webhooks/<int:w>/edit/")
def _page_webhook_update(w: World) -> Posted:
    endpoint = _endpoint(w)
    return Posted(
        f"{PAGE}/webhooks/{endpoint.pk}/edit/",
        {
            "url": endpoint.url,
            "events": ["document.updated"],
            "description": "CI",
            "active": "on",
        },
        [("webhook.update", "acme", "")],
    )


@page_case(ROUTE + "webhooks/<int:w>/rotate/")
def _page_webhook_rotate(w: World) -> Posted:
    endpoint = _endpoint(w)
    return Posted(f"{PAGE}/webhooks/{endpoint.pk}/rotate/", {}, [("webhook.rotate", "acme", "")])


@page_case(ROUTE + "webhooks/<int:w>/test/")
def _page_webhook_test(w: World) -> Posted:
    endpoint = _endpoint(w)
    return Posted(f"{PAGE}/webhooks/{endpoint.pk}/test/", {}, [("webhook.test", "acme", "")])


@page_case(ROUTE + "webhooks/<int:w>/delete/")
def _page_webhook_delete(w: World) -> Posted:
    endpoint = _endpoint(w)
    return Posted(f"{PAGE}/webhooks/{endpoint.pk}/delete/", {}, [("webhook.delete", "acme", "")])


@page_case(ROUTE + "webhooks/<int:w>/deliveries/<int:d>/redeliver/")
def _page_webhook_redeliver(w: World) -> Posted:
    endpoint = _endpoint(w)
    delivery = endpoint_send_test(endpoint=endpoint, actor="t")
    type(delivery).objects.filter(pk=delivery.pk).update(state="failed")
    return Posted(
        f"{PAGE}/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/redeliver/",
        {},
        [("webhook.redeliver", "acme", "")],
    )


@page_case(ROUTE + "keys/new/")
def _page_key_create(w: World) -> Posted:
    return Posted(f"{PAGE}/keys/new/", {"name": "ci"}, [("apikey.create", "acme", "")])


@page_case(ROUTE + "keys/<int:k>/revoke/")
def _page_key_revoke(w: World) -> Posted:
    key, _ = api_key_create(project_id="acme", name="old")
    return Posted(f"{PAGE}/keys/{key.pk}/revoke/", {}, [("apikey.revoke", "acme", "")])


@page_case(ROUTE + "deployments/secrets/")
def _page_secret_set(w: World) -> Posted:
    return Posted(
        f"{PAGE}/deployments/secrets/",
        {"name": "MEM0_KEY", "value": "s3cret", "origins": "https://mem0.example.com"},
        [("secret.set", *ACME_DEV)],
    )


@page_case(ROUTE + "deployments/<str:deployment_id>/promote/")
def _page_deployment_promote(w: World) -> Posted:
    deployment = deployment_create(
        project=w.project, agent="support-bot", memory=MANIFEST_MEMORY, actor="t"
    )
    return Posted(
        f"{PAGE}/deployments/{deployment.id}/promote/", {}, [("deployment.promote", *ACME_DEV)]
    )


@page_case(ROUTE + "people/grant/")
def _page_grant(w: World) -> Posted:
    return Posted(
        f"{PAGE}/people/grant/",
        {"grant-username": "vera", "grant-role": "support"},
        [("role.grant", "acme", "")],
    )


@page_case(ROUTE + "people/invite/")
def _page_invite(w: World) -> Posted:
    return Posted(
        f"{PAGE}/people/invite/",
        {"invite-username": "newcomer", "invite-role": "viewer", "invite-method": "link"},
        [("role.grant", "acme", ""), ("user.invite", "acme", "")],
    )


@page_case(ROUTE + "people/<str:username>/revoke/")
def _page_revoke(w: World) -> Posted:
    return Posted(f"{PAGE}/people/vera/revoke/", {}, [("role.revoke", "acme", "")])


@page_case(ROUTE + "sessions/<str:s>/end/")
def _page_session_end(w: World) -> Posted:
    session = w.session()
    return Posted(f"{PAGE}/sessions/{session.id}/end/", {}, [("session.end", *ACME_DEV)])


@page_case(ROUTE + "sessions/<str:s>/revert/")
def _page_session_revert(w: World) -> Posted:
    asked = _session_revert(w)
    session_id = asked.url.split("/")[-2]
    return Posted(f"{PAGE}/sessions/{session_id}/revert/", {}, asked.expect)


@page_case(ROUTE + "operations/<str:o>/retry/")
def _page_operation_retry(w: World) -> Posted:
    operation = _dead_letter(w)
    return Posted(f"{PAGE}/operations/{operation.id}/retry/", {}, [("operation.retry", *ACME_DEV)])


@page_case(ROUTE + "operations/<str:o>/discard/")
def _page_operation_discard(w: World) -> Posted:
    operation = _dead_letter(w)
    return Posted(
        f"{PAGE}/operations/{operation.id}/discard/", {}, [("operation.discard", *ACME_DEV)]
    )


@page_case(ROUTE + "incidents/new/")
def _page_incident_create(w: World) -> Posted:
    session = w.session()
    return Posted(
        f"{PAGE}/incidents/new/",
        {"kind": "session", "value": session.id, "title": "Poison", "hops": "1"},
        [("incident.create", *ACME_DEV)],
    )


@page_case(ROUTE + "incidents/<str:i>/contain/")
def _page_incident_contain(w: World) -> Posted:
    session = w.session()
    incident = incident_create(
        project=w.project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=1,
        actor="t",
    )
    return Posted(
        f"{PAGE}/incidents/{incident.id}/contain/",
        {"action": ["endSessions"], "confirm": "yes"},
        [("incident.contain", *ACME_DEV), ("session.end", *ACME_DEV)],
    )


@page_case(ROUTE + "review/<str:proposal>/approve/")
def _page_proposal_approve(w: World) -> Posted:
    proposal, workshop = _proposal(w)
    return Posted(
        f"{PAGE}/review/{proposal}/approve/",
        {"revision": workshop.revision},
        [("proposal.approve", *ACME_DEV), ("document.approve", *ACME_DEV)],
    )


@page_case(ROUTE + "review/<str:proposal>/reject/")
def _page_proposal_reject(w: World) -> Posted:
    proposal, _ = _proposal(w)
    return Posted(
        f"{PAGE}/review/{proposal}/reject/", {"reason": "No."}, [("proposal.reject", *ACME_DEV)]
    )


# Signing in and out change nothing audited; setting one's password from an invitation's
# link is the person's change, in the log of the project that invited them.
@page_case("login/")
def _page_login(w: World) -> Posted:
    from tests.helpers import PASSWORD

    return Posted(
        "/login/", {"username": "olivia", "password": PASSWORD}, client=Client(), refused=None
    )


@page_case("logout/")
def _page_logout(w: World) -> Posted:
    return Posted("/logout/", {}, refused=None)


@page_case("set-password/<uidb64>/<token>/")
def _page_password_set(w: World) -> Posted:
    from memoryadmin.web.services.roles import user_invite

    invitation = user_invite(
        username="newcomer", project_id="acme", role="viewer", method="link", actor="t"
    )
    client = Client()
    opened = client.get(f"/set-password/{invitation.uid}/{invitation.token}/")
    assert opened.status_code == 302, opened.status_code
    password = "a-long-new-password-42"
    return Posted(
        opened["Location"],
        {"new_password1": password, "new_password2": password},
        [("user.password_set", "acme", "", "user:newcomer")],
        client=client,
        refused=None,
    )


PAGE_MORE = {
    "bulk delete": _page_bulk_delete,
    "bulk export": _page_bulk_export,
    "erasure preview": _page_erasure_preview,
}


def _route_filled(route: str) -> str:
    names = {"p": "acme", "e": "development"}

    def fill(match: re.Match[str]) -> str:
        converter, name = match.group(1), match.group(2)
        return names.get(name, "1" if converter == "int:" else "x1")

    return "/" + re.sub(r"<(\w+:)?(\w+)>", fill, route)


def _page_post_routes() -> set[str]:
    """Every page route that answers a POST with anything but 405 (asked anonymously)."""
    anonymous = Client()
    found = set()
    for route, _, spaces in url_routes():
        if "web" in spaces and anonymous.post(_route_filled(route)).status_code != 405:
            found.add(route)
    return found


def test_every_page_route_that_takes_a_post_has_a_case(project: Project) -> None:
    routes = _page_post_routes()
    assert len(routes) > 30, routes
    assert routes == set(PAGE_CASES), (routes - set(PAGE_CASES), set(PAGE_CASES) - routes)


def _page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _page_send(client: Client, posted: Posted) -> Any:
    response = client.post(posted.url, posted.data)
    if posted.streamed and response.status_code == 200:
        streamed(response)
    return response


def _check_page(w: World, posted: Posted) -> None:
    if posted.refused is not None:
        refused = posted if posted.refused is True else posted.refused
        assert isinstance(refused, Posted)
        # A viewer may change nothing; a refusal of its own is the owner's or a persona's.
        who = "viewer" if posted.refused is True else refused.client or "owner"
        before = _watermark()
        response = _page_send(_page_client(getattr(w.people, who)), refused)
        assert response.status_code >= 400, (refused.url, response.status_code)
        assert _new_entries(before) == [], (refused.url, _shape(_new_entries(before)))
    client = posted.client or _page_client(w.people.owner)
    before = _watermark()
    response = _page_send(client, posted)
    content = b"" if posted.streamed else response.content[:300]
    assert response.status_code == posted.status, (posted.url, response.status_code, content)
    written = _shape(_new_entries(before))
    assert written == _expected(posted.expect, f"user:{w.people.owner.username}"), (
        posted.url,
        written,
    )


@pytest.mark.parametrize("case", [*sorted(PAGE_CASES), *sorted(PAGE_MORE)])
def test_page_change_is_audited_once_with_its_user(world: World, case: str) -> None:
    make = PAGE_MORE.get(case) or PAGE_CASES[case]
    _check_page(world, make(world))


# ---------------------------------------------------------------- changes that change nothing

# Each case readies a world where its request changes nothing (a paused webhook paused
# again, an ended session ended again...) and answers the request's status: it must be
# the success it always was, with no audit entry and no event queued.
NOOP_CASES: dict[str, Callable[[World], Callable[[], int]]] = {}


def noop_case(name: str) -> Callable[[Callable[[World], Callable[[], int]]], Any]:
    def register(
        make: Callable[[World], Callable[[], int]],
    ) -> Callable[[World], Callable[[], int]]:
        NOOP_CASES[name] = make
        return make

    return register


def _owner_page(w: World) -> Client:
    return _page_client(w.people.owner)


def _cli(*argv: str) -> Callable[[], int]:
    def run() -> int:
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())
        return 0

    return run


def _paused(w: World) -> Any:
    from memoryadmin.webhooks.services import endpoint_update

    return endpoint_update(endpoint=_endpoint(w), active=False, actor="t")


@noop_case("API: a paused webhook paused again")
def _noop_api_pause(w: World) -> Callable[[], int]:
    endpoint = _paused(w)
    url = f"{API}/projects/acme/webhooks/{endpoint.pk}"
    return lambda: (
        _api_client(w.keys.owner).patch(url, {"active": False}, format="json").status_code
    )


@noop_case("CLI: a paused webhook paused again")
def _noop_cli_pause(w: World) -> Callable[[], int]:
    endpoint = _paused(w)
    return _cli("webhook", "update", "--project", "acme", str(endpoint.pk), "--pause")


@noop_case("page: a webhook's settings saved as they are")
def _noop_page_webhook(w: World) -> Callable[[], int]:
    endpoint = _endpoint(w)
    form = {"url": endpoint.url, "events": ["document.updated"], "description": "", "active": "on"}
    url = f"{PAGE}/webhooks/{endpoint.pk}/edit/"
    return lambda: _owner_page(w).post(url, form).status_code


def _ended(w: World) -> Session:
    from memoryadmin.agents.services.sessions import session_end

    return session_end(session=w.session(), actor="t")


@noop_case("API: an ended session ended again")
def _noop_api_end(w: World) -> Callable[[], int]:
    session = _ended(w)
    url = f"{API}/sessions/{session.id}/end"
    return lambda: _api_client(w.keys.owner).post(url, {}, format="json").status_code


@noop_case("page: an ended session ended again")
def _noop_page_end(w: World) -> Callable[[], int]:
    session = _ended(w)
    return lambda: _owner_page(w).post(f"{PAGE}/sessions/{session.id}/end/").status_code


@noop_case("CLI: an ended session ended again")
def _noop_cli_end(w: World) -> Callable[[], int]:
    return _cli("session", "end", _ended(w).id)


@noop_case("page: a frozen document frozen again")
def _noop_page_freeze(w: World) -> Callable[[], int]:
    document = w.document()
    documents_freeze(w, document.doc_id)
    return lambda: _owner_page(w).post(_page_doc(document.doc_id, "freeze/")).status_code


@noop_case("page: frozen documents frozen again at once")
def _noop_page_bulk_freeze(w: World) -> Callable[[], int]:
    document = w.document()
    documents_freeze(w, document.doc_id)
    document.refresh_from_db()
    form = {"action": "freeze", "confirm": "yes", "doc": [f"{document.doc_id}:{document.revision}"]}
    return lambda: _owner_page(w).post(f"{PAGE}/resources/notes/bulk/", form).status_code


@noop_case("CLI: a frozen document frozen again")
def _noop_cli_freeze(w: World) -> Callable[[], int]:
    document = w.document()
    documents_freeze(w, document.doc_id)
    return _cli("memory", "--project", "acme", "freeze", "notes", document.doc_id)


def _contained(w: World) -> Any:
    from memoryadmin.incidents.services.contain import incident_contain

    session = w.session()
    incident = incident_create(
        project=w.project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=1,
        actor="t",
    )
    done = incident_contain(incident=incident, dry_run=False, actions=["endSessions"], actor="t")
    assert done["changed"] == 1, done
    return incident


@noop_case("API: an incident contained again")
def _noop_api_contain(w: World) -> Callable[[], int]:
    incident = _contained(w)
    url = f"{API}/projects/acme/memory/incidents/{incident.id}/contain{DEV}"
    body = {"actions": ["endSessions"]}
    return lambda: _api_client(w.keys.owner).post(url, body, format="json").status_code


@noop_case("page: an incident contained again")
def _noop_page_contain(w: World) -> Callable[[], int]:
    incident = _contained(w)
    url = f"{PAGE}/incidents/{incident.id}/contain/"
    form = {"action": ["endSessions"], "confirm": "yes"}
    return lambda: _owner_page(w).post(url, form).status_code


@noop_case("CLI: an incident contained again")
def _noop_cli_contain(w: World) -> Callable[[], int]:
    incident = _contained(w)
    argv = ["incident", "--project", "acme", "contain", incident.id, "--action", "endSessions"]
    return _cli(*argv)


@noop_case("page: a person given the role they have")
def _noop_page_grant(w: World) -> Callable[[], int]:
    form = {"grant-username": "vera", "grant-role": "viewer"}
    return lambda: _owner_page(w).post(f"{PAGE}/people/grant/", form).status_code


@noop_case("CLI: a person given the role they have")
def _noop_cli_grant(w: World) -> Callable[[], int]:
    return _cli("grant", "vera", "acme", "--role", "viewer")


@noop_case("API: a revoked key revoked again")
def _noop_api_revoke(w: World) -> Callable[[], int]:
    from memoryadmin.memory.services.keys import api_key_revoke

    key, _ = api_key_create(project_id="acme", name="old")
    api_key_revoke(key=key, actor="t")
    url = f"{API}/projects/acme/api-keys/{key.pk}/revoke"
    return lambda: _api_client(w.keys.owner).post(url, {}, format="json").status_code


@noop_case("page: a revoked key revoked again")
def _noop_page_revoke(w: World) -> Callable[[], int]:
    from memoryadmin.memory.services.keys import api_key_revoke

    key, _ = api_key_create(project_id="acme", name="old")
    api_key_revoke(key=key, actor="t")
    return lambda: _owner_page(w).post(f"{PAGE}/keys/{key.pk}/revoke/").status_code


def _active_deployment(w: World) -> str:
    from memoryadmin.memory.models import ActiveDeployment

    active = ActiveDeployment.objects.get(
        project=w.project, environment="development", agent="support-bot"
    )
    return active.deployment_id


@noop_case("API: the active deployment promoted again")
def _noop_api_promote(w: World) -> Callable[[], int]:
    url = f"{API}/projects/acme/deployments/{_active_deployment(w)}/promote"
    body = {"environment": "development"}
    return lambda: _api_client(w.keys.owner).post(url, body, format="json").status_code


@noop_case("page: the active deployment promoted again")
def _noop_page_promote(w: World) -> Callable[[], int]:
    url = f"{PAGE}/deployments/{_active_deployment(w)}/promote/"
    return lambda: _owner_page(w).post(url).status_code


def _secret_kept(w: World) -> None:
    secret_set(
        project=w.project,
        environment="development",
        name="MEM0_KEY",
        value="s3cret",
        origins=["https://mem0.example.com"],
        actor="t",
    )


@noop_case("API: a secret set to the value it has")
def _noop_api_secret(w: World) -> Callable[[], int]:
    _secret_kept(w)
    url = f"{API}/projects/acme/secrets/MEM0_KEY{DEV}"
    body = {"value": "s3cret", "origins": ["https://mem0.example.com"]}
    return lambda: _api_client(w.keys.owner).put(url, body, format="json").status_code


@noop_case("page: a secret set to the value it has")
def _noop_page_secret(w: World) -> Callable[[], int]:
    _secret_kept(w)
    form = {"name": "MEM0_KEY", "value": "s3cret", "origins": ""}
    return lambda: _owner_page(w).post(f"{PAGE}/deployments/secrets/", form).status_code


@noop_case("CLI: a secret set to the value it has")
def _noop_cli_secret(w: World) -> Callable[[], int]:
    _secret_kept(w)

    def run() -> int:
        argv = ["secret", "set", "--project", "acme", "MEM0_KEY"]
        call_command(*argv, stdin=io.StringIO("s3cret"), stdout=io.StringIO())
        return 0

    return run


@pytest.mark.parametrize("case", sorted(NOOP_CASES))
def test_a_change_that_changes_nothing_writes_no_entry_and_raises_no_event(
    world: World, case: str
) -> None:
    from memoryadmin.webhooks.models import Delivery
    from memoryadmin.webhooks.outbox import EVENT_TYPES

    send = NOOP_CASES[case](world)
    endpoint_create(
        project=world.project,
        url="https://hooks.example.com/all",
        events=list(EVENT_TYPES),
        actor="t",
    )
    before, deliveries = _watermark(), Delivery.objects.count()
    status = send()
    assert status in (0, 200, 204, 302), (case, status)
    assert _shape(_new_entries(before)) == [], case
    assert Delivery.objects.count() == deliveries, case
