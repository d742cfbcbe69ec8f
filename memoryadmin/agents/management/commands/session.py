"""`manage.py session create|show|end|events|list`: agent sessions from the shell."""

from __future__ import annotations

import json
import secrets
from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.agents.bindings import bindings_parse
from memoryadmin.agents.models import Session
from memoryadmin.agents.representations import event_dict, recall_record_dict, sessions_dicts
from memoryadmin.agents.services import sessions as services
from memoryadmin.agents.services.provenance import recall_list
from memoryadmin.agents.services.reverts import session_revert
from memoryadmin.agents.services.sessions import AGENT_REFS
from memoryadmin.agents.topics import topic_session_key
from memoryadmin.core import cli
from memoryadmin.core.environments import DEFAULT_ENVIRONMENT, Environment
from memoryadmin.memory.services.projects import project_get

MEMORY_HELP = (
    "<resource>=<documentId>[:read|read-write] binds a document (read-write by default); "
    "<resource> alone binds the resource as a read-only collection. Repeatable."
)
NAMESPACE_HELP = (
    "<resource>=<namespace>[:read|read-write] binds a namespace of an http provider "
    "(read-write by default). Repeatable."
)


def target_option(value: str, scope: str) -> tuple[str, dict[str, str]]:
    """One `<resource>=<id>[:access]` value as (resource, binding)."""
    resource, _, target = value.partition("=")
    access = "read-write"
    if ":" in target:
        target, access = target.rsplit(":", 1)
    return resource, {"scope": scope, "id": target, "access": access}


def memory_options(options: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The --memory and --namespace values as the `memory` map of a session request."""
    bindings = [
        target_option(value, "document") if "=" in value else (value, {"scope": "collection"})
        for value in options["memory"]
    ]
    bindings += [target_option(value, "namespace") for value in options["namespace"]]
    resources = [resource for resource, _ in bindings]
    for resource in resources:
        if resources.count(resource) > 1:
            raise cli.invalid(f"Resource '{resource}' is bound twice; bind each resource once.")
    return dict(bindings)


def binding_arguments(parser: Any, *, required: bool) -> None:
    """--project, --agent and the bindings, as every command that starts a session takes them."""
    parser.add_argument("--project", required=required)
    parser.add_argument(
        "--agent", required=required, help=f"{AGENT_REFS} (default: {DEFAULT_ENVIRONMENT})."
    )
    parser.add_argument("--memory", action="append", default=[], help=MEMORY_HELP)
    parser.add_argument("--namespace", action="append", default=[], help=NAMESPACE_HELP)
    parser.add_argument(
        "--create-document",
        action="store_true",
        help="Create each bound document that does not exist yet, titled after its id.",
    )


def label_option(value: str) -> tuple[str, str]:
    name, sep, text = value.partition("=")
    if not sep:
        raise cli.invalid(f"--label takes name=value, not {value!r}.")
    return name, text


class Command(cli.Command):
    help = "Create, inspect, end and follow agent sessions."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", required=True)
        create = commands.add_parser("create", help="Create a session (idempotently).")
        binding_arguments(create, required=True)
        create.add_argument(
            "--idempotency-key",
            help="Retrying with the same key returns the same session "
            "(the session's key is derived from it, as the SDK helper does).",
        )
        create.add_argument("--deployment", help="Pin a deployment (default: the active one).")
        create.add_argument("--label", action="append", default=[], help="name=value")
        create.add_argument("--json", action="store_true")
        for name, text in (("show", "Show a session."), ("end", "End a session.")):
            sub = commands.add_parser(name, help=text)
            sub.add_argument("session_id")
            sub.add_argument("--json", action="store_true")
        revert = commands.add_parser(
            "revert",
            help="Undo what a session wrote: each document it changed gets back the version "
            "before its first write, unless others changed it since.",
        )
        revert.add_argument("session_id")
        revert.add_argument("--dry-run", action="store_true", help="show the plan only")
        revert.add_argument("--json", action="store_true")
        recalls = commands.add_parser(
            "recalls", help="What the model was given: a session's newest recalls."
        )
        recalls.add_argument("session_id")
        recalls.add_argument("--json", action="store_true")
        events = commands.add_parser("events", help="A session's events, in order.")
        events.add_argument("session_id")
        events.add_argument("--after", default="0", help="only events with a seq above this")
        events.add_argument("--json", action="store_true")
        listing = commands.add_parser("list", help="Sessions of a project, newest first.")
        listing.add_argument("--project", required=True)
        listing.add_argument(
            "--environment", choices=Environment.values, default=DEFAULT_ENVIRONMENT
        )
        listing.add_argument("--agent")
        listing.add_argument("--status", choices=["active", "ended"])
        listing.add_argument("--json", action="store_true")

    def act(self, options: dict[str, Any]) -> None:
        getattr(self, "handle_" + options["action"])(options)

    @staticmethod
    def actor() -> str:
        return cli.cli_actor()

    def emit(self, options: dict[str, Any], data: Any, lines: list[str]) -> None:
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
        else:
            self.stdout.write("\n".join(lines))

    def handle_create(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        agent = options["agent"]
        agent_id = agent if "@" in agent else f"{agent}@{DEFAULT_ENVIRONMENT}"
        environment = services.agent_ref_parse(agent_id)[1]
        memory = memory_options(options)
        # Every input is checked before a document is created: a refused key or label
        # leaves nothing behind.
        key = options["idempotency_key"]
        try:
            key = topic_session_key(key) if key else "cli/" + secrets.token_hex(16)
        except ValueError as exc:
            raise cli.invalid(f"--idempotency-key: {exc}") from exc
        labels = services.labels_check(dict(label_option(value) for value in options["label"]))
        documents: dict[str, bool] = {}
        if options["create_document"]:
            documents = services.binding_documents_ensure(
                project=project,
                environment=environment,
                specs=bindings_parse(memory),
                actor=self.actor(),
            )
        session, created = services.session_create(
            project=project,
            agent_id=agent_id,
            deployment_id=options["deployment"],
            memory=memory,
            labels=labels,
            idempotency_key=key,
            actor=self.actor(),
        )
        body = sessions_dicts([session])[0]
        bound = {b["resource"]: b.get("id") for b in body["memory"]}
        lines = [
            f"document {resource}/{bound[resource]}: {'created' if made else 'existing'}"
            for resource, made in documents.items()
        ]
        lines.append(f"session {session.id}: {'created' if created else 'existing'}")
        lines += self.describe(body)[1:]
        data = {
            "session": body,
            "created": created,
            "documents": [
                {"resource": resource, "id": bound[resource], "created": made}
                for resource, made in documents.items()
            ],
        }
        self.emit(options, data, lines)

    @staticmethod
    def describe(body: dict[str, Any]) -> list[str]:
        lines = [
            f"session {body['id']}",
            f"  agent       {body['agentId']}",
            f"  deployment  {body['deploymentId']}",
            f"  status      {body['status']}"
            + (f" ({body['endedAt']})" if body["endedAt"] else ""),
            f"  created     {body['createdAt']}",
        ]
        for binding in body["memory"]:
            target = f" {binding['id']}" if "id" in binding else ""
            writable = "writable" if binding["writable"] else "not writable"
            lines.append(
                f"  memory      {binding['resource']}  {binding['scope']}{target}  "
                f"{binding['access']}  {writable}"
            )
        return lines

    def session(self, options: dict[str, Any]) -> Session:
        return services.session_get(session_id=options["session_id"])

    def handle_show(self, options: dict[str, Any]) -> None:
        body = sessions_dicts([self.session(options)])[0]
        self.emit(options, body, self.describe(body))

    def handle_end(self, options: dict[str, Any]) -> None:
        session = self.session(options)
        was_active = session.is_active
        ended = services.session_end(session=session, actor=self.actor())
        body = sessions_dicts([ended])[0]
        note = "ended" if was_active else "was already ended"
        self.emit(options, body, [f"session {ended.id}: {note}"])

    def handle_recalls(self, options: dict[str, Any]) -> None:
        recalls, _ = recall_list(session=self.session(options))
        body = {"recalls": [recall_record_dict(r) for r in recalls]}
        lines = []
        for recall in body["recalls"]:
            lines.append(f"{recall['id']}  {recall['createdAt']}")
            for resource, projection in recall["memory"].items():
                sources = ", ".join(
                    f"{s['id']}@{s['revision']}" if "revision" in s else str(s.get("id"))
                    for s in projection["sources"]
                )
                lines.append(f"  {resource}: {len(projection['text'])} chars from {sources or '-'}")
        self.emit(options, body, lines or ["(no recalls)"])

    def handle_revert(self, options: dict[str, Any]) -> None:
        plan = session_revert(
            session=self.session(options), dry_run=options["dry_run"], actor=self.actor()
        )
        body = plan.as_dict()
        verb = "would" if plan.dry_run else "did"
        lines = [
            f"{d['resource']}/{d['documentId']}  {d['action']}"
            + (f"  -> {d['revision']}" if d["revision"] else "")
            for d in body["documents"]
        ]
        lines.append(f"({verb} restore {sum(d['action'] == 'restore' for d in body['documents'])})")
        self.emit(options, body, lines)

    def handle_events(self, options: dict[str, Any]) -> None:
        session = self.session(options)
        events: list[dict[str, Any]] = []
        after = services.check_after(options["after"])
        while True:
            page = services.session_events(session=session, after=after)
            events += [event_dict(event) for event in page]
            if len(page) < services.EVENT_PAGE_SIZE:
                break
            after = page[-1].seq
        lines = [
            f"{e['seq']:>4}  {e['createdAt']}  {e['type']}  {json.dumps(e['data'])}" for e in events
        ]
        self.emit(options, {"events": events}, lines or ["(no events)"])

    def handle_list(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        sessions: list[Session] = []
        cursor = None
        while True:
            page, cursor = services.session_list(
                project=project,
                environment=options["environment"],
                agent=options["agent"],
                status=options["status"],
                cursor=cursor,
            )
            sessions += page
            if cursor is None:
                break
        bodies = sessions_dicts(sessions)
        lines = [
            f"{b['id']}  {b['agentId']}  {b['status']:<6}  {b['createdAt']}  "
            + ", ".join(binding["resource"] for binding in b["memory"])
            for b in bodies
        ]
        self.emit(options, {"sessions": bodies}, lines or ["(no sessions)"])
