"""Service-level rules that every door shares."""

from __future__ import annotations

from typing import Any

import pytest

from memoryadmin.core.errors import NotFound
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Resource
from memoryadmin.memory.services.documents import (
    document_delete,
    document_replace,
    document_set_agent_writes,
)


def test_freeze_needs_no_revision_and_is_idempotent(make_document: Any, notes: Resource) -> None:
    document = make_document("workshop", text="one")
    # An unrelated edit moves the revision; the freeze does not care.
    document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=document.revision,
        text="two",
        actor="t",
    )
    frozen, changed = document_set_agent_writes(
        resource=notes, doc_id="workshop", enabled=False, actor="t"
    )
    assert changed is True
    stored = Document.objects.get(pk=document.pk)
    assert (stored.agent_writes, stored.text, stored.revision) == (False, "two", frozen.revision)
    versions = DocumentVersion.objects.filter(document=document).count()
    again, changed_again = document_set_agent_writes(
        resource=notes, doc_id="workshop", enabled=False, actor="t"
    )
    assert changed_again is False
    assert again.revision == frozen.revision
    assert DocumentVersion.objects.filter(document=document).count() == versions
    assert AuditEntry.objects.filter(action="document.freeze").count() == 1


def test_freeze_of_deleted_document_is_not_found(make_document: Any, notes: Resource) -> None:
    document = make_document("workshop")
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=document.revision, actor="t"
    )
    with pytest.raises(NotFound):
        document_set_agent_writes(resource=notes, doc_id="workshop", enabled=False, actor="t")
    assert Document.objects.get(pk=document.pk).agent_writes is True
