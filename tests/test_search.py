"""Search: ranked hits with escaped snippets, phrases and prefixes, keyset pages, and an
index that follows every write (create, replace, patch, delete, restore, agent save)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.documents import (
    document_delete,
    document_patch,
    document_replace,
    document_restore,
)
from memoryadmin.memory.services.search import document_search
from tests.helpers import DEV, DOCS, Keys, agent_save, html_of

pytestmark = pytest.mark.django_db

SEARCH = "/api/managed-agents/projects/acme/memory/search"


def ids(api: APIClient, q: str, url: str = DOCS) -> list[str]:
    response = api.get(url, {"environment": "development", "q": q})
    assert response.status_code == 200, response.content
    return [d["id"] for d in response.json()["documents"]]


def found(notes: Resource, q: str) -> list[str]:
    hits, _ = document_search(resources=[notes], q=q, scope="t")
    return [h["doc_id"] for h in hits]


@pytest.fixture
def library(make_document: Callable[..., Any]) -> None:
    make_document("runtime", title="Runtime notes", text="Exercises must run on Node.js 22.")
    make_document("refunds", title="Refund policy", summary="Refunds within 30 days.")
    make_document("payments-team", title="Payments", text="The refund desk answers in a day.")
    make_document("greeting", title="Hello", text="Say hello to every new customer first.")


def test_words_match_in_id_title_summary_and_text_ranked_title_first(
    api: APIClient, library: None
) -> None:
    assert ids(api, "refund") == ["refunds", "payments-team"] or ids(api, "refund")[0] == "refunds"
    assert ids(api, "customer") == ["greeting"]
    assert ids(api, "exercises node") == ["runtime"]
    assert ids(api, "exercises python") == []


def test_phrases_and_prefixes(api: APIClient, library: None) -> None:
    assert ids(api, '"new customer"') == ["greeting"]
    assert ids(api, '"customer new"') == []
    assert ids(api, "exer*") == ["runtime"]
    assert ids(api, "exer") == []
    assert ids(api, "node.js") == ["runtime"]


def test_id_and_title_substrings_match(api: APIClient, library: None) -> None:
    assert ids(api, "ments-te") == ["payments-team"]
    assert ids(api, "untime no") == ["runtime"]


def test_snippets_are_escaped_with_the_matches_marked(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    make_document("xss", title="Markup", text="Beware <script>alert(1)</script> & the beware sign.")
    document = api.get(DOCS, {"environment": "development", "q": "beware"}).json()["documents"][0]
    assert "<script>" not in document["snippet"]
    assert "&lt;script&gt;" in document["snippet"]
    assert "<mark>Beware</mark>" in document["snippet"]
    assert "text" not in document


def test_search_pages_by_keyset_without_repeats(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    for n in range(60):
        make_document(f"doc-{n:02d}", text="common " * (n % 5 + 1))
    first = api.get(DOCS, {"environment": "development", "q": "common"}).json()
    assert len(first["documents"]) == 50
    second = api.get(
        DOCS, {"environment": "development", "q": "common", "cursor": first["nextCursor"]}
    ).json()
    assert len(second["documents"]) == 10
    assert second["nextCursor"] is None
    seen = [d["id"] for d in first["documents"] + second["documents"]]
    assert sorted(seen) == [f"doc-{n:02d}" for n in range(60)]
    other = api.get(
        DOCS, {"environment": "development", "q": "other", "cursor": first["nextCursor"]}
    )
    assert other.status_code == 400


def test_the_index_follows_every_write(
    notes: Resource, make_document: Callable[..., Any], session: Session
) -> None:
    first = make_document("log", text="alpha")
    assert found(notes, "alpha") == ["log"]
    second = document_replace(
        resource=notes, doc_id="log", expected_revision=first.revision, text="beta", actor="t"
    )
    assert (found(notes, "alpha"), found(notes, "beta")) == ([], ["log"])
    third = document_patch(
        resource=notes, doc_id="log", expected_revision=second.revision, title="Gamma", actor="t"
    )
    assert found(notes, "gamma") == ["log"]
    fourth = document_restore(
        resource=notes,
        doc_id="log",
        revision=first.revision,
        expected_revision=third.revision,
        actor="t",
    )
    assert (found(notes, "alpha"), found(notes, "beta")) == (["log"], [])
    fifth = agent_save(notes, "log", fourth.revision, "delta", session_id=session.id, action="save")
    assert (found(notes, "alpha"), found(notes, "delta")) == ([], ["log"])
    document_delete(resource=notes, doc_id="log", expected_revision=fifth.revision, actor="t")
    assert found(notes, "delta") == found(notes, "gamma") == found(notes, "log") == []


def test_a_rolled_back_write_leaves_the_index_as_it_was(
    notes: Resource, make_document: Callable[..., Any]
) -> None:
    from django.db import transaction

    first = make_document("log", text="alpha")

    def replace_then_fail() -> None:
        with transaction.atomic():
            document_replace(
                resource=notes,
                doc_id="log",
                expected_revision=first.revision,
                text="beta",
                actor="t",
            )
            raise RuntimeError

    with pytest.raises(RuntimeError):
        replace_then_fail()
    assert (found(notes, "alpha"), found(notes, "beta")) == (["log"], [])


def test_environment_search_spans_resources_and_never_others(
    api: APIClient, make_document: Callable[..., Any], other_project: Project, keys: Keys
) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("workshop", text="Node 22 everywhere.")
    make_document("node-faq", resource=kb, title="Node questions")
    body = api.get(SEARCH, {"environment": "development", "q": "node"}).json()
    assert {(d["resource"], d["id"]) for d in body["documents"]} == {
        ("notes", "workshop"),
        ("kb", "node-faq"),
    }
    assert body["documents"][0]["id"] == "node-faq"  # a title match ranks first
    assert api.get(SEARCH, {"environment": "production", "q": "node"}).json()["documents"] == []
    assert Document.objects.count() == 2


@pytest.mark.parametrize("q", ["", '""', "***", "x" * 257])
def test_a_query_without_words_is_400(api: APIClient, notes: Resource, q: str) -> None:
    for url in (DOCS, SEARCH):
        response = api.get(url, {"environment": "development", "q": q})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_request"
    assert api.get(SEARCH + DEV).status_code == 400


def test_search_needs_a_key_of_the_project(
    client_for: Callable[[str | None], APIClient], keys: Keys, library: None
) -> None:
    assert ids(client_for(keys.read_only), "refund", SEARCH)[0] == "refunds"
    assert (
        client_for(keys.other)
        .get(SEARCH, {"environment": "development", "q": "refund"})
        .status_code
        == 403
    )
    assert (
        client_for(None).get(SEARCH, {"environment": "development", "q": "refund"}).status_code
        == 401
    )


# The Memory page

PAGE = "/projects/acme/development/search/"


def test_page_groups_hits_by_resource_with_safe_snippets(
    web: Callable[[str], Any], make_document: Callable[..., Any]
) -> None:
    kb = Resource.objects.get(resource_id="kb", environment="development")
    make_document("workshop", text="Node <b>22</b> everywhere.")
    make_document("node-faq", resource=kb, title="Node questions")
    html = html_of(web("viewer").get(PAGE, {"q": "node"}))
    assert html.index('id="group-kb"') < html.index('id="group-notes"')
    assert "Node &lt;b&gt;22&lt;/b&gt; everywhere." in html.replace("<mark>Node</mark>", "Node")
    assert "<b>22</b>" not in html
    assert 'href="/projects/acme/development/resources/notes/documents/workshop/"' in html
    assert 'id="site-search"' in html
    assert 'value="node"' in html


def test_page_reports_a_bad_query_and_empty_results(
    web: Callable[[str], Any], notes: Resource
) -> None:
    response = web("owner").get(PAGE, {"q": '"'})
    assert response.status_code == 422
    assert "q needs at least one word" in response.content.decode()
    assert "No documents match" in html_of(web("owner").get(PAGE, {"q": "nothing"}))


def test_page_search_is_for_members_only(web: Callable[[str], Any], notes: Resource) -> None:
    assert web("outsider").get(PAGE, {"q": "x"}).status_code == 404


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_slash_focuses_the_search_box_and_results_show_marked_snippets(
    open_page: Any, used_memory: Resource
) -> None:
    from playwright.sync_api import expect

    page = open_page("olivia")
    page.locator("body").click()
    page.keyboard.press("/")
    box = page.get_by_label("Search development memory")
    expect(box).to_be_focused()
    box.fill("node")
    box.press("Enter")
    expect(page).to_have_url("/projects/acme/development/search/?q=node")
    expect(page.locator(".search-hits mark").first).to_have_text("Node", ignore_case=True)
    assert page.js_errors == []


def test_a_document_deleted_between_the_ranking_and_the_page_is_left_out(
    notes: Resource, library: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryadmin.memory.services import search

    ranker = "_pg_ranked" if connection.vendor == "postgresql" else "_sqlite_ranked"
    ranked = getattr(search, ranker)

    def then_deleted(*args: Any) -> Any:
        hits = ranked(*args)
        # A delete that commits after the ranking's statement, before the page's read.
        doomed = Document.objects.get(resource=notes, doc_id="refunds")
        document_delete(
            resource=notes, doc_id="refunds", expected_revision=doomed.revision, actor="t"
        )
        return hits

    monkeypatch.setattr(search, ranker, then_deleted)
    hits, _ = document_search(resources=[notes], q="refund", scope="t")
    assert [h["doc_id"] for h in hits] == ["payments-team"]
    assert all(h["text"] for h in hits)


def test_a_deleted_document_leaves_no_words_in_the_index(
    notes: Resource, make_document: Callable[..., Any]
) -> None:
    for n in range(20):
        make_document(f"filler-{n}", text=f"filler words {n}")
    doomed = make_document("doomed", title="Quixotic", text="xylophonist")
    document_delete(resource=notes, doc_id="doomed", expected_revision=doomed.revision, actor="t")
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            blobs: list[Any] = []
            for table in ("memory_document_fts", "memory_document_trigram"):
                for shadow in ("data", "content"):
                    cursor.execute(f"SELECT * FROM {table}_{shadow}")
                    blobs += [cell for row in cursor.fetchall() for cell in row]
            raw = b"".join(c if isinstance(c, bytes) else str(c).encode() for c in blobs)
        else:
            cursor.execute("SELECT string_agg(search_vector::text, ' ') FROM memory_document")
            raw = (cursor.fetchone()[0] or "").encode()
    assert b"filler" in raw
    assert b"xylophonist" not in raw.lower()
    assert b"quixotic" not in raw.lower()


# The agent tool


SESSIONS = "/api/managed-agents/sessions"


def start(api: APIClient, memory: dict[str, Any], key: str) -> tuple[str, dict[str, Any]]:
    body = {"agentId": "support-bot@development", "memory": memory}
    created = api.post(SESSIONS, body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert created.status_code == 201, created.content
    session = created.json()["session"]["id"]
    recall = api.post(f"{SESSIONS}/{session}/memory/recall", {"use": list(memory)}, format="json")
    assert recall.status_code == 200, recall.content
    return session, recall.json()


def call(api: APIClient, session: str, recall: dict[str, Any], arguments: Any) -> Any:
    body = {
        "recallId": recall["recallId"],
        "callId": "c1",
        "name": "memory_search",
        "arguments": arguments,
    }
    return api.post(f"{SESSIONS}/{session}/memory/tool-calls", body, format="json")


def test_memory_search_is_offered_only_where_the_binding_allows_it(
    api: APIClient, library: None
) -> None:
    _, plain = start(api, {"notes": {"scope": "collection"}}, "s1")
    assert "memory_search" not in [t["name"] for t in plain["tools"]]
    session, allowed = start(api, {"notes": {"scope": "collection", "search": True}}, "s2")
    tool = next(t for t in allowed["tools"] if t["name"] == "memory_search")
    assert tool["inputSchema"]["required"] == ["query"]
    assert tool["inputSchema"]["properties"]["limit"]["type"] == "integer"
    inspected = api.get(f"{SESSIONS}/{session}").json()["memory"]
    assert inspected == [
        {
            "resource": "notes",
            "scope": "collection",
            "access": "read",
            "search": True,
            "writable": False,
        }
    ]


def test_memory_search_returns_ids_titles_and_plain_snippets_in_pages(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    for n in range(7):
        make_document(f"note-{n}", title=f"Note {n}", text=f"A & B <refund> case {n}.")
    session, recall = start(api, {"notes": {"scope": "collection", "search": True}}, "s1")
    first = call(api, session, recall, {"query": "refund", "limit": 5})
    assert first.status_code == 200, first.content
    page = first.json()["result"]
    assert len(page["documents"]) == 5
    assert set(page["documents"][0]) == {"id", "title", "snippet"}
    assert page["documents"][0]["snippet"].startswith("A & B <refund> case")
    rest = call(api, session, recall, {"query": "refund", "cursor": page["nextCursor"]})
    ids = [d["id"] for d in page["documents"] + rest.json()["result"]["documents"]]
    assert sorted(ids) == [f"note-{n}" for n in range(7)]
    assert rest.json()["result"]["nextCursor"] is None


@pytest.mark.parametrize(
    ("arguments", "outcome"),
    [
        ({"query": "***"}, "invalid_query"),
        ({"query": "refund", "cursor": "forged"}, "invalid_cursor"),
    ],
)
def test_memory_search_rejects_what_the_model_can_fix(
    api: APIClient, library: None, arguments: dict[str, Any], outcome: str
) -> None:
    session, recall = start(api, {"notes": {"scope": "collection", "search": True}}, "s1")
    response = call(api, session, recall, arguments)
    assert response.status_code == 200
    assert response.json()["result"]["reason"] == outcome


@pytest.mark.parametrize(
    "arguments", [{}, {"query": 5}, {"query": "a", "limit": 0}, {"query": "a", "limit": True}]
)
def test_memory_search_with_malformed_arguments_is_a_tool_error(
    api: APIClient, library: None, arguments: dict[str, Any]
) -> None:
    session, recall = start(api, {"notes": {"scope": "collection", "search": True}}, "s1")
    response = call(api, session, recall, arguments)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_tool_arguments"


def test_memory_search_in_a_session_that_was_never_offered_it_is_unknown(
    api: APIClient, library: None
) -> None:
    session, recall = start(api, {"notes": {"scope": "collection"}}, "s1")
    response = call(api, session, recall, {"query": "refund"})
    assert response.status_code == 400
    assert "Unknown tool 'memory_search'" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "binding",
    [
        {"scope": "document", "id": "runtime", "search": True},
        {"scope": "collection", "search": "yes"},
    ],
)
def test_search_is_a_collection_binding_option(
    api: APIClient, library: None, binding: dict[str, Any]
) -> None:
    body = {"agentId": "support-bot@development", "memory": {"notes": binding}}
    response = api.post(SESSIONS, body, format="json", HTTP_IDEMPOTENCY_KEY="s1")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_memory_binding"


# The CLI


def test_cli_search_prints_hits_of_every_resource(library: None, capsys: Any) -> None:
    from django.core.management import call_command

    call_command("memory", "--project", "acme", "search", "refund")
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["RESOURCE", "ID", "TITLE", "SNIPPET"]
    assert "refunds" in out
    assert "<mark>" not in out
    call_command(
        "memory", "--project", "acme", "search", "refund*", "--resource", "notes", "--json"
    )
    body = json.loads(capsys.readouterr().out)
    assert body["documents"][0]["id"] == "refunds"
    assert body["documents"][0]["resource"] == "notes"


def test_cli_tables_show_agent_written_fields_on_one_line_without_terminal_controls(
    notes: Resource, make_document: Callable[..., Any], capsys: Any
) -> None:
    from django.core.management import call_command

    make_document(
        "hostile",
        title="Rogue\x1b]0;owned\x07 title\u202e",
        text="first line about zebras\nsecond line\r\x1b[2Jthird",
    )
    for command in (["list", "notes"], ["search", "zebras"]):
        call_command("memory", "--project", "acme", *command)
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert len(lines) == 2, out  # the heading and one row: no cell spans lines
        assert not any(c in out for c in "\x1b\x07\r\u202e"), out
        assert "Rogue ]0;owned  title" in lines[1]
    call_command("memory", "--project", "acme", "list", "notes", "--as-of", "2999-01-01T00:00:00Z")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 2, out  # the heading and one row, as without --as-of
    assert "Rogue ]0;owned  title" in lines[1]
    assert "\x1b" not in out, out


def test_cli_search_refuses_a_query_without_words(notes: Resource) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command("memory", "--project", "acme", "search", "***")
    assert refused.value.returncode == 6


@pytest.mark.parametrize("q", ["node\udcffjs", "no\x00de"])
def test_a_query_breaking_the_string_rule_is_refused_not_a_traceback(
    notes: Resource, make_document: Callable[..., Any], q: str
) -> None:
    """The CLI passes its arguments on as given (a byte that is not UTF-8 arrives as a
    lone surrogate): the search refuses what the database cannot take, as every door."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    make_document("runtime", title="Runtime notes", text="Node.js 22.")
    with pytest.raises(CommandError) as refused:
        call_command("memory", "--project", "acme", "search", q)
    assert refused.value.returncode == 6
    assert "q: the value contains" in str(refused.value)
    with pytest.raises(InvalidRequest):
        document_search(resources=[notes], q=q, scope="t")
    assert Document.objects.get(doc_id="runtime").text == "Node.js 22."


def test_the_index_is_in_place_after_every_migration(db: None) -> None:
    """A migration that rebuilds memory_document (SQLite remakes a table to alter it)
    drops its triggers: this fails until that migration puts them back."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT name FROM sqlite_master "
                "WHERE type = 'trigger' AND tbl_name = 'memory_document'"
            )
            names = {row[0] for row in cursor.fetchall()}
            assert names >= {
                "memory_document_search_ai",
                "memory_document_search_ad",
                "memory_document_search_au",
            }
        else:
            cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'memory_document'")
            names = {row[0] for row in cursor.fetchall()}
            assert names >= {"memory_document_search", "document_id_trgm", "document_title_trgm"}


@pytest.mark.django_db(transaction=True)
def test_the_words_index_moves_to_rowid_ranges_per_resource_and_back() -> None:
    """Migration memory 0011 (SQLite): documents indexed before it are found after it,
    each in its own resource, and migrating back restores the scoped index."""
    if connection.vendor != "sqlite":
        pytest.skip("the FTS5 index is SQLite's; PostgreSQL's is a column")
    before, latest = (
        ("memory", "0010_document_search_direct"),
        ("memory", "0011_document_search_by_resource"),
    )
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    try:
        apps = executor.loader.project_state([before]).apps
        project = apps.get_model("memory", "Project").objects.create(id="old", name="Old")
        made = {}
        for resource_id in ("one", "two"):
            resource = apps.get_model("memory", "Resource").objects.create(
                project=project,
                environment="development",
                resource_id=resource_id,
                kind="document",
                max_bytes=8192,
            )
            made[resource_id] = resource.pk
            apps.get_model("memory", "Document").objects.create(
                resource=resource,
                doc_id=f"note-{resource_id}",
                title="Lantern",
                text=f"zephyrine in {resource_id}",
                revision="r1",
                bytes=20,
                updated_at=timezone.now(),
                created_at=timezone.now(),
                writer_kind="owner",
            )
        executor = MigrationExecutor(connection)
        executor.migrate([latest])
        one, two = Resource.objects.get(pk=made["one"]), Resource.objects.get(pk=made["two"])
        assert found(one, "zephyrine") == ["note-one"]
        assert found(two, "zephyrine") == ["note-two"]
        hits, _ = document_search(resources=[one, two], q="zephyrine lantern", scope="t")
        assert sorted(h["doc_id"] for h in hits) == ["note-one", "note-two"]
        executor = MigrationExecutor(connection)
        executor.migrate([before])
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT rowid FROM memory_document_fts WHERE memory_document_fts MATCH %s",
                [f"scope : res{made['two']} AND zephyrine"],
            )
            assert [row[0] for row in cursor.fetchall()] == [
                Document.objects.get(doc_id="note-two").pk
            ]
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_a_search_binding_and_a_provider_tool_of_that_name_collide(
    api: APIClient, project: Project, library: None
) -> None:
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.refprovider.declaration import reference_declaration
    from tests.helpers import MANIFEST_MEMORY

    facts = reference_declaration(
        resource_id="facts", base_url="http://127.0.0.1:9", description="Facts."
    )
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[*MANIFEST_MEMORY, facts],
        promote="development",
        actor="t",
    )
    namespace = {"scope": "namespace", "id": "team", "access": "read-write"}
    body: dict[str, Any] = {
        "agentId": "support-bot@development",
        "memory": {"notes": {"scope": "collection", "search": True}, "facts": namespace},
    }
    response = api.post(SESSIONS, body, format="json", HTTP_IDEMPOTENCY_KEY="s1")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "tool_collision"
    body["memory"]["notes"] = {"scope": "collection"}
    assert api.post(SESSIONS, body, format="json", HTTP_IDEMPOTENCY_KEY="s2").status_code == 201
