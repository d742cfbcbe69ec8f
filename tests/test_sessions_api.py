"""Sessions through the management API: creation, idempotency, admission, inspection, end."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import Binding, Recall, Session, SessionEvent
from memoryadmin.agents.services.sessions import event_append
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
)
from tests.helpers import MANIFEST_MEMORY, Keys, freeze, unfreeze

SESSIONS = "/api/managed-agents/sessions"
WORKSHOP_RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


def create(api: APIClient, memory: Any = None, *, key: str | None = "key-1", **body: Any) -> Any:
    body.setdefault("agentId", "support-bot@development")
    if memory is not None:
        body["memory"] = memory
    headers: dict[str, Any] = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return api.post(SESSIONS, data=json.dumps(body), content_type="application/json", **headers)


def test_create_returns_201_session_and_deployment(
    api: APIClient, workshop: Any, project: Project
) -> None:
    response = create(api, {**WORKSHOP_RW, "kb": {"scope": "collection"}}, labels={"app": "x"})
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"session", "deployment"}
    session = body["session"]
    assert session["id"].startswith("ses_")
    assert session["agentId"] == "support-bot@development"
    assert (session["agent"], session["environment"], session["status"]) == (
        "support-bot",
        "development",
        "active",
    )
    assert session["labels"] == {"app": "x"}
    assert session["endedAt"] is None
    assert session["memory"] == [
        {"resource": "kb", "scope": "collection", "access": "read", "writable": False},
        {
            "resource": "notes",
            "scope": "document",
            "id": "workshop",
            "access": "read-write",
            "writable": True,
        },
    ]
    assert body["deployment"]["id"] == session["deploymentId"]
    assert body["deployment"]["activeIn"] == ["development"]
    stored = Session.objects.get(pk=session["id"])
    assert stored.project_id == "acme"
    assert stored.idempotency_key == "key-1"
    assert stored.deployment.agent == "support-bot"
    assert sorted(Binding.objects.filter(session=stored).values_list("scope", "target_id")) == [
        ("collection", ""),
        ("document", "workshop"),
    ]
    events = list(SessionEvent.objects.filter(session=stored).values_list("seq", "type"))
    assert events == [(1, "session.created")]
    assert AuditEntry.objects.filter(action="session.create").count() == 1


def test_access_defaults_to_read(api: APIClient, workshop: Any) -> None:
    response = create(api, {"notes": {"scope": "document", "id": "workshop"}})
    assert response.status_code == 201
    binding = response.json()["session"]["memory"][0]
    assert (binding["access"], binding["writable"]) == ("read", False)
    assert Binding.objects.get().access == "read"


def test_session_without_memory_is_allowed(api: APIClient, project: Project) -> None:
    response = create(api)
    assert response.status_code == 201
    assert response.json()["session"]["memory"] == []
    assert Session.objects.count() == 1


def test_deployment_id_pins_an_older_deployment(
    api: APIClient, project: Project, workshop: Any
) -> None:
    first = project.deployments.get()
    newer = deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY[:1],
        promote="development",
        actor="test",
    )
    default = create(api, WORKSHOP_RW, key="default")
    assert default.status_code == 201
    assert default.json()["session"]["deploymentId"] == newer.id
    pinned = create(api, {"kb": {"scope": "collection"}}, key="pinned", deploymentId=first.id)
    assert pinned.status_code == 201
    assert pinned.json()["session"]["deploymentId"] == first.id
    assert pinned.json()["deployment"]["activeIn"] == []
    assert Session.objects.get(idempotency_key="pinned").deployment_id == first.id


def test_newer_deployment_without_a_resource_cannot_bind_it(
    api: APIClient, project: Project
) -> None:
    deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY[:1],
        promote="development",
        actor="test",
    )
    response = create(api, {"kb": {"scope": "collection"}})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_memory_binding"
    assert error["details"] == {"binding": "kb"}
    assert "does not declare" in error["message"]
    assert not Session.objects.exists()


def test_deployment_of_another_agent_is_400(api: APIClient, project: Project) -> None:
    other = deployment_create(project=project, agent="sales-bot", memory=[], actor="test")
    response = create(api, deploymentId=other.id)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Session.objects.exists()


def test_unknown_deployment_is_404(api: APIClient, project: Project) -> None:
    response = create(api, deploymentId="dep_nope")
    assert response.status_code == 404
    assert not Session.objects.exists()


def test_agent_without_active_deployment_is_400(api: APIClient, project: Project) -> None:
    response = create(api, agentId="support-bot@production")
    assert response.status_code == 400
    assert "no active deployment" in response.json()["error"]["message"]
    assert not Session.objects.exists()


@pytest.mark.parametrize(
    "agent_id", ["support-bot", "support-bot@staging", "Support@development", "a@b@development"]
)
def test_bad_agent_id_is_400(api: APIClient, project: Project, agent_id: str) -> None:
    response = create(api, agentId=agent_id)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Session.objects.exists()


@pytest.mark.parametrize("key", [None, "", "x" * 257, "tab\tkey"])
def test_idempotency_key_is_required_and_bounded(
    api: APIClient, project: Project, key: str | None
) -> None:
    response = create(api, key=key)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "Idempotency-Key" in response.json()["error"]["message"]
    assert not Session.objects.exists()


def test_idempotency_key_of_256_characters_is_accepted(api: APIClient, project: Project) -> None:
    response = create(api, key="k" * 256)
    assert response.status_code == 201
    assert Session.objects.get().idempotency_key == "k" * 256


def test_reused_key_with_same_inputs_returns_the_session_with_200(
    api: APIClient, workshop: Any
) -> None:
    first = create(api, WORKSHOP_RW)
    # Explicit defaults and other labels are the same request as far as the key is concerned.
    again = create(
        api,
        {"notes": {"access": "read-write", "id": "workshop", "scope": "document"}},
        labels={"other": "labels"},
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["session"] == first.json()["session"]
    assert Session.objects.count() == 1
    assert SessionEvent.objects.count() == 1


def test_reused_key_after_session_end_still_returns_it(api: APIClient, workshop: Any) -> None:
    session_id = create(api, WORKSHOP_RW).json()["session"]["id"]
    api.post(f"{SESSIONS}/{session_id}/end")
    again = create(api, WORKSHOP_RW)
    assert again.status_code == 200
    assert again.json()["session"]["status"] == "ended"
    assert Session.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"memory": {"notes": {"scope": "document", "id": "workshop"}}}, ["memory"]),
        ({"memory": {"kb": {"scope": "collection"}}}, ["memory"]),
        ({"agentId": "other-bot@development"}, ["agent", "deployment"]),
    ],
)
def test_reused_key_with_other_inputs_is_409_naming_what_differs(
    api: APIClient, workshop: Any, project: Project, change: dict[str, Any], differs: list[str]
) -> None:
    deployment_create(
        project=project, agent="other-bot", memory=MANIFEST_MEMORY, promote="development", actor="t"
    )
    first = create(api, WORKSHOP_RW)
    assert first.status_code == 201
    body = {"memory": WORKSHOP_RW, **change}
    response = create(api, **body)
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "idempotency_conflict"
    assert error["details"] == {"differs": differs}
    assert first.json()["session"]["id"] in error["message"]
    assert Session.objects.count() == 1


def test_reused_key_with_other_deployment_is_409(
    api: APIClient, workshop: Any, project: Project
) -> None:
    first = create(api, WORKSHOP_RW)
    newer = deployment_create(
        project=project, agent="support-bot", memory=MANIFEST_MEMORY, promote=None, actor="t"
    )
    response = create(api, WORKSHOP_RW, deploymentId=newer.id)
    assert response.status_code == 409
    assert response.json()["error"]["details"] == {"differs": ["deployment"]}
    assert Session.objects.get().pk == first.json()["session"]["id"]


def test_idempotency_keys_are_scoped_to_the_project(
    client_for: Callable[[str | None], APIClient],
    keys: Keys,
    other_project: Project,
    workshop: Any,
) -> None:
    deployment_create(
        project=other_project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="development",
        actor="test",
    )
    ours = create(client_for(keys.owner), WORKSHOP_RW)
    theirs = create(client_for(keys.other), {"kb": {"scope": "collection"}})
    assert (ours.status_code, theirs.status_code) == (201, 201)
    assert ours.json()["session"]["id"] != theirs.json()["session"]["id"]
    assert Session.objects.filter(idempotency_key="key-1").count() == 2


@pytest.mark.parametrize(
    ("memory", "binding", "message"),
    [
        ({"nope": {"scope": "collection"}}, "nope", "does not declare"),
        ({"notes": {"scope": "document", "id": "missing"}}, "notes", "does not exist"),
        ({"notes": {"scope": "collection", "access": "read-write"}}, "notes", "read-only"),
        ({"notes": {"scope": "namespace", "id": "owner"}}, "notes", "http provider"),
        ({"notes": {"scope": "collection", "id": "workshop"}}, "notes", "takes no id"),
        ({"notes": {"scope": "document"}}, "notes", "Document ids"),
        ({"notes": {"scope": "document", "id": "bad id"}}, "notes", "Document ids"),
        ({"notes": {"scope": "document", "id": 7}}, "notes", "Document ids"),
        ({"notes": {"id": "workshop"}}, "notes", "scope must be"),
        ({"notes": {"scope": "document", "id": "workshop", "access": "write"}}, "notes", "access"),
        ({"notes": {"scope": "collection", "extra": 1}}, "notes", "unknown fields"),
        ({"notes": "workshop"}, "notes", "must be an object"),
        ({"Bad_Id": {"scope": "collection"}}, "Bad_Id", "Resource ids"),
        (["notes"], "*", "keyed by resource id"),
        ({f"r{i}": {"scope": "collection"} for i in range(9)}, "*", "at most 8"),
    ],
)
def test_admission_errors_are_400_naming_the_binding(
    api: APIClient, workshop: Any, memory: Any, binding: str, message: str
) -> None:
    response = create(api, memory)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_memory_binding"
    assert error["details"] == {"binding": binding}
    assert message in error["message"]
    assert not Session.objects.exists()
    assert not Binding.objects.exists()


def test_binding_a_deleted_document_is_400(api: APIClient, workshop: Any, notes: Resource) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    response = create(api, WORKSHOP_RW)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_memory_binding"
    assert "deleted" in response.json()["error"]["message"]
    assert not Session.objects.exists()


def test_a_replay_returns_the_session_even_where_its_bindings_would_now_be_refused(
    api: APIClient, workshop: Any, notes: Resource
) -> None:
    first = create(api, WORKSHOP_RW)
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    # The key decides before admission: the session it made is the answer, not a 400.
    again = create(api, WORKSHOP_RW)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["session"]["id"] == first.json()["session"]["id"]
    assert Session.objects.count() == 1
    assert SessionEvent.objects.count() == 1
    assert AuditEntry.objects.filter(action="session.create").count() == 1


def test_a_key_refused_at_admission_stays_free_for_bindings_that_pass(
    api: APIClient, workshop: Any
) -> None:
    refused = create(api, {"notes": {"scope": "document", "id": "missing"}})
    assert refused.status_code == 400
    assert not Session.objects.exists()
    created = create(api, WORKSHOP_RW)
    assert created.status_code == 201
    session = Session.objects.get()
    assert (session.idempotency_key, session.last_seq) == ("key-1", 1)
    assert list(SessionEvent.objects.values_list("seq", "type")) == [(1, "session.created")]


@pytest.mark.parametrize(
    ("notes_id", "kb_id", "binding", "message"),
    [
        # Each id exists, but only in the other resource.
        ("kb-only", "notes-only", "kb", "'notes-only' does not exist"),
        ("workshop", "notes-only", "kb", "'notes-only' does not exist"),
        ("kb-only", "kb-only", "notes", "'kb-only' does not exist"),
        ("gone", "kb-only", "notes", "'gone' was deleted"),
        ("workshop", "gone", "kb", "'gone' was deleted"),
    ],
)
def test_documents_bound_in_two_resources_are_each_looked_up_in_their_own(
    api: APIClient,
    workshop: Any,
    project: Project,
    make_document: Any,
    notes_id: str,
    kb_id: str,
    binding: str,
    message: str,
) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("notes-only")
    make_document("kb-only", resource=kb)
    for resource in (Resource.objects.get(resource_id="notes", environment="development"), kb):
        gone = make_document("gone", resource=resource)
        document_delete(
            resource=resource, doc_id="gone", expected_revision=gone.revision, actor="t"
        )
    response = create(
        api,
        {
            "notes": {"scope": "document", "id": notes_id},
            "kb": {"scope": "document", "id": kb_id},
        },
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["code"], error["details"]) == ("invalid_memory_binding", {"binding": binding})
    assert message in error["message"]
    assert not Session.objects.exists()
    assert not Binding.objects.exists()


def test_eight_bindings_are_accepted(api: APIClient, project: Project) -> None:
    memory = [
        {"id": f"r{i}", "description": "Resource.", "provider": {"kind": "document"}}
        for i in range(8)
    ]
    deployment_create(
        project=project, agent="wide-bot", memory=memory, promote="development", actor="t"
    )
    response = create(
        api,
        {f"r{i}": {"scope": "collection"} for i in range(8)},
        agentId="wide-bot@development",
    )
    assert response.status_code == 201
    assert len(response.json()["session"]["memory"]) == 8
    assert Binding.objects.count() == 8


def test_the_created_session_answers_the_memory_it_is_read_with_later(
    api: APIClient, project: Project
) -> None:
    # The answer lists the bindings just written (not read back): the same entries, in
    # the same order (resource ids compared as text) and with the same writability as
    # the session read afterwards and as the list shows it.
    ids = ["r-b", "r10", "ra", "r2", "r-a"]
    memory = [{"id": i, "description": "R.", "provider": {"kind": "document"}} for i in ids]
    deployment_create(
        project=project, agent="wide-bot", memory=memory, promote="development", actor="t"
    )
    for rid in ("r-b", "r10", "ra"):
        resource = Resource.objects.get(resource_id=rid, environment="development")
        document = document_create(resource=resource, doc_id="d", title="D", actor="t")
        if rid == "r10":
            freeze(document)
    response = create(
        api,
        {
            "ra": {"scope": "document", "id": "d", "access": "read-write"},
            "r-b": {"scope": "document", "id": "d"},
            "r10": {"scope": "document", "id": "d", "access": "read-write"},
            "r2": {"scope": "collection"},
            "r-a": {"scope": "collection"},
        },
        agentId="wide-bot@development",
    )
    assert response.status_code == 201, response.content
    created = response.json()["session"]
    assert [(b["resource"], b["writable"]) for b in created["memory"]] == [
        ("r-a", False),
        ("r-b", False),  # read
        ("r10", False),  # frozen
        ("r2", False),  # a collection
        ("ra", True),
    ]
    read = api.get(f"{SESSIONS}/{created['id']}")
    assert read.status_code == 200
    assert read.json() == created
    listed = api.get(f"{SESSIONS}?projectId=acme&environment=development")
    assert listed.status_code == 200
    assert listed.json()["sessions"] == [created]


def test_unknown_body_field_is_400(api: APIClient, project: Project) -> None:
    response = create(api, source="x")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Session.objects.exists()


@pytest.mark.parametrize("labels", [["a"], {"a": 1}, {"": "x"}, {f"k{i}": "v" for i in range(33)}])
def test_bad_labels_are_400(api: APIClient, project: Project, labels: Any) -> None:
    response = create(api, labels=labels)
    assert response.status_code == 400
    assert not Session.objects.exists()


def test_all_projects_key_needs_project_id(
    client_for: Callable[[str | None], APIClient], keys: Keys, workshop: Any
) -> None:
    api = client_for(keys.all_projects)
    missing = create(api, WORKSHOP_RW)
    assert missing.status_code == 400
    assert "projectId" in missing.json()["error"]["message"]
    created = create(api, WORKSHOP_RW, projectId="acme")
    assert created.status_code == 201
    assert Session.objects.get().project_id == "acme"


def test_project_key_cannot_create_in_another_project(
    api: APIClient, workshop: Any, other_project: Project
) -> None:
    response = create(api, WORKSHOP_RW, projectId="globex")
    assert response.status_code == 403
    assert not Session.objects.exists()


def test_read_only_key_cannot_create(
    client_for: Callable[[str | None], APIClient], keys: Keys, workshop: Any
) -> None:
    response = create(client_for(keys.read_only), WORKSHOP_RW)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"
    assert not Session.objects.exists()


def test_missing_key_is_401(client_for: Callable[[str | None], APIClient], workshop: Any) -> None:
    response = create(client_for(None), WORKSHOP_RW)
    assert response.status_code == 401
    assert not Session.objects.exists()


# Inspection.


@pytest.fixture
def session_id(api: APIClient, workshop: Any) -> str:
    response = create(api, {**WORKSHOP_RW, "kb": {"scope": "collection"}})
    assert response.status_code == 201
    return str(response.json()["session"]["id"])


def notes_binding(api: APIClient, session_id: str) -> dict[str, Any]:
    response = api.get(f"{SESSIONS}/{session_id}")
    assert response.status_code == 200
    return next(b for b in response.json()["memory"] if b["resource"] == "notes")


def test_get_returns_session_with_memory(api: APIClient, session_id: str) -> None:
    response = api.get(f"{SESSIONS}/{session_id}")
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == session_id
    assert [b["resource"] for b in body["memory"]] == ["kb", "notes"]
    assert notes_binding(api, session_id)["writable"] is True


def test_writable_goes_false_on_freeze_and_back_on_unfreeze(
    api: APIClient, session_id: str, notes: Resource, workshop: Any
) -> None:
    frozen = freeze(workshop)
    assert notes_binding(api, session_id)["writable"] is False
    unfreeze(frozen)
    assert notes_binding(api, session_id)["writable"] is True


def test_writable_goes_false_on_delete(
    api: APIClient, session_id: str, notes: Resource, workshop: Any
) -> None:
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=workshop.revision, actor="t"
    )
    assert notes_binding(api, session_id)["writable"] is False


def test_end_revokes_writes_and_records_event_and_audit(api: APIClient, session_id: str) -> None:
    response = api.post(f"{SESSIONS}/{session_id}/end")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ended"
    assert body["endedAt"] is not None
    assert all(b["writable"] is False for b in body["memory"])
    stored = Session.objects.get(pk=session_id)
    assert (stored.status, stored.last_seq) == ("ended", 2)
    assert list(stored.events.order_by("seq").values_list("type", flat=True)) == [
        "session.created",
        "session.ended",
    ]
    entry = AuditEntry.objects.get(action="session.end")
    assert entry.detail["session"] == session_id
    assert entry.actor.startswith("key:")
    assert notes_binding(api, session_id)["writable"] is False


def test_ending_an_ended_session_returns_it_unchanged(api: APIClient, session_id: str) -> None:
    first = api.post(f"{SESSIONS}/{session_id}/end")
    again = api.post(f"{SESSIONS}/{session_id}/end")
    assert again.status_code == 200
    assert again.json() == first.json()
    assert SessionEvent.objects.filter(type="session.ended").count() == 1
    assert AuditEntry.objects.filter(action="session.end").count() == 1


def test_read_only_key_can_read_but_not_end(
    client_for: Callable[[str | None], APIClient], keys: Keys, session_id: str
) -> None:
    reader = client_for(keys.read_only)
    assert reader.get(f"{SESSIONS}/{session_id}").status_code == 200
    assert reader.get(f"{SESSIONS}/{session_id}/events").status_code == 200
    response = reader.post(f"{SESSIONS}/{session_id}/end")
    assert response.status_code == 403
    assert Session.objects.get(pk=session_id).status == "active"


@pytest.mark.parametrize("route", ["", "/events", "/end", "/memory/recall", "/memory/tool-calls"])
def test_sessions_of_other_projects_are_404(
    client_for: Callable[[str | None], APIClient], keys: Keys, session_id: str, route: str
) -> None:
    outsider = client_for(keys.other)
    url = f"{SESSIONS}/{session_id}{route}"
    response = outsider.get(url) if route in ("", "/events") else outsider.post(url, {}, "json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert Session.objects.get(pk=session_id).status == "active"
    assert not Recall.objects.exists()


def test_all_projects_key_reaches_every_session(
    client_for: Callable[[str | None], APIClient], keys: Keys, session_id: str
) -> None:
    response = client_for(keys.all_projects).get(f"{SESSIONS}/{session_id}")
    assert response.status_code == 200
    assert response.json()["projectId"] == "acme"


def test_unknown_session_is_404(api: APIClient, project: Project) -> None:
    response = api.get(f"{SESSIONS}/ses_nope")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# Events.


def test_events_are_ascending_from_seq_1_and_filter_by_after(
    api: APIClient, session_id: str
) -> None:
    api.post(f"{SESSIONS}/{session_id}/end")
    response = api.get(f"{SESSIONS}/{session_id}/events")
    assert response.status_code == 200
    body = response.json()
    assert [(e["seq"], e["type"]) for e in body["events"]] == [
        (1, "session.created"),
        (2, "session.ended"),
    ]
    assert body["events"][0]["data"]["agent"] == "support-bot"
    assert body["nextAfter"] is None
    later = api.get(f"{SESSIONS}/{session_id}/events?after=1").json()
    assert [e["seq"] for e in later["events"]] == [2]
    assert api.get(f"{SESSIONS}/{session_id}/events?after=2").json()["events"] == []


def test_events_come_in_pages_of_500(api: APIClient, session_id: str) -> None:
    session = Session.objects.get(pk=session_id)
    for _ in range(500):
        event_append(session=session, type="memory.saved", data={})
    first = api.get(f"{SESSIONS}/{session_id}/events").json()
    assert len(first["events"]) == 500
    assert first["nextAfter"] == 500
    rest = api.get(f"{SESSIONS}/{session_id}/events?after=500").json()
    assert [e["seq"] for e in rest["events"]] == [501]
    assert rest["nextAfter"] is None


@pytest.mark.parametrize("after", ["-1", "x", "1.5", ""])
def test_bad_after_is_400(api: APIClient, session_id: str, after: str) -> None:
    response = api.get(f"{SESSIONS}/{session_id}/events?after={after}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


# Listing.


def test_list_is_newest_first_with_filters(api: APIClient, workshop: Any) -> None:
    first = create(api, WORKSHOP_RW, key="a").json()["session"]["id"]
    second = create(api, WORKSHOP_RW, key="b").json()["session"]["id"]
    api.post(f"{SESSIONS}/{first}/end")
    listed = api.get(f"{SESSIONS}?environment=development")
    assert listed.status_code == 200
    assert [s["id"] for s in listed.json()["sessions"]] == [second, first]
    assert listed.json()["nextCursor"] is None
    ended = api.get(f"{SESSIONS}?environment=development&status=ended").json()
    assert [s["id"] for s in ended["sessions"]] == [first]
    assert ended["sessions"][0]["memory"][0]["writable"] is False
    other_agent = api.get(f"{SESSIONS}?environment=development&agent=other-bot").json()
    assert other_agent["sessions"] == []
    production = api.get(f"{SESSIONS}?environment=production").json()
    assert production["sessions"] == []


def test_list_paginates_with_a_signed_cursor(api: APIClient, project: Project) -> None:
    ids = [create(api, key=f"k{i}").json()["session"]["id"] for i in range(51)]
    first = api.get(f"{SESSIONS}?environment=development").json()
    assert len(first["sessions"]) == 50
    assert first["nextCursor"]
    second = api.get(f"{SESSIONS}?environment=development&cursor={first['nextCursor']}").json()
    seen = [s["id"] for s in first["sessions"] + second["sessions"]]
    assert sorted(seen) == sorted(ids)
    assert second["nextCursor"] is None
    foreign = api.get(
        f"{SESSIONS}?environment=development&status=active&cursor={first['nextCursor']}"
    )
    assert foreign.status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?environment=staging",
        "?environment=development&status=gone",
        "?environment=development&cursor=x",
    ],
)
def test_bad_list_queries_are_400(api: APIClient, project: Project, query: str) -> None:
    response = api.get(f"{SESSIONS}{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_list_for_all_projects_key_needs_project_id(
    client_for: Callable[[str | None], APIClient], keys: Keys, session_id: str
) -> None:
    api = client_for(keys.all_projects)
    assert api.get(f"{SESSIONS}?environment=development").status_code == 400
    response = api.get(f"{SESSIONS}?environment=development&projectId=acme")
    assert [s["id"] for s in response.json()["sessions"]] == [session_id]


def test_list_of_another_project_is_403(
    api: APIClient, session_id: str, other_project: Project
) -> None:
    response = api.get(f"{SESSIONS}?environment=development&projectId=globex")
    assert response.status_code == 403


# A recall's input text fits every provider's recall request: a longer one is the caller's
# to fix (400), refused before any provider is called, never a provider's failure.


def test_an_input_text_over_the_recall_limit_is_400_and_calls_nothing(
    api: APIClient, project: Project, scripted: Any
) -> None:
    from memoryadmin.agents.services.runtime import INPUT_TEXT_MAX_BYTES
    from tests.helpers import scripted_session

    session_id = scripted_session(api, project, scripted, [])
    url = f"{SESSIONS}/{session_id}/memory/recall"

    def recall(text: str) -> Any:
        body = {"use": ["ledger"], "input": {"text": text}}
        return api.post(url, data=json.dumps(body), content_type="application/json")

    # Within the API's 64 KiB body, beyond what a recall request can carry with it.
    beyond = recall("x" * (65_536 - 64))
    assert beyond.status_code == 400, beyond.json()
    assert beyond.json()["error"]["code"] == "invalid_request"
    over = recall("x" * (INPUT_TEXT_MAX_BYTES + 1))
    assert over.status_code == 400, over.json()
    assert over.json() == {
        "error": {
            "code": "invalid_request",
            "message": f"input.text is {INPUT_TEXT_MAX_BYTES + 1} bytes (UTF-8, as JSON writes "
            f"it); a recall's input text takes at most {INPUT_TEXT_MAX_BYTES} bytes: send less.",
        }
    }
    # Escapes count as the provider would receive them: 42,000 characters, 62,000 bytes.
    quoted = recall('"' * 20_000 + "x" * 22_000)
    assert quoted.status_code == 400, quoted.json()
    assert scripted.seen == []
    assert not Recall.objects.exists()
    assert not AuditEntry.objects.filter(action="provider.failed").exists()

    longest = recall("x" * INPUT_TEXT_MAX_BYTES)
    assert longest.status_code == 200, longest.json()
    [sent] = scripted.requests("recall")
    assert sent["input"]["text"] == "x" * INPUT_TEXT_MAX_BYTES
