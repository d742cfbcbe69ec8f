"""Logins lock out after repeated failures, per user name and per address, until
`manage.py axes_reset` or the cool-off lifts the lock."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings
from django.utils import timezone

from memoryadmin.core.addresses import client_address
from tests.helpers import PASSWORD, People, password_login

LIMIT = settings.AXES_FAILURE_LIMIT


def attempt(username: str, password: str, address: str = "127.0.0.1") -> int:
    client = Client(REMOTE_ADDR=address)
    return int(client.post("/login/", {"username": username, "password": password}).status_code)


def test_settings_lock_out_after_five_failures_for_fifteen_minutes() -> None:
    assert LIMIT == 5
    assert timedelta(minutes=15) == settings.AXES_COOLOFF_TIME
    assert settings.AUTHENTICATION_BACKENDS[0] == "axes.backends.AxesStandaloneBackend"


def test_a_user_name_locks_out_from_every_address(people: People) -> None:
    # Each failure from another address: the lock follows the user name.
    statuses = [attempt("olivia", "wrong", f"10.0.0.{n + 1}") for n in range(LIMIT)]
    assert statuses == [422] * (LIMIT - 1) + [429]  # the last failure already locks
    response = Client(REMOTE_ADDR="10.0.1.1").post(
        "/login/", {"username": "olivia", "password": PASSWORD}
    )
    assert response.status_code == 429
    assert b"Too many failed logins" in response.content
    assert "_auth_user_id" not in response.wsgi_request.session
    # Another user from one of those addresses is not locked out by olivia's failures.
    assert password_login(Client(REMOTE_ADDR="10.0.0.9"), "sam", PASSWORD)


def test_an_address_locks_out_for_every_user_name(people: People) -> None:
    statuses = [attempt(f"nobody-{n}", "wrong", "10.0.0.7") for n in range(LIMIT)]
    assert statuses == [422] * (LIMIT - 1) + [429]
    assert attempt("vera", PASSWORD, "10.0.0.7") == 429
    assert password_login(Client(REMOTE_ADDR="10.0.0.8"), "vera", PASSWORD)


def test_axes_reset_lifts_every_lockout(people: People) -> None:
    for _ in range(LIMIT):
        attempt("olivia", "wrong")
    assert attempt("olivia", PASSWORD) == 429
    call_command("axes_reset", stdout=StringIO())
    assert not AccessAttempt.objects.exists()
    assert password_login(Client(), "olivia", PASSWORD)


def test_the_lock_ends_after_the_cool_off(people: People) -> None:
    for _ in range(LIMIT):
        attempt("olivia", "wrong")
    assert attempt("olivia", PASSWORD) == 429
    # The failures are now older than the cool-off.
    long_ago = timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    AccessAttempt.objects.update(attempt_time=long_ago)
    assert password_login(Client(), "olivia", PASSWORD)


def test_a_success_before_the_limit_clears_the_count(people: People) -> None:
    for _ in range(LIMIT - 1):
        attempt("olivia", "wrong", "10.0.0.3")
    assert password_login(Client(REMOTE_ADDR="10.0.0.3"), "olivia", PASSWORD)
    for _ in range(LIMIT - 1):
        attempt("olivia", "wrong", "10.0.0.4")
    assert password_login(Client(REMOTE_ADDR="10.0.0.4"), "olivia", PASSWORD)


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "6.6.6.6", "10.0.0.1"),  # no proxy: the header is the client's word
        (1, "1.2.3.4", "1.2.3.4"),
        (1, "6.6.6.6, 1.2.3.4", "1.2.3.4"),  # the forged left part is ignored
        (2, "6.6.6.6, 1.2.3.4, 10.1.1.1", "1.2.3.4"),
        (2, "1.2.3.4", "10.0.0.1"),  # fewer entries than proxies: the socket's
    ],
)
def test_the_address_behind_proxies(proxies: int, forwarded: str, expected: str) -> None:
    request = RequestFactory().post(
        "/login/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded
    )
    with override_settings(MEMORYADMIN_PROXY_COUNT=proxies):
        assert client_address(request) == expected


@override_settings(MEMORYADMIN_PROXY_COUNT=1)
def test_behind_a_proxy_each_client_address_locks_out_alone(people: People) -> None:
    def attempt_via_proxy(client_ip: str, username: str) -> int:
        client = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR=client_ip)
        response = client.post("/login/", {"username": username, "password": "wrong"})
        return int(response.status_code)

    # Another user name each time: only the address can lock.
    statuses = [attempt_via_proxy("1.1.1.1", f"nobody-{n}") for n in range(LIMIT)]
    assert statuses == [422] * (LIMIT - 1) + [429]
    # Another client behind the same proxy is not locked out.
    client = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="2.2.2.2")
    assert password_login(client, "vera", PASSWORD)


# Sessions: Django's database rows, read with hand-written SQL (memoryadmin/web/sessions.py).


def test_a_login_lasts_until_its_session_expires(people: People) -> None:
    from django.contrib.sessions.models import Session

    client = Client()
    assert password_login(client, "olivia", PASSWORD)
    assert client.get("/projects/acme/development/").status_code == 200
    Session.objects.update(expire_date=timezone.now() - timedelta(seconds=1))
    response = client.get("/projects/acme/development/")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/login/")


def test_a_session_deleted_elsewhere_logs_out_here(people: People) -> None:
    """Another instance's logout deletes the row: nothing is kept in this process."""
    from django.contrib.sessions.models import Session

    client = Client()
    assert password_login(client, "olivia", PASSWORD)
    assert client.get("/projects/acme/development/").status_code == 200
    Session.objects.all().delete()
    assert client.get("/projects/acme/development/").status_code == 302


def test_logout_ends_the_session(people: People) -> None:
    from django.contrib.sessions.models import Session

    client = Client()
    assert password_login(client, "olivia", PASSWORD)
    assert client.post("/logout/").status_code == 302
    assert not Session.objects.exists()
    assert client.get("/projects/acme/development/").status_code == 302


def test_the_session_store_reads_as_djangos(db: None) -> None:
    from django.contrib.sessions.backends.db import SessionStore as DjangoStore

    from memoryadmin.web.sessions import SessionStore

    store = SessionStore()
    store["k"] = {"v": [1, "two"]}
    store.save()
    assert SessionStore(store.session_key).load() == DjangoStore(store.session_key).load()
    assert SessionStore(store.session_key)["k"] == {"v": [1, "two"]}
    missing = SessionStore("x" * 32)
    assert missing.load() == {}
    assert missing.session_key is None


@pytest.mark.parametrize("length", [151, 256, 70_000])
def test_a_user_name_longer_than_any_login_is_the_forms_error(people: People, length: int) -> None:
    """A name past the 150 characters of a login is refused by the form, before a login is
    tried: it was tried and failed, and django-axes, recording the failure, could not keep
    the name (PostgreSQL answered 500 past 255 characters)."""
    response = Client().post("/login/", {"username": "o" * length, "password": "wrong"})
    assert response.status_code == 422
    assert "at most 150 characters" in response.content.decode()
    assert not AccessAttempt.objects.exists()
    assert password_login(Client(), "olivia", PASSWORD)
