"""Owner edits composed from the document services: edit and reapply after a conflict."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from memoryadmin.core.diff import text_merge
from memoryadmin.core.errors import PreconditionFailed
from memoryadmin.memory.models import Document, DocumentVersion, Resource
from memoryadmin.memory.services.documents import (
    document_get,
    document_patch,
    document_replace,
)


@transaction.atomic
def document_edit(
    *,
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    title: str,
    text: str,
    summary: str,
    actor: str,
) -> Document | None:
    """Saves an owner's edit of title, text and summary; None when nothing changed.

    Text and summary go through one replace and a new title through one patch,
    each a conditional write: the replace under the revision the form was
    loaded from, the patch under the replace's result. One transaction makes
    the pair all-or-nothing.
    """
    current = document_get(resource=resource, doc_id=doc_id)
    if current.revision != expected_revision:
        # The conditional writes below would refuse too; refusing here also
        # covers an edit that would have been a no-op on a changed document.
        raise PreconditionFailed(f"Document '{doc_id}' has changed since that revision.")
    document: Document | None = None
    revision = expected_revision
    if text != current.text or summary != current.summary:
        document = document_replace(
            resource=resource,
            doc_id=doc_id,
            expected_revision=revision,
            text=text,
            summary=summary,
            actor=actor,
        )
        revision = document.revision
    if title != current.title:
        document = document_patch(
            resource=resource, doc_id=doc_id, expected_revision=revision, title=title, actor=actor
        )
    return document


@dataclass(frozen=True)
class Reapply:
    """What the conflict view offers to save on top of the current revision."""

    title: str
    text: str
    summary: str
    merged: bool  # the user's changes applied to the current text without overlap
    base_text: str | None  # the text both edits started from (None if unknown)


def _merge_field(base: str | None, mine: str, theirs: str) -> str:
    # A field the user left as loaded keeps whatever was saved meanwhile.
    return theirs if base is not None and mine == base else mine


def edit_reapply(
    *, current: Document, base_revision: str, title: str, text: str, summary: str
) -> Reapply:
    base = DocumentVersion.objects.filter(document=current, revision=base_revision).first()
    merged_text = None
    if base is not None:
        merged_text = text_merge(base=base.text, mine=text, theirs=current.text)
    return Reapply(
        title=_merge_field(base.title if base else None, title, current.title),
        summary=_merge_field(base.summary if base else None, summary, current.summary),
        text=text if merged_text is None else merged_text,
        merged=merged_text is not None,
        base_text=base.text if base is not None else None,
    )
