"""What the agent sees: the recall a new session would get, from the runtime itself,
with nothing kept (no session, binding, event, recall or audit entry)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services.preview import recall_preview
from memoryadmin.core.errors import DomainError
from memoryadmin.memory.models import AuditEntry, Document, Project
from tests.helpers import html_of

URL = "/projects/acme/development/agents/preview/"
BINDINGS = {
    "notes": {"scope": "document", "id": "workshop", "access": "read-write"},
    "kb": {"scope": "collection"},
}


def kept() -> tuple[int, int, int, int]:
    return (
        Session.objects.count(),
        Recall.objects.count(),
        AuditEntry.objects.count(),
        Document.objects.count(),
    )


def test_the_preview_is_the_recall_and_keeps_nothing(project: Project, workshop: Any) -> None:
    before = kept()
    preview = recall_preview(
        project=project, agent_id="support-bot@development", memory=BINDINGS, actor="user:x"
    )
    notes = preview["memory"]["notes"]
    assert "Exercises must run on Node.js 22." in notes["text"]
    assert notes["writable"] is True
    assert notes["maxBytes"] == 8192
    assert notes["bytes"] == len(notes["text"].encode())
    assert preview["memory"]["kb"]["writable"] is False
    assert "memory_save" in preview["tools"]
    assert kept() == before


def test_a_missing_document_is_the_api_s_error_and_nothing_is_kept(
    project: Project, workshop: Any
) -> None:
    before = kept()
    memory = {"notes": {"scope": "document", "id": "brand-new", "access": "read-write"}}
    with pytest.raises(DomainError, match="does not exist"):
        recall_preview(
            project=project, agent_id="support-bot@development", memory=memory, actor="x"
        )
    assert kept() == before


def test_bad_bindings_are_the_api_s_errors(project: Project, workshop: Any) -> None:
    with pytest.raises(DomainError):
        recall_preview(
            project=project,
            agent_id="support-bot@development",
            memory={"nope": {"scope": "collection"}},
            actor="x",
        )


@pytest.mark.parametrize("persona", ["owner", "support", "viewer"])
def test_every_role_previews_on_the_page(web: Any, persona: str, workshop: Any) -> None:
    before = kept()
    html = html_of(web(persona).get(URL, {"agent": "support-bot", "memory": json.dumps(BINDINGS)}))
    assert "support-bot would see" in html
    assert "Exercises must run on Node.js 22." in html
    assert '<span class="badge">writable</span>' in html
    assert kept() == before


def test_the_page_says_what_is_wrong(owner: Any, workshop: Any) -> None:
    html = html_of(owner.get(URL, {"agent": "support-bot", "memory": "{not json"}))
    assert 'role="alert"' in html
    assert "not JSON" in html
    html = html_of(owner.get(URL, {"agent": "nobody", "memory": "{}"}))
    assert 'role="alert"' in html
