"""Management on the Memory page: people and roles, invitations, deployments (promote an
earlier one), provider secrets (values never shown) and the overview; each through the
services, audited, and refused to roles that may not."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.views import INTERNAL_RESET_SESSION_TOKEN
from django.test import Client
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from memoryadmin.memory.models import ActiveDeployment, AuditEntry, Deployment, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.providers.models import Secret
from memoryadmin.web.models import ProjectRole, Role
from memoryadmin.web.services.roles import (
    password_set_by_link,
    role_grant,
    role_revoke,
    user_invite,
)
from tests.helpers import MANIFEST_MEMORY, PASSWORD, People, html_of, password_login, streamed

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
PEOPLE = f"{BASE}/people/"
DEPLOYMENTS = f"{BASE}/deployments/"


def role_of(username: str) -> str | None:
    row = ProjectRole.objects.filter(user__username=username, project_id="acme").first()
    return row.role if row else None


# People and roles


def test_people_page_lists_roles_owners_first(owner: Client, people: People) -> None:
    html = html_of(owner.get(PEOPLE))
    names = [
        html.index(f'<th scope="row" class="chosen">{name}') for name in ("olivia", "sam", "vera")
    ]
    assert names == sorted(names)
    assert "oscar" not in html  # a role on another project only


def test_a_rows_refused_role_change_is_told_beside_that_row(owner: Client, people: People) -> None:
    """Demoting the only owner from their row: a 409 whose message stands in that row,
    on its role control, and not in the "Give someone a role" box below."""
    posted = {"grant-username": "olivia", "grant-role": "viewer", "row": "yes"}
    html = html_of(owner.post(f"{PEOPLE}grant/", posted), 409)
    start = html.index('<th scope="row" class="chosen">olivia')
    row = html[start : html.index("</tr>", start)]
    assert 'role="alert"><p>olivia is the only owner of acme;' in row
    assert 'aria-invalid="true" aria-describedby="role-' in row
    box = html[html.index('id="grant-title"') : html.index('id="invite-title"')]
    assert "the only owner" not in box
    assert 'name="grant-username" value="olivia"' not in box
    assert html.count("the only owner of acme") == 1
    assert role_of("olivia") == "owner"


def test_owner_changes_a_role_and_it_is_audited(owner: Client, people: People) -> None:
    response = owner.post(f"{PEOPLE}grant/", {"grant-username": "vera", "grant-role": "support"})
    assert response.status_code == 302
    assert role_of("vera") == "support"
    entry = AuditEntry.objects.filter(action="role.grant").latest("id")
    assert (entry.actor, entry.detail) == ("user:olivia", {"user": "vera", "role": "support"})


def test_granting_an_unknown_user_says_so_and_changes_nothing(
    owner: Client, people: People
) -> None:
    html = html_of(
        owner.post(f"{PEOPLE}grant/", {"grant-username": "ghost", "grant-role": "viewer"}), 422
    )
    assert "No user &#x27;ghost&#x27;." in html
    assert not ProjectRole.objects.filter(user__username="ghost").exists()


def test_owner_removes_a_role_after_confirming(owner: Client, people: People) -> None:
    confirm = html_of(owner.get(f"{PEOPLE}sam/revoke/"))
    assert "Remove sam from acme?" in confirm
    assert owner.post(f"{PEOPLE}sam/revoke/").status_code == 302
    assert role_of("sam") is None
    assert AuditEntry.objects.filter(action="role.revoke", detail__user="sam").exists()


@pytest.mark.parametrize("method", ["get", "post"])
def test_removing_someone_without_a_role_here_is_404_whoever_they_are(
    web: Callable[[str], Client], people: People, method: str
) -> None:
    """Globex's owner names acme's viewer, then a login that does not exist: the same
    404, so a project's page tells nothing of other projects' people; nothing changes."""
    outsider = web("outsider")
    roles = list(ProjectRole.objects.order_by("id").values_list("user_id", "project_id", "role"))
    audited = AuditEntry.objects.count()
    answers = []
    for name in ("vera", "ghost"):
        response = getattr(outsider, method)(f"/projects/globex/development/people/{name}/revoke/")
        html = html_of(response, 404)
        assert f"No one named &#x27;{name}&#x27; has a role on globex." in html
        answers.append(html.replace(name, "NAME"))
    assert "Remove" not in answers[0]
    roles_after = ProjectRole.objects.order_by("id").values_list("user_id", "project_id", "role")
    assert list(roles_after) == roles
    assert AuditEntry.objects.count() == audited


def test_the_last_owner_cannot_leave_or_be_demoted(owner: Client, people: People) -> None:
    response = owner.post(f"{PEOPLE}grant/", {"grant-username": "olivia", "grant-role": "viewer"})
    assert "the only owner of acme" in html_of(response, 409)
    page = owner.post(f"{PEOPLE}olivia/revoke/", follow=True).content.decode()
    assert "the only owner of acme" in page
    assert role_of("olivia") == "owner"
    # With a second owner, the first may step down.
    owner.post(f"{PEOPLE}grant/", {"grant-username": "sam", "grant-role": "owner"})
    owner.post(f"{PEOPLE}grant/", {"grant-username": "olivia", "grant-role": "viewer"})
    assert (role_of("olivia"), role_of("sam")) == ("viewer", "owner")


def test_a_demoted_owners_open_page_loses_owner_powers_on_its_next_request(
    owner: Client, people: People, web_client_for: Callable[[Any], Client]
) -> None:
    """Roles are read on every request: a page open in a demoted owner's browser manages
    nothing any more (no role cached in the session)."""
    assert owner.get(PEOPLE).status_code == 200
    owner.post(f"{PEOPLE}grant/", {"grant-username": "sam", "grant-role": "owner"})
    sam = web_client_for(people.support)
    sam.post(f"{PEOPLE}grant/", {"grant-username": "olivia", "grant-role": "viewer"})
    assert role_of("olivia") == "viewer"
    roles = list(ProjectRole.objects.order_by("id").values_list("user_id", "role"))
    audited = AuditEntry.objects.count()
    assert "may not manage people" in html_of(owner.get(PEOPLE), 403)
    html_of(owner.post(f"{PEOPLE}grant/", {"grant-username": "olivia", "grant-role": "owner"}), 403)
    html_of(owner.post(f"{PEOPLE}sam/revoke/"), 403)
    invite = {"invite-username": "nina", "invite-role": "owner", "invite-method": "password"}
    html_of(owner.post(f"{PEOPLE}invite/", invite), 403)
    html_of(owner.post(f"{BASE}/keys/new/", {"name": "mine"}), 403)
    assert list(ProjectRole.objects.order_by("id").values_list("user_id", "role")) == roles
    assert not get_user_model().objects.filter(username="nina").exists()
    assert AuditEntry.objects.count() == audited
    assert owner.get(f"{BASE}/").status_code == 200  # a viewer reads


def test_invite_with_a_one_time_password_shows_it_once(
    owner: Client, people: People, web_client_for: Callable[[Any], Client]
) -> None:
    response = owner.post(
        f"{PEOPLE}invite/",
        {"invite-username": "nina", "invite-role": "support", "invite-method": "password"},
        follow=True,
    )
    # POST/redirect/GET: the page after the redirect shows the password, once.
    assert response.redirect_chain == [(PEOPLE, 302)]
    html = html_of(response)
    assert "no-store" in response["Cache-Control"]
    password = html.split('id="invitation-secret"')[1].split('value="')[1].split('"')[0]
    assert len(password) >= 16
    assert role_of("nina") == "support"
    assert password_login(Client(), "nina", password)
    assert password not in owner.get(PEOPLE).content.decode()
    invite = AuditEntry.objects.get(action="user.invite")
    assert invite.detail == {"user": "nina", "role": "support", "method": "password"}


def test_invite_with_a_link_lets_them_choose_a_password_once(owner: Client, people: People) -> None:
    html = html_of(
        owner.post(
            f"{PEOPLE}invite/",
            {"invite-username": "nina", "invite-role": "viewer", "invite-method": "link"},
            follow=True,
        )
    )
    link = html.split('id="invitation-secret"')[1].split('value="')[1].split('"')[0]
    path = link.removeprefix("http://testserver")
    assert path.startswith("/set-password/")
    user = get_user_model().objects.get(username="nina")
    assert not user.has_usable_password()
    role_grant(username="nina", project_id="globex", role=Role.VIEWER, actor="t")
    guest = Client()
    form = guest.get(path, follow=True)
    assert "Choose your password" in form.content.decode()
    # Two passwords that differ: the form again, 422 as every page form, nothing set.
    refused = guest.post(
        form.redirect_chain[-1][0], {"new_password1": PASSWORD, "new_password2": PASSWORD + "x"}
    )
    assert refused.status_code == 422
    assert "The two password fields didn" in refused.content.decode()
    user.refresh_from_db()
    assert not user.has_usable_password()
    done = guest.post(
        form.redirect_chain[-1][0],
        {"new_password1": PASSWORD, "new_password2": PASSWORD},
        follow=True,
    )
    assert "Your password is set" in done.content.decode()
    assert password_login(Client(), "nina", PASSWORD)
    # The person's change, in the log of each project they have a role on, and nothing
    # of the password in it.
    entries = AuditEntry.objects.filter(action="user.password_set").order_by("project_id")
    assert [(e.project_id, e.environment, e.actor, e.detail) for e in entries] == [
        ("acme", "", "user:nina", {"user": "nina"}),
        ("globex", "", "user:nina", {"user": "nina"}),
    ]
    user.refresh_from_db()
    for entry in AuditEntry.objects.all():
        assert PASSWORD not in str(entry.detail)
        assert user.password not in str(entry.detail)
    # Used once: the link no longer works, and writes nothing more.
    assert "This link no longer works" in Client().get(path, follow=True).content.decode()
    assert AuditEntry.objects.filter(action="user.password_set").count() == 2


def test_an_expired_link_sets_nothing(
    owner: Client, people: People, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.contrib.auth.tokens import default_token_generator

    html = html_of(
        owner.post(
            f"{PEOPLE}invite/",
            {"invite-username": "nina", "invite-role": "viewer", "invite-method": "link"},
            follow=True,
        )
    )
    path = html.split('id="invitation-secret"')[1].split('value="')[1].split('"')[0]
    path = path.removeprefix("http://testserver")
    guest = Client()
    form = guest.get(path, follow=True).redirect_chain[-1][0]
    later = default_token_generator._now() + timedelta(days=3, seconds=1)
    monkeypatch.setattr(default_token_generator, "_now", lambda: later)
    # The form opened before it expired, and the link itself, no longer work.
    refused = guest.post(form, {"new_password1": PASSWORD, "new_password2": PASSWORD})
    assert refused.status_code == 404
    assert "This link no longer works" in refused.content.decode()
    assert "This link no longer works" in Client().get(path, follow=True).content.decode()
    assert not get_user_model().objects.get(username="nina").has_usable_password()


def test_a_password_set_by_someone_with_no_role_left_is_audited_without_a_project(
    people: People,
) -> None:
    invitation = user_invite(
        username="nina", project_id="acme", role=Role.VIEWER, method="link", actor="t"
    )
    role_revoke(username="nina", project_id="acme", actor="t")
    nina = get_user_model().objects.get(username="nina")
    assert password_set_by_link(user_pk=nina.pk, token=invitation.token, password=PASSWORD)
    entries = AuditEntry.objects.filter(action="user.password_set")
    assert [(e.project_id, e.environment, e.actor, e.detail) for e in entries] == [
        (None, "", "user:nina", {"user": "nina"})
    ]
    assert password_login(Client(), "nina", PASSWORD)


DEAD_LINK = (
    '<section class="narrow">\n\n'
    "  <h1>This link no longer works</h1>\n"
    "  <p>A set-password link works once, for 3 days: this one was used already, has expired,"
    " or is not one.</p>\n"
    '  <p>If you chose your password with it, <a href="/login/">log in</a>. Otherwise ask an'
    " owner of your project for a new invitation.</p>\n\n"
    "</section>"
)


def logins() -> list[tuple[Any, ...]]:
    return list(get_user_model().objects.order_by("pk").values_list("pk", "username", "password"))


@pytest.mark.parametrize("dead", ["used", "expired", "login-gone", "not-a-token", "no-login"])
def test_a_dead_set_password_link_is_404_with_the_way_forward_and_changes_nothing(
    people: People, monkeypatch: pytest.MonkeyPatch, dead: str
) -> None:
    """Used, expired, its login gone, a token never made, a login that never was: one
    page and one status for all (whether the login exists is not told), and nothing set."""
    invitation = user_invite(
        username="nina", project_id="acme", role=Role.VIEWER, method="link", actor="t"
    )
    nina = get_user_model().objects.get(username="nina")
    uid, token = invitation.uid, invitation.token
    if dead == "used":
        assert password_set_by_link(user_pk=nina.pk, token=token, password=PASSWORD)
    elif dead == "expired":
        later = default_token_generator._now() + timedelta(days=3, seconds=1)
        monkeypatch.setattr(default_token_generator, "_now", lambda: later)
    elif dead == "login-gone":
        nina.delete()
    elif dead == "not-a-token":
        token = "cz1z4a-0123456789abcdef0123456789abcdef"
    else:
        uid = urlsafe_base64_encode(force_bytes(nina.pk + 1000))
    before, audited = logins(), AuditEntry.objects.count()
    guest = Client()
    for method, path in [
        ("get", f"/set-password/{uid}/{token}/"),
        ("post", f"/set-password/{uid}/{token}/"),
        ("get", f"/set-password/{uid}/set-password/"),
        ("post", f"/set-password/{uid}/set-password/"),
    ]:
        passwords = {"new_password1": PASSWORD + "-2", "new_password2": PASSWORD + "-2"}
        response = getattr(guest, method)(path, passwords if method == "post" else None)
        assert response.status_code == 404, (method, path)
        html = response.content.decode()
        assert html[html.index('<section class="narrow">') : html.index("</section>") + 10] == (
            DEAD_LINK
        )
        assert INTERNAL_RESET_SESSION_TOKEN not in guest.session
    assert logins() == before
    assert AuditEntry.objects.count() == audited
    if dead == "used":
        assert password_login(Client(), "nina", PASSWORD)


def test_invite_of_an_existing_user_is_refused(owner: Client, people: People) -> None:
    html = html_of(
        owner.post(
            f"{PEOPLE}invite/",
            {"invite-username": "oscar", "invite-role": "viewer", "invite-method": "link"},
        ),
        422,
    )
    assert "A user &#x27;oscar&#x27; exists already" in html
    assert role_of("oscar") is None


def test_an_invited_name_is_read_as_logins_store_it(owner: Client, people: People) -> None:
    """Logins keep a username in Unicode's compatibility form (NFKC): an invitation reads
    the name so before checking it, so a name written in fullwidth letters is the login it
    will be (it answered 500 for an existing one, and refused a new one after making it)."""
    users = get_user_model().objects
    html = html_of(
        owner.post(
            f"{PEOPLE}invite/",
            {"invite-username": "\uff4f\uff53\uff43\uff41\uff52", "invite-role": "viewer"}
            | {"invite-method": "link"},
        ),
        422,
    )
    assert "A user &#x27;oscar&#x27; exists already" in html
    assert role_of("oscar") is None
    assert users.count() == 4
    made = owner.post(
        f"{PEOPLE}invite/",
        {"invite-username": "nina\uff21", "invite-role": "viewer", "invite-method": "link"},
    )
    assert made.status_code == 302, made.content
    assert role_of("ninaA") == "viewer"
    assert AuditEntry.objects.get(action="user.invite").detail["user"] == "ninaA"


@pytest.mark.parametrize("persona", ["support", "viewer"])
def test_only_owners_manage_people(persona: str, web: Callable[[str], Client]) -> None:
    client = web(persona)
    assert client.get(PEOPLE).status_code == 403
    response = client.post(f"{PEOPLE}grant/", {"grant-username": "sam", "grant-role": "owner"})
    assert response.status_code == 403
    invite = client.post(
        f"{PEOPLE}invite/",
        {"invite-username": "x", "invite-role": "owner", "invite-method": "password"},
    )
    assert invite.status_code == 403
    assert not get_user_model().objects.filter(username="x").exists()
    assert role_of("sam") == "support"


# Deployments


@pytest.fixture
def two_builds(project: Project) -> tuple[Deployment, Deployment]:
    first = Deployment.objects.get(project=project, agent="support-bot")
    second = deployment_create(
        project=project,
        agent="support-bot",
        memory=[{**MANIFEST_MEMORY[0], "provider": {"kind": "document", "maxBytes": 4096}}],
        promote="development",
        actor="test",
    )
    return first, second


def test_deployments_show_the_active_one_with_its_declarations_and_the_history(
    owner: Client, two_builds: tuple[Deployment, Deployment]
) -> None:
    first, second = two_builds
    html = html_of(owner.get(DEPLOYMENTS))
    active = html.split("<h2>Active in development</h2>")[1].split("<h2>History</h2>")[0]
    assert f"<code>{second.id}</code>" in active
    assert ">4096<" in active
    history = html.split("<h2>History</h2>")[1]
    assert history.index(second.id) < history.index(first.id)
    assert f"{DEPLOYMENTS}{first.id}/promote/" in history
    assert f"{DEPLOYMENTS}{second.id}/promote/" not in history  # already active here


def test_the_history_shows_a_page_and_loads_the_next(
    owner: Client, two_builds: tuple[Deployment, Deployment]
) -> None:
    first, second = two_builds  # the bulk below are newer
    Deployment.objects.bulk_create(
        Deployment(id=f"dep_bulk{i:03d}", project_id="acme", agent="bulk-bot") for i in range(49)
    )
    made = list(
        Deployment.objects.filter(project_id="acme")
        .order_by("-created_at", "id")
        .values_list("id", flat=True)
    )
    assert len(made) == 51
    html = html_of(owner.get(DEPLOYMENTS))
    history = html.split("<h2>History</h2>")[1]
    assert [i for i in made if f"<code>{i}</code>" in history] == made[:50]
    more = history.split('class="load-more"')[1]
    cursor = more.split("?cursor=")[1].split('"')[0]
    # htmx: the next rows replace the "load more" row, the rest of the page not sent.
    rows = html_of(owner.get(f"{DEPLOYMENTS}?cursor={cursor}", HTTP_HX_REQUEST="true"))
    assert f"<code>{made[50]}</code>" in rows
    assert made[49:] == [second.id, first.id]
    assert f"{DEPLOYMENTS}{first.id}/promote/" in rows  # the row's own action
    assert "<h2>" not in rows
    assert "load-more" not in rows
    # Without htmx, the page from there, with a way back to the newest.
    page = html_of(owner.get(f"{DEPLOYMENTS}?cursor={cursor}"))
    assert f"<code>{made[50]}</code>" in page
    assert "Back to the newest deployments" in page
    assert "<h2>Active in development</h2>" not in page
    assert owner.get(f"{DEPLOYMENTS}?cursor=nonsense").status_code == 400


def test_owner_promotes_an_earlier_deployment(
    owner: Client, two_builds: tuple[Deployment, Deployment]
) -> None:
    first, _ = two_builds
    assert "Promote" in html_of(owner.get(f"{DEPLOYMENTS}{first.id}/promote/"))
    assert owner.post(f"{DEPLOYMENTS}{first.id}/promote/").status_code == 302
    active = ActiveDeployment.objects.get(project_id="acme", environment="development")
    assert active.deployment_id == first.id
    assert Resource.objects.get(resource_id="notes", environment="development").max_bytes == 8192
    entry = AuditEntry.objects.filter(action="deployment.promote").latest("id")
    assert (entry.actor, entry.detail["deployment"]) == ("user:olivia", first.id)


@pytest.mark.parametrize("persona", ["support", "viewer"])
def test_only_owners_promote(
    persona: str, web: Callable[[str], Client], two_builds: tuple[Deployment, Deployment]
) -> None:
    first, second = two_builds
    client = web(persona)
    assert client.get(DEPLOYMENTS).status_code == 200
    assert f"{first.id}/promote/" not in client.get(DEPLOYMENTS).content.decode()
    assert client.post(f"{DEPLOYMENTS}{first.id}/promote/").status_code == 403
    active = ActiveDeployment.objects.get(project_id="acme", environment="development")
    assert active.deployment_id == second.id


# Provider secrets


def test_owner_sets_and_rotates_a_secret_whose_value_is_never_shown(
    owner: Client, people: People
) -> None:
    url = f"{DEPLOYMENTS}secrets/"
    value = "sk-live-0123456789"
    response = owner.post(
        url, {"name": "MEM_TOKEN", "value": value, "origins": "https://memory.example.com\n"}
    )
    assert response.status_code == 302
    secret = Secret.objects.get(name="MEM_TOKEN", environment="development")
    assert (secret.value, secret.origins) == (value, ["https://memory.example.com"])
    html = html_of(owner.get(DEPLOYMENTS))
    assert "<code>MEM_TOKEN</code>" in html
    assert "https://memory.example.com" in html
    assert value not in html
    # Rotating keeps the origins; a refused form does not echo the value back.
    owner.post(url, {"name": "MEM_TOKEN", "value": "sk-live-rotated", "origins": ""})
    secret.refresh_from_db()
    assert (secret.value, secret.origins) == ("sk-live-rotated", ["https://memory.example.com"])
    refused = html_of(
        owner.post(url, {"name": "NEW_ONE", "value": "v-secret-1", "origins": ""}), 422
    )
    assert "origins is required" in refused
    assert "v-secret-1" not in refused
    entries = AuditEntry.objects.filter(action="secret.set").order_by("id")
    assert [(e.actor, e.detail["created"]) for e in entries] == [
        ("user:olivia", True),
        ("user:olivia", False),
    ]


@pytest.mark.parametrize("persona", ["support", "viewer"])
def test_only_owners_see_and_set_secrets(persona: str, web: Callable[[str], Client]) -> None:
    client = web(persona)
    assert "Provider secrets" not in client.get(DEPLOYMENTS).content.decode()
    response = client.post(
        f"{DEPLOYMENTS}secrets/",
        {"name": "T", "value": "v", "origins": "https://memory.example.com"},
    )
    assert response.status_code == 403
    assert not Secret.objects.exists()


# Overview


def test_overview_counts_writes_by_who_and_links_the_entries_behind_them(
    owner: Client, used_memory: Resource
) -> None:
    from django.utils import timezone

    def writes_of(html: str) -> str:
        return html.split('id="writes-caption"')[1].split("</figure>")[0]

    # used_memory: 5 creates by owners (actor "test") and 1 agent save, in development,
    # all today: one day is not a chart.
    html = html_of(owner.get(f"{BASE}/overview/"))
    today = timezone.now().date().isoformat()
    writes = writes_of(html)
    assert "Document changes per day</strong> &middot; 6 in 30 days" in writes
    assert "Not enough history yet" in writes
    assert "<svg" not in writes
    assert f'<tr><th scope="row">{today}</th><td class="num">0</td>' in writes
    sessions = html.split('id="sessions-caption"')[1].split("</figure>")[0]
    assert "Not enough history yet" in sessions
    assert "<svg" not in sessions
    # The replace two days ago: two days of history, drawn.
    agent_save = AuditEntry.objects.filter(action__startswith="document.", actor="agent")
    assert agent_save.update(created_at=timezone.now() - timedelta(days=2)) == 1
    html = html_of(owner.get(f"{BASE}/overview/"))
    writes = writes_of(html)
    assert "Not enough history yet" not in writes
    assert writes.count("<rect") == 2
    query = f"action=document.*&amp;by=owner&amp;since={today}&amp;until={today}"
    assert f'href="{BASE}/audit/?{query}"' in writes
    assert "<svg" in writes
    assert 'role="img"' in writes
    assert "notes/onboarding" in html.split('id="active-title"')[1]
    nearest = html.split('id="nearest-title"')[1]
    assert nearest.index("kb/refunds") < nearest.index("notes/workshop")
    assert "style=" not in html
    assert "<script>" not in html


# Provider resources


def test_an_http_resource_shows_its_connection_and_tools_without_header_values(
    owner: Client, project: Project
) -> None:
    Resource.objects.create(
        project=project,
        environment="development",
        resource_id="facts",
        kind="http",
        max_bytes=8192,
        description="Facts kept by the memory service.",
        config={
            "connection": {
                "id": "memory-service",
                "origin": "https://memory.example.com",
                "methods": ["POST"],
                "pathPrefix": "/oc-memory",
                "headers": {
                    "Authorization": {"secret": "MEMORY_TOKEN", "scheme": "Bearer"},
                    "X-Team": "literal-team-value",
                },
            },
            "path": "/oc-memory",
            "tools": [
                {"name": "remember", "description": "Save a verified fact.", "access": "write"}
            ],
        },
    )
    html = html_of(owner.get(f"{BASE}/resources/facts/"))
    assert "<code>https://memory.example.com</code>" in html
    assert "secret <code>MEMORY_TOKEN</code> (Bearer)" in html
    assert "literal-team-value" not in html
    assert '<th scope="row"><code>remember</code></th><td>write</td>' in html
    assert "records live with the provider" in html
    assert "retired" in html


# Bulk actions


def test_bulk_freeze_confirms_the_count_then_freezes_each_with_its_own_entry(
    support: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.models import Document

    docs = [make_document(name) for name in ("a1", "a2", "a3")]
    url = f"{BASE}/resources/notes/bulk/"
    picked = [f"{d.doc_id}:{d.revision}" for d in docs]
    confirm = html_of(support.post(url, {"action": "freeze", "doc": picked}))
    assert "Freeze 3 documents in notes?" in confirm
    assert not Document.objects.filter(agent_writes=False).exists()
    done = support.post(url, {"action": "freeze", "doc": picked, "confirm": "yes"}, follow=True)
    assert "Froze 3 documents." in done.content.decode()
    assert Document.objects.filter(agent_writes=False).count() == 3
    assert AuditEntry.objects.filter(action="document.freeze", actor="user:sam").count() == 3
    again = support.post(
        url, {"action": "freeze", "doc": picked[:1], "confirm": "yes"}, follow=True
    )
    assert "Already frozen, unchanged: a1." in again.content.decode()


def test_bulk_delete_reports_the_documents_that_changed_meanwhile(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.models import Document
    from memoryadmin.memory.services.documents import document_replace

    first, second = make_document("b1"), make_document("b2")
    document_replace(
        resource=notes, doc_id="b2", expected_revision=second.revision, text="new", actor="t"
    )
    picked = [f"b1:{first.revision}", f"b2:{second.revision}"]
    response = owner.post(
        f"{BASE}/resources/notes/bulk/",
        {"action": "delete", "doc": picked, "confirm": "yes"},
        follow=True,
    )
    html = response.content.decode()
    assert "Deleted 1 document." in html
    assert "Not done for 1 document (b2: it changed after you selected it)" in html
    assert Document.objects.get(doc_id="b1").deleted is True
    assert Document.objects.get(doc_id="b2").deleted is False


def test_bulk_delete_with_a_nul_in_a_revision_refuses_the_whole_selection(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    """A selection is refused as a whole before any document is touched, as a malformed id
    is: a revision holding a NUL is a 400 naming the field (PostgreSQL answered 500 after
    deleting the documents before it; SQLite deleted them and reported that one as failed)."""
    from memoryadmin.memory.models import Document

    first, second = make_document("b1"), make_document("b2")
    audited = AuditEntry.objects.count()
    picked = [f"b1:{first.revision}", f"b2:{second.revision}\x00"]
    response = owner.post(
        f"{BASE}/resources/notes/bulk/", {"action": "delete", "doc": picked, "confirm": "yes"}
    )
    assert "doc[1]: the value contains a NUL character" in html_of(response, 400)
    assert list(Document.objects.filter(deleted=True)) == []
    assert AuditEntry.objects.count() == audited


def test_bulk_delete_is_for_owners_only(
    support: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.models import Document

    document = make_document("c1")
    response = support.post(
        f"{BASE}/resources/notes/bulk/",
        {"action": "delete", "doc": [f"c1:{document.revision}"], "confirm": "yes"},
    )
    assert response.status_code == 403
    assert Document.objects.get(doc_id="c1").deleted is False


def test_bulk_export_downloads_exactly_the_selected_documents_without_a_confirmation(
    support: Client, make_document: Any, notes: Resource
) -> None:
    import io
    import json
    import zipfile

    from memoryadmin.memory.models import Document
    from memoryadmin.memory.services.documents import document_delete

    docs = [make_document(name) for name in ("b1", "b2", "b3")]
    gone = make_document("b4")
    picked = [f"{d.doc_id}:{d.revision}" for d in (docs[0], docs[2], gone)]
    document_delete(resource=notes, doc_id="b4", expected_revision=gone.revision, actor="user:x")
    before = Document.objects.values_list("doc_id", "revision", "agent_writes")
    snapshot = sorted(before)
    response = support.post(f"{BASE}/resources/notes/bulk/", {"action": "export", "doc": picked})
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    archive = zipfile.ZipFile(io.BytesIO(streamed(response)))
    names = sorted(name for name in archive.namelist() if not name.endswith("/"))
    assert names == ["manifest.json", "notes/b1.json", "notes/b3.json"]
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["resources"] == ["notes"]
    assert manifest["documents"] == 2
    assert json.loads(archive.read("notes/b3.json"))["id"] == "b3"
    entry = AuditEntry.objects.get(action="memory.export")
    assert entry.detail["selected"] == ["b1", "b3", "b4"]
    assert entry.detail["documents"] == 2
    assert sorted(Document.objects.values_list("doc_id", "revision", "agent_writes")) == snapshot


def test_bulk_export_is_refused_to_viewers(
    web: Callable[[str], Any], make_document: Any, notes: Resource
) -> None:
    doc = make_document("c1")
    response = web("viewer").post(
        f"{BASE}/resources/notes/bulk/", {"action": "export", "doc": [f"c1:{doc.revision}"]}
    )
    assert response.status_code == 403
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_bulk_refuses_an_empty_or_oversized_selection(owner: Client, notes: Resource) -> None:
    url = f"{BASE}/resources/notes/bulk/"
    # Nothing ticked: said on the list, not on an error page.
    empty = owner.post(url, {"action": "freeze"}, follow=True)
    assert "Nothing was selected" in html_of(empty)
    assert empty.redirect_chain == [(f"{BASE}/resources/notes/", 302)]
    many = [f"d{i}:r" for i in range(101)]
    assert "at most 100 documents" in html_of(
        owner.post(url, {"action": "freeze", "doc": many}), 400
    )
