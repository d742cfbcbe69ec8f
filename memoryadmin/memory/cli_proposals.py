"""The review subcommands of `manage.py memory`: review, proposals, approve, reject."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from memoryadmin.core import cli
from memoryadmin.core.errors import PreconditionFailed
from memoryadmin.memory.models import Project, ProposalState
from memoryadmin.memory.representations import document_dict, proposal_dict
from memoryadmin.memory.services.documents import document_set_review
from memoryadmin.memory.services.proposals import (
    proposal_approve,
    proposal_get,
    proposal_list,
    proposal_merge,
    proposal_reject,
)

SUBCOMMANDS = {
    "review": "Send a document's agent saves to review (--off: let them through; "
    "--inherit: as the resource's manifest says).",
    "proposals": "List agent proposals waiting for review (or in another --state).",
    "approve": "Approve a proposal: write it (or your edit of it) to its document.",
    "reject": "Reject a proposal with a reason.",
}


class ProposalCommands:
    """Mixed into the memory command, which provides out, out_json, resource and friends."""

    options: dict[str, Any]
    actor: str
    out: Any
    out_json: Any
    verbose: Any
    resource: Any
    given_text: Any
    report: Any
    _text_options: Any

    def _args_review(self, parser: CommandParser) -> None:
        parser.add_argument("resource")
        parser.add_argument("document")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--off", action="store_true", help="let agent saves through")
        mode.add_argument("--inherit", action="store_true", help="follow the resource's manifest")

    def _args_proposals(self, parser: CommandParser) -> None:
        parser.add_argument("--state", choices=ProposalState.values, default="pending")
        parser.add_argument("--resource", default="", help="only this resource")

    def _args_approve(self, parser: CommandParser) -> None:
        parser.add_argument("proposal")
        self._text_options(parser)
        parser.add_argument(
            "--revision",
            default=None,
            help="write over this current revision (default: the revision the agent read)",
        )
        parser.add_argument(
            "--merged",
            action="store_true",
            help="approve the proposal merged into the current text (when they do not overlap)",
        )

    def _args_reject(self, parser: CommandParser) -> None:
        parser.add_argument("proposal")
        parser.add_argument("--reason", required=True)

    def do_review(self, project: Project, options: dict[str, Any]) -> None:
        resource = self.resource(project, options["resource"])
        review = None if options["inherit"] else not options["off"]
        document, changed = document_set_review(
            resource=resource, doc_id=options["document"], review=review, actor=self.actor
        )
        data = document_dict(
            document, max_bytes=resource.max_bytes, review_default=resource.review_default
        )
        if options["json"]:
            self.out_json(data)
        elif self.verbose():
            state = "now" if changed else "already"
            self.out(
                f"Agent writes to {resource.resource_id}/{document.doc_id} are {state} "
                f"{data['agentWrites']}."
            )

    def do_proposals(self, project: Project, options: dict[str, Any]) -> None:
        now = timezone.now()
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            rows, cursor = proposal_list(
                project=project,
                environment=options["environment"],
                state=options["state"],
                resource_id=options["resource"],
                cursor=cursor,
            )
            found.extend(proposal_dict(row, now=now) for row in rows)
            if cursor is None:
                break
        if options["json"]:
            self.out_json({"proposals": found})
            return
        if not found:
            self.out(f"No {options['state']} proposals in {options['environment']}.")
            return
        for item in found:
            moved = item["currentRevision"] != item["baseRevision"]
            self.out(
                f"{item['id']}  {item['resource']}/{item['documentId']}  {item['bytes']} bytes  "
                f"session {item['sessionId']} ({item['agent']})  {item['createdAt']}"
                + ("  [document changed since]" if moved else "")
            )

    def do_approve(self, project: Project, options: dict[str, Any]) -> None:
        environment = options["environment"]
        proposal = proposal_get(
            project=project, environment=environment, proposal_id=options["proposal"]
        )
        text = self.given_text(options)
        expected = options["revision"] or proposal.base_revision
        if options["merged"]:
            if text is not None:
                raise cli.invalid("Give --merged or a text option, not both.")
            merged = proposal_merge(proposal=proposal, current=proposal.document)
            if merged is None:
                raise cli.invalid(
                    "The proposal overlaps what changed since the agent read the document; "
                    "approve your own merge with --text-file and --revision."
                )
            text, expected = merged, proposal.document.revision
        try:
            document = proposal_approve(
                project=project,
                environment=environment,
                proposal_id=proposal.id,
                expected_revision=expected,
                text=text,
                actor=self.actor,
            )
        except PreconditionFailed as exc:
            hint = "pass --merged" if exc.details.get("merged") is not None else "merge by hand"
            raise cli.error_from(
                exc,
                suffix=f"The document is at {exc.details.get('currentRevision')}: {hint}, or "
                "--revision to write over it.",
            ) from exc
        self.report(document, document.resource, f"Approved {proposal.id}:")

    def do_reject(self, project: Project, options: dict[str, Any]) -> None:
        proposal = proposal_reject(
            project=project,
            environment=options["environment"],
            proposal_id=options["proposal"],
            reason=options["reason"],
            actor=self.actor,
        )
        if options["json"]:
            self.out_json(proposal_dict(proposal, now=timezone.now()))
        elif self.verbose():
            self.out(f"Rejected {proposal.id}.")
