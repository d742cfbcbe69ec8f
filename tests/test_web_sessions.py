"""The Sessions page: sessions with their live memory and events, and ending one, by role."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memoryadmin.agents.models import EventType, Session, SessionEvent
from memoryadmin.agents.services.sessions import session_create, session_end
from memoryadmin.core.partitions import partition_key
from memoryadmin.memory.models import AuditEntry, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.refprovider.declaration import reference_declaration
from tests.helpers import People, agent_save, html_of, support_session

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
SESSIONS = f"{BASE}/sessions/"
HX = {"HTTP_HX_REQUEST": "true"}


def new_session(project: Project, key: str, *, agent: str = "support-bot") -> Session:
    created, _ = session_create(
        project=project, agent_id=f"{agent}@development", idempotency_key=key, actor="test"
    )
    return created


def session_ids(html: str) -> list[str]:
    return re.findall(
        r'<th scope="row"><a href="[^"]*/sessions/[^"]*"[^>]*><code>([^<]+)</code>', html
    )


def queries(client: Client, url: str, **headers: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200, url
    return len(captured)


def session_url(session: Session, environment: str = "development", project: str = "acme") -> str:
    return f"/projects/{project}/{environment}/sessions/{session.id}/"


def test_the_tab_bar_links_the_sessions_page(web: Any, project: Project) -> None:
    response = web("viewer").get(f"{BASE}/")
    assert response.status_code == 200
    assert f'<a href="{SESSIONS}">Sessions</a>' in response.content.decode()
    listing = web("viewer").get(SESSIONS).content.decode()
    assert f'<a href="{SESSIONS}" aria-current="page">Sessions</a>' in listing


def test_anonymous_users_are_sent_to_the_login_page(session: Session) -> None:
    response = Client().get(SESSIONS)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_the_list_shows_agent_status_created_and_live_bindings(web: Any, session: Session) -> None:
    html = html_of(web("viewer").get(SESSIONS))
    assert session_ids(html) == [session.id]
    row = re.search(r"<tr>\s*<th scope=\"row\">.*?</tr>", html, re.S)
    assert row is not None
    assert "<td>support-bot</td>" in row.group()
    assert 'class="badge session-active">active<' in row.group()
    assert "<time datetime=" in row.group()
    assert "kb: collection &middot; read" in row.group()
    assert "notes: document <code>workshop</code> &middot; read-write" in row.group()
    assert row.group().count('class="badge writable"') == 1


def test_the_list_filters_by_status_and_agent(web: Any, project: Project) -> None:
    deployment_create(
        project=project, agent="archivist", memory=[], promote="development", actor="test"
    )
    active = new_session(project, "a")
    ended = new_session(project, "b")
    session_end(session=ended, actor="test")
    archivist = new_session(project, "c", agent="archivist")
    viewer = web("viewer")
    by_status = viewer.get(SESSIONS, {"status": "ended"}).content.decode()
    assert session_ids(by_status) == [ended.id]
    by_agent = viewer.get(SESSIONS, {"agent": "archivist"}).content.decode()
    assert session_ids(by_agent) == [archivist.id]
    assert '<option value="archivist" selected>' in by_agent
    both = viewer.get(SESSIONS, {"agent": "support-bot", "status": "active"}).content.decode()
    assert session_ids(both) == [active.id]
    assert "No sessions match" in viewer.get(SESSIONS, {"agent": "nobody"}).content.decode()
    assert viewer.get(SESSIONS, {"status": "paused"}).status_code == 400


def test_load_more_pages_through_every_session_once(web: Any, project: Project) -> None:
    created = [new_session(project, f"k{i}") for i in range(53)]
    # Distinct creation times, newest first: k0 is the newest.
    now = timezone.now()
    for i, item in enumerate(created):
        Session.objects.filter(pk=item.pk).update(created_at=now - timedelta(seconds=i))
    viewer = web("viewer")
    first = viewer.get(SESSIONS).content.decode()
    seen = session_ids(first)
    assert len(seen) == 50
    more = re.search(r'hx-get="([^"]*cursor=[^"]*)"', first)
    assert more is not None
    rest = viewer.get(more.group(1).replace("&amp;", "&"), **HX)
    assert rest.status_code == 200
    assert "<table" not in rest.content.decode()  # only the next rows
    seen += session_ids(rest.content.decode())
    assert seen == [item.id for item in created]
    assert "Load more sessions" not in rest.content.decode()
    # Without JavaScript the link loads a whole page of the next rows.
    plain = viewer.get(more.group(1).replace("&amp;", "&")).content.decode()
    assert "<table" in plain
    assert "Back to the newest sessions" in plain


def test_the_session_page_shows_bindings_with_live_writable_and_events_in_order(
    web: Any, session: Session
) -> None:
    html = html_of(web("viewer").get(session_url(session)))
    assert f"Session <code>{session.id}</code>" in html
    assert f"<code>{session.deployment_id}</code>" in html
    assert "ticket: T-42" in html
    rows = re.findall(r"<tr>\s*<th scope=\"row\">(\w+)</th>(.*?)</tr>", html, re.S)
    bindings = {name: cells for name, cells in rows}
    assert "read-write" in bindings["notes"]
    assert "/resources/notes/documents/workshop/" in bindings["notes"]
    assert '<span class="badge writable">true</span>' in bindings["notes"]
    assert '<td class="writable">false</td>' in bindings["kb"]
    events = re.findall(r'<th scope="row" class="num">(\d+)</th>.*?<td>([\w.]+)</td>', html, re.S)
    assert events == [("1", "session.created")]
    assert "deploymentId: " + session.deployment_id in html


def test_a_namespace_binding_shows_its_partition(web: Any, project: Project) -> None:
    deployment_create(
        project=project,
        agent="researcher",
        memory=[
            reference_declaration(
                resource_id="facts", base_url="http://127.0.0.1:9", description="Facts."
            )
        ],
        promote="development",
        actor="test",
    )
    created, _ = session_create(
        project=project,
        agent_id="researcher@development",
        memory={"facts": {"scope": "namespace", "id": "owner-7", "access": "read-write"}},
        idempotency_key="ns",
        actor="test",
    )
    html = web("viewer").get(session_url(created)).content.decode()
    partition = partition_key(
        project_id="acme", environment="development", resource_id="facts", namespace="owner-7"
    )
    assert f"<code>{partition}</code>" in html
    assert '<span class="badge writable">true</span>' in html


def test_saved_events_link_the_document_and_freezing_turns_writable_false(
    web: Any, session: Session, notes: Resource
) -> None:
    from memoryadmin.agents.services.sessions import event_append, session_lock
    from memoryadmin.memory.services.documents import document_set_agent_writes

    event_append(
        session=session_lock(session=session),
        type=EventType.MEMORY_SAVED,
        data={"resource": "notes", "documentId": "workshop", "revision": "r2", "bytes": 3},
    )
    document_set_agent_writes(resource=notes, doc_id="workshop", enabled=False, actor="test")
    html = web("viewer").get(session_url(session)).content.decode()
    events = re.findall(r'<th scope="row" class="num">(\d+)</th>.*?<td>([\w.]+)</td>', html, re.S)
    assert events == [("1", "session.created"), ("2", "memory.saved")]
    assert (
        'documentId: <a href="/projects/acme/development/resources/notes/documents/workshop/">'
        in html
    )
    assert 'class="badge writable"' not in html


def test_document_pages_link_the_agent_session_that_saved_them(
    web: Any, session: Session, notes: Resource
) -> None:
    document = notes.documents.get(doc_id="workshop")
    agent_save(notes, "workshop", document.revision, "Node.js 24.", session_id=session.id)
    html = web("viewer").get(f"{BASE}/resources/notes/documents/workshop/").content.decode()
    assert f'<a href="{session_url(session)}"><code>{session.id}</code></a>' in html


@pytest.mark.parametrize(("persona", "username"), [("support", "sam"), ("owner", "olivia")])
def test_owners_and_support_end_a_session_and_it_is_audited(
    web: Any, session: Session, persona: str, username: str
) -> None:
    user = web(persona)
    page = user.get(session_url(session)).content.decode()
    end_url = session_url(session) + "end/"
    assert f'href="{end_url}"' in page
    confirm = user.get(end_url)
    assert confirm.status_code == 200
    assert f"End session {session.id}?" in confirm.content.decode()
    dialog = user.get(end_url, **HX).content.decode()
    assert "<html" not in dialog
    assert "End session</button>" in dialog
    assert Session.objects.get(pk=session.pk).status == "active"  # asking changes nothing

    response = user.post(end_url, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain == [(session_url(session), 302)]
    html = response.content.decode()
    assert f"Ended {session.id}" in html
    assert 'class="badge session-ended">ended<' in html
    assert "End session&hellip;" not in html
    assert 'class="badge writable"' not in html
    ended = Session.objects.get(pk=session.pk)
    assert ended.status == "ended"
    assert ended.ended_at is not None
    entry = AuditEntry.objects.get(action="session.end")
    assert entry.actor == f"user:{username}"
    assert entry.detail == {"session": session.id, "agent": "support-bot"}
    assert list(session.events.order_by("seq").values_list("seq", "type")) == [
        (1, "session.created"),
        (2, "session.ended"),
    ]


def test_ending_twice_changes_nothing_the_second_time(web: Any, session: Session) -> None:
    support = web("support")
    end_url = session_url(session) + "end/"
    support.post(end_url)
    ended_at = Session.objects.get(pk=session.pk).ended_at
    again = support.post(end_url, follow=True)
    assert again.status_code == 200
    assert f"{session.id} had already ended." in again.content.decode()
    assert Session.objects.get(pk=session.pk).ended_at == ended_at
    assert AuditEntry.objects.filter(action="session.end").count() == 1
    assert session.events.filter(type="session.ended").count() == 1


def test_viewers_see_no_end_button_and_a_forged_end_is_refused(web: Any, session: Session) -> None:
    viewer = web("viewer")
    page = viewer.get(session_url(session)).content.decode()
    assert "End session" not in page
    end_url = session_url(session) + "end/"
    assert viewer.get(end_url).status_code == 403
    forged = viewer.post(end_url)
    assert forged.status_code == 403
    assert "The viewer role may not end sessions" in forged.content.decode()
    assert Session.objects.get(pk=session.pk).status == "active"
    assert not AuditEntry.objects.filter(action="session.end").exists()
    assert list(session.events.values_list("type", flat=True)) == ["session.created"]


def test_the_end_needs_the_csrf_token(people: People, session: Session) -> None:
    support = Client(enforce_csrf_checks=True)
    support.force_login(people.support)
    assert support.post(session_url(session) + "end/").status_code == 403
    assert Session.objects.get(pk=session.pk).status == "active"


def test_sessions_of_other_environments_and_projects_are_not_found(
    web: Any, session: Session, other_project: Project
) -> None:
    support = web("support")
    production = session_url(session, "production")
    assert support.get(production).status_code == 404
    assert support.post(production + "end/").status_code == 404
    assert support.get(session_url(session)[:-1] + "x/").status_code == 404

    deployment_create(
        project=other_project, agent="helper", memory=[], promote="development", actor="test"
    )
    theirs, _ = session_create(
        project=other_project, agent_id="helper@development", idempotency_key="g", actor="test"
    )
    assert support.get(session_url(theirs)).status_code == 404
    assert support.post(session_url(theirs) + "end/").status_code == 404
    assert theirs.id not in support.get(SESSIONS).content.decode()
    # The owner of the other project reaches neither acme's session through their own
    # project nor acme itself.
    outsider = web("outsider")
    assert outsider.get(session_url(session, project="globex")).status_code == 404
    assert outsider.post(session_url(session, project="globex") + "end/").status_code == 404
    assert outsider.get(session_url(session)).status_code == 404
    assert Session.objects.filter(status="active").count() == 2
    assert not AuditEntry.objects.filter(action="session.end").exists()


def test_a_production_session_is_listed_only_in_production(
    web: Any, project: Project, session: Session
) -> None:
    from memoryadmin.memory.models import Deployment
    from memoryadmin.memory.services.deployments import deployment_promote

    deployment_promote(
        deployment=Deployment.objects.get(project=project, agent="support-bot"),
        environment="production",
        actor="test",
    )
    live, _ = session_create(
        project=project, agent_id="support-bot@production", idempotency_key="p", actor="test"
    )
    viewer = web("viewer")
    assert session_ids(viewer.get(SESSIONS).content.decode()) == [session.id]
    production = viewer.get("/projects/acme/production/sessions/").content.decode()
    assert session_ids(production) == [live.id]
    assert viewer.get(session_url(live, "production")).status_code == 200


def test_session_pages_query_counts_are_constant(
    web: Any, project: Project, session: Session, django_assert_max_num_queries: Any
) -> None:
    viewer = web("viewer")
    listing, detail = queries(viewer, SESSIONS), queries(viewer, session_url(session))
    for i in range(40):
        support_session(project, idempotency_key=f"many-{i}")
    now = timezone.now()
    SessionEvent.objects.bulk_create(
        SessionEvent(session=session, seq=seq, type="memory.saved", data={"n": seq}, created_at=now)
        for seq in range(2, 120)
    )
    Session.objects.filter(pk=session.pk).update(last_seq=119)
    with django_assert_max_num_queries(listing):
        viewer.get(SESSIONS)
    with django_assert_max_num_queries(detail):
        response = viewer.get(session_url(session))
    assert response.content.decode().count('<th scope="row" class="num">') == 119
