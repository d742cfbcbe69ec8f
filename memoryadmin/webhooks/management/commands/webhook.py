"""`manage.py webhook add|list|show|update|rotate|remove|deliveries|redeliver --project P`.

`add` and `rotate` print the signing secret once, on a line of its own after
the endpoint, so a script can take the last line.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from memoryadmin.core import cli
from memoryadmin.core.inputs import int_argument
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.projects import project_get
from memoryadmin.webhooks import services
from memoryadmin.webhooks.models import DeliveryState, Endpoint
from memoryadmin.webhooks.outbox import EVENT_TYPES

SUBCOMMANDS = {
    "add": "Register an endpoint; prints its signing secret once.",
    "list": "List the project's endpoints.",
    "show": "Show one endpoint.",
    "update": "Change an endpoint's URL, events, description, or pause/resume it.",
    "rotate": "Give an endpoint a new signing secret; prints it once.",
    "remove": "Delete an endpoint and its deliveries.",
    "deliveries": "List an endpoint's recent deliveries, newest first.",
    "redeliver": "Send a delivered or failed delivery again.",
}


def _state(active: bool) -> str:
    return "active" if active else "paused"


class Command(cli.Command):
    help = "Webhook endpoints of a project and their deliveries (docs/webhooks.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        for name, help_text in SUBCOMMANDS.items():
            sub = subcommands.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("--project", required=True, help="project id")
            if name not in {"add", "list"}:
                sub.add_argument("endpoint", metavar="ENDPOINT", help="the endpoint's id")
            if name in {"add", "update"}:
                sub.add_argument("--url", required=name == "add", help="https:// URL")
                sub.add_argument(
                    "--event",
                    action="append",
                    dest="events",
                    choices=EVENT_TYPES,
                    metavar="EVENT",
                    help=f"an event wanted, repeatable: {', '.join(EVENT_TYPES)}",
                )
                sub.add_argument("--description")
            if name == "update":
                group = sub.add_mutually_exclusive_group()
                group.add_argument("--pause", action="store_true", help="stop sending (queue)")
                group.add_argument("--resume", action="store_true", help="send again")
            if name == "deliveries":
                sub.add_argument("--state", choices=DeliveryState.values)
                sub.add_argument("--limit", type=int_argument(), default=20)
            if name == "redeliver":
                sub.add_argument("delivery", metavar="DELIVERY", help="the delivery's id")

    def _show(self, endpoint: Endpoint) -> None:
        events = ",".join(endpoint.event_list)
        line = f"{endpoint.pk}\t{_state(endpoint.active)}\t{endpoint.url}\t{events}"
        self.stdout.write(line + (f"\t{endpoint.description}" if endpoint.description else ""))

    def act(self, options: dict[str, Any]) -> None:
        project = project_get(project_id=options["project"])
        subcommand = options["subcommand"]
        actor = cli.cli_actor()
        if subcommand == "add":
            if not options.get("events"):
                raise cli.invalid("Name at least one --event.")
            endpoint, secret = services.endpoint_create(
                project=project,
                url=options["url"],
                events=options["events"],
                description=options.get("description") or "",
                actor=actor,
            )
            self._show(endpoint)
            self.stdout.write(secret)
            return
        if subcommand == "list":
            for endpoint in services.endpoint_list(project=project):
                self._show(endpoint)
            return
        endpoint = services.endpoint_get(project=project, endpoint_id=options["endpoint"])
        if subcommand == "show":
            self._show(endpoint)
        elif subcommand == "update":
            active = True if options["resume"] else False if options["pause"] else None
            endpoint = services.endpoint_update(
                endpoint=endpoint,
                actor=actor,
                url=options.get("url"),
                events=options.get("events"),
                description=options.get("description"),
                active=active,
            )
            self._show(endpoint)
        elif subcommand == "rotate":
            endpoint, secret = services.endpoint_rotate_secret(endpoint=endpoint, actor=actor)
            self._show(endpoint)
            self.stdout.write(secret)
        elif subcommand == "remove":
            services.endpoint_delete(endpoint=endpoint, actor=actor)
            self.stdout.write(f"Removed webhook {endpoint.pk} ({endpoint.url}).")
        elif subcommand == "deliveries":
            rows, _ = services.delivery_list(
                endpoint=endpoint, state=options.get("state"), limit=max(1, options["limit"])
            )
            for row in rows:
                fields = [row.pk, row.event, row.event_id, row.state, row.attempts]
                fields += [row.response_code or "-", iso_ms(row.created_at)]
                fields += [row.last_error] if row.last_error else []
                self.stdout.write("\t".join(str(field) for field in fields))
        else:
            delivery, queued = services.delivery_redeliver(
                endpoint=endpoint, delivery_id=options["delivery"], actor=actor
            )
            if queued:
                self.stdout.write(f"Delivery {delivery.pk} ({delivery.event_id}) is queued again.")
            else:
                self.stdout.write(f"Delivery {delivery.pk} is still being sent; nothing changed.")
