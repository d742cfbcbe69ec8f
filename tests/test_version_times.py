"""A document's version times never go backwards, whatever wrote them and whenever it
waited: as-of reads pick a document's version by its time, so a version dated before the
one it follows would make "the document as it was at T" show the wrong text."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from memoryadmin.core.errors import DomainError
from memoryadmin.memory.models import Document, DocumentVersion, Proposal, Resource
from memoryadmin.memory.services.asof import document_list_as_of, resource_restore_as_of
from memoryadmin.memory.services.documents import (
    AgentWritesDisabled,
    Writer,
    document_delete,
    document_erase_text,
    document_patch,
    document_replace,
    document_restore,
    document_set_review,
    document_set_write_mode,
    documents_set_agent_writes,
)
from memoryadmin.memory.services.edits import document_edit
from memoryadmin.memory.services.proposals import document_agent_save, proposal_approve
from tests.helpers import lock_waiter_seen, run_threads

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = Writer(kind="agent", session_id="sess_times")


def current(document: Document) -> Document:
    return Document.objects.select_related("resource").get(pk=document.pk)


def version_times(document: Document) -> list[datetime]:
    """The document's version times in the order the versions were written (the order
    of every version list)."""
    rows = DocumentVersion.objects.filter(document=document).order_by("id")
    return list(rows.values_list("created_at", flat=True))


def assert_in_order(document: Document) -> None:
    """Every version is dated no earlier than the one before it, the document's time is
    its newest version's (a delete's no earlier), and as of each version's time (where
    the next one is later) the document reads as that version."""
    times = version_times(document)
    assert times == sorted(times), times
    stored = current(document)
    if stored.deleted:
        assert stored.updated_at >= times[-1]
        return
    assert stored.updated_at == times[-1]
    versions = list(DocumentVersion.objects.filter(document=document).order_by("id"))
    for version, following in zip(versions, [*versions[1:], None], strict=True):
        if following is not None and following.created_at == version.created_at:
            continue
        entries, _ = document_list_as_of(resource=stored.resource, as_of=version.created_at)
        shown = {entry.document.doc_id: entry.version.revision for entry in entries}
        assert shown[stored.doc_id] == version.revision


def outcome(work: Callable[[], Any]) -> str:
    try:
        work()
    except DomainError as exc:
        return exc.code
    except AgentWritesDisabled:
        return "agent_writes_disabled"
    return "ok"


def proposal_for(document: Document, text: str) -> str | None:
    """An agent's save of `text` over the current revision, held for review (None: the
    review setting changed meanwhile and the save was written)."""
    document_set_review(resource=document.resource, doc_id=document.doc_id, review=True, actor="t")
    held = document_agent_save(
        resource=document.resource,
        doc_id=document.doc_id,
        expected_revision=current(document).revision,
        text=text,
        summary=None,
        writer=AGENT,
        agent="support-bot",
    )
    return held.id if isinstance(held, Proposal) else None


def approve(document: Document, proposal_id: str) -> Document:
    return proposal_approve(
        project=document.resource.project,
        environment="development",
        proposal_id=proposal_id,
        expected_revision=current(document).revision,
        actor="user:olivia",
    )


# Every way a document's version (or a delete's time) is written, as the doors call it:
# each a function of the document, given what `prepare` made of it beforehand.
def _replace(doc: Document, _: Any) -> Any:
    return document_replace(
        resource=doc.resource,
        doc_id=doc.doc_id,
        expected_revision=current(doc).revision,
        text="From the owner.",
        actor="user:olivia",
    )


def _patch(doc: Document, _: Any) -> Any:
    return document_patch(
        resource=doc.resource,
        doc_id=doc.doc_id,
        expected_revision=current(doc).revision,
        title="Renamed",
        actor="user:olivia",
    )


def _edit(doc: Document, _: Any) -> Any:
    return document_edit(
        resource=doc.resource,
        doc_id=doc.doc_id,
        expected_revision=current(doc).revision,
        title="Edited",
        text="Edited on the page.",
        summary="Edited.",
        actor="user:olivia",
    )


def _restore(doc: Document, first: str) -> Any:
    return document_restore(
        resource=doc.resource,
        doc_id=doc.doc_id,
        revision=first,
        expected_revision=current(doc).revision,
        actor="user:olivia",
    )


def _agent_save(doc: Document, _: Any) -> Any:
    return document_agent_save(
        resource=doc.resource,
        doc_id=doc.doc_id,
        expected_revision=current(doc).revision,
        text="From the agent.",
        summary=None,
        writer=AGENT,
        agent="support-bot",
    )


def _approve(doc: Document, proposal_id: str) -> Any:
    return approve(doc, proposal_id)


def _review(doc: Document, _: Any) -> Any:
    return document_set_review(resource=doc.resource, doc_id=doc.doc_id, review=True, actor="t")


def _write_mode(doc: Document, _: Any) -> Any:
    return document_set_write_mode(
        resource=doc.resource, doc_id=doc.doc_id, mode="review", actor="t"
    )


def _freeze(doc: Document, _: Any) -> Any:
    return documents_set_agent_writes(
        resource=doc.resource, doc_ids=[doc.doc_id], enabled=False, actor="t"
    )


def _erase(doc: Document, _: Any) -> Any:
    return document_erase_text(document=current(doc), needles=["Node.js"], actor="t")


def _restore_as_of(doc: Document, _: Any) -> Any:
    plan = resource_restore_as_of(
        resource=doc.resource, as_of=timezone.now(), doc_ids=[doc.doc_id], dry_run=False, actor="t"
    )
    assert [item.action for item in plan.items] == ["restore"]


def _delete(doc: Document, _: Any) -> Any:
    return document_delete(
        resource=doc.resource, doc_id=doc.doc_id, expected_revision=current(doc).revision, actor="t"
    )


WRITES: dict[str, Callable[[Document, Any], Any]] = {
    "replace": _replace,
    "patch": _patch,
    "page edit": _edit,
    "restore": _restore,
    "agent save": _agent_save,
    "approval": _approve,
    "review": _review,
    "write mode": _write_mode,
    "freeze": _freeze,
    "erasure": _erase,
    "restore as of": _restore_as_of,
    "delete": _delete,
}


def prepare(kind: str, document: Document) -> Any:
    """What a write needs made before the version it follows: the revision a restore
    returns to, the proposal an approval decides."""
    if kind == "approval":
        proposal_id = proposal_for(document, "From the agent.")
        assert proposal_id is not None
        return proposal_id
    return document.revision


@pytest.mark.parametrize("kind", list(WRITES))
def test_a_write_after_a_version_dated_by_a_clock_ahead_is_dated_no_earlier(
    workshop: Document, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # Two servers share the database and their clocks disagree: the previous version was
    # written by the one whose clock is ahead, the next write comes from this one.
    made = prepare(kind, workshop)
    ahead = timezone.now() + timedelta(seconds=3)
    with monkeypatch.context() as clock:
        clock.setattr(timezone, "now", lambda: ahead)
        document_replace(
            resource=workshop.resource,
            doc_id="workshop",
            expected_revision=current(workshop).revision,
            text="Written ahead, on Node.js 24.",
            actor="user:sam",
        )
    assert version_times(workshop)[-1] == ahead
    before = DocumentVersion.objects.filter(document=workshop).count()

    WRITES[kind](workshop, made)

    if kind != "delete":
        assert DocumentVersion.objects.filter(document=workshop).count() > before
    assert current(workshop).updated_at >= ahead
    assert_in_order(workshop)


# What waits for the document's lock while another transaction holds it and writes a
# version: the waiter's version, if it writes one, is dated no earlier than the holder's.
WAITERS = ["review", "write mode", "freeze", "approval", "agent save", "replace"]


@pytest.mark.postgres
@pytest.mark.parametrize("kind", WAITERS)
def test_a_write_waiting_for_the_lock_is_dated_after_the_version_the_holder_wrote(
    workshop: Document, kind: str
) -> None:
    if kind == "agent save":
        # Under review: the save waits to lock the document for its proposal.
        document_set_review(resource=workshop.resource, doc_id="workshop", review=True, actor="t")
    made = prepare(kind, workshop)
    locked, waiting = threading.Event(), threading.Event()

    def work(index: int) -> str:
        if index == 1:
            assert locked.wait(30)
            return outcome(lambda: WRITES[kind](workshop, made))
        with transaction.atomic():
            Document.objects.select_for_update().filter(pk=workshop.pk).first()
            locked.set()
            assert waiting.wait(30)
            document_replace(
                resource=workshop.resource,
                doc_id="workshop",
                expected_revision=current(workshop).revision,
                text="From the lock's holder.",
                actor="user:sam",
            )
        return "held"

    runner = threading.Thread(target=lambda: results.extend(run_threads(2, work)))
    results: list[str] = []
    runner.start()
    assert locked.wait(30)
    assert lock_waiter_seen(runner)
    waiting.set()
    runner.join(60)
    held, waited = results
    assert held == "held"
    # A write conditional on the revision the holder moved is refused; the others write.
    expected = {"review": "ok", "write mode": "ok", "freeze": "ok"}
    assert waited == expected.get(kind, "precondition_failed")
    holder = (
        DocumentVersion.objects.filter(document=workshop, text="From the lock's holder.")
        .order_by("id")
        .first()
    )
    assert holder is not None
    later = DocumentVersion.objects.filter(document=workshop, id__gt=holder.id)
    assert later.exists() == (kind in {"review", "write mode", "freeze"})
    assert all(version.created_at >= holder.created_at for version in later)
    assert_in_order(workshop)


@pytest.mark.postgres
def test_concurrent_writes_of_every_kind_leave_every_version_list_in_time_order(
    make_document: Callable[..., Any], notes: Resource
) -> None:
    documents = [
        make_document(f"doc-{n}", text=f"Node.js {n}.", summary="First.") for n in range(3)
    ]
    firsts = {doc.pk: doc.revision for doc in documents}
    kinds = ["replace", "review", "approval", "freeze", "restore", "agent save", "patch", "edit"]

    def unreview(doc: Document) -> None:
        document_set_review(resource=notes, doc_id=doc.doc_id, review=None, actor="t")
        documents_set_agent_writes(resource=notes, doc_ids=[doc.doc_id], enabled=True, actor="t")

    def step(doc: Document, kind: str, round_: int) -> None:
        if kind == "review":
            review = (None, True, False)[round_ % 3]
            document_set_review(resource=notes, doc_id=doc.doc_id, review=review, actor="t")
        elif kind == "approval":
            proposal_id = proposal_for(doc, f"Proposed {round_}.")
            if proposal_id is not None:
                approve(doc, proposal_id)
        elif kind == "freeze":
            documents_set_agent_writes(
                resource=notes, doc_ids=[doc.doc_id], enabled=bool(round_ % 2), actor="t"
            )
        elif kind == "restore":
            _restore(doc, firsts[doc.pk])
        elif kind == "agent save":
            unreview(doc)
            _agent_save(doc, None)
        elif kind == "edit":
            _edit(doc, None)
        elif kind == "patch":
            _patch(doc, None)
        else:
            _replace(doc, None)

    def work(index: int) -> list[str]:
        kind = kinds[index]
        return [
            outcome(functools.partial(step, doc, kind, round_))
            for round_ in range(6)
            for doc in documents
        ]

    results = run_threads(len(kinds), work)
    assert sum(result.count("ok") for result in results) > len(documents) * len(kinds)
    for doc in documents:
        assert_in_order(doc)
