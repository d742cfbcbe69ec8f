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
    assert store.session_key is not None
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
    text = store.encode(store._session)  # type: ignore[attr-defined]  # not in django-stubs

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


def _project_page(persona: str) -> str:
    return "/projects/globex/development/" if persona == "oscar" else INVENTORY


@pytest.mark.django_db
def test_a_session_read_before_reads_its_user_in_its_own_query_with_the_same_checks(
    people: People,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    clients = {name: Client() for name in ("olivia", "sam", "vera", "oscar", "ended")}
    for name, client in clients.items():
        assert password_login(client, "olivia" if name == "ended" else name, PASSWORD)
        # The first page reads the session, then the user with the role.
        first = client.get(_project_page(name))
        assert first.status_code == 200
    with CaptureQueriesContext(connection) as captured:
        again = clients["olivia"].get(INVENTORY)
    assert again.status_code == 200
    assert again.wsgi_request.user == people.owner
    assert again.context["page"].role == "owner"
    sessions = [q["sql"] for q in captured if "django_session" in q["sql"]]
    assert len(sessions) == 1, captured.captured_queries
    assert "web_projectrole" in sessions[0], sessions
    assert "auth_user" in sessions[0], sessions

    # What ends a session ends it as before, the user read in the session's query.
    people.support.is_active = False
    people.support.save(update_fields=["is_active"])
    people.viewer.set_password("another-long-password-2")
    people.viewer.save(update_fields=["password"])
    people.outsider.delete()
    StoredSession.objects.filter(session_key=clients["ended"].session.session_key).delete()
    for name in ("sam", "vera", "oscar", "ended"):
        response = clients[name].get(_project_page(name))
        assert response.status_code == 302, name
        assert response["Location"].startswith("/login/"), name
        assert not response.wsgi_request.user.is_authenticated, name
    assert clients["olivia"].get(INVENTORY).status_code == 200


@pytest.mark.django_db
def test_a_session_that_names_another_user_than_remembered_reads_the_user_it_names(
    people: People,
) -> None:
    from memoryadmin.web import sessions

    client = Client()
    assert password_login(client, "vera", PASSWORD)
    assert client.get(INVENTORY).status_code == 200
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    assert sessions._users[key] == people.viewer.pk
    # As if the session had named the owner when this instance last read it.
    sessions._users[key] = people.owner.pk

    response = client.get(INVENTORY)

    assert response.status_code == 200
    assert response.wsgi_request.user == people.viewer
    assert response.context["page"].role == "viewer"
    assert sessions._users[key] == people.viewer.pk
