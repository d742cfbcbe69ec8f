"""Webhooks: endpoints through the API, deliveries written with the change (outbox)
and sent by the background runner to a real receiving HTTP server."""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.services.sessions import session_end
from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.documents import document_replace
from memoryadmin.runner.jobs import job_run, jobs_run_due
from memoryadmin.runner.models import Job
from memoryadmin.webhooks import delivery as sending
from memoryadmin.webhooks.delivery import webhook_deliver
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin_client.webhooks import InvalidSignature, verify
from tests.helpers import (
    Keys,
    Receiver,
    SlowNames,
    free_port,
    is_postgres,
    lock_waiter_seen,
    run_threads,
    serve,
    support_session,
)

pytestmark = pytest.mark.django_db

HOOKS = "/api/managed-agents/projects/acme/webhooks"
DOCS = "/api/managed-agents/projects/acme/memory/notes/documents"
ENV = "?environment=development"
DELIVER = f"{webhook_deliver.__module__}.{webhook_deliver.__qualname__}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


@pytest.fixture
def fast_retries(settings: Any) -> None:
    settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = 0.2
    settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS = 5.0


def register(api: APIClient, url: str, events: list[str]) -> dict[str, Any]:
    response = api.post(HOOKS, {"url": url, "events": events}, format="json")
    assert response.status_code == 201, response.json()
    body: dict[str, Any] = response.json()
    return body


def run_jobs(rounds: int = 1) -> None:
    for _ in range(rounds):
        jobs_run_due()


def run_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the deliveries did not settle in time"
        jobs_run_due()
        time.sleep(0.05)


def test_document_events_reach_the_endpoint_in_order_signed(
    api: APIClient, receiver: Receiver, notes: Resource
) -> None:
    every = [
        "document.created",
        "document.updated",
        "document.deleted",
        "document.frozen",
        "document.unfrozen",
    ]
    hook = register(api, receiver.url, every)
    assert hook["secret"].startswith("whsec_")
    assert hook["events"] == sorted(every)
    assert hook["url"] == receiver.url
    listed = api.get(HOOKS).json()["webhooks"]
    assert listed == [{key: value for key, value in hook.items() if key != "secret"}]

    created = api.put(
        f"{DOCS}/plan{ENV}", {"title": "Plan", "text": "one"}, format="json", HTTP_IF_NONE_MATCH="*"
    )
    assert created.status_code == 201
    revision = created.json()["revision"]
    revisions = [revision]
    for text in ["two", "three"]:
        response = api.put(
            f"{DOCS}/plan{ENV}", {"text": text}, format="json", HTTP_IF_MATCH=f'"{revision}"'
        )
        assert response.status_code == 200
        revision = response.json()["revision"]
        revisions.append(revision)
    for agent_writes in ["disabled", "enabled"]:
        response = api.patch(
            f"{DOCS}/plan{ENV}",
            {"agentWrites": agent_writes},
            format="json",
            HTTP_IF_MATCH=f'"{revision}"',
        )
        assert response.status_code == 200
        revision = response.json()["revision"]
        revisions.append(revision)
    deleted = api.delete(f"{DOCS}/plan{ENV}", HTTP_IF_MATCH=f'"{revision}"')
    assert deleted.status_code == 204
    assert receiver.received == []  # nothing is sent by the request itself

    run_jobs()
    events = receiver.events()
    assert [event["type"] for event in events] == [
        "document.created",
        "document.updated",
        "document.updated",
        "document.frozen",
        "document.unfrozen",
        "document.deleted",
    ]
    assert [event["data"]["revision"] for event in events[:5]] == revisions
    for event in events:
        assert event["project"] == "acme"
        assert event["environment"] == "development"
        assert event["data"]["resource"] == "notes"
        assert event["data"]["document"] == "plan"
        assert event["data"]["actor"].startswith("key:mak_")
    assert len({event["id"] for event in events}) == 6
    for headers, body, _ in receiver.received:
        assert headers["path"] == "/hooks?team=ops"
        assert headers["Content-Type"] == "application/json"
        event = verify(hook["secret"], headers, body)
        assert headers["Memoryadmin-Event-Id"] == event["id"]
        assert headers["Memoryadmin-Event-Type"] == event["type"]
        assert headers["Memoryadmin-Delivery-Attempt"] == "1"
        with pytest.raises(InvalidSignature):
            verify("whsec_not-the-secret", headers, body)
        with pytest.raises(InvalidSignature):
            verify(hook["secret"], headers, body.replace(b"acme", b"evil"))
        with pytest.raises(InvalidSignature):
            verify(hook["secret"], headers, body, now=time.time() + 3600)
    rows = Delivery.objects.order_by("id")
    assert [row.state for row in rows] == ["delivered"] * 6
    assert {(row.attempts, row.response_code) for row in rows} == {(1, 200)}

    page = api.get(f"{HOOKS}/{hook['id']}/deliveries").json()
    assert page["deliveries"][0]["event"] == "document.deleted"
    assert page["deliveries"][0]["state"] == "delivered"
    assert page["deliveries"][0]["responseCode"] == 200
    assert page["nextCursor"] is None


def test_an_endpoint_hears_only_the_events_it_wants_of_its_own_project(
    api: APIClient,
    client_for: Any,
    keys: Keys,
    receiver: Receiver,
    make_document: Any,
    project: Project,
    other_project: Project,
) -> None:
    register(api, receiver.url, ["document.deleted"])
    other = client_for(keys.other).post(
        "/api/managed-agents/projects/globex/webhooks",
        {"url": receiver.url, "events": ["document.created"]},
        format="json",
    )
    assert other.status_code == 201
    document = make_document("plan", text="one")
    assert not Delivery.objects.exists()  # no endpoint of acme wants document.created
    assert not Job.objects.filter(name=DELIVER).exists()
    response = api.delete(f"{DOCS}/plan{ENV}", HTTP_IF_MATCH=f'"{document.revision}"')
    assert response.status_code == 204
    run_jobs()
    assert [event["type"] for event in receiver.events()] == ["document.deleted"]


def test_a_failed_attempt_is_retried_and_later_events_wait_for_it(
    api: APIClient, receiver: Receiver, make_document: Any, fast_retries: None
) -> None:
    hook = register(api, receiver.url, ["document.created"])
    receiver.statuses = [500, 503, 200]
    make_document("first")
    run_jobs()
    first = Delivery.objects.get()
    assert first.job_id is not None
    assert (first.state, first.attempts, first.response_code) == ("pending", 1, 500)
    assert first.last_attempt_at is not None
    assert first.next_attempt_at is not None
    assert first.next_attempt_at > first.last_attempt_at
    # Not due for an hour (the 0.2 s backoff could pass on a busy machine before the
    # second event's jobs run, and the retry would then go first).
    Job.objects.filter(pk=first.job_id).update(run_after=timezone.now() + timedelta(hours=1))
    make_document("second")
    run_jobs()
    # The second event waits behind the first, which is not due yet.
    assert [json.loads(body)["data"]["document"] for _, body, _ in receiver.received] == ["first"]
    Job.objects.filter(pk=first.job_id).update(run_after=timezone.now())
    run_until(lambda: not Delivery.objects.exclude(state="delivered").exists())
    sent = [(json.loads(body)["data"]["document"], status) for _, body, status in receiver.received]
    assert sent == [("first", 500), ("first", 503), ("first", 200), ("second", 200)]
    attempts = [h["Memoryadmin-Delivery-Attempt"] for h, body, _ in receiver.received[:3]]
    assert attempts == ["1", "2", "3"]
    # One event id for every attempt of the first delivery, each signed.
    ids = {verify(hook["secret"], h, body)["id"] for h, body, _ in receiver.received[:3]}
    assert len(ids) == 1
    assert Delivery.objects.get(pk=first.pk).attempts == 3


@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_a_receivers_retry_after_postpones_the_next_attempt(
    api: APIClient, receiver: Receiver, make_document: Any, fast_retries: None, form: str
) -> None:
    register(api, receiver.url, ["document.created"])
    receiver.statuses = [503, 200]
    wait = timedelta(minutes=10)
    receiver.retry_after = (
        str(int(wait.total_seconds()))
        if form == "seconds"
        else format_datetime(datetime.now(UTC) + wait, usegmt=True)
    )
    make_document("first")
    run_jobs()
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("pending", 1, 503)
    assert delivery.last_attempt_at is not None
    assert delivery.next_attempt_at is not None
    # Not the 0.2 s backoff: the receiver's wait (an HTTP date loses its fraction).
    assert delivery.next_attempt_at - delivery.last_attempt_at > wait - timedelta(seconds=2)
    run_jobs()
    assert len(receiver.received) == 1


def test_a_delivery_left_sending_by_a_worker_that_died_is_sent_once_its_lease_ends(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    """A worker died while sending: its job holds the endpoint's line until its lease
    ends, then the delivery is sent again (its second attempt) and the line moves on."""
    register(api, receiver.url, ["document.created"])
    make_document("first")
    make_document("second")
    first, second = Delivery.objects.order_by("id")
    assert first.job is not None
    assert second.job is not None
    assert first.job_id is not None
    assert first.job.line == second.job.line == f"webhook:{first.endpoint_id}"
    assert first.job.project == "acme"
    held = timezone.now() + timedelta(seconds=60)
    Job.objects.filter(pk=first.job_id).update(state="running", attempts=1, lease_until=held)
    Delivery.objects.filter(pk=first.pk).update(state="sending")
    run_jobs()
    assert receiver.received == []
    assert Delivery.objects.get(pk=second.pk).state == "pending"
    Job.objects.filter(pk=first.job_id).update(lease_until=timezone.now() - timedelta(seconds=1))
    run_jobs()
    sent = [
        (json.loads(body)["data"]["document"], h["Memoryadmin-Delivery-Attempt"])
        for h, body, _ in receiver.received
    ]
    assert sent == [("first", "2"), ("second", "1")]
    assert set(Delivery.objects.values_list("state", flat=True)) == {"delivered"}


def test_a_worker_back_after_another_delivered_writes_nothing_over_it(
    api: APIClient, receiver: Receiver, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker stalled past its lease while sending; another took the job over and
    delivered. The first, failing late, wrote the delivery back to pending while its job
    was done: never sent again, refused by redeliver, the endpoint failing for good."""
    register(api, receiver.url, ["document.created"])
    make_document("first")
    delivery = Delivery.objects.get()
    assert delivery.job_id is not None
    real_send = sending._send
    attempts: list[int] = []

    def stalled(delivery: Delivery, attempt: int) -> tuple[int | None, str, float | None, str]:
        assert delivery.job_id is not None
        attempts.append(attempt)
        if attempt == 1:
            # The first worker's lease passes; a second one takes the job over.
            past = timezone.now() - timedelta(seconds=1)
            Job.objects.filter(pk=delivery.job_id).update(lease_until=past)
            assert job_run(delivery.job_id) == "done"
            return None, "timed out", None, ""
        return real_send(delivery, attempt)

    monkeypatch.setattr(sending, "_send", stalled)
    assert job_run(delivery.job_id) == "skipped"
    assert attempts == [1, 2]
    delivery.refresh_from_db()
    assert (delivery.state, delivery.response_code, delivery.last_error) == ("delivered", 200, "")
    assert Job.objects.filter(pk=delivery.job_id, state="done", attempts=2).exists()
    assert [h["Memoryadmin-Delivery-Attempt"] for h, _, _ in receiver.received] == ["2"]


def test_a_worker_whose_job_was_taken_over_before_it_sends_sends_nothing(
    api: APIClient, receiver: Receiver, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(api, receiver.url, ["document.created"])
    make_document("first")
    delivery = Delivery.objects.get()
    job_id = delivery.job_id
    assert job_id is not None
    real_current_job = sending.current_job

    def taken_over() -> Job:
        # The worker's lease passed before it sent; another one took the job over.
        Job.objects.filter(pk=job_id, attempts=1).update(
            attempts=2, lease_until=timezone.now() + timedelta(seconds=60)
        )
        return real_current_job()

    monkeypatch.setattr(sending, "current_job", taken_over)
    assert job_run(job_id) == "skipped"
    assert receiver.received == []
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_attempt_at) == ("pending", None)
    assert Job.objects.filter(pk=job_id, state="running", attempts=2).exists()


def test_exhausted_deliveries_are_kept_as_failed_and_can_be_redelivered(
    api: APIClient, receiver: Receiver, make_document: Any, fast_retries: None, settings: Any
) -> None:
    settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS = 2
    hook = register(api, receiver.url, ["document.created"])
    receiver.statuses = [500, 500, 200]
    make_document("first")
    make_document("second")
    run_until(lambda: not Delivery.objects.filter(state__in=["pending", "sending"]).exists())
    first, second = Delivery.objects.order_by("id")
    assert (first.state, first.attempts, first.response_code) == ("failed", 2, 500)
    assert first.last_error == "HTTP 500"
    assert (second.state, second.attempts) == ("delivered", 1)  # the queue moved on

    url = f"{HOOKS}/{hook['id']}/deliveries/{first.pk}/redeliver"
    response = api.post(url)
    assert response.status_code == 202
    assert response.json()["state"] == "pending"
    assert response.json()["attempts"] == 0
    run_until(lambda: Delivery.objects.get(pk=first.pk).state == "delivered")
    resent = receiver.received[-1]
    assert verify(hook["secret"], resent[0], resent[1])["id"] == first.event_id
    assert AuditEntry.objects.filter(action="webhook.redeliver").count() == 1
    # Redelivering an open delivery changes nothing; an unknown one is 404.
    assert api.post(f"{HOOKS}/{hook['id']}/deliveries/999999/redeliver").status_code == 404
    failed = api.get(f"{HOOKS}/{hook['id']}/deliveries?state=failed").json()
    assert failed["deliveries"] == []


def test_nothing_is_delivered_for_a_rolled_back_change(
    api: APIClient, receiver: Receiver, make_document: Any, notes: Resource
) -> None:
    register(api, receiver.url, ["document.updated", "document.created"])
    document = make_document("plan", text="one")
    Delivery.objects.all().delete()
    Job.objects.all().delete()

    class Abort(Exception):
        pass

    written = []

    def change_then_fail() -> None:
        with transaction.atomic():
            document_replace(
                resource=notes,
                doc_id="plan",
                expected_revision=document.revision,
                text="two",
                actor="test",
            )
            written.append(Delivery.objects.count())
            raise Abort

    with pytest.raises(Abort):
        change_then_fail()
    assert written == [1]  # written with the change...
    assert not Delivery.objects.exists()  # ...and gone with it
    assert not Job.objects.filter(name=DELIVER).exists()
    run_jobs()
    assert receiver.received == []
    assert Document.objects.get(pk=document.pk).text == "one"


def test_agent_saves_and_sessions_raise_their_events(
    api: APIClient, receiver: Receiver, project: Project, workshop: Document
) -> None:
    register(
        api,
        receiver.url,
        ["memory.saved", "document.updated", "session.created", "session.ended"],
    )
    session = support_session(project)
    sessions = "/api/managed-agents/sessions"
    recall = api.post(
        f"{sessions}/{session.id}/memory/recall",
        {"use": ["notes"], "input": {"text": "hi"}},
        format="json",
    )
    assert recall.status_code == 200
    call = {
        "recallId": recall.json()["recallId"],
        "callId": "c1",
        "name": "memory_save",
        "arguments": {"text": "Node.js 24 now."},
    }
    saved = api.post(f"{sessions}/{session.id}/memory/tool-calls", call, format="json")
    assert saved.status_code == 200
    assert saved.json()["result"]["status"] == "saved"
    session_end(session=session, actor="test")
    run_jobs()
    events = receiver.events()
    assert [event["type"] for event in events] == [
        "session.created",
        "document.updated",
        "memory.saved",
        "session.ended",
    ]
    assert events[0]["data"]["session"] == session.id
    assert events[0]["data"]["agent"] == "support-bot"
    for event in events[1:3]:
        assert event["data"]["session"] == session.id
        assert event["data"]["document"] == "workshop"
        assert event["data"]["revision"] == saved.json()["result"]["revision"]
    # One event, one id per endpoint: the two events of the save are distinct.
    assert events[1]["id"] != events[2]["id"]


def test_an_inactive_endpoint_keeps_its_deliveries_until_reactivated(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    hook = register(api, receiver.url, ["document.created"])
    paused = api.patch(f"{HOOKS}/{hook['id']}", {"active": False}, format="json")
    assert paused.status_code == 200
    assert paused.json()["active"] is False
    make_document("plan")
    # An inactive endpoint hears of nothing new...
    assert not Delivery.objects.exists()
    api.patch(f"{HOOKS}/{hook['id']}", {"active": True}, format="json")
    make_document("plan-2")
    api.patch(f"{HOOKS}/{hook['id']}", {"active": False}, format="json")
    run_jobs()
    # ...and sends nothing while paused; what was queued is sent once it is back.
    assert receiver.received == []
    assert Delivery.objects.get().state == "pending"
    api.patch(f"{HOOKS}/{hook['id']}", {"active": True}, format="json")
    run_jobs()
    assert [event["data"]["document"] for event in receiver.events()] == ["plan-2"]


def test_bad_endpoints_are_refused_and_change_nothing(
    api: APIClient, client_for: Any, keys: Keys, settings: Any
) -> None:
    cases: list[tuple[Any, dict[str, Any], int]] = [
        (api, {"url": "http://example.com/hooks", "events": ["document.created"]}, 400),
        (api, {"url": "https://example.com/h#frag", "events": ["document.created"]}, 400),
        (api, {"url": "https://user:pw@example.com/h", "events": ["document.created"]}, 400),
        (api, {"url": "ftp://example.com/h", "events": ["document.created"]}, 400),
        (api, {"url": "https://example.com/h", "events": ["document.exploded"]}, 400),
        (api, {"url": "https://example.com/h", "events": []}, 400),
        (api, {"url": "https://example.com/h\u0000", "events": ["document.created"]}, 400),
        (api, {"url": "https://example.com/h", "events": ["document.created"], "x": 1}, 400),
        (
            client_for(keys.read_only),
            {"url": "https://example.com/h", "events": ["document.created"]},
            403,
        ),
    ]
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    cases.append((api, {"url": "https://10.1.2.3/h", "events": ["document.created"]}, 400))
    cases.append((api, {"url": "http://127.0.0.1:9/h", "events": ["document.created"]}, 400))
    for client, body, status in cases:
        response = client.post(HOOKS, body, format="json")
        assert response.status_code == status, (body, response.json())
        assert set(response.json()) == {"error"}
    ascii_only = (
        "url must be ASCII: write an international host name in its xn-- form and"
        " percent-encode other characters."
    )
    for url, message in [
        ("https://\u043f\u0440\u0438\u043c\u0435\u0440.com/h", ascii_only),
        ("https://example.com/caf\u00e9", ascii_only),
        ("https://example.com/h\tx", "url must not contain whitespace or control characters."),
        ("https://example.com/h?q=1#x", "url must not contain a fragment."),
    ]:
        response = api.post(HOOKS, {"url": url, "events": ["document.created"]}, format="json")
        assert response.json()["error"]["message"] == message, url
    outsider = client_for(keys.other).get(HOOKS)
    assert outsider.status_code == 403
    assert api.get(f"{HOOKS}/12345").status_code == 404
    assert api.get(f"{HOOKS}/abc").status_code == 404
    assert not Endpoint.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="webhook.").exists()


def test_delivery_is_refused_when_the_address_is_no_longer_allowed(
    api: APIClient, receiver: Receiver, make_document: Any, settings: Any
) -> None:
    register(api, receiver.url, ["document.created"])
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    make_document("plan")
    run_jobs()
    assert receiver.received == []
    delivery = Delivery.objects.get()
    assert delivery.state == "pending"
    assert delivery.last_error.startswith("refused:")
    assert delivery.response_code is None


def test_a_receivers_slow_name_lookup_ends_at_the_delivery_timeout(
    api: APIClient, receiver: Receiver, make_document: Any, settings: Any, slow_names: SlowNames
) -> None:
    """The lookup of the receiver's name is part of the attempt: the worker's thread is
    back at the timeout, whatever the receiver's name servers do."""
    port = receiver.server_address[1]
    register(api, f"https://hooks.slow.test:{port}/hooks", ["document.created"])
    settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS = 0.5
    slow_names.hang = True
    make_document("plan")
    started = time.monotonic()
    run_jobs()
    assert time.monotonic() - started < 10  # the lookup hangs 30 s: cut at the timeout
    assert receiver.received == []
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.response_code, delivery.last_error) == (
        "pending",
        None,
        "timed out",
    )


def test_registering_a_url_whose_lookup_hangs_holds_the_request_two_seconds_at_most(
    api: APIClient, slow_names: SlowNames
) -> None:
    slow_names.hang = True
    started = time.monotonic()
    hook = register(api, "https://hangs.slow.test/hooks", ["document.created"])
    assert time.monotonic() - started < 10  # two seconds, not the lookup's 30
    assert Endpoint.objects.get(pk=hook["id"]).url == "https://hangs.slow.test/hooks"


def test_a_receivers_compression_bomb_is_cut_at_the_reply_limit(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    """A 200 whose few kilobytes inflate to 256 MiB (gzip twice over): delivered, its
    reply not kept, and never held whole."""
    inflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = b"0" * (1 << 20)
    once = b"".join(inflater.compress(zeros) for _ in range(256)) + inflater.flush()
    receiver.reply_body = gzip.compress(once, 9)
    receiver.reply_headers = {"Content-Encoding": "gzip, gzip"}
    register(api, receiver.url, ["document.created"])
    make_document("plan")
    tracemalloc.start()
    try:
        run_jobs()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.response_code, delivery.response_excerpt) == (
        "delivered",
        200,
        f"(the reply was over {sending.REPLY_MAX_BYTES} bytes; not kept)",
    )


def test_a_receiver_nothing_listens_on_is_told_as_no_connection(
    api: APIClient, make_document: Any, fast_retries: None
) -> None:
    register(api, f"http://127.0.0.1:{free_port()}/hook", ["document.created"])
    make_document("plan")
    run_jobs()
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("pending", 1, None)
    assert delivery.last_error == "could not connect (ConnectError)"


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_reply_cut_short_is_not_a_delivery(
    api: APIClient, receiver: Receiver, make_document: Any, fast_retries: None, coding: str
) -> None:
    """A 200 whose compressed reply ends before its stream does (no last block, no
    trailer) failed as a connection reset mid-reply does: the delivery waits for its next
    attempt, and no part of the reply is kept as the receiver's."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31 if coding == "gzip" else 15)
    receiver.reply_body = deflater.compress(b'{"ok": true}') + deflater.flush(zlib.Z_SYNC_FLUSH)
    receiver.reply_headers = {"Content-Encoding": coding}
    register(api, receiver.url, ["document.created"])
    make_document("plan")
    run_jobs()
    assert len(receiver.received) == 1
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("pending", 1, None)
    assert (delivery.last_error, delivery.response_excerpt) == (
        "no whole reply (DecodingError)",
        "",
    )
    # The whole reply, next time, is a delivery.
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31 if coding == "gzip" else 15)
    receiver.reply_body = deflater.compress(b'{"ok": true}') + deflater.flush()
    run_until(lambda: Delivery.objects.get().state == "delivered")
    delivery.refresh_from_db()
    assert (delivery.attempts, delivery.response_code, delivery.response_excerpt) == (
        2,
        200,
        '{"ok": true}',
    )


def test_endpoint_changes_are_audited_and_the_secret_is_shown_once(
    api: APIClient, receiver: Receiver
) -> None:
    hook = register(api, receiver.url, ["document.created"])
    assert "secret" not in api.get(f"{HOOKS}/{hook['id']}").json()
    rotated = api.post(f"{HOOKS}/{hook['id']}/rotate-secret")
    assert rotated.status_code == 200
    assert rotated.json()["secret"] not in {hook["secret"], ""}
    assert Endpoint.objects.get().secret == rotated.json()["secret"]
    changed = api.patch(
        f"{HOOKS}/{hook['id']}",
        {"events": ["session.created"], "description": "Ops"},
        format="json",
    )
    assert changed.json()["events"] == ["session.created"]
    assert changed.json()["description"] == "Ops"
    assert api.patch(f"{HOOKS}/{hook['id']}", {}, format="json").status_code == 400
    assert api.delete(f"{HOOKS}/{hook['id']}").status_code == 204
    assert not Endpoint.objects.exists()
    entries = AuditEntry.objects.filter(action__startswith="webhook.").order_by("id")
    actions = [entry.action for entry in entries]
    assert actions == ["webhook.create", "webhook.rotate", "webhook.update", "webhook.delete"]
    for entry in entries:
        assert hook["secret"] not in json.dumps(entry.detail)
        assert rotated.json()["secret"] not in json.dumps(entry.detail)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="racing senders need PostgreSQL")
def test_racing_senders_deliver_each_event_exactly_once_in_order(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    register(api, receiver.url, ["document.created"])
    for index in range(20):
        make_document(f"doc-{index:02d}")
    job_ids = list(Delivery.objects.order_by("id").values_list("job_id", flat=True))

    def drain(_: int) -> None:
        from django.db import connection

        # Each sender offers itself every job, as racing workers would.
        deadline = time.monotonic() + 60
        try:
            while Delivery.objects.exclude(state="delivered").exists():
                assert time.monotonic() < deadline, "the deliveries did not settle"
                for job_id in job_ids:
                    job_run(job_id)
        finally:
            connection.close()

    run_threads(4, drain)
    ids = [json.loads(body)["id"] for _, body, _ in receiver.received]
    assert len(ids) == 20
    assert len(set(ids)) == 20
    documents = [json.loads(body)["data"]["document"] for _, body, _ in receiver.received]
    assert documents == [f"doc-{index:02d}" for index in range(20)]
    assert set(Delivery.objects.values_list("state", "job__attempts")) == {("delivered", 1)}


def test_the_documented_signature_check_accepts_a_delivery_and_refuses_a_forgery(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs" / "webhooks.md").read_text()
    snippet = next(
        block.removeprefix("python\n")
        for block in guide.split("```")
        if block.startswith("python\n") and "def verified" in block
    )
    namespace: dict[str, Any] = {}
    exec(snippet, namespace)  # the guide's code, as a receiver would paste it
    hook = register(api, receiver.url, ["document.created"])
    make_document("plan")
    run_jobs()
    ((headers, body, _),) = receiver.received
    assert namespace["verified"](hook["secret"], headers, body) is True
    assert namespace["verified"]("whsec_other", headers, body) is False
    assert namespace["verified"](hook["secret"], headers, body + b" ") is False


def test_the_audit_log_keeps_a_webhook_url_without_its_query(
    api: APIClient, receiver: Receiver, people: Any, web_client_for: Any
) -> None:
    """Receivers take tokens in the query; the Webhooks page is the owners', the audit
    log every role's."""
    base, _, query = receiver.url.partition("?")
    join = f"{base}?{query}&" if query else f"{base}?"
    created = register(api, f"{join}token=SEKRIT123", ["document.created"])
    assert created["url"].endswith("token=SEKRIT123")  # the endpoint keeps it whole
    changed = api.patch(f"{HOOKS}/{created['id']}", {"url": f"{join}token=OTHER456"}, format="json")
    assert changed.status_code == 200, changed.content
    details = [e.detail for e in AuditEntry.objects.filter(action__startswith="webhook.")]
    assert [d["url"] for d in details] == [f"{base}?\u2026"] * 2
    viewer = web_client_for(people.viewer)
    for page in ("audit/", "audit/download/?format=jsonl"):
        answer = viewer.get(f"/projects/acme/development/{page}")
        assert answer.status_code == 200
        body = b"".join(answer.streaming_content) if answer.streaming else answer.content
        assert b"SEKRIT123" not in body
        assert b"OTHER456" not in body


def _aged(delivery: Delivery, days: float) -> None:
    """The delivery (its event and its last attempt, if any) `days` old."""
    at = timezone.now() - timedelta(days=days)
    Delivery.objects.filter(pk=delivery.pk).update(created_at=at)
    Delivery.objects.exclude(last_attempt_at=None).filter(pk=delivery.pk).update(last_attempt_at=at)


def test_finished_deliveries_past_their_days_go_with_their_jobs_and_the_page_still_answers(
    api: APIClient, receiver: Receiver, make_document: Any, settings: Any, owner: Any
) -> None:
    from memoryadmin.runner.housekeeping import housekeeping

    settings.MEMORYADMIN_WEBHOOK_MAX_ATTEMPTS = 1
    hook = register(api, receiver.url, ["document.created"])
    receiver.statuses = [200, 500, 200]
    for name in ("old", "failed", "recent"):
        make_document(name)
    run_jobs(3)
    make_document("waiting")
    api.patch(f"{HOOKS}/{hook['id']}", {"active": False}, format="json")
    run_jobs()
    old, failed, recent, waiting = Delivery.objects.order_by("id")
    assert [d.state for d in (old, failed, recent, waiting)] == [
        "delivered",
        "failed",
        "delivered",
        "pending",
    ]
    for delivery, days in ((old, 31), (failed, 31), (recent, 29), (waiting, 90)):
        _aged(delivery, days)
    # Failed before any attempt of it began (its worker died each time): its event's age.
    never_sent = Delivery.objects.create(
        endpoint_id=hook["id"],
        event_id="evt_never_sent",
        event="document.created",
        body="{}",
        state="failed",
        created_at=timezone.now() - timedelta(days=31),
    )
    jobs = {d.pk: d.job_id for d in (old, failed, recent, waiting)}

    settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = 0  # for ever
    assert housekeeping().removed == {}
    assert Delivery.objects.count() == 5

    settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = 30
    assert housekeeping().removed == {"webhook deliveries": 3}
    assert set(Delivery.objects.values_list("pk", flat=True)) == {recent.pk, waiting.pk}
    assert set(Job.objects.values_list("pk", flat=True)) == {jobs[recent.pk], jobs[waiting.pk]}
    assert never_sent.pk not in Delivery.objects.values_list("pk", flat=True)
    assert housekeeping().removed == {}  # done: again removes nothing

    listed = api.get(f"{HOOKS}/{hook['id']}/deliveries")
    assert listed.status_code == 200
    assert [(d["id"], d["state"], d["attempts"]) for d in listed.json()["deliveries"]] == [
        (waiting.pk, "pending", 0),
        (recent.pk, "delivered", 1),
    ]
    page = owner.get(f"/projects/acme/development/webhooks/{hook['id']}/")
    assert page.status_code == 200
    assert f'id="delivery-{recent.pk}"' in page.content.decode()
    assert f'id="delivery-{old.pk}"' not in page.content.decode()
    assert "kept 30 days after their last attempt" in page.content.decode()
    gone = api.post(f"{HOOKS}/{hook['id']}/deliveries/{old.pk}/redeliver")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "delivery_not_found")
    # What is kept is sent again as before, by its own job.
    api.patch(f"{HOOKS}/{hook['id']}", {"active": True}, format="json")
    again = api.post(f"{HOOKS}/{hook['id']}/deliveries/{recent.pk}/redeliver")
    assert (again.status_code, again.json()["state"]) == (202, "pending")
    run_until(lambda: not Delivery.objects.exclude(state="delivered").exists())
    assert Delivery.objects.get(pk=recent.pk).job_id == jobs[recent.pk]
    assert [e["data"]["document"] for e in receiver.events()][-2:] == ["recent", "waiting"]


def test_a_backlog_of_old_deliveries_goes_a_batch_at_a_time_while_events_are_sent(
    api: APIClient, receiver: Receiver, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryadmin.runner import housekeeping

    monkeypatch.setattr(housekeeping, "BATCH", 2)
    hook = register(api, receiver.url, ["document.created"])
    for number in range(5):
        make_document(f"old-{number}")
    run_jobs(5)
    for delivery in Delivery.objects.all():
        _aged(delivery, 31)
    calls: list[housekeeping.Swept] = []
    while not calls or not calls[-1].done:
        # Each call stops at its budget (none here) after a batch; the worker runs its
        # jobs between calls, and a new event goes out meanwhile.
        calls.append(housekeeping.housekeeping(budget=0))
        make_document(f"new-{len(calls)}")
        run_jobs()
    assert [call.removed.get("webhook deliveries", 0) for call in calls] == [2, 2, 1, 0]
    new = [f"new-{number}" for number in range(1, 5)]
    assert [e["data"]["document"] for e in receiver.events()][5:] == new
    assert set(Delivery.objects.values_list("state", flat=True)) == {"delivered"}
    assert Delivery.objects.count() == Job.objects.count() == 4
    listed = api.get(f"{HOOKS}/{hook['id']}/deliveries").json()["deliveries"]
    assert [d["attempts"] for d in listed] == [1, 1, 1, 1]


def test_a_delivery_sent_again_while_it_is_being_removed_is_kept_with_its_job(
    api: APIClient, receiver: Receiver, make_document: Any
) -> None:
    from memoryadmin.runner.housekeeping import _with_jobs
    from memoryadmin.webhooks.delivery import deliveries_past_keeping

    hook = register(api, receiver.url, ["document.created"])
    make_document("first")
    make_document("second")
    run_jobs(2)
    first, second = Delivery.objects.order_by("id")
    _aged(first, 31)
    _aged(second, 31)
    due = deliveries_past_keeping()
    assert due is not None
    batch = list(due.values_list("pk", flat=True))
    # Between the batch's read and its delete, an owner sends the first one again.
    again = api.post(f"{HOOKS}/{hook['id']}/deliveries/{first.pk}/redeliver")
    assert again.status_code == 202
    assert _with_jobs(Delivery)(due, batch) == 1
    assert list(Delivery.objects.values_list("pk", "state")) == [(first.pk, "pending")]
    assert list(Job.objects.values_list("pk", "state")) == [(first.job_id, "pending")]
    run_jobs()
    assert Delivery.objects.get().state == "delivered"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="a row lock held across threads needs PostgreSQL")
def test_a_redelivery_racing_the_removal_of_its_delivery_is_not_found(
    api: APIClient, receiver: Receiver, make_document: Any, settings: Any
) -> None:
    """Housekeeping deletes the delivery after the redelivery read it and before its
    update: the owner is told it is not found (404), as after the removal, not a 500."""
    import threading

    from django.db import connections

    from memoryadmin.runner.housekeeping import _with_jobs
    from memoryadmin.webhooks.delivery import deliveries_past_keeping

    settings.MEMORYADMIN_WEBHOOK_DELIVERIES_KEEP_DAYS = 30
    hook = register(api, receiver.url, ["document.created"])
    make_document("old")
    run_jobs()
    # Delivered long ago (set here: the race is with its removal, not its sending).
    Delivery.objects.update(state="delivered", last_attempt_at=timezone.now())
    Job.objects.update(state="done", finished_at=timezone.now())
    old = Delivery.objects.get()
    _aged(old, 31)
    deleted, done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def housekeeper() -> None:
        try:
            with transaction.atomic():
                due = deliveries_past_keeping()
                assert due is not None
                outcome["removed"] = _with_jobs(Delivery)(due, [old.pk])
                deleted.set()
                # Commits once the redelivery waits for the deleted row's lock.
                if not lock_waiter_seen(looks=1000):
                    outcome["never waited"] = True
        except Exception as exc:
            outcome["housekeeper"] = exc
        finally:
            deleted.set()
            done.set()
            connections.close_all()

    thread = threading.Thread(target=housekeeper)
    thread.start()
    assert deleted.wait(60)
    gone = api.post(f"{HOOKS}/{hook['id']}/deliveries/{old.pk}/redeliver")
    assert done.wait(60)
    thread.join(60)
    assert outcome == {"removed": 1}
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "delivery_not_found")
    assert not Delivery.objects.exists()
    assert not Job.objects.exists()
    assert not AuditEntry.objects.filter(action="webhook.redeliver").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="a row lock held across threads needs PostgreSQL")
@pytest.mark.parametrize("first", ["change", "deletion"])
def test_a_change_racing_its_endpoints_deletion_is_written_and_the_endpoint_goes(
    api: APIClient, make_document: Any, first: str
) -> None:
    """A change of the project writes its delivery while the owner deletes the endpoint:
    the change read the endpoint before the deletion committed, and failed at its own
    commit (the delivery's endpoint gone), its write lost. Now whichever comes second
    waits for the first: a deletion waits for the change and deletes its delivery too, a
    change waits for the deletion and queues nothing for the endpoint."""
    import threading

    from django.db import connections

    from memoryadmin.webhooks.services import endpoint_delete

    hook = register(api, "http://127.0.0.1:9/hooks", ["document.created"])
    ready, done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def holder() -> None:
        # Writes first, then commits once the other side waits for it (3 s at most).
        try:
            with transaction.atomic():
                if first == "change":
                    make_document("racing")
                else:
                    endpoint_delete(endpoint=Endpoint.objects.get(), actor="t")
                ready.set()
                outcome["waited"] = lock_waiter_seen(looks=300)
        except Exception as exc:
            outcome["holder"] = repr(exc)
        finally:
            ready.set()
            done.set()
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    assert ready.wait(60)
    if first == "change":
        second = api.delete(f"{HOOKS}/{hook['id']}")
        assert second.status_code == 204
    else:
        second = api.put(
            f"{DOCS}/racing{ENV}", {"title": "Racing"}, format="json", HTTP_IF_NONE_MATCH="*"
        )
        assert second.status_code == 201, second.json()
    assert done.wait(60)
    thread.join(60)
    assert outcome == {"waited": True}
    assert Document.objects.filter(doc_id="racing").exists()
    assert not Endpoint.objects.exists()
    # The change's delivery waits for the deletion's job, which removes it with its job.
    assert Delivery.objects.count() == (1 if first == "change" else 0)
    assert Job.objects.filter(name=DELIVER).count() == (1 if first == "change" else 0)
    assert AuditEntry.objects.filter(action="webhook.delete").count() == 1
    # Handed to the task backend at commit: run here, in order.
    assert [job_run(pk) for pk in Job.objects.order_by("pk").values_list("pk", flat=True)] == (
        ["done", "done"] if first == "change" else ["done"]
    )
    assert not Endpoint._base_manager.exists()
    assert not Delivery.objects.exists()
    assert not Job.objects.filter(name=DELIVER).exists()


def _backlog(endpoint_id: int, count: int) -> None:
    """`count` deliveries waiting for the endpoint, each with its job, as the outbox
    writes them."""
    from memoryadmin.runner.jobs import enqueue_many
    from memoryadmin.webhooks.delivery import line_of
    from memoryadmin.webhooks.outbox import new_event_id

    events = [new_event_id() for _ in range(count)]
    line = line_of(endpoint_id)
    jobs = enqueue_many(
        webhook_deliver,
        project="acme",
        jobs=[(line, {"endpoint": endpoint_id, "event": event}) for event in events],
    )
    Delivery.objects.bulk_create(
        Delivery(
            endpoint_id=endpoint_id,
            event_id=event,
            event="document.created",
            body="{}",
            job=job,
            created_at=timezone.now(),
        )
        for event, job in zip(events, jobs, strict=True)
    )


def test_deleting_an_endpoint_does_the_same_work_however_many_deliveries_it_kept(
    api: APIClient, receiver: Receiver, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deletion removed the endpoint's deliveries in its own statement, past the
    statement bound on a busy endpoint (a 503 every time: never deletable). Now the
    request marks the endpoint deleted and queues a job, in as many statements for an
    endpoint of 1 delivery as of 300, none of them touching the deliveries; the job
    removes them a batch at a time, their jobs with them, then the endpoint, and nothing
    waiting is sent after the deletion answered."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memoryadmin.runner import housekeeping

    monkeypatch.setattr(housekeeping, "BATCH", 50)
    monkeypatch.setattr(housekeeping, "BUDGET_SECONDS", 0)  # one batch a run
    quiet = register(api, receiver.url, ["document.created"])
    busy = register(api, receiver.url, ["document.created"])
    make_document("first")
    run_jobs(2)
    assert len(receiver.received) == 2
    _backlog(quiet["id"], 1)
    _backlog(busy["id"], 300)
    # A delivery being sent when its worker died: it would be taken over at its lease's end.
    sending_now = Delivery.objects.filter(endpoint_id=busy["id"], state="pending").first()
    assert sending_now is not None
    Delivery.objects.filter(pk=sending_now.pk).update(state="sending")
    assert sending_now.job_id is not None
    past = timezone.now() - timedelta(seconds=1)
    Job.objects.filter(pk=sending_now.job_id).update(state="running", attempts=1, lease_until=past)
    assert api.get(HOOKS).status_code == 200

    statements = {}
    for hook in (quiet, busy):
        with CaptureQueriesContext(connection) as captured:
            deleted = api.delete(f"{HOOKS}/{hook['id']}")
        assert deleted.status_code == 204
        statements[hook["id"]] = [query["sql"] for query in captured.captured_queries]
    assert len(statements[quiet["id"]]) == len(statements[busy["id"]])
    delivery_table = Delivery._meta.db_table
    assert not [sql for sql in statements[busy["id"]] if delivery_table in sql]
    # Gone from every read at once; the rows wait for the job.
    assert api.get(HOOKS).json()["webhooks"] == []
    gone = api.get(f"{HOOKS}/{busy['id']}/deliveries")
    assert (gone.status_code, gone.json()["error"]["code"]) == (404, "webhook_not_found")
    assert Delivery.objects.count() == 2 + 1 + 300
    assert Endpoint._base_manager.filter(deleted_at__isnull=False, active=False).count() == 2

    runs = 0
    while Job.objects.filter(name__endswith="webhook_endpoint_purge", state="pending").exists():
        runs += 1
        assert runs < 100
        run_jobs()
    assert runs >= 300 // 50
    assert len(receiver.received) == 2
    assert not Delivery.objects.exists()
    assert not Job.objects.filter(name=DELIVER).exists()
    assert not Endpoint._base_manager.exists()
    purges = Job.objects.filter(name__endswith="webhook_endpoint_purge")
    assert list(purges.values_list("state", flat=True)) == ["done", "done"]
    actions = AuditEntry.objects.filter(action="webhook.delete")
    assert sorted(actions.values_list("detail__webhook", flat=True)) == [quiet["id"], busy["id"]]


def test_a_delivery_read_before_its_endpoints_deletion_is_not_sent_after_it(
    api: APIClient, receiver: Receiver, make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker read a waiting delivery, then the owner deleted its endpoint before the
    worker began to send it: the worker sends nothing."""
    from memoryadmin.webhooks.services import endpoint_delete

    hook = register(api, receiver.url, ["document.created"])
    make_document("first")
    delivery = Delivery.objects.get()
    real_current_job = sending.current_job

    def deleted_meanwhile() -> Job:
        endpoint_delete(endpoint=Endpoint.objects.get(pk=hook["id"]), actor="t")
        return real_current_job()

    monkeypatch.setattr(sending, "current_job", deleted_meanwhile)
    assert delivery.job_id is not None
    assert job_run(delivery.job_id) == "done"
    monkeypatch.undo()
    assert receiver.received == []
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_attempt_at) == ("pending", None)
    run_jobs()
    assert receiver.received == []
    assert not Delivery.objects.exists()
    assert not Endpoint._base_manager.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="a row lock held across threads needs PostgreSQL")
@pytest.mark.parametrize("action", ["test", "update", "rotate", "delete"])
def test_an_endpoints_change_racing_its_deletion_is_not_found(api: APIClient, action: str) -> None:
    """An owner's action on an endpoint read before another's deletion of it committed:
    a test event queued its delivery to the deleted endpoint all the same (a 500 at its
    commit), a change or a new secret saved no row (a 500), a second deletion was
    audited twice. Each is now not found (404) and changes nothing."""
    import threading

    from django.db import connections

    from memoryadmin.webhooks.services import endpoint_delete

    hook = register(api, "http://127.0.0.1:9/hooks", ["document.created"])
    ready, done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def deleter() -> None:
        try:
            with transaction.atomic():
                endpoint_delete(endpoint=Endpoint.objects.get(), actor="t")
                ready.set()
                outcome["waited"] = lock_waiter_seen(looks=300)
        except Exception as exc:
            outcome["deleter"] = repr(exc)
        finally:
            ready.set()
            done.set()
            connections.close_all()

    thread = threading.Thread(target=deleter)
    thread.start()
    assert ready.wait(60)
    url = f"{HOOKS}/{hook['id']}"
    sent = {
        "test": lambda: api.post(f"{url}/test"),
        "update": lambda: api.patch(url, {"description": "Ops"}, format="json"),
        "rotate": lambda: api.post(f"{url}/rotate-secret"),
        "delete": lambda: api.delete(url),
    }[action]()
    assert done.wait(60)
    thread.join(60)
    assert outcome == {"waited": True}
    assert (sent.status_code, sent.json()["error"]["code"]) == (404, "webhook_not_found")
    assert not Endpoint.objects.exists()
    assert not Delivery.objects.exists()
    assert not Job.objects.filter(name=DELIVER).exists()
    actions = AuditEntry.objects.filter(action__startswith="webhook.").order_by("id")
    assert list(actions.values_list("action", flat=True)) == ["webhook.create", "webhook.delete"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not is_postgres(), reason="a row lock held across threads needs PostgreSQL")
def test_changes_of_an_endpoint_at_once_each_keep_the_others(api: APIClient) -> None:
    """An owner pauses an endpoint while another changes its description: the second,
    saving the endpoint as it read it, set it active again (its deliveries went out).
    Now each change is saved over the endpoint as the one before left it."""
    import threading

    from django.db import connections

    from memoryadmin.webhooks.services import endpoint_update

    hook = register(api, "http://127.0.0.1:9/hooks", ["document.created"])
    ready, done = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def pauser() -> None:
        try:
            with transaction.atomic():
                endpoint_update(endpoint=Endpoint.objects.get(), actor="t", active=False)
                ready.set()
                outcome["waited"] = lock_waiter_seen(looks=300)
        except Exception as exc:
            outcome["pauser"] = repr(exc)
        finally:
            ready.set()
            done.set()
            connections.close_all()

    thread = threading.Thread(target=pauser)
    thread.start()
    assert ready.wait(60)
    described = api.patch(f"{HOOKS}/{hook['id']}", {"description": "Ops"}, format="json")
    assert done.wait(60)
    thread.join(60)
    assert outcome == {"waited": True}
    assert described.status_code == 200
    assert (described.json()["description"], described.json()["active"]) == ("Ops", False)
    assert Endpoint.objects.filter(active=False, description="Ops").count() == 1
