"""Review of agent writes: an agent save under review becomes a proposal that an
owner approves (as a conditional write), edits then approves, or rejects.

The agent never decides: nothing in the runtime can approve, and approval
is an owner write through the API (a read-write key), the Memory page or the
CLI. Expiry is a matter of time (see `ProposalQuerySet.in_state`), so no
background job is needed for a proposal to stop being decidable.
"""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.diff import text_merge
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import Conflict, InvalidRequest, NotFound, PreconditionFailed
from memoryadmin.core.rows import Compiled, values_of
from memoryadmin.core.strings import string_check
from memoryadmin.memory.limits import (
    LIST_PAGE_SIZE,
    check_summary,
    check_text,
    utf8_len,
)
from memoryadmin.memory.models import (
    Document,
    DocumentVersion,
    Project,
    Proposal,
    ProposalState,
    Resource,
    WriterKind,
)
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import (
    AgentWritesDisabled,
    Writer,
    document_replace,
    explain_no_rows,
)

REASON_MAX_BYTES = 500


class ProposalDecided(Conflict):
    code = "proposal_decided"


def changed_bytes(old: str, new: str) -> int:
    """UTF-8 bytes of the span a write changes: what lies between the common
    prefix and the common suffix, on the larger side."""
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[len(old) - 1 - end] == new[len(new) - 1 - end]:
        end += 1
    return max(utf8_len(old[start : len(old) - end]), utf8_len(new[start : len(new) - end]))


def review_catches(
    *, resource: Resource, doc_id: str, agent_review: bool | None, old_text: str, new_text: str
) -> bool:
    """Whether an agent write goes to review instead of the document.

    A document set to review on its own reviews every write; a resource whose
    manifest says review reviews the writes its policy selects (all of them
    without a policy); a document set to enabled on its own is never reviewed.
    """
    if agent_review is not None:
        return agent_review
    if not resource.review_default:
        return False
    policy = resource.review_policy
    if not policy:
        return True
    prefixes = policy.get("idPrefixes")
    if isinstance(prefixes, list) and any(doc_id.startswith(p) for p in prefixes):
        return True
    over = policy.get("overBytes")
    return isinstance(over, int) and changed_bytes(old_text, new_text) > over


def new_proposal_id() -> str:
    return "prop_" + secrets.token_hex(10)


def _audit(proposal: Proposal, *, actor: str, action: str, **detail: Any) -> None:
    resource = proposal.document.resource
    audit_record(
        project_id=resource.project_id,
        environment=resource.environment,
        actor=actor,
        action=action,
        resource_id=resource.resource_id,
        document_id=proposal.document.doc_id,
        revision=proposal.applied_revision or proposal.base_revision,
        detail={"proposalId": proposal.id, **detail},
    )


# What an agent's save reads of its live document before writing.
_SAVE_STATE_NAMES = ("id", "agent_writes", "agent_review", "revision", "text")
_SAVE_STATE = Compiled(
    lambda resource_pk, doc_id: (
        Document.objects.live()
        .filter(resource_id=resource_pk, doc_id=doc_id)
        .values_list(*_SAVE_STATE_NAMES)
    ),
    (int, str),
)


@transaction.atomic(savepoint=False)
def document_agent_save(
    *,
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    text: str,
    summary: str | None,
    writer: Writer,
    agent: str,
) -> Document | Proposal:
    """An agent's save: written to the document, or held as a proposal under review.

    Raises what `document_replace` raises for agents: NotFound,
    AgentWritesDisabled, LimitExceeded, PreconditionFailed (the revision the
    agent read is no longer current, under review too).
    """
    check_text(text, max_bytes=resource.max_bytes)
    if summary is not None:
        check_summary(summary)
    row = _SAVE_STATE.row(resource.pk, doc_id)
    if row is None:
        raise NotFound(f"No document '{doc_id}' in resource '{resource.resource_id}'.")
    state = values_of(Document, _SAVE_STATE_NAMES, row)
    if not state["agent_writes"]:
        raise AgentWritesDisabled(doc_id)
    reviewed = review_catches(
        resource=resource,
        doc_id=doc_id,
        agent_review=state["agent_review"],
        old_text=state["text"],
        new_text=text,
    )
    if not reviewed:
        # The write commits only under the review setting it was judged by: an
        # owner who switched the document to review meanwhile turns it into a
        # conflict, and the agent's next save becomes a proposal.
        review_guard = (
            {"agent_review__isnull": True}
            if state["agent_review"] is None
            else {"agent_review": state["agent_review"]}
        )
        return document_replace(
            resource=resource,
            doc_id=doc_id,
            expected_revision=expected_revision,
            text=text,
            summary=summary,
            actor=f"agent:{writer.session_id}",
            writer=writer,
            action="save",
            guard=review_guard,
        )
    # The proposal is written over the state it was judged by, as the direct path's
    # conditional UPDATE is: the row is locked at the revision the agent read, live and
    # open to agent writes. A freeze, edit, review change or delete that committed first
    # is seen here and explained as the direct path explains it; one that comes later
    # waits for this transaction.
    held = (
        Document.objects.select_for_update()
        .filter(pk=state["id"], deleted=False, agent_writes=True, revision=expected_revision)
        .values_list("pk", flat=True)
        .first()
    )
    if held is None:
        raise explain_no_rows(resource, doc_id, agent=True)
    return _proposal_create(
        document_pk=state["id"],
        text=text,
        summary=summary,
        base_revision=expected_revision,
        writer=writer,
        agent=agent,
    )


def _proposal_create(
    *,
    document_pk: int,
    text: str,
    summary: str | None,
    base_revision: str,
    writer: Writer,
    agent: str,
) -> Proposal:
    now = timezone.now()
    proposal = Proposal.objects.create(
        id=new_proposal_id(),
        document_id=document_pk,
        text=text,
        summary=summary,
        bytes=utf8_len(text),
        base_revision=base_revision,
        session_id=writer.session_id,
        agent=agent,
        recall_id=writer.recall_id,
        call_id=writer.call_id,
        created_at=now,
        expires_at=now + timedelta(hours=settings.MEMORYADMIN_PROPOSAL_TTL_HOURS),
    )
    proposal = Proposal.objects.select_related("document__resource").get(pk=proposal.pk)
    _audit(
        proposal,
        actor=f"agent:{writer.session_id}",
        action="proposal.create",
        bytes=proposal.bytes,
        sessionId=writer.session_id,
        agent=agent,
    )
    return proposal


def _scoped(project: Project, environment: str) -> Any:
    check_environment(environment)
    return Proposal.objects.select_related("document__resource").filter(
        document__resource__project=project, document__resource__environment=environment
    )


def proposal_list(
    *,
    project: Project,
    environment: str,
    state: str = ProposalState.PENDING,
    resource_id: str = "",
    doc_id: str = "",
    cursor: str | None = None,
    limit: int = LIST_PAGE_SIZE,
) -> tuple[list[Proposal], str | None]:
    """Newest first, in keyset pages."""
    if state not in ProposalState.values:
        raise InvalidRequest(f"state must be one of: {', '.join(ProposalState.values)}.")
    rows = _scoped(project, environment).in_state(state, now=timezone.now())
    if resource_id:
        rows = rows.filter(document__resource__resource_id=resource_id)
    if doc_id:
        rows = rows.filter(document__doc_id=doc_id)
    return keyset_page(
        rows,
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"proposals:{project.id}:{environment}:{state}:{resource_id}:{doc_id}",
        limit=limit,
    )


def proposal_pending_count(*, project: Project, environment: str) -> int:
    return int(
        _scoped(project, environment).in_state(ProposalState.PENDING, now=timezone.now()).count()
    )


def proposal_get(*, project: Project, environment: str, proposal_id: str) -> Proposal:
    proposal = _scoped(project, environment).filter(pk=proposal_id).first()
    if proposal is None:
        raise NotFound(f"No proposal '{proposal_id}' in {project.id} ({environment}).")
    return proposal


def _decision(*, state: str, actor: str, reason: str, now: Any) -> dict[str, Any]:
    """What deciding a proposal writes on it."""
    return {"state": state, "decided_at": now, "decided_by": actor, "reason": reason}


def _claim(proposal: Proposal, *, state: str, actor: str, reason: str = "") -> None:
    """Decides a pending, unexpired proposal in one statement: of two decisions
    racing, exactly one claims it."""
    now = timezone.now()
    claimed = (
        Proposal.objects.filter(pk=proposal.pk)
        .in_state(ProposalState.PENDING, now=now)
        .update(**_decision(state=state, actor=actor, reason=reason, now=now))
    )
    if not claimed:
        proposal.refresh_from_db()
        raise ProposalDecided(
            f"Proposal {proposal.id} is {proposal.state_at(now)}; only a pending proposal "
            "can be approved or rejected.",
            details={"state": proposal.state_at(now)},
        )
    proposal.state, proposal.decided_at, proposal.decided_by = state, now, actor
    proposal.reason = reason


def proposal_merge(*, proposal: Proposal, current: Document) -> str | None:
    """The proposal applied on top of the current text when it does not overlap
    what changed since the agent read it; None when it does (or the base is gone)."""
    base = DocumentVersion.objects.filter(document=current, revision=proposal.base_revision).first()
    if base is None:
        return None
    return text_merge(base=base.text, mine=proposal.text, theirs=current.text)


@transaction.atomic
def proposal_approve(
    *,
    project: Project,
    environment: str,
    proposal_id: str,
    expected_revision: str,
    actor: str,
    text: str | None = None,
    summary: str | None = None,
) -> Document:
    """Writes the proposal (or the approver's edit of it) over `expected_revision`,
    the current revision the approver saw.

    A moved document is 412 with the current revision and, where the changes
    do not overlap, the merged text to approve instead (the merge view).
    """
    proposal = proposal_get(project=project, environment=environment, proposal_id=proposal_id)
    if text is not None:
        string_check(text, field="text")
    # The document is locked before the proposal is claimed: the order a delete (which
    # closes the document's proposals) and an agent's save take, so that none of them
    # waits on another for ever.
    current_summary = (
        Document.objects.select_for_update()
        .filter(pk=proposal.document_id)
        .values_list("summary", flat=True)
        .first()
    )
    _claim(proposal, state=ProposalState.APPROVED, actor=actor)
    # An approver's text or summary other than the agent's is the approver's write (the
    # summary the agent left alone is the document's).
    proposed_summary = proposal.summary if proposal.summary is not None else current_summary
    edited = (text is not None and text != proposal.text) or (
        summary is not None and summary != proposed_summary
    )
    writer = Writer(
        kind=WriterKind.OWNER if edited else WriterKind.AGENT,
        session_id="" if edited else proposal.session_id,
        recall_id="" if edited else proposal.recall_id,
        call_id="" if edited else proposal.call_id,
        proposal_id=proposal.id,
    )
    document = proposal.document
    try:
        written = document_replace(
            resource=document.resource,
            doc_id=document.doc_id,
            expected_revision=expected_revision,
            text=proposal.text if text is None else text,
            summary=proposal.summary if summary is None else summary,
            actor=actor,
            writer=writer,
            action="approve",
        )
    except PreconditionFailed as exc:
        current = Document.objects.filter(pk=document.pk, deleted=False).first()
        if current is None:
            raise NotFound(f"Document '{document.doc_id}' was deleted.") from exc
        raise PreconditionFailed(
            f"Document '{document.doc_id}' has changed; approve again on top of revision "
            f"{current.revision} (merged text in details when the changes do not overlap).",
            details={
                "currentRevision": current.revision,
                "merged": proposal_merge(proposal=proposal, current=current),
            },
        ) from exc
    Proposal.objects.filter(pk=proposal.pk).update(applied_revision=written.revision)
    proposal.applied_revision = written.revision
    _audit(proposal, actor=actor, action="proposal.approve", edited=edited)
    return written


@transaction.atomic
def proposal_reject(
    *, project: Project, environment: str, proposal_id: str, reason: object, actor: str
) -> Proposal:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest("reason is required: say why the proposal is rejected.")
    string_check(reason, field="reason")
    if utf8_len(reason) > REASON_MAX_BYTES:
        raise InvalidRequest(f"reason is over {REASON_MAX_BYTES} UTF-8 bytes.")
    proposal = proposal_get(project=project, environment=environment, proposal_id=proposal_id)
    _claim(proposal, state=ProposalState.REJECTED, actor=actor, reason=reason)
    _audit(proposal, actor=actor, action="proposal.reject", reason=reason)
    return proposal


DOCUMENT_DELETED = "document deleted"


def proposals_close(*, document: Document, actor: str) -> None:
    """A deleted document's proposals: each pending one rejected by the delete's actor
    (reason DOCUMENT_DELETED, audited `proposal.reject` as a rejection is), and the
    agent's text and summary of every one blanked, as the document's versions are."""
    now = timezone.now()
    of_document = Proposal.objects.filter(document=document)
    # Blanked first: most documents never had a proposal, and then this one statement is
    # all a delete pays here.
    if not of_document.update(text="", summary=None):
        return
    pending = list(
        of_document.in_state(ProposalState.PENDING, now=now)
        .select_for_update(of=("self",))
        .select_related("document__resource")
        .order_by("pk")
    )
    closed = _decision(state=ProposalState.REJECTED, actor=actor, reason=DOCUMENT_DELETED, now=now)
    of_document.filter(pk__in=[proposal.pk for proposal in pending]).update(**closed)
    for proposal in pending:
        _audit(proposal, actor=actor, action="proposal.reject", reason=DOCUMENT_DELETED)
