"""Webhooks as owners debug them: "Send test event", each delivery's request body and
the first KiB of the receiver's reply (kept on the delivery when it is sent), and why
later deliveries wait behind a failing one. Against a real receiving HTTP server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Resource
from memoryadmin.runner.jobs import jobs_run_due
from memoryadmin.webhooks.models import Delivery
from memoryadmin_client.webhooks import verify
from tests.helpers import Receiver, html_of, serve

pytestmark = pytest.mark.django_db

HOOKS = "/api/managed-agents/projects/acme/webhooks"
PAGE = "/projects/acme/development/webhooks"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


@pytest.fixture
def hook(api: APIClient, receiver: Receiver) -> dict[str, Any]:
    response = api.post(HOOKS, {"url": receiver.url, "events": ["document.created"]}, format="json")
    assert response.status_code == 201
    body: dict[str, Any] = response.json()
    return body


def test_a_test_event_is_sent_signed_and_its_reply_kept_to_a_kib(
    api: APIClient, receiver: Receiver, hook: dict[str, Any]
) -> None:
    receiver.reply_body = b"accepted " + "é".encode() * 1000
    response = api.post(f"{HOOKS}/{hook['id']}/test")
    assert response.status_code == 202
    queued = response.json()
    assert queued["event"] == "webhook.test"
    assert queued["state"] == "pending"
    jobs_run_due()
    headers, body, _status = receiver.received[0]
    event = verify(hook["secret"], headers, body)
    assert event["type"] == "webhook.test"
    assert event["environment"] is None  # an endpoint belongs to no environment
    assert (event["project"], event["id"]) == ("acme", queued["eventId"])
    assert event["data"] == {"actor": f"key:{api_key_prefix(api)}"}
    delivery = Delivery.objects.get()
    assert delivery.state == "delivered"
    assert delivery.response_code == 200
    # The first KiB, without the character the cut would split.
    assert delivery.response_excerpt == (b"accepted " + "é".encode() * 507).decode()
    listed = api.get(f"{HOOKS}/{hook['id']}/deliveries").json()["deliveries"][0]
    assert listed["body"] == body.decode()
    assert listed["responseExcerpt"] == delivery.response_excerpt
    assert AuditEntry.objects.filter(action="webhook.test").count() == 1


def api_key_prefix(api: APIClient) -> str:
    from memoryadmin.memory.models import ApiKey

    return ApiKey.objects.filter(project_id="acme", read_only=False).first().prefix  # type: ignore[union-attr]


def test_a_failing_reply_is_kept_too_and_bytes_that_are_not_text_are_replaced(
    api: APIClient, receiver: Receiver, hook: dict[str, Any], settings: Any
) -> None:
    settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = 60
    receiver.statuses = [500]
    receiver.reply_body = b'{"error": "db down \xff"}'
    api.post(f"{HOOKS}/{hook['id']}/test")
    jobs_run_due()
    delivery = Delivery.objects.get()
    assert (delivery.state, delivery.response_code) == ("pending", 500)
    assert delivery.response_excerpt == '{"error": "db down \ufffd"}'


def test_test_events_waiting_at_once_are_bounded(
    api: APIClient, hook: dict[str, Any], settings: Any
) -> None:
    api.patch(f"{HOOKS}/{hook['id']}", {"active": False}, format="json")
    for _ in range(5):
        assert api.post(f"{HOOKS}/{hook['id']}/test").status_code == 202
    refused = api.post(f"{HOOKS}/{hook['id']}/test")
    assert refused.status_code == 400
    assert "5 test events already wait" in refused.json()["error"]["message"]
    assert Delivery.objects.count() == 5


def test_the_page_sends_a_test_and_says_why_later_deliveries_wait(
    owner: Client, receiver: Receiver, hook: dict[str, Any], make_document: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = 600
    receiver.statuses = [503]
    receiver.reply_body = b"maintenance until 14:00"
    make_document("first")
    jobs_run_due()
    url = f"{PAGE}/{hook['id']}/"
    done = owner.post(f"{url}test/", follow=True)
    html = html_of(done)
    test = Delivery.objects.get(event="webhook.test")
    assert f"Test event {test.event_id} queued" in html
    head = Delivery.objects.get(event="document.created")
    assert "1 later delivery waits behind" in html
    assert f'href="#delivery-{head.pk}">delivery {head.pk}</a>' in html
    assert "failed 1 of" in html
    assert "HTTP 503" in html
    assert "maintenance until 14:00" in html
    # The request body, exactly as sent.
    assert json.loads(head.body)["data"]["document"] == "first"
    assert "&quot;type&quot;:&quot;document.created&quot;" in html
    jobs_run_due()
    assert len(receiver.received) == 1  # the test waits behind the failing delivery


def test_a_paused_endpoint_says_so(owner: Client, api: APIClient, hook: dict[str, Any]) -> None:
    api.patch(f"{HOOKS}/{hook['id']}", {"active": False}, format="json")
    api.post(f"{HOOKS}/{hook['id']}/test")
    html = html_of(owner.get(f"{PAGE}/{hook['id']}/"))
    assert "This webhook is paused: 1 delivery waits" in html


def test_support_and_viewers_may_not_send_tests(
    web: Any, hook: dict[str, Any], notes: Resource
) -> None:
    for persona in ("support", "viewer"):
        assert web(persona).post(f"{PAGE}/{hook['id']}/test/").status_code == 403
    assert not Delivery.objects.exists()
