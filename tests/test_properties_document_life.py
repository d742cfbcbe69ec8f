"""One document's life as a state machine, checked against a plain model of the contract:
create, replace with the right or a stale revision, patch, freeze, unfreeze, delete, create
again over the tombstone, and agent saves through a session. After every step the status
codes, the revision, the tombstone and the version rows agree with the model.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from rest_framework.test import APIClient

from memoryadmin.memory.models import Document, DocumentVersion
from tests.helpers import DEV, DOCS, Keys

pytestmark = pytest.mark.django_db

SESSIONS = "/api/managed-agents/sessions"
CHARACTERS = st.characters(codec="utf-8", exclude_characters="\x00")
TEXT = st.text(CHARACTERS, max_size=20)
TITLE = st.text(CHARACTERS, min_size=1, max_size=10)
NUMBERS = itertools.count()


@dataclass
class Model:
    """What the contract says about the document."""

    live: bool = False
    tombstone: bool = False
    revision: str | None = None
    text: str = ""
    title: str = ""
    frozen: bool = False
    versions: int = 0
    seen: set[str] = field(default_factory=set)
    stale: str | None = None

    def moved(self, revision: str) -> None:
        assert revision not in self.seen, "a revision came back"
        self.stale, self.revision = self.revision, revision
        self.seen.add(revision)
        self.versions += 1


class DocumentLife(RuleBasedStateMachine):
    api: APIClient

    def __init__(self) -> None:
        super().__init__()
        self.doc_id = f"life{next(NUMBERS)}"
        self.url = f"{DOCS}/{self.doc_id}{DEV}"
        self.model = Model()

    def send(self, method: str, body: Any = None, **headers: str) -> Any:
        data = None if body is None else json.dumps(body)
        call = getattr(self.api, method)
        response = call(self.url, data=data, content_type="application/json", **headers)
        assert response.status_code < 500
        return response

    def if_match(self, revision: str | None) -> dict[str, str]:
        return {"HTTP_IF_MATCH": f'"{revision or "0" * 20}"'}

    def wrong_revision(self) -> str:
        return self.model.stale or "f" * 20

    def expect_write(self, response: Any, success: int) -> None:
        if self.model.live:
            assert response.status_code == success, response.content
        else:
            assert response.status_code == 404, response.content

    # Owner writes through the API.

    @rule(title=TITLE, text=TEXT)
    def create(self, title: str, text: str) -> None:
        response = self.send("put", {"title": title, "text": text}, HTTP_IF_NONE_MATCH="*")
        if self.model.live or self.model.tombstone:
            assert response.status_code == 412, response.content
            return
        assert response.status_code == 201, response.content
        self.model.live, self.model.title, self.model.text = True, title, text
        self.model.moved(response.json()["revision"])

    @rule(text=TEXT)
    def replace(self, text: str) -> None:
        response = self.send("put", {"text": text}, **self.if_match(self.model.revision))
        self.expect_write(response, 200)
        if response.status_code == 200:
            self.model.text = text
            self.model.moved(response.json()["revision"])

    @rule(text=TEXT)
    def replace_with_a_stale_revision(self, text: str) -> None:
        response = self.send("put", {"text": text}, **self.if_match(self.wrong_revision()))
        assert response.status_code == (412 if self.model.live else 404), response.content

    @rule(title=TITLE)
    def patch_title(self, title: str) -> None:
        response = self.send("patch", {"title": title}, **self.if_match(self.model.revision))
        self.expect_write(response, 200)
        if response.status_code == 200:
            self.model.title = title
            self.model.moved(response.json()["revision"])

    @rule(frozen=st.booleans())
    def freeze_or_unfreeze(self, frozen: bool) -> None:
        body = {"agentWrites": "disabled" if frozen else "enabled"}
        response = self.send("patch", body, **self.if_match(self.model.revision))
        self.expect_write(response, 200)
        if response.status_code == 200:
            self.model.frozen = frozen
            self.model.moved(response.json()["revision"])

    @rule(stale=st.booleans())
    def delete(self, stale: bool) -> None:
        revision = self.wrong_revision() if stale else self.model.revision
        response = self.send("delete", **self.if_match(revision))
        if not self.model.live:
            assert response.status_code == 404, response.content
        elif stale:
            assert response.status_code == 412, response.content
        else:
            assert response.status_code == 204, response.content
            self.model.live, self.model.tombstone = False, True

    # An agent save through a session bound to the document.

    @precondition(lambda self: self.model.live)
    @rule(text=TEXT, owner_edit_first=st.booleans())
    def agent_save(self, text: str, owner_edit_first: bool) -> None:
        memory = {"notes": {"scope": "document", "id": self.doc_id, "access": "read-write"}}
        created = self.api.post(
            SESSIONS,
            data=json.dumps({"agentId": "support-bot@development", "memory": memory}),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=f"{self.doc_id}-{next(NUMBERS)}",
        )
        assert created.status_code == 201, created.content
        session = f"{SESSIONS}/{created.json()['session']['id']}/memory"
        recall = self.api.post(
            f"{session}/recall",
            data=json.dumps({"use": ["notes"]}),
            content_type="application/json",
        )
        assert recall.status_code == 200, recall.content
        if owner_edit_first:
            self.replace(f"{text} (owner)")
        call = {
            "recallId": recall.json()["recallId"],
            "callId": "c1",
            "name": "memory_save",
            "arguments": {"text": text},
        }
        response = self.api.post(
            f"{session}/tool-calls", data=json.dumps(call), content_type="application/json"
        )
        assert response.status_code == 200, response.content
        result = response.json()["result"]
        if self.model.frozen:
            assert result["status"] == "rejected", result
        elif owner_edit_first:
            assert result["status"] == "conflict", result
            assert result["text"] == self.model.text
        else:
            assert result["status"] == "saved", result
            self.model.text = text
            self.model.moved(result["revision"])

    # What must hold after every step.

    @invariant()
    def the_store_agrees_with_the_model(self) -> None:
        response = self.api.get(self.url)
        row = Document.objects.filter(doc_id=self.doc_id).first()
        versions = DocumentVersion.objects.filter(document__doc_id=self.doc_id)
        if not self.model.live:
            assert response.status_code == 404
            assert (row is not None) == self.model.tombstone
            if row is not None:
                assert row.deleted
                assert (row.text, row.title) == ("", "")
                assert not versions.exclude(text="", title="").exists()
            assert versions.count() == self.model.versions
            return
        assert response.status_code == 200, response.content
        body = response.json()
        assert response["ETag"] == f'"{self.model.revision}"'
        assert body["revision"] == self.model.revision
        assert (body["text"], body["title"]) == (self.model.text, self.model.title)
        assert body["agentWrites"] == ("disabled" if self.model.frozen else "enabled")
        assert versions.count() == self.model.versions
        newest = versions.order_by("-id").first()
        assert newest is not None
        assert (newest.revision, newest.text) == (self.model.revision, self.model.text)


def test_one_documents_life_agrees_with_the_model(api: APIClient, keys: Keys) -> None:
    DocumentLife.api = api
    run_state_machine_as_test(DocumentLife, settings=settings(stateful_step_count=20))
