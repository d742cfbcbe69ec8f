"""A page's session and signed-in user: sessions name Django's ModelBackend as every
version stores them (so instances of other versions accept them both ways), and the
user is read by its subclass UserBackend with the same rules."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from django.contrib.sessions.models import Session as StoredSession
from django.test import Client

from memoryadmin.web.auth import STORED_BACKEND, USER_BACKEND
from tests.helpers import PASSWORD, People, password_login

INVENTORY = "/projects/acme/development/"


def _stored(client: Client) -> dict[str, Any]:
    """The session as its row holds it, decoded by Django's own store."""
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    row = StoredSession.objects.get(session_key=key)
    return dict(DjangoSessionStore().decode(row.session_data))


@pytest.mark.django_db
def test_a_login_stores_djangos_backend_and_pages_read_the_user_with_ours(
    people: People,
) -> None:
    client = Client()
    assert password_login(client, "olivia", PASSWORD)

    stored = _stored(client)
    assert stored[BACKEND_SESSION_KEY] == STORED_BACKEND
    assert stored[SESSION_KEY] == str(people.owner.pk)
    response = client.get(INVENTORY)
    assert response.status_code == 200
    assert response.wsgi_request.user == people.owner
    assert response.wsgi_request.session[BACKEND_SESSION_KEY] == USER_BACKEND
    # Saving the session again (a message, a new CSRF secret, ...) keeps Django's name.
    assert _stored(client)[BACKEND_SESSION_KEY] == STORED_BACKEND


@pytest.mark.django_db
def test_a_session_written_with_djangos_own_store_is_accepted(people: People) -> None:
    # As an instance of an earlier version wrote it.
    store = DjangoSessionStore()
    store[SESSION_KEY] = str(people.viewer.pk)
    store[BACKEND_SESSION_KEY] = STORED_BACKEND
    store[HASH_SESSION_KEY] = people.viewer.get_session_auth_hash()
    store.create()
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = store.session_key

    response = client.get(INVENTORY)

    assert response.status_code == 200
    assert response.wsgi_request.user == people.viewer


@pytest.mark.django_db
def test_a_deactivated_user_or_a_changed_password_ends_the_session(people: People) -> None:
    deactivated, changed = Client(), Client()
    assert password_login(deactivated, "olivia", PASSWORD)
    assert password_login(changed, "vera", PASSWORD)
    people.owner.is_active = False
    people.owner.save(update_fields=["is_active"])
    people.viewer.set_password("another-long-password-2")
    people.viewer.save(update_fields=["password"])

    for client in (deactivated, changed):
        response = client.get(INVENTORY)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
        assert not response.wsgi_request.user.is_authenticated


@pytest.mark.django_db
def test_a_session_decoded_before_is_a_fresh_copy_and_needs_the_same_secret(
    people: People,
) -> None:
    from django.test import override_settings

    from memoryadmin.web.sessions import SessionStore

    store = SessionStore()
    store[SESSION_KEY] = str(people.viewer.pk)
    store["list"] = [1, 2]
    text = store.encode(store._session)

    first = SessionStore().decode(text)
    first["list"].append(3)  # what a view may do to its session
    again = SessionStore().decode(text)
    assert again == {SESSION_KEY: str(people.viewer.pk), "list": [1, 2]}
    assert again is not first
    # Signed with a secret that is no longer this instance's: not a session.
    with override_settings(SECRET_KEY="another secret key, long enough for the checks"):
        assert SessionStore().decode(text) == {}
    # Tampered with: not a session, however often it comes back.
    forged = text[:-2] + ("AA" if not text.endswith("AA") else "BB")
    assert SessionStore().decode(forged) == {}
    assert SessionStore().decode(forged) == {}
