"""The Memory page's reading pages: what they show, to whom, and at what cost in queries."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import document_replace
from tests.helpers import (
    MANIFEST_MEMORY,
    PASSWORD,
    People,
    agent_save,
    deploy_reference_provider,
    fragment_of,
    html_of,
    streamed,
)

pytestmark = pytest.mark.django_db

BASE = "/projects/acme/development"
NOTES = f"{BASE}/resources/notes/"
WORKSHOP = f"{NOTES}documents/workshop/"
HX: dict[str, Any] = {"HTTP_HX_REQUEST": "true"}


def many_documents(resource: Resource, count: int, *, prefix: str = "doc") -> list[str]:
    """Bulk-created documents with distinct update times (newest: the first id)."""
    now = timezone.now()
    documents = [
        Document(
            resource=resource,
            doc_id=f"{prefix}-{i:04d}",
            title=f"Title {i}",
            text="x",
            bytes=1,
            revision=f"r{i}",
            updated_at=now - timedelta(seconds=i),
            created_at=now,
            writer_kind="owner",
        )
        for i in range(count)
    ]
    Document.objects.bulk_create(documents)
    return [d.doc_id for d in documents]


def ids_in(html: str) -> list[str]:
    return re.findall(r'<th scope="row"><a href="[^"]*"[^>]*><code>([^<]+)</code>', html)


def test_anonymous_users_are_sent_to_the_login_page(project: Project) -> None:
    response = Client().get(NOTES)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_htmx_requests_of_anonymous_users_reload_to_the_login_page(project: Project) -> None:
    response = Client().get(NOTES, **HX)
    assert response.status_code == 200
    assert response["HX-Redirect"].startswith("/login/?next=")


def test_a_form_sent_after_the_login_expired_comes_back_to_its_page_after_logging_in(
    people: People, used_memory: Resource
) -> None:
    """The form's own address answers its POST only: after the login, a GET there was a
    blank 405. The login now leads back to the page the form was on."""
    version = Document.objects.get(resource=used_memory, doc_id="workshop").revision
    page = f"{WORKSHOP}versions/{version}/"
    client = Client()
    response = client.post(
        f"{page}restore/", {"revision": version}, HTTP_REFERER=f"http://testserver{page}"
    )
    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={page}"
    response = client.post(
        response["Location"], {"username": "olivia", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == page
    assert response.status_code == 200
    # Without a Referer of this site: the home page, which leads to the project.
    response = Client().post(f"{page}restore/", HTTP_REFERER="https://elsewhere.example/x/")
    assert response["Location"] == "/login/?next=/"


@pytest.mark.parametrize("path", [f"{BASE}/webhooks/new/", f"{BASE}/keys/new/"])
def test_a_visit_to_a_forms_address_is_a_page_that_says_so(web: Any, path: str) -> None:
    """A refused form leaves its address in the address bar; opened again from there it was
    a blank 405. Now the site's page, with the navigation, saying what the address is."""
    response = web("owner").get(path)
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    html = response.content.decode()
    assert "<h1>Not a page</h1>" in html
    assert "takes a form&#x27;s submission, not a visit" in html
    assert 'href="/projects/acme/development/"' in html  # the site's header
    # Anonymous alike (with the login link).
    anonymous = Client().get(path)
    assert anonymous.status_code == 405
    assert 'href="/login/"' in anonymous.content.decode()


def test_login_lands_on_the_only_project_in_development(people: People) -> None:
    client = Client()
    response = client.post("/login/", {"username": "olivia", "password": PASSWORD}, follow=True)
    assert response.status_code == 200
    assert response.redirect_chain[-1][0] == f"{BASE}/"
    assert b"notes" in response.content


def test_inventory_shows_no_count_for_a_resource_whose_records_live_with_the_provider(
    owner: Client, project: Project, make_document: Any
) -> None:
    """An http resource keeps no documents here: its count is not a false 0."""
    make_document("workshop")
    deploy_reference_provider(project, "http://127.0.0.1:9", extra=[MANIFEST_MEMORY[0]])
    html = html_of(owner.get(f"{BASE}/"))
    rows = dict(
        re.findall(r'<tr>\s*<th scope="row"[^>]*><a [^>]*>([^<]+)</a>(.*?)</tr>', html, re.S)
    )
    assert set(rows) == {"facts", "kb", "notes"}
    assert "http" in rows["facts"]
    facts = rows["facts"].split('<td class="num">')[-1]
    assert facts.startswith('<span class="muted">with the provider</span></td>'), facts
    assert rows["notes"].split('<td class="num">')[-1] == "1</td>\n    "


def test_login_with_a_wrong_password_is_refused(people: People) -> None:
    response = Client().post("/login/", {"username": "olivia", "password": "nope"})
    assert response.status_code == 422
    assert b"Please enter a correct username and password" in response.content
    assert "_auth_user_id" not in Client().session


def test_inventory_lists_resources_with_kind_limit_status_and_count(
    owner: Client, project: Project, make_document: Any
) -> None:
    make_document("workshop")
    make_document("second")
    # A newer deployment drops "notes": it is retired, still listed.
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[{"id": "kb", "description": "Knowledge.", "provider": {"maxBytes": 64}}],
        promote="development",
        actor="test",
    )
    response = owner.get(f"{BASE}/")
    assert response.status_code == 200
    rows = re.findall(
        r"<tr>\s*<th scope=\"row\" class=\"chosen\">.*?</tr>", response.content.decode(), re.S
    )
    assert len(rows) == 2
    kb, notes = rows
    assert ">kb</a>" in kb
    assert ">64<" in kb
    assert "declared" in kb
    assert ">0<" in kb
    assert ">notes</a>" in notes
    assert ">8192<" in notes
    assert "retired" in notes
    assert ">2<" in notes


def test_production_has_a_banner_and_development_has_none(owner: Client) -> None:
    development = owner.get(f"{BASE}/")
    production = owner.get("/projects/acme/production/")
    assert development.status_code == production.status_code == 200
    assert b"production-banner" not in development.content
    assert b'class="production-banner"' in production.content
    assert b'<body class="env-production"' in production.content


def test_pages_of_ascii_content_are_ascii(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    """The product's own markup is ASCII, its typographic characters written as entities
    (&middot;, &hellip;, &rsaquo;): a page whose content is ASCII is then one byte a
    character in Python and encoded with a copy, where one character beyond Latin-1
    anywhere in it doubles every copy the template language makes and turns the encoding
    into a pass over each character (docs/performance.md)."""
    workshop = make_document("workshop", title="Workshop notes", text="12345", summary="R.")
    agent_save(
        notes, "workshop", workshop.revision, "saved by an agent", session_id="ses_0123456789abcdef"
    )
    pages = [
        f"{BASE}/",
        NOTES,
        WORKSHOP,
        "/projects/acme/production/",
        f"{BASE}/overview/",
        f"{BASE}/sessions/",
        f"{BASE}/audit/",
        f"{BASE}/keys/",
        f"{BASE}/deployments/",
    ]
    for url in pages:
        response = owner.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        beyond = [(i, c) for i, c in enumerate(body) if ord(c) > 127][:1]
        assert not beyond, (url, [body[max(0, i - 60) : i + 20] for i, _ in beyond])
    # The agent's writer cell shows the session id cut short, with an ellipsis.
    assert '<code title="ses_0123456789abcdef">ses_0123&hellip;</code>' in html_of(owner.get(NOTES))


def test_the_templates_are_ascii() -> None:
    from django.conf import settings

    dirs = [cast(list[str], engine["DIRS"]) for engine in settings.TEMPLATES]
    folders = [Path(folder) for listed in dirs for folder in listed]
    templates = [path for folder in folders for path in folder.rglob("*.html")]
    assert len(templates) > 20
    for path in templates:
        text = path.read_text(encoding="utf-8")
        beyond = [text[max(0, i - 40) : i + 10] for i, c in enumerate(text) if ord(c) > 127]
        assert not beyond, (path.name, beyond[:3])


def test_unknown_environment_is_404(owner: Client) -> None:
    assert owner.get("/projects/acme/staging/").status_code == 404


def test_project_root_redirects_to_development(owner: Client) -> None:
    response = owner.get("/projects/acme/")
    assert response.status_code == 302
    assert response["Location"] == f"{BASE}/"


def test_project_switcher_goes_to_the_chosen_project_and_environment(
    owner: Client, people: People
) -> None:
    response = owner.get("/switch/", {"project": "acme", "environment": "production"})
    assert response.status_code == 302
    assert response["Location"] == "/projects/acme/production/"
    assert owner.get("/switch/", {"project": "globex"}).status_code == 404


def test_document_list_shows_writer_time_size_and_frozen_badge(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    make_document("workshop", title="Workshop notes", text="12345", summary="Runtime.")
    agent_doc = make_document("agent-notes")
    agent_save(notes, "agent-notes", agent_doc.revision, "saved by an agent", session_id="sess_123")
    make_document("frozen", agent_writes=False)
    html = html_of(owner.get(NOTES))
    assert ids_in(html) == ["frozen", "agent-notes", "workshop"]
    workshop = row_of(html, "workshop")
    assert "Workshop notes" in workshop
    assert "Runtime." in workshop
    assert "</meter> 5 B</span>" in workshop
    assert 'value="5"' in workshop
    assert 'max="8192"' in workshop
    assert "writer-owner" in workshop
    assert '<time datetime="' in workshop
    assert 'UTC">just now</time>' in workshop
    assert "badge frozen" not in workshop
    agent = row_of(html, "agent-notes")
    assert "writer-agent" in agent
    assert '<code title="sess_123">sess_123</code>' in agent
    # The row links the session's page (remembered per process, read from the routes).
    session_page = reverse("web:session", args=["acme", "development", "sess_123"])
    assert f'<a href="{session_page}"><code title="sess_123">' in agent
    assert "badge frozen" in row_of(html, "frozen")


def row_of(html: str, doc_id: str) -> str:
    return html[html.index(f"<code>{doc_id}</code>") :].split("</tr>")[0]


def test_filter_matches_id_prefix_and_title_substring_ignoring_case(
    owner: Client, make_document: Any
) -> None:
    make_document("workshop", title="Runtime requirements")
    make_document("work-log", title="Log")
    make_document("refunds", title="Refund policy for WORKshops")
    make_document("shipping", title="Shipping")
    make_document("homework", title="Other")  # contains "work" in the id, not at the start
    response = owner.get(NOTES, {"q": "Work"})
    assert response.status_code == 200
    assert sorted(ids_in(response.content.decode())) == ["refunds", "work-log", "workshop"]
    nothing = owner.get(NOTES, {"q": "zzz"})
    assert ids_in(nothing.content.decode()) == []
    assert "No documents match &ldquo;zzz&rdquo;." in nothing.content.decode()


def test_filter_over_htmx_returns_only_the_table_rows(owner: Client, make_document: Any) -> None:
    make_document("workshop")
    make_document("refunds")
    response = owner.get(NOTES, {"q": "work"}, **HX)
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in html
    assert "<tbody" not in html
    assert ids_in(html) == ["workshop"]
    assert "HX-Request" in response["Vary"]
    full = owner.get(NOTES, {"q": "work"})
    assert "<html" in full.content.decode()
    assert "HX-Request" in full["Vary"]


def test_history_restore_requests_get_the_whole_page(owner: Client, make_document: Any) -> None:
    make_document("workshop")
    response = owner.get(NOTES, {"q": "work"}, HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX)
    assert "<html" in response.content.decode()


def test_load_more_walks_every_document_once_in_keyset_order(
    owner: Client, notes: Resource
) -> None:
    expected = many_documents(notes, 120)
    seen: list[str] = []
    response = owner.get(NOTES)
    html = response.content.decode()
    seen += ids_in(html)
    assert len(seen) == 50
    pages = 1
    while "Load more documents" in html:
        link = re.search(r'hx-get="([^"]+)"\s+hx-target="closest tr"', html)
        assert link is not None
        url = link.group(1).replace("&amp;", "&")
        # The plain link and the htmx link are the same URL: both work.
        assert f'href="{link.group(1)}"' in html
        html = fragment_of(owner.get(url, **HX))
        seen += ids_in(html)
        pages += 1
    assert pages == 3
    assert seen == expected


def test_load_more_without_javascript_shows_the_next_page(owner: Client, notes: Resource) -> None:
    expected = many_documents(notes, 60)
    first = owner.get(NOTES).content.decode()
    link = re.search(r'<a href="([^"]+cursor=[^"]+)"', first)
    assert link is not None
    html = html_of(owner.get(link.group(1).replace("&amp;", "&")))
    assert "<html" in html
    assert ids_in(html) == expected[50:]
    assert "Back to the first page" in html


def test_load_more_keeps_the_filter(owner: Client, notes: Resource) -> None:
    many_documents(notes, 70, prefix="alpha")
    many_documents(notes, 70, prefix="beta")
    first = owner.get(NOTES, {"q": "beta"}).content.decode()
    link = re.search(r'hx-get="([^"]+)"\s+hx-target="closest tr"', first)
    assert link is not None
    assert "q=beta" in link.group(1)
    second = owner.get(link.group(1).replace("&amp;", "&"), **HX).content.decode()
    ids = ids_in(first) + ids_in(second)
    assert len(ids) == 70
    assert all(i.startswith("beta-") for i in ids)


def _walk(client: Client, first_html: str) -> list[str]:
    """Every id of a list, following "Load more" (htmx) to the end."""
    html, seen = first_html, ids_in(first_html)
    while "Load more documents" in html:
        link = re.search(r'hx-get="([^"]+)"\s+hx-target="closest tr"', html)
        assert link is not None
        html = fragment_of(client.get(link.group(1).replace("&amp;", "&"), **HX))
        seen += ids_in(html)
    return seen


def test_the_list_sorts_by_updated_id_or_size_and_pages_in_that_order(
    owner: Client, notes: Resource
) -> None:
    ids = many_documents(notes, 120)  # newest first: doc-0000 ... doc-0119
    # Sizes: three of each, so ties are broken by id.
    Document.objects.filter(doc_id__in=ids).update(bytes=1)
    for index, doc_id in enumerate(ids):
        Document.objects.filter(doc_id=doc_id).update(bytes=(index % 40) * 100)
    Document.objects.filter(doc_id="doc-0005").update(deleted=True)
    live = [i for i in ids if i != "doc-0005"]
    by_size = sorted(live, key=lambda i: (-((ids.index(i) % 40) * 100), i))

    default = owner.get(NOTES).content.decode()
    assert 'aria-current="true">Updated<' in default
    assert _walk(owner, default) == live
    by_id = owner.get(NOTES, {"sort": "id"}).content.decode()
    assert 'aria-current="true">Id<' in by_id
    assert "sort=id&amp;" in by_id  # "Load more" stays in the order
    assert _walk(owner, by_id) == sorted(live)
    size_html = owner.get(NOTES, {"sort": "size"}).content.decode()
    assert _walk(owner, size_html) == by_size
    assert by_size[:3] == ["doc-0039", "doc-0079", "doc-0119"]
    # The filter keeps the order.
    filtered = owner.get(NOTES, {"sort": "id", "q": "doc-01"}, **HX).content.decode()
    assert ids_in(filtered) == [f"doc-01{i:02d}" for i in range(20)]


def test_the_list_counts_the_live_documents_of_the_resource(owner: Client, notes: Resource) -> None:
    many_documents(notes, 60)
    Document.objects.filter(doc_id="doc-0001").update(deleted=True)
    html = owner.get(NOTES, {"q": "doc-000"}).content.decode()
    # It loads after the page.
    assert f'<p class="total" data-total aria-live="polite" hx-get="{NOTES}total/"' in html
    assert 'hx-include="#document-filter"' in html
    total = owner.get(f"{NOTES}total/", **HX).content.decode()
    assert total == "59 documents"
    # With the filter's query: how many it keeps, of how many (the deleted one is neither).
    total = owner.get(f"{NOTES}total/", {"q": "doc-000"}, **HX).content.decode()
    assert total == "9 of 59 documents"
    # Swapped rows (filter, "Load more") carry no total: the count reloads by itself.
    assert "data-total" not in owner.get(NOTES, {"q": "doc"}, **HX).content.decode()


def test_an_unknown_order_or_a_cursor_of_another_order_is_a_400_page(
    owner: Client, notes: Resource
) -> None:
    many_documents(notes, 60)
    response = owner.get(NOTES, {"sort": "title"})
    assert response.status_code == 400
    assert b"sort must be one of: updated, id, size." in response.content
    html = owner.get(NOTES, {"sort": "size"}).content.decode()
    cursor = re.search(r"cursor=([^\"&]+)", html)
    assert cursor is not None
    response = owner.get(NOTES, {"sort": "id", "cursor": cursor.group(1)})
    assert response.status_code == 400
    assert b"cursor is not valid" in response.content


def test_owners_select_rows_for_the_bulk_form_and_viewers_do_not(
    owner: Client, support: Client, web: Callable[[str], Any], make_document: Any
) -> None:
    document = make_document("workshop", text="x")
    html = owner.get(NOTES).content.decode()
    assert '<form id="bulk"' in html
    assert f'name="doc" form="bulk" value="workshop:{document.revision}"' in html
    assert "data-select-page" in html
    assert 'value="delete"' in html
    html = support.get(NOTES).content.decode()
    assert 'name="doc" form="bulk"' in html
    assert 'value="freeze"' in html
    assert 'value="delete"' not in html  # support staff freeze, owners delete
    html = web("viewer").get(NOTES).content.decode()
    assert 'id="bulk"' not in html
    assert 'name="doc"' not in html


def test_a_tampered_cursor_is_a_400_page(owner: Client, notes: Resource) -> None:
    response = owner.get(NOTES, {"cursor": "forged"})
    assert response.status_code == 400
    assert b"cursor is not valid" in response.content


def test_a_query_parameter_given_twice_is_a_400_page_as_in_the_api(
    owner: Client, notes: Resource, make_document: Any
) -> None:
    """`?cursor=a&cursor=b` is refused naming it (the API's 400 and words), in the pages'
    error style, as a page or an htmx fragment; the view never runs, so a form sent so
    changes nothing. A parameter a page takes repeated (the as-of plan's documents)
    is read whole."""
    many_documents(notes, 60)
    html = owner.get(NOTES).content.decode()
    cursor = re.search(r"cursor=([^\"&]+)", html)
    assert cursor is not None
    twice = f"{NOTES}?cursor={cursor.group(1)}&cursor=forged"
    response = owner.get(twice)
    page = html_of(response, 400)
    assert "<html" in page
    assert "Something is wrong with this request" in page
    assert "<p>cursor must be given once.</p>" in page
    assert "Back to the memory of Acme" in page
    fragment = html_of(owner.get(twice, **HX), 400)
    assert "<html" not in fragment
    assert "<p>cursor must be given once.</p>" in fragment
    assert "sort must be given once." in html_of(owner.get(f"{NOTES}?sort=id&sort=size"), 400)
    document = make_document("workshop", text="x")
    entries = AuditEntry.objects.count()
    refused = owner.post(f"{WORKSHOP}freeze/?next=a&next=b")
    assert "next must be given once." in html_of(refused, 400)
    document.refresh_from_db()
    assert document.agent_writes
    assert AuditEntry.objects.count() == entries
    plan = owner.get(
        f"{NOTES}as-of/restore/",
        {"asOf": timezone.now().isoformat(), "documents": ["workshop", "doc-0001"]},
    )
    chosen = re.findall(r'type="hidden" name="documents" value="([^"]+)"', html_of(plan))
    assert chosen == ["workshop", "doc-0001"]


def test_document_page_escapes_text_and_keeps_whitespace(owner: Client, make_document: Any) -> None:
    make_document(
        "workshop",
        title="<b>Bold</b>",
        text="<script>alert('x')</script>\n    indented\n\ttabbed",
        summary="<i>sum</i>",
    )
    html = html_of(owner.get(WORKSHOP))
    assert "<script>alert" not in html
    assert "<b>Bold</b>" not in html
    assert "<i>sum" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;\n    indented\n\ttabbed</pre>" in html
    assert "&lt;b&gt;Bold&lt;/b&gt;" in html


def test_document_page_shows_metadata_and_history(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    first = make_document("workshop", text="one")
    second = document_replace(
        resource=notes, doc_id="workshop", expected_revision=first.revision, text="two", actor="t"
    )
    html = owner.get(WORKSHOP).content.decode()
    # Short revision ids, the full one on hover and behind the copy button.
    assert f'<code title="{second.revision}">{second.revision[:8]}</code>' in html
    assert f'data-copy-text="{second.revision}"' in html
    assert "3 / 8192 bytes" in html
    history = html[html.index('id="history"') :]
    assert history.index(second.revision) < history.index(first.revision)
    assert '<span class="version-number">v2</span> edited<' in history
    assert '<span class="version-number">v1</span> created<' in history
    version_url = f"{WORKSHOP}versions/{first.revision}/"
    assert f'href="{version_url}" hx-get="{version_url}" hx-target="#version-diff"' in history


def test_document_history_pages_older_versions(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    document = make_document("workshop", text="v0")
    for i in range(1, 60):
        document = document_replace(
            resource=notes,
            doc_id="workshop",
            expected_revision=document.revision,
            text=f"v{i}",
            actor="t",
        )
    html = owner.get(WORKSHOP).content.decode()
    assert html.count("Compare with current") == 49  # 50 newest, one of them current
    link = re.search(r'hx-get="([^"]+versions=[^"]+)"', html)
    assert link is not None
    older = owner.get(link.group(1).replace("&amp;", "&"), **HX).content.decode()
    assert "<html" not in older
    assert older.count("Compare with current") == 10


def test_version_page_diffs_a_version_against_the_current_text(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    first = make_document("workshop", text="keep\nold line\n")
    document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=first.revision,
        text="keep\nnew line\n",
        actor="t",
    )
    html = html_of(owner.get(f"{WORKSHOP}versions/{first.revision}/"))
    assert re.search(r'<tr class="removed">.*?old line', html, re.S)
    assert re.search(r'<tr class="added">.*?new line', html, re.S)
    assert "1 line added, 1 removed" in html
    assert "Restore this version" in html
    partial = owner.get(f"{WORKSHOP}versions/{first.revision}/", **HX).content.decode()
    assert "<html" not in partial
    assert "old line" in partial
    assert "autofocus" in partial


def test_unknown_version_is_404(owner: Client, make_document: Any) -> None:
    make_document("workshop")
    assert owner.get(f"{WORKSHOP}versions/nope/").status_code == 404


def test_deleted_documents_are_404_and_gone_from_the_list(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.services.documents import document_delete

    document = make_document("workshop")
    make_document("other")
    document_delete(
        resource=notes, doc_id="workshop", expected_revision=document.revision, actor="t"
    )
    tombstone = owner.get(WORKSHOP)
    assert tombstone.status_code == 404
    html = tombstone.content.decode()
    assert "<code>workshop</code> was deleted</h1>" in html
    assert "<dt>Deleted by</dt><dd><code>t</code></dd>" in html
    assert "stays reserved" in html
    assert "audit/?resource=notes&amp;document=workshop" in html
    assert 'class="tabs"' in html  # the site's navigation stays
    assert ids_in(owner.get(NOTES).content.decode()) == ["other"]


def test_audit_log_lists_entries_and_filters_by_document(
    owner: Client, make_document: Any, people: People
) -> None:
    make_document("workshop")
    make_document("refunds")
    html = html_of(owner.get(f"{BASE}/audit/"))
    assert "notes/workshop" in html
    assert "notes/refunds" in html
    assert "<td>role.grant</td>" in html  # project-wide entries show in every environment
    filtered = owner.get(f"{BASE}/audit/", {"resource": "notes", "document": "workshop"})
    text = filtered.content.decode()
    assert "notes/workshop" in text
    assert "notes/refunds" not in text
    assert "<td>role.grant</td>" not in text


def test_audit_log_filters_by_part_of_an_id_action_actor_and_dates(
    owner: Client, make_document: Any, people: People, notes: Resource
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from memoryadmin.memory.models import AuditEntry
    from memoryadmin.memory.services.documents import document_set_agent_writes

    make_document("workshop-2024")
    make_document("refunds")
    document_set_agent_writes(resource=notes, doc_id="refunds", enabled=False, actor="user:sam")
    old = AuditEntry.objects.get(action="document.create", document_id="refunds")
    AuditEntry.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))

    def shown(**query: str) -> set[str]:
        html = html_of(owner.get(f"{BASE}/audit/", query))
        return set(re.findall(r"<td>(document\.[a-z]+)</td>.*?>notes/([\w-]+)</a>", html, re.S))

    assert shown(document="SHOP") == {("document.create", "workshop-2024")}
    assert shown(action="document.freeze") == {("document.freeze", "refunds")}
    assert shown(actor="sam") == {("document.freeze", "refunds")}
    today = timezone.now().date()
    since = (today - timedelta(days=1)).isoformat()
    assert shown(since=since, document="refunds") == {("document.freeze", "refunds")}
    until = (today - timedelta(days=5)).isoformat()
    assert shown(until=until) == {("document.create", "refunds")}
    # A start after the end: said so, nothing listed.
    html = html_of(owner.get(f"{BASE}/audit/", {"since": today.isoformat(), "until": until}))
    assert "The start date of the audit filter is after its end date." in html
    assert "No entries match this filter." in html


def test_audit_log_links_documents_and_writes_details_as_json(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.services.audit import audit_record

    make_document("workshop")
    audit_record(
        project_id="acme",
        environment="development",
        actor="user:olivia",
        action="test.flags",
        detail={"merged": False, "count": 2, "missing": None},
    )
    html = html_of(owner.get(f"{BASE}/audit/"))
    assert f'<a href="{WORKSHOP}">notes/workshop</a>' in html
    assert '<td class="who"><code>user:olivia</code></td>' in html
    assert "merged: false" in html
    assert "missing: null" in html
    assert "False" not in html


def test_audit_log_downloads_the_filtered_log_as_csv_and_json_lines(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    import csv
    import io
    import json

    make_document("workshop", title="=cmd|' /C calc'!A0")
    make_document("refunds")
    url = f"{BASE}/audit/download/"
    response = owner.get(url, {"format": "csv", "document": "work"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-acme-develop')
    rows = list(csv.reader(io.StringIO(streamed(response).decode())))
    assert rows[0] == [
        "id", "time", "environment", "actor", "action", "resource", "document", "revision",
        "detail",
    ]  # fmt: skip
    assert [(r[4], r[6]) for r in rows[1:]] == [("document.create", "workshop")]
    lines = streamed(owner.get(url, {"format": "jsonl"})).decode()
    records = [json.loads(line) for line in lines.splitlines()]
    assert [(r["action"], r["document"]) for r in records][:2] == [
        ("document.create", "refunds"),
        ("document.create", "workshop"),
    ]
    assert records[0]["detail"] == {"bytes": 0}
    assert owner.get(url, {"format": "xml"}).status_code == 400


def test_a_project_downloads_its_audit_log_one_at_a_time(
    owner: Client, support: Client, make_document: Any, notes: Resource
) -> None:
    """A download holds a request thread and a database connection while it streams:
    the project's people download its audit log one at a time, as its exports."""
    make_document("workshop")
    url = f"{BASE}/audit/download/"
    first = owner.get(url, {"format": "jsonl"})  # streaming, not read yet
    assert first.status_code == 200
    busy = support.get(url, {"format": "csv"})
    assert busy.status_code == 429
    assert busy["Retry-After"] == "5"
    assert (
        "This project is downloading its audit log already; one download runs at a time."
        in busy.content.decode()
    )
    assert b"document.create" in streamed(first)  # read whole: free again
    again = support.get(url, {"format": "csv"})
    assert again.status_code == 200
    assert b"document.create" in streamed(again)


def test_audit_log_pages_older_entries(owner: Client, project: Project, people: People) -> None:
    from memoryadmin.memory.services.audit import audit_record

    for i in range(70):
        audit_record(
            project_id="acme",
            environment="development",
            actor="test",
            action=f"test.action-{i}",
            # The older page's entries name documents: its first link takes the focus.
            resource_id="notes" if i < 20 else "",
            document_id=f"doc-{i}" if i < 20 else "",
        )
    html = owner.get(f"{BASE}/audit/").content.decode()
    assert "<td>test.action-69</td>" in html
    assert "<td>test.action-20</td>" in html
    assert "<td>test.action-19</td>" not in html
    link = re.search(r'hx-get="([^"]+cursor=[^"]+)"', html)
    assert link is not None
    older = owner.get(link.group(1).replace("&amp;", "&"), **HX).content.decode()
    assert "test.action-19" in older
    assert "test.action-0<" in older
    assert older.count(" autofocus") == 1
    assert re.search(r'href="[^"]*/doc-19/" autofocus>notes/doc-19</a>', older)
    assert " autofocus" not in html.split("<tbody>")[1]


# Who sees what.

PAGES = [
    f"{BASE}/",
    "/projects/acme/production/",
    f"{BASE}/audit/",
    NOTES,
    WORKSHOP,
    f"{WORKSHOP}versions/REV/",
]


@pytest.mark.parametrize("url", PAGES)
def test_users_without_a_role_see_nothing_of_a_project(
    url: str, people: People, web_client_for: Callable[[Any], Client], make_document: Any
) -> None:
    document = make_document("workshop")
    outsider = web_client_for(people.outsider)
    response = outsider.get(url.replace("REV", document.revision))
    assert response.status_code == 404
    assert b"No project &#x27;acme&#x27;." in response.content
    assert b"workshop" not in response.content
    # Exactly what a project that does not exist looks like.
    missing = outsider.get(url.replace("REV", document.revision).replace("acme", "nosuch"))
    assert missing.status_code == 404


@pytest.mark.parametrize("url", PAGES)
def test_viewers_read_every_page(
    url: str, people: People, web_client_for: Callable[[Any], Client], make_document: Any
) -> None:
    document = make_document("workshop")
    response = web_client_for(people.viewer).get(url.replace("REV", document.revision))
    assert response.status_code == 200


def test_viewers_get_no_buttons_for_what_they_may_not_do(
    people: People, web_client_for: Callable[[Any], Client], make_document: Any
) -> None:
    first = make_document("workshop")
    viewer = web_client_for(people.viewer)
    html = viewer.get(WORKSHOP).content.decode()
    for label in ("Edit", "Delete"):
        assert f">{label}" not in html
    assert 'name="agentWrites"' not in html
    assert ">Export<" not in viewer.get(f"{BASE}/").content.decode()
    assert "New document" not in viewer.get(NOTES).content.decode()
    version = viewer.get(f"{WORKSHOP}versions/{first.revision}/").content.decode()
    assert "Restore this version" not in version


def test_support_gets_freeze_and_export_but_no_edit_or_delete(
    people: People, web_client_for: Callable[[Any], Client], make_document: Any
) -> None:
    make_document("workshop")
    support = web_client_for(people.support)
    html = support.get(WORKSHOP).content.decode()
    assert 'name="agentWrites"' in html
    assert ">Edit<" not in html
    assert "Delete&hellip;" not in html
    assert ">Export<" in support.get(f"{BASE}/").content.decode()


# Security headers and markup rules.


def test_pages_send_a_content_security_policy_without_inline_script(
    owner: Client, make_document: Any
) -> None:
    make_document("workshop")
    for url in (f"{BASE}/", NOTES, WORKSHOP, f"{WORKSHOP}edit/", "/login/"):
        response = owner.get(url)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "unsafe-inline" not in policy
        assert "style-src 'self'" in policy
        html = response.content.decode()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), url
        assert not re.search(r"<style", html), url
        assert not re.search(r"\sstyle=", html), url
        assert not re.search(r"\son[a-z]+=", html), url


def test_every_htmx_link_also_has_an_href(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    first = make_document("workshop")
    document_replace(
        resource=notes, doc_id="workshop", expected_revision=first.revision, text="2", actor="t"
    )
    many_documents(notes, 60)
    for url in (NOTES, WORKSHOP):
        html = owner.get(url).content.decode()
        tags = re.findall(r"<(\w+)\b[^>]*\bhx-get=[^>]*>", html)
        assert tags, url
        for tag in re.finditer(r"<(\w+)\b([^>]*\bhx-get=[^>]*)>", html):
            name, attributes = tag.group(1), tag.group(2)
            if re.search(r'hx-trigger="load[",]', attributes):
                # Not a link: a fragment the page loads after itself (the review
                # badge, the list's total).
                assert name in ("span", "p")
            elif name == "a":
                href = re.search(r'href="([^"]+)"', attributes)
                get = re.search(r'hx-get="([^"]+)"', attributes)
                assert href
                assert get
                assert href.group(1).split("#")[0] == get.group(1)
            else:
                # The filter input: its form submits to the same URL without JavaScript.
                assert name == "input"
                assert 'name="q"' in attributes


def test_session_cookies_are_secure_outside_debug() -> None:
    from django.conf import settings

    assert settings.DEBUG is False
    assert settings.SESSION_COOKIE_SECURE is True
    assert settings.CSRF_COOKIE_SECURE is True


# Query counts do not grow with the number of documents or versions.


def queries(client: Client, url: str, **headers: Any) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200, url
    return len(captured)


def test_document_list_query_count_is_constant(
    owner: Client, notes: Resource, django_assert_max_num_queries: Any
) -> None:
    many_documents(notes, 3, prefix="few")
    few = queries(owner, NOTES)
    many_documents(notes, 200, prefix="many")
    with django_assert_max_num_queries(few):
        owner.get(NOTES)
    with django_assert_max_num_queries(few):
        owner.get(NOTES, {"q": "many"})
    with django_assert_max_num_queries(few):
        owner.get(NOTES, {"q": "many"}, **HX)


def test_inventory_and_audit_query_counts_are_constant(
    owner: Client, notes: Resource, make_document: Any, django_assert_max_num_queries: Any
) -> None:
    make_document("one")
    inventory, audit = queries(owner, f"{BASE}/"), queries(owner, f"{BASE}/audit/")
    for i in range(80):
        make_document(f"doc-{i}")
    with django_assert_max_num_queries(inventory):
        owner.get(f"{BASE}/")
    with django_assert_max_num_queries(audit):
        owner.get(f"{BASE}/audit/")


def test_document_page_query_count_is_constant_in_versions(
    owner: Client, make_document: Any, notes: Resource, django_assert_max_num_queries: Any
) -> None:
    document = make_document("workshop", text="v0")
    few = queries(owner, WORKSHOP)
    for i in range(80):
        document = document_replace(
            resource=notes,
            doc_id="workshop",
            expected_revision=document.revision,
            text=f"v{i}",
            actor="t",
        )
    with django_assert_max_num_queries(few):
        owner.get(WORKSHOP)


def test_http_resources_keep_no_documents_here(owner: Client, project: Project) -> None:
    Resource.objects.create(
        project=project, environment="development", resource_id="crm", kind="http", max_bytes=1
    )
    listing = owner.get(f"{BASE}/resources/crm/")
    assert listing.status_code == 200
    assert "its records live with the provider" in listing.content.decode()
    assert "New document" not in listing.content.decode()
    create = owner.post(f"{BASE}/resources/crm/new/", {"doc_id": "x", "title": "X"})
    assert create.status_code == 400
    assert not Document.objects.exists()


def test_history_names_every_kind_of_change_in_words(
    owner: Client, make_document: Any, notes: Resource
) -> None:
    from memoryadmin.memory.services.documents import (
        document_patch,
        document_restore,
        document_set_agent_writes,
    )

    first = make_document("workshop", text="one")
    document = document_replace(
        resource=notes, doc_id="workshop", expected_revision=first.revision, text="two", actor="t"
    )
    document = document_patch(
        resource=notes,
        doc_id="workshop",
        expected_revision=document.revision,
        title="Renamed",
        actor="t",
    )
    document, _ = document_set_agent_writes(
        resource=notes, doc_id="workshop", enabled=False, actor="t"
    )
    document, _ = document_set_agent_writes(
        resource=notes, doc_id="workshop", enabled=True, actor="t"
    )
    document = agent_save(notes, "workshop", document.revision, "three", session_id="sess_1")
    document_restore(
        resource=notes,
        doc_id="workshop",
        revision=first.revision,
        expected_revision=document.revision,
        actor="t",
    )
    history = owner.get(WORKSHOP).content.decode().split('id="history"')[1]
    labels = re.findall(r'<span class="version-number">(v\d+)</span> ([^<]+)<', history)
    assert labels == [
        ("v7", "restored from version 1"),
        ("v6", "agent save"),
        ("v5", "unfroze agent writes"),
        ("v4", "froze agent writes"),
        ("v3", "renamed to “Renamed”"),
        ("v2", "edited"),
        ("v1", "created"),
    ]
    assert ">patch<" not in history


def test_error_pages_use_the_sites_layout_outside_the_api(
    owner: Client, people: People, web_client_for: Callable[[Any], Client]
) -> None:
    from django.test import RequestFactory

    from memoryadmin.errorpages import server_error_view

    missing = owner.get("/no/such/page/")
    assert missing.status_code == 404
    assert 'class="topbar"' in missing.content.decode()
    assert "There is no page at this address." in missing.content.decode()
    api = owner.get("/api/managed-agents/no-such-route/")
    assert api.json() == {"error": {"code": "not_found", "message": "No such route."}}
    # The reference provider is an API too: the envelope, not the page.
    provider = owner.get("/reference-provider/no-such-route/")
    assert provider.status_code == 404
    assert provider.json() == {"error": {"code": "not_found", "message": "No such route."}}

    forbidden = web_client_for(people.viewer).get(f"{WORKSHOP}edit/")
    html = forbidden.content.decode()
    assert forbidden.status_code == 403
    assert 'aria-label="Project sections"' in html
    assert '<span class="role role-viewer">viewer</span>' in html

    request = RequestFactory().get("/projects/acme/development/")
    request.user = people.owner
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        crashed = server_error_view(request)
    assert crashed.status_code == 500
    assert "Something went wrong" in crashed.content.decode()
    assert "olivia" in crashed.content.decode()
    from django.db import OperationalError

    try:
        raise OperationalError("connection refused")
    except OperationalError:
        away = server_error_view(RequestFactory().post("/reference-provider/oc-memory"))
    assert (away.status_code, away["Retry-After"]) == (503, "5")
    assert away["Content-Type"] == "application/json"
    assert b'"code": "service_unavailable"' in away.content


def test_a_refused_csrf_token_is_a_page_in_the_sites_layout(people: People) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.owner)
    response = client.post(f"{NOTES}new/", {"doc_id": "x", "title": "X"})
    assert response.status_code == 403
    html = response.content.decode()
    assert "without a valid security token" in html
    assert 'class="topbar"' in html


def test_ago_says_what_timesince_says() -> None:
    """The list's "… ago" and "in …" have a fast path under 28 days: Django's words."""
    import random
    from datetime import UTC, datetime, timedelta

    from django.utils.timesince import timesince, timeuntil

    from memoryadmin.web.templatetags.memorypage import _ago, ago

    pick = random.Random(17)
    for _ in range(20000):
        now = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=pick.uniform(0, 800 * 86400))
        seconds = pick.choice(
            [pick.uniform(0, 40 * 86400), pick.uniform(0, 4 * 3600), pick.randint(0, 29 * 86400)]
        )
        then = now - timedelta(seconds=seconds)
        expected = "just now" if seconds < 60 else f"{timesince(then, now)} ago"
        assert ago(then, now) == expected
        # The same span ahead: "in …", as timeuntil words it.
        later = now + timedelta(seconds=seconds)
        expected = "in under a minute" if seconds < 60 else f"in {timeuntil(later, now)}"
        assert ago(later, now) == expected
        # The list's column: one unit.
        expected = "just now" if seconds < 60 else f"{timesince(then, now, depth=1)} ago"
        assert _ago(then, now, False, 1) == expected
        expected = "in under a minute" if seconds < 60 else f"in {timeuntil(later, now, depth=1)}"
        assert _ago(later, now, False, 1) == expected


def test_remembered_times_are_written_in_the_zone_asked() -> None:
    """The page's and the API's remembered timestamps: equal instants share an entry and
    still read in the zone asked for (the API's always in UTC)."""
    from datetime import UTC, datetime, timedelta, timezone
    from zoneinfo import ZoneInfo

    from memoryadmin.memory.representations import iso_ms
    from memoryadmin.web.templatetags.memorypage import _stamp

    utc = datetime(2026, 1, 31, 9, 5, 0, 123456, tzinfo=UTC)
    paris = utc.astimezone(ZoneInfo("Europe/Paris"))
    plus_two = utc.astimezone(timezone(timedelta(hours=2)))
    assert utc == paris == plus_two
    for value in (utc, paris, plus_two, utc, paris):
        assert _stamp(value, ZoneInfo("UTC")) == "2026-01-31T09:05:00.123456+00:00"
        assert _stamp(value, ZoneInfo("Europe/Paris")) == "2026-01-31T10:05:00.123456+01:00"
        assert _stamp(value, ZoneInfo("Asia/Tokyo")) == "2026-01-31T18:05:00.123456+09:00"
        assert iso_ms(value) == "2026-01-31T09:05:00.123Z"
    assert iso_ms(utc + timedelta(milliseconds=1)) == "2026-01-31T09:05:00.124Z"


def test_a_read_user_takes_the_place_of_its_lazy_object(people: People) -> None:
    """A page reads its user through Django's lazy object once; from then on the request
    holds the user itself (an unread one stays lazy)."""
    from django.contrib.auth.models import User
    from django.test import RequestFactory
    from django.utils.functional import SimpleLazyObject

    from memoryadmin.core.users import user_settled

    user = User.objects.get(username="olivia")
    request = RequestFactory().get("/")
    request.user = SimpleLazyObject(lambda: user)  # type: ignore[assignment]  # lazy, as in a request
    user_settled(request)
    assert isinstance(request.__dict__["user"], SimpleLazyObject)
    assert request.user.is_authenticated  # read through the lazy object
    user_settled(request)
    assert request.__dict__["user"] is user
