"""People, roles, invitations and API keys of one project against concurrent changes, with
real threads on PostgreSQL: a project keeps an owner, an invitation link sets one password,
a key is rotated into one successor and a revoked key into none."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client

from memoryadmin.core.errors import DomainError
from memoryadmin.memory.models import ApiKey, AuditEntry, Project
from memoryadmin.memory.services.keys import api_key_create, api_key_revoke, api_key_rotate
from memoryadmin.web.models import ProjectRole, Role
from memoryadmin.web.services.roles import role_grant, role_revoke, user_invite
from tests.helpers import PASSWORD, lock_waiter_seen, password_login, run_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def outcome(work: Callable[[], Any]) -> str:
    try:
        work()
    except DomainError as exc:
        return exc.code
    return "ok"


def roles() -> dict[str, str]:
    rows = ProjectRole.objects.filter(project_id="acme").values_list("user__username", "role")
    return dict(rows)


def owners(project: Project, *names: str) -> None:
    model = get_user_model()
    for name in names:
        model.objects.create_user(username=name, password=PASSWORD)
        role_grant(username=name, project_id=project.id, role=Role.OWNER, actor="test")


def demote(name: str) -> Callable[[], Any]:
    return lambda: role_grant(username=name, project_id="acme", role=Role.VIEWER, actor="t")


def remove(name: str) -> Callable[[], Any]:
    return lambda: role_revoke(username=name, project_id="acme", actor="t")


def while_held(
    first: Callable[[], Any], second: Callable[[], Any], then: Callable[[], Any] | None = None
) -> tuple[str, ...]:
    """`first` in a transaction that stays open until `second`, in a thread, waits on a
    lock; then `then` (if given) in that transaction, and both end. Each one's outcome."""
    results: dict[str, str] = {}

    def run_second() -> None:
        try:
            results["second"] = outcome(second)
        finally:
            connection.close()

    with transaction.atomic():
        results["first"] = outcome(first)
        thread = threading.Thread(target=run_second)
        thread.start()
        assert lock_waiter_seen(thread), "the second change did not wait for the first"
        if then is not None:
            results["then"] = outcome(then)
    thread.join(timeout=60)
    return tuple(results[step] for step in ("first", "second", "then") if step in results)


# A project keeps an owner.


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (demote("ann"), demote("bob")),
        (remove("ann"), remove("bob")),
        (remove("ann"), demote("bob")),  # an owner leaving while the other is demoted
        (demote("ann"), remove("bob")),
    ],
)
def test_two_owners_ending_each_other_leave_one(
    project: Project, first: Callable[[], Any], second: Callable[[], Any]
) -> None:
    owners(project, "ann", "bob")
    assert while_held(first, second) == ("ok", "conflict")
    assert roles().get("bob") == Role.OWNER
    assert roles().get("ann") in (None, Role.VIEWER)


@pytest.mark.parametrize("change", ["demote", "remove"])
def test_owners_ending_each_other_at_once_keep_one(project: Project, change: str) -> None:
    names = ["ann", "bob", "cid"]
    owners(project, *names)
    work = demote if change == "demote" else remove
    for _ in range(3):
        results = run_threads(3, lambda i: outcome(work(names[i])))
        assert Counter(results) == {"ok": 2, "conflict": 1}
        left = [name for name, role in roles().items() if role == Role.OWNER]
        assert len(left) == 1
        for name in names:
            role_grant(username=name, project_id="acme", role=Role.OWNER, actor="t")


def test_a_role_given_to_someone_being_removed_is_one_or_the_other(project: Project) -> None:
    owners(project, "ann")
    get_user_model().objects.create_user(username="sue", password=PASSWORD)
    role_grant(username="sue", project_id="acme", role=Role.SUPPORT, actor="t")
    grant = lambda: role_grant(username="sue", project_id="acme", role=Role.VIEWER, actor="t")  # noqa: E731
    assert while_held(remove("sue"), grant) == ("ok", "ok")
    # Removed, then given a role again: the second change is the one that stays.
    assert roles() == {"ann": Role.OWNER, "sue": Role.VIEWER}
    assert while_held(grant, remove("sue")) == ("ok", "ok")
    assert roles() == {"ann": Role.OWNER}


# Invitations.


def invited(project: Project) -> str:
    owners(project, "ann")
    invitation = user_invite(
        username="nina", project_id="acme", role=Role.VIEWER, method="link", actor="t"
    )
    return f"/set-password/{invitation.uid}/{invitation.token}/"


def opened(link: str) -> tuple[Client, str]:
    """A browser that opened the link: its form's address (the token kept in its session)."""
    guest = Client()
    form = guest.get(link, follow=True)
    assert "Choose your password" in form.content.decode()
    return guest, form.redirect_chain[-1][0]


def waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_an_invitation_link_used_twice_at_once_sets_one_password(project: Project) -> None:
    link = invited(project)
    browsers = [opened(link), opened(link)]
    passwords = [PASSWORD, PASSWORD + "-other"]
    answers: list[Any] = [None, None]

    def submit(i: int) -> None:
        guest, form = browsers[i]
        try:
            answers[i] = guest.post(
                form, {"new_password1": passwords[i], "new_password2": passwords[i]}
            )
        finally:
            connection.close()

    nina = get_user_model().objects.get(username="nina")
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(2)]
    # Both submit while the login's row is held, so that both have read it before
    # either writes.
    with transaction.atomic():
        get_user_model().objects.select_for_update().get(pk=nina.pk)
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while waiters() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waiters() == 2
    for thread in threads:
        thread.join(timeout=60)
    set_by = [i for i, answer in enumerate(answers) if answer.status_code == 302]
    assert len(set_by) == 1, [answer.status_code for answer in answers]
    refused = answers[1 - set_by[0]]
    assert "This link no longer works" in refused.content.decode()
    assert password_login(Client(), "nina", passwords[set_by[0]])
    assert not password_login(Client(), "nina", passwords[1 - set_by[0]])
    # One password set, one entry.
    entries = AuditEntry.objects.filter(action="user.password_set")
    assert [(e.project_id, e.actor) for e in entries] == [("acme", "user:nina")]


def test_an_invitation_accepted_while_its_role_is_revoked(project: Project) -> None:
    """Either order leaves a login without a role: it sees no project."""
    link = invited(project)
    guest, form = opened(link)
    accept = lambda: guest.post(  # noqa: E731
        form, {"new_password1": PASSWORD, "new_password2": PASSWORD}
    )
    results = run_threads(2, lambda i: accept().status_code if i else outcome(remove("nina")))
    assert results == ["ok", 302]
    assert "nina" not in roles()
    member = Client()
    assert password_login(member, "nina", PASSWORD)
    assert member.get("/projects/acme/development/").status_code == 404


# API keys.


def successors(key: ApiKey) -> list[ApiKey]:
    return list(ApiKey.objects.filter(project_id=key.project_id, name=key.name).exclude(pk=key.pk))


def test_a_key_rotated_twice_at_once_has_one_successor(project: Project) -> None:
    key = api_key_create(project_id="acme", name="ci")[0]
    rotate = lambda: api_key_rotate(key=key, actor="t", grace_seconds=600)  # noqa: E731
    assert sorted(run_threads(2, lambda i: outcome(rotate))) == ["conflict", "ok"]
    assert len(successors(key)) == 1
    assert AuditEntry.objects.filter(action="apikey.rotate").count() == 1


def test_a_key_rotated_while_another_rotation_holds_it_has_one_successor(
    project: Project,
) -> None:
    key = api_key_create(project_id="acme", name="ci")[0]
    rotate = lambda: api_key_rotate(key=key, actor="t", grace_seconds=0)  # noqa: E731
    hold = lambda: ApiKey.objects.select_for_update().get(pk=key.pk)  # noqa: E731
    # A rotation reads the clock and waits on the key's row; another, asked later, takes
    # it first and ends the key now. The waiting one finds the key ended.
    assert while_held(hold, rotate, then=rotate) == ("ok", "conflict", "ok")
    assert len(successors(key)) == 1


def test_a_key_revoked_while_a_rotation_waits_gets_no_successor(project: Project) -> None:
    key = api_key_create(project_id="acme", name="ci")[0]
    rotate = lambda: api_key_rotate(key=key, actor="t", grace_seconds=60)  # noqa: E731
    revoke = lambda: api_key_revoke(key=key, actor="t")  # noqa: E731

    results: dict[str, str] = {}

    def run_rotate() -> None:
        try:
            results["rotate"] = outcome(rotate)
        finally:
            connection.close()

    # Another change holds the key's row; the rotation reads the clock and waits; the key
    # is revoked after that (a later time) and the hold ends.
    with transaction.atomic():
        ApiKey.objects.select_for_update().get(pk=key.pk)
        thread = threading.Thread(target=run_rotate)
        thread.start()
        assert lock_waiter_seen(thread)
        revoke()
    thread.join(timeout=60)
    assert results["rotate"] == "conflict"
    assert successors(key) == []
    assert not AuditEntry.objects.filter(action="apikey.rotate").exists()


def test_a_key_revoked_while_its_rotation_waits_is_revoked_once(project: Project) -> None:
    """A revocation waiting on a rotation that ends the key now changes nothing more."""
    key = api_key_create(project_id="acme", name="ci")[0]
    results: dict[str, str] = {}

    def run_revoke() -> None:
        try:
            results["revoke"] = outcome(lambda: api_key_revoke(key=key, actor="t"))
        finally:
            connection.close()

    with transaction.atomic():
        ApiKey.objects.select_for_update().get(pk=key.pk)
        thread = threading.Thread(target=run_revoke)
        thread.start()
        assert lock_waiter_seen(thread)
        api_key_rotate(key=key, actor="t", grace_seconds=0)
        rotated_at = ApiKey.objects.get(pk=key.pk).revoked_at
    thread.join(timeout=60)
    assert results["revoke"] == "ok"
    assert ApiKey.objects.get(pk=key.pk).revoked_at == rotated_at
    assert not AuditEntry.objects.filter(action="apikey.revoke").exists()


def test_concurrent_creates_stop_at_the_cap(project: Project, settings: Any) -> None:
    from memoryadmin.memory.services import keys as keys_service

    ApiKey.objects.bulk_create(
        ApiKey(project_id="acme", name="same", prefix=f"mak_k{i:07d}", hashed=f"h{i}")
        for i in range(keys_service.KEYS_MAX - 2)
    )
    create = lambda: api_key_create(project_id="acme", name="same")  # noqa: E731
    results = run_threads(4, lambda i: outcome(create))
    assert Counter(results) == {"ok": 2, "invalid_request": 2}
    assert ApiKey.objects.filter(project_id="acme").count() == keys_service.KEYS_MAX


def test_one_name_invited_twice_at_once_is_one_login(project: Project) -> None:
    owners(project, "ann")

    def invite(i: int) -> str:
        method = ("link", "password")[i]
        return outcome(
            lambda: user_invite(
                username="nina", project_id="acme", role=Role.VIEWER, method=method, actor="t"
            )
        )

    for _ in range(3):
        assert sorted(run_threads(2, invite)) == ["conflict", "ok"]
        assert get_user_model().objects.filter(username="nina").count() == 1
        assert roles()["nina"] == Role.VIEWER
        assert AuditEntry.objects.filter(action="user.invite").count() == 1
        get_user_model().objects.filter(username="nina").delete()
        AuditEntry.objects.filter(action="user.invite").delete()
