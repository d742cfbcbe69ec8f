"""Recall reuse (spec 000): a retried model request with the same requestId reuses the
recall accepted for it; a changed body under the same id is 409."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import Document, Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import Writer, document_replace
from tests.helpers import run_threads

SESSIONS = "/api/managed-agents/sessions"
RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


def post(api: APIClient, url: str, body: Any, **headers: Any) -> Any:
    return api.post(url, data=json.dumps(body), content_type="application/json", **headers)


def start(api: APIClient, agent: str, memory: dict[str, Any], key: str = "k1") -> str:
    body = {"agentId": f"{agent}@development", "memory": memory}
    response = post(api, SESSIONS, body, HTTP_IDEMPOTENCY_KEY=f"{agent}-{key}")
    assert response.status_code == 201, response.json()
    return str(response.json()["session"]["id"])


def recall(api: APIClient, session_id: str, **body: Any) -> Any:
    return post(api, f"{SESSIONS}/{session_id}/memory/recall", body)


@pytest.fixture
def session_id(api: APIClient, workshop: Document) -> str:
    return start(api, "support-bot", RW)


def test_a_retried_request_reuses_the_accepted_recall_even_after_the_memory_changed(
    api: APIClient, session_id: str, workshop: Document
) -> None:
    first = recall(api, session_id, use=["notes"], input={"text": "hi"}, requestId="mreq-1")
    assert first.status_code == 200
    document_replace(
        resource=workshop.resource,
        doc_id="workshop",
        expected_revision=workshop.revision,
        text="Changed since.",
        actor="t",
        writer=Writer(kind="owner"),
    )
    again = recall(api, session_id, use=["notes"], input={"text": "hi"}, requestId="mreq-1")
    assert (again.status_code, again.json()) == (200, first.json())
    assert Recall.objects.filter(session_id=session_id).count() == 1
    fresh = recall(api, session_id, use=["notes"], input={"text": "hi"}, requestId="mreq-2")
    assert fresh.json()["recallId"] != first.json()["recallId"]
    assert fresh.json()["memory"]["notes"]["text"] == "Changed since."
    assert Recall.objects.filter(session_id=session_id).count() == 2


@pytest.mark.parametrize("changed", [{"use": []}, {"use": ["notes"], "input": {"text": "other"}}])
def test_a_changed_body_under_the_same_request_id_is_409_and_stores_nothing(
    api: APIClient, session_id: str, changed: dict[str, Any]
) -> None:
    first = recall(api, session_id, use=["notes"], input={"text": "hi"}, requestId="mreq-1")
    assert first.status_code == 200
    conflict = recall(api, session_id, requestId="mreq-1", **changed)
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_conflict"
    assert Recall.objects.filter(session_id=session_id).count() == 1


def test_request_ids_belong_to_their_session(
    api: APIClient, session_id: str, project: Project
) -> None:
    other = start(api, "support-bot", {}, key="k2")
    recall(api, session_id, use=["notes"], requestId="mreq-1")
    assert recall(api, other, requestId="mreq-1").status_code == 200
    assert Recall.objects.filter(request_id="mreq-1").count() == 2


@pytest.mark.parametrize("bad", ["", "a b", "x" * 257, 7])
def test_a_malformed_request_id_is_400(api: APIClient, session_id: str, bad: Any) -> None:
    response = recall(api, session_id, use=["notes"], requestId=bad)
    assert response.status_code == 400
    assert not Recall.objects.exists()


def test_a_reused_recall_does_not_call_the_provider_again(
    api: APIClient, project: Project, scripted: Any
) -> None:
    deployment_create(
        project=project,
        agent="scribe",
        memory=[scripted.declaration([])],
        promote="development",
        actor="t",
    )
    session_id = start(
        api, "scribe", {"ledger": {"scope": "namespace", "id": "team", "access": "read"}}
    )
    first = recall(api, session_id, use=["ledger"], requestId="mreq-1")
    again = recall(api, session_id, use=["ledger"], requestId="mreq-1")
    assert again.json() == first.json()
    assert len(scripted.requests("recall")) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_of_one_request_share_one_recall(
    project: Project, workshop: Document
) -> None:
    session, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory=RW,
        idempotency_key="race",
        actor="t",
    )
    results = run_threads(
        8,
        lambda _: recall_create(
            session=Session.objects.get(pk=session.pk), use=["notes"], request_id="mreq-r"
        )["recallId"],
    )
    assert len(set(results)) == 1
    assert Recall.objects.filter(session=session).count() == 1
