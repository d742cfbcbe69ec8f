"""The Webhooks page in a real browser: an owner adds an endpoint, copies its signing
secret, sees a delivery after a change, redelivers it, and deletes the endpoint after
confirming."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memoryadmin.memory.models import Resource
from memoryadmin.runner.jobs import job_run
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin_client.webhooks import verify
from tests.helpers import BROWSER_TESTS, Receiver, serve, shoot

pytestmark = BROWSER_TESTS


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


def run_jobs() -> None:
    for job in Job.objects.filter(state="pending"):
        job_run(job.pk)


def test_owner_adds_a_webhook_sees_and_redelivers_a_delivery(
    open_page: Any, used_memory: Resource, receiver: Receiver, make_document: Any
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia", permissions=["clipboard-read", "clipboard-write"])
    page.get_by_role("link", name="Webhooks", exact=True).click()
    expect(page.get_by_role("heading", name="Webhooks of Acme")).to_be_visible()
    page.get_by_label("URL").fill(receiver.url)
    page.get_by_label("document.created").check()
    page.get_by_role("button", name="Add webhook").click()
    secret = page.get_by_label("The signing secret").input_value()
    assert secret.startswith("whsec_")
    page.get_by_role("button", name="Copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == secret

    make_document("plan", text="A plan.")
    run_jobs()
    ((headers, body, _),) = receiver.received
    assert verify(secret, headers, body)["data"]["document"] == "plan"

    page.get_by_role("link", name=receiver.url).click()
    delivery = Delivery.objects.get()
    row = page.locator(f"#delivery-{delivery.pk}")
    expect(row).to_contain_text("delivered")
    shoot(page, "webhook", full_page=True)
    row.get_by_role("button", name="Redeliver").click()
    expect(page.get_by_text(f"Delivery {delivery.pk} (document.created) is queued")).to_be_visible()
    run_jobs()
    assert len(receiver.received) == 2

    page.get_by_role("link", name="Delete webhook").click()
    page.locator("#webhook-dialog").get_by_role("button", name="Delete webhook").click()
    expect(page.get_by_text(f"Deleted the webhook to {receiver.url}")).to_be_visible()
    assert not Endpoint.objects.exists()
    assert page.js_errors == []
