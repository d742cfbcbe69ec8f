"""What the review inbox shows of each proposal: both diffs, read in one query."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from memoryadmin.core.diff import Diff, text_diff
from memoryadmin.memory.models import DocumentVersion, Proposal


@dataclass(frozen=True)
class ProposalView:
    proposal: Proposal
    state: str
    # The text the agent read is gone when its version was wiped (a deleted document).
    base_text: str | None
    against_base: Diff | None
    # Set when the document moved since the agent read it.
    against_current: Diff | None

    @property
    def moved(self) -> bool:
        return self.against_current is not None


def proposal_views(proposals: list[Proposal]) -> list[ProposalView]:
    wanted = Q(pk__in=[])
    for proposal in proposals:
        wanted |= Q(document_id=proposal.document_id, revision=proposal.base_revision)
    bases = {
        (v.document_id, v.revision): v.text
        for v in DocumentVersion.objects.filter(wanted).only("document_id", "revision", "text")
    }
    now = timezone.now()
    views = []
    for proposal in proposals:
        base = bases.get((proposal.document_id, proposal.base_revision))
        current = proposal.document
        moved = current.revision != proposal.base_revision and not current.deleted
        views.append(
            ProposalView(
                proposal=proposal,
                state=proposal.state_at(now),
                base_text=base,
                against_base=None if base is None else text_diff(base, proposal.text),
                against_current=text_diff(current.text, proposal.text) if moved else None,
            )
        )
    return views
