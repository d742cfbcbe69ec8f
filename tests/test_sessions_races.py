"""Races on PostgreSQL: one key, one session; no agent save commits after an end,
a freeze or a delete that committed first."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import httpx
import pytest
from django.db import connection, connections, transaction

from memoryadmin.agents.models import Binding, Session, SessionEvent
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.agents.services.sessions import session_create, session_end, session_lock
from memoryadmin.core.errors import NotFound, PreconditionFailed
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.documents import document_create, document_delete, document_patch
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import run_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

ROUNDS = 15
RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


def test_twenty_concurrent_creates_with_one_key_create_one_session(
    live_server: Any, project: Project, notes: Resource
) -> None:
    document_create(resource=notes, doc_id="workshop", title="Workshop", actor="t")
    key = api_key_create(project_id="acme")[1]

    def create(index: int) -> tuple[int, dict[str, Any]]:
        with httpx.Client(timeout=60) as client:
            response = client.post(
                f"{live_server.url}/api/managed-agents/sessions",
                json={"agentId": "support-bot@development", "memory": RW},
                headers={"x-api-key": key, "Idempotency-Key": "topic/race"},
            )
        return response.status_code, response.json()

    results = run_threads(20, create)
    assert Counter(status for status, _ in results) == {201: 1, 200: 19}
    assert len({body["session"]["id"] for _, body in results}) == 1
    session = Session.objects.get()
    assert session.id == results[0][1]["session"]["id"]
    assert Binding.objects.filter(session=session).count() == 1
    assert list(SessionEvent.objects.values_list("seq", "type")) == [(1, "session.created")]


def _session_and_recall(project: Project, notes: Resource, round_no: int) -> tuple[Session, str]:
    doc_id = f"doc-{round_no}"
    document_create(resource=notes, doc_id=doc_id, title="Race", text="0", actor="t")
    session, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory={"notes": {"scope": "document", "id": doc_id, "access": "read-write"}},
        idempotency_key=f"race-{round_no}",
        actor="t",
    )
    recall = recall_create(session=session, use=["notes"])
    return session, recall["recallId"]


def _save(session: Session, recall_id: str) -> dict[str, Any]:
    return tool_call(
        session=session,
        recall_id=recall_id,
        call_id="c",
        name="memory_save",
        arguments={"text": "agent"},
    )


def test_session_end_racing_a_save_never_lets_the_save_commit_after_it(
    project: Project, notes: Resource
) -> None:
    outcomes: Counter[str] = Counter()
    for round_no in range(ROUNDS):
        session, recall_id = _session_and_recall(project, notes, round_no)

        def work(index: int, session: Session = session, recall_id: str = recall_id) -> Any:
            if index == 0:
                return session_end(session=Session.objects.get(pk=session.pk), actor="t")
            return _save(session, recall_id)

        _, saved = run_threads(2, work)
        outcomes[saved["status"] + ":" + saved.get("reason", "")] += 1
        events = dict(SessionEvent.objects.filter(session=session).values_list("type", "seq"))
        document = Document.objects.get(resource=notes, doc_id=f"doc-{round_no}")
        if saved["status"] == "saved":
            # The save committed first: its event precedes the end.
            assert events["memory.saved"] < events["session.ended"]
            assert document.text == "agent"
        else:
            assert saved == {"status": "rejected", "reason": "session_closed"}
            assert "memory.saved" not in events
            assert document.text == "0"
    assert set(outcomes) <= {"saved:", "rejected:session_closed"}


def test_save_waiting_on_an_end_in_progress_sees_it_and_is_rejected(
    project: Project, notes: Resource
) -> None:
    """An end holds the session lock; a save arriving meanwhile must wait for it and
    then find the session closed, not commit on the strength of an earlier read."""
    session, recall_id = _session_and_recall(project, notes, 0)
    outcome: dict[str, Any] = {}

    def save() -> None:
        try:
            outcome.update(_save(session, recall_id))
        finally:
            connections.close_all()

    with transaction.atomic():
        session_lock(session=session)
        saver = threading.Thread(target=save)
        saver.start()
        assert _wait_for_lock_waiter(saver), "the save did not wait for the session lock"
        session_end(session=session, actor="t")
    saver.join(timeout=60)
    assert outcome == {"status": "rejected", "reason": "session_closed"}
    assert Document.objects.get(resource=notes, doc_id="doc-0").text == "0"
    assert not SessionEvent.objects.filter(session=session, type="memory.saved").exists()


def _wait_for_lock_waiter(thread: threading.Thread) -> bool:
    """True once another backend waits on a lock; False if the thread finished first."""
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock' "
        "AND pid <> pg_backend_pid()"
    )
    for _ in range(6000):
        if not thread.is_alive():
            return False
        with connection.cursor() as cursor:
            cursor.execute(query)
            if cursor.fetchone()[0] > 0:
                return True
        thread.join(timeout=0.01)
    return False


@pytest.mark.parametrize("owner_action", ["freeze", "delete"])
def test_freeze_or_delete_racing_a_save_never_both_succeed(
    project: Project, notes: Resource, owner_action: str
) -> None:
    for round_no in range(ROUNDS):
        session, recall_id = _session_and_recall(project, notes, round_no)
        doc_id = f"doc-{round_no}"
        revision = Document.objects.get(resource=notes, doc_id=doc_id).revision

        def work(
            index: int,
            session: Session = session,
            recall_id: str = recall_id,
            doc_id: str = doc_id,
            revision: str = revision,
        ) -> Any:
            if index == 1:
                return _save(session, recall_id)
            try:
                if owner_action == "freeze":
                    document_patch(
                        resource=notes,
                        doc_id=doc_id,
                        expected_revision=revision,
                        agent_writes=False,
                        actor="t",
                    )
                else:
                    document_delete(
                        resource=notes, doc_id=doc_id, expected_revision=revision, actor="t"
                    )
            except (PreconditionFailed, NotFound):
                return False
            return True

        owner_won, saved = run_threads(2, work)
        document = Document.objects.get(resource=notes, doc_id=doc_id)
        if owner_won:
            expected = "agent_writes_disabled" if owner_action == "freeze" else "not_found"
            assert saved == {"status": "rejected", "reason": expected}
            assert document.text in ("0", "")
        else:
            assert saved["status"] == "saved"
            assert document.text == "agent"
