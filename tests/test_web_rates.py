"""Request rates of the pages: per signed-in person and per project's people together,
in windows of their own (an owner whose keys are past the project's API rate can still
revoke them), so that no person or project can take the servers from the others."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client

from memoryadmin.memory.models import ApiKey, AuditEntry, Document, Resource
from tests.helpers import Keys, People, html_of

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
NOTES = f"{BASE}/resources/notes/"
WORKSHOP = f"{NOTES}documents/workshop/"
GLOBEX = "/projects/globex/development/"


def refused(response: Any) -> str:
    """The 429 page's text, after checking it is one with its Retry-After."""
    page = unescape(html_of(response, 429))
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    assert f"retry in {retry_after} seconds." in page
    return page


def test_a_person_past_their_rate_is_refused_and_changes_nothing(
    people: People, web_client_for: Any, workshop: Document, settings: Any
) -> None:
    settings.MEMORYADMIN_PAGE_RATE = "3/minute"
    owner = web_client_for(people.owner)
    assert owner.get(NOTES).status_code == 200
    assert owner.get(f"{WORKSHOP}freeze/").status_code == 200
    assert owner.get(WORKSHOP).status_code == 200
    message = refused(owner.post(f"{WORKSHOP}freeze/"))
    assert "You are asking for pages faster than one person may (3/minute)" in message
    assert "<title>Too many requests" in message
    assert "<h1>Too many requests</h1>" in message
    assert Document.objects.get(pk=workshop.pk).agent_writes is True
    assert not AuditEntry.objects.filter(action="document.freeze").exists()
    # An htmx request gets the message as a fragment, with the same header.
    fragment = owner.get(NOTES, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 429
    assert "Retry-After" in fragment
    assert b"<html" not in fragment.content
    assert b"faster than one person may" in fragment.content
    # Another person of the project is served, and so is the API.
    support = web_client_for(people.support)
    assert support.get(NOTES).status_code == 200
    assert support.post(f"{WORKSHOP}freeze/").status_code == 302
    assert Document.objects.get(pk=workshop.pk).agent_writes is False


def test_a_projects_people_together_are_limited_and_other_projects_are_not(
    people: People, web_client_for: Any, notes: Resource, settings: Any
) -> None:
    settings.MEMORYADMIN_PROJECT_PAGE_RATE = "3/minute"
    owner, support, viewer = (
        web_client_for(getattr(people, persona)) for persona in ("owner", "support", "viewer")
    )
    outsider = web_client_for(people.outsider)
    # Another project's owner asking for this project's pages gets its 404 and does not
    # spend the project's window.
    for _ in range(5):
        assert outsider.get(NOTES).status_code == 404
    assert owner.get(NOTES).status_code == 200
    assert support.get(NOTES).status_code == 200
    assert viewer.get(NOTES).status_code == 200
    message = refused(owner.get(NOTES))
    assert (
        "This project's people together are asking for pages faster than they may (3/minute)"
        in message
    )
    assert "faster than they may" in refused(viewer.get(BASE + "/"))
    assert outsider.get(GLOBEX).status_code == 200


def test_an_owner_revokes_a_key_past_the_projects_api_rate(
    people: People, web_client_for: Any, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_PROJECT_API_RATE = "2/minute"
    api = "/api/managed-agents/projects/acme"
    assert [client_for(keys.owner).get(api).status_code for _ in range(3)] == [200, 200, 429]
    owner: Client = web_client_for(people.owner)
    assert owner.get(f"{BASE}/keys/").status_code == 200
    key = ApiKey.objects.get(prefix=keys.owner[:12])
    assert owner.post(f"{BASE}/keys/{key.pk}/revoke/").status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


def test_a_person_past_their_own_rate_spends_nothing_of_the_projects(
    people: People, web_client_for: Any, notes: Resource, settings: Any
) -> None:
    """The project's people are not all trusted alike: a viewer asking on past their own
    rate must not hold the owner off the project's pages."""
    settings.MEMORYADMIN_PAGE_RATE = "3/minute"
    settings.MEMORYADMIN_PROJECT_PAGE_RATE = "5/minute"
    viewer, owner = web_client_for(people.viewer), web_client_for(people.owner)
    assert [viewer.get(NOTES).status_code for _ in range(8)] == [200] * 3 + [429] * 5
    # The project's window holds the viewer's three: the owner has two more.
    assert owner.get(NOTES).status_code == 200
    assert owner.get(f"{BASE}/keys/").status_code == 200
    assert "faster than they may (5/minute)" in refused(owner.get(NOTES))
