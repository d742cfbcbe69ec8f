"""The Webhooks page: owners add endpoints (the secret shown once), see each one's
recent deliveries, redeliver one, pause, rotate the secret and delete."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from memoryadmin.memory.models import AuditEntry, Project
from memoryadmin.runner.jobs import jobs_run_due
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin.webhooks.services import endpoint_create
from memoryadmin_client.webhooks import verify
from tests.helpers import Receiver, html_of, serve

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
HOOKS = f"{BASE}/webhooks/"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


def secret_in(html: str) -> str:
    match = re.search(r'value="(whsec_[^"]+)"', html)
    assert match is not None, "no secret shown"
    return match.group(1)


def add(owner: Any, url: str, events: list[str]) -> tuple[Endpoint, str]:
    response = owner.post(
        f"{HOOKS}new/",
        {"url": url, "events": events, "description": "Ops", "active": "on"},
        follow=True,
    )
    # POST/redirect/GET: the list after the redirect shows the secret, once.
    assert response.redirect_chain == [(HOOKS, 302)]
    html = html_of(response)
    assert "no-store" in response["Cache-Control"]
    endpoint = Endpoint.objects.get(url=url)
    assert secret_in(html) not in owner.get(HOOKS).content.decode()
    return endpoint, secret_in(html)


def test_owner_adds_a_webhook_and_sees_its_deliveries(
    owner: Any, receiver: Receiver, make_document: Any
) -> None:
    listed = html_of(owner.get(HOOKS))
    assert f'href="{HOOKS}" aria-current="page">Webhooks</a>' in listed
    assert "No webhooks yet." in listed
    endpoint, secret = add(owner, receiver.url, ["document.created", "document.deleted"])
    assert endpoint.secret == secret
    assert endpoint.event_list == ["document.created", "document.deleted"]
    assert endpoint.created_by.startswith("user:")
    # The secret is shown in the response that made it, and never again.
    again = html_of(owner.get(HOOKS))
    assert secret not in again
    assert receiver.url.replace("&", "&amp;") in again

    make_document("plan", text="one")
    jobs_run_due()
    ((headers, body, _),) = receiver.received
    assert verify(secret, headers, body)["type"] == "document.created"
    detail = html_of(owner.get(f"{HOOKS}{endpoint.pk}/"))
    assert secret not in detail
    delivery = Delivery.objects.get()
    assert f'id="delivery-{delivery.pk}"' in detail
    assert delivery.event_id in detail
    assert "delivered" in detail

    redeliver = owner.post(f"{HOOKS}{endpoint.pk}/deliveries/{delivery.pk}/redeliver/")
    assert redeliver.status_code == 302
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("pending", 0)
    jobs_run_due()
    assert len(receiver.received) == 2
    assert verify(secret, *receiver.received[1][:2])["id"] == delivery.event_id


def test_a_refused_url_is_shown_and_nothing_is_made(owner: Any, settings: Any) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    response = owner.post(
        f"{HOOKS}new/", {"url": "https://10.0.0.7/hooks", "events": ["document.created"]}
    )
    html = html_of(response, 422)
    assert "10.0.0.7" in html
    assert "not allowed" in html or "private" in html
    none = owner.post(f"{HOOKS}new/", {"url": "https://example.com/hooks"})
    assert "This field is required" in html_of(none, 422)
    assert not Endpoint.objects.exists()


def test_a_url_past_its_length_once_its_address_is_spelled_out_is_refused(
    owner: Any, people: Any
) -> None:
    """The URL kept is the checked one, its address in its usual spelling (1572395042 is
    93.184.216.34): its length is the kept URL's. A URL of 2048 characters became 2051
    (PostgreSQL answered 500; SQLite kept it past the limit)."""
    url = "https://1572395042/" + "a" * (2048 - len("https://1572395042/"))
    response = owner.post(f"{HOOKS}new/", {"url": url, "events": ["document.created"]})
    assert "Url is over 2048 characters." in html_of(response, 422)
    endpoint, _ = endpoint_create(
        project=Project.objects.get(id="acme"),
        url="https://93.184.216.34/x",
        events=["document.created"],
        actor="t",
    )
    audited = AuditEntry.objects.count()
    changed = owner.post(
        f"{HOOKS}{endpoint.pk}/edit/", {"url": url, "events": ["document.created"], "active": "on"}
    )
    assert "Url is over 2048 characters." in html_of(changed, 422)
    assert list(Endpoint.objects.values_list("url", flat=True)) == ["https://93.184.216.34/x"]
    assert AuditEntry.objects.count() == audited


def test_owner_pauses_rotates_and_deletes(owner: Any, receiver: Receiver) -> None:
    endpoint, secret = add(owner, receiver.url, ["document.created"])
    paused = owner.post(
        f"{HOOKS}{endpoint.pk}/edit/",
        {"url": receiver.url, "events": ["session.created", "session.ended"], "description": ""},
    )
    assert paused.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.active, endpoint.event_list) == (False, ["session.created", "session.ended"])
    assert "paused" in html_of(owner.get(f"{HOOKS}{endpoint.pk}/"))

    rotated = html_of(owner.post(f"{HOOKS}{endpoint.pk}/rotate/", follow=True))
    new_secret = secret_in(rotated)
    assert new_secret != secret
    endpoint.refresh_from_db()
    assert endpoint.secret == new_secret

    dialog = owner.get(f"{HOOKS}{endpoint.pk}/delete/", HTTP_HX_REQUEST="true")
    assert "Delete the webhook to" in html_of(dialog)
    deleted = owner.post(f"{HOOKS}{endpoint.pk}/delete/")
    assert deleted.status_code == 302
    assert not Endpoint.objects.exists()
    actions = AuditEntry.objects.filter(action__startswith="webhook.").order_by("id")
    assert [entry.action for entry in actions] == [
        "webhook.create",
        "webhook.update",
        "webhook.rotate",
        "webhook.delete",
    ]
    assert all(entry.actor.startswith("user:") for entry in actions)


@pytest.mark.parametrize("persona", ["support", "viewer", "outsider"])
def test_only_owners_manage_webhooks(
    web: Any, owner: Any, receiver: Receiver, persona: str
) -> None:
    endpoint, _ = add(owner, receiver.url, ["document.created"])
    user = web(persona)
    assert ">Webhooks</a>" not in user.get(f"{BASE}/audit/").content.decode()
    for response in [
        user.get(HOOKS),
        user.get(f"{HOOKS}{endpoint.pk}/"),
        user.post(f"{HOOKS}new/", {"url": receiver.url, "events": ["document.created"]}),
        user.post(f"{HOOKS}{endpoint.pk}/rotate/"),
        user.post(f"{HOOKS}{endpoint.pk}/delete/"),
    ]:
        assert response.status_code in {403, 404}, response.status_code
    assert Endpoint.objects.count() == 1
    assert Endpoint.objects.get().secret == endpoint.secret
