"""`manage.py webhook`: endpoints and deliveries at the command line."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memoryadmin.core import cli
from memoryadmin.memory.models import AuditEntry, Project
from memoryadmin.runner.jobs import jobs_run_due
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin_client.webhooks import verify
from tests.helpers import Receiver, serve

pytestmark = pytest.mark.django_db


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("webhook", *args, stdout=out)
    return out.getvalue()


def fails(*args: str) -> CommandError:
    with pytest.raises(CommandError) as raised:
        run(*args)
    return raised.value


def test_add_list_deliver_redeliver_rotate_remove(
    project: Project, receiver: Receiver, make_document: Any
) -> None:
    lines = run(
        "add", "--project", "acme", "--url", receiver.url,
        "--event", "document.created", "--description", "Ops",
    ).splitlines()  # fmt: skip
    endpoint = Endpoint.objects.get()
    secret = lines[-1]
    assert secret == endpoint.secret
    assert lines[0] == f"{endpoint.pk}\tactive\t{receiver.url}\tdocument.created\tOps"
    assert run("list", "--project", "acme").splitlines() == [lines[0]]
    assert secret not in run("list", "--project", "acme")

    make_document("plan")
    jobs_run_due()
    assert verify(secret, *receiver.received[0][:2])["data"]["document"] == "plan"
    delivery = Delivery.objects.get()
    listed = run("deliveries", "--project", "acme", str(endpoint.pk)).splitlines()
    assert listed[0].startswith(
        f"{delivery.pk}\tdocument.created\t{delivery.event_id}\tdelivered\t1\t200\t"
    )
    said = run("redeliver", "--project", "acme", str(endpoint.pk), str(delivery.pk))
    assert said == f"Delivery {delivery.pk} ({delivery.event_id}) is queued again.\n"
    jobs_run_due()
    assert len(receiver.received) == 2

    paused = run("update", "--project", "acme", str(endpoint.pk), "--pause")
    assert "\tpaused\t" in paused
    rotated = run("rotate", "--project", "acme", str(endpoint.pk)).splitlines()[-1]
    assert rotated.startswith("whsec_")
    assert rotated != secret
    removed = run("remove", "--project", "acme", str(endpoint.pk))
    assert removed == f"Removed webhook {endpoint.pk} ({endpoint.url}).\n"
    assert not Endpoint.objects.exists()
    actions = AuditEntry.objects.filter(action__startswith="webhook.").order_by("id")
    assert [entry.action for entry in actions] == [
        "webhook.create",
        "webhook.redeliver",
        "webhook.update",
        "webhook.rotate",
        "webhook.delete",
    ]
    assert all(entry.actor.startswith("cli:") for entry in actions)


def test_bad_input_fails_with_its_exit_code_and_changes_nothing(
    project: Project, settings: Any
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    add = ["add", "--project", "acme", "--event", "document.created"]
    assert fails(*add, "--url", "https://10.0.0.1/h").returncode == cli.EXIT_INVALID
    assert fails(*add, "--url", "http://example.com/h").returncode == cli.EXIT_INVALID
    no_events = fails("add", "--project", "acme", "--url", "https://example.com/h")
    assert no_events.returncode == cli.EXIT_INVALID
    assert fails("list", "--project", "nope").returncode == cli.EXIT_NOT_FOUND
    assert fails("show", "--project", "acme", "42").returncode == cli.EXIT_NOT_FOUND
    assert not Endpoint.objects.exists()
