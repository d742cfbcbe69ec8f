"""A store as it was: ?asOf= listings from the version history, and restoring documents
or a whole resource to a moment as new conditional versions."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.asof import document_list_as_of
from memoryadmin.memory.services.documents import (
    document_create,
    document_delete,
    document_patch,
    document_replace,
)
from memoryadmin.memory.services.redaction import version_redact
from tests.helpers import DEV, DOCS, Keys, form_posted, html_of

RESTORE = "/api/managed-agents/projects/acme/memory/notes/restore"


def moment() -> datetime:
    """Now, and a clock that has moved on, so the next write is strictly later."""
    now = timezone.now()
    while timezone.now() <= now:
        pass
    return now


def current(document: Document) -> Document:
    return Document.objects.get(pk=document.pk)


def restore(api: APIClient, body: Any) -> Any:
    return api.post(f"{RESTORE}{DEV}", data=json.dumps(body), content_type="application/json")


@pytest.fixture
def history(notes: Resource, make_document: Any) -> dict[str, Any]:
    """Three documents at T: one changed since, one deleted since, one left alone;
    and one created after T."""
    changed = make_document("changed", text="then")
    gone = make_document("gone", text="soon gone")
    kept = make_document("kept", text="as it was")
    t = moment()
    document_replace(
        resource=notes, doc_id="changed", expected_revision=changed.revision, text="now", actor="t"
    )
    document_delete(resource=notes, doc_id="gone", expected_revision=gone.revision, actor="t")
    make_document("later", text="new")
    return {"t": t, "changed": changed, "gone": gone, "kept": kept}


def test_as_of_lists_each_document_with_its_version_then(
    api: APIClient, history: dict[str, Any]
) -> None:
    response = api.get(DOCS, {"environment": "development", "asOf": history["t"].isoformat()})
    assert response.status_code == 200, response.json()
    entries = {d["id"]: d for d in response.json()["documents"]}
    assert list(entries) == ["changed", "gone", "kept"]
    assert entries["changed"]["revision"] == history["changed"].revision
    assert entries["changed"]["currentRevision"] != history["changed"].revision
    assert entries["gone"]["deleted"] is True
    assert entries["gone"]["currentRevision"] is None
    assert entries["gone"]["title"] == ""
    assert entries["kept"]["currentRevision"] == history["kept"].revision
    assert "text" not in entries["kept"]
    assert api.get(f"{DOCS}{DEV}&asOf=yesterday").status_code == 400
    early = api.get(f"{DOCS}{DEV}&asOf=2000-01-01T00:00:00Z").json()
    assert early == {"documents": [], "nextCursor": None}


def test_restore_to_a_moment_never_resurrects_and_leaves_newer_documents(
    api: APIClient, history: dict[str, Any], client_for: Any, keys: Keys
) -> None:
    t = history["t"].isoformat()
    dry = restore(api, {"asOf": t, "dryRun": True})
    assert dry.status_code == 200, dry.json()
    actions = {d["documentId"]: d["action"] for d in dry.json()["documents"]}
    assert actions == {
        "changed": "restore",
        "gone": "deleted",
        "kept": "unchanged",
        "later": "created_since",
    }
    assert current(history["changed"]).text == "now"
    assert restore(client_for(keys.read_only), {"asOf": t}).status_code == 403
    applied = restore(api, {"asOf": t})
    assert applied.status_code == 200
    written = {d["documentId"]: d["revision"] for d in applied.json()["documents"]}
    restored = current(history["changed"])
    assert restored.text == "then"
    assert written["changed"] == restored.revision
    assert written["gone"] is None
    assert Document.objects.get(doc_id="gone").deleted
    assert Document.objects.get(doc_id="later").text == "new"
    entry = AuditEntry.objects.get(action="resource.restore_as_of")
    assert entry.detail["restored"] == ["changed"]


def test_restore_chosen_documents_only(api: APIClient, notes: Resource, make_document: Any) -> None:
    one = make_document("one", text="1")
    two = make_document("two", text="2")
    t = moment()
    for doc in (one, two):
        document_replace(
            resource=notes, doc_id=doc.doc_id, expected_revision=doc.revision, text="x", actor="t"
        )
    body = restore(api, {"asOf": t.isoformat(), "documents": ["two", "nope"]}).json()
    assert {d["documentId"]: d["action"] for d in body["documents"]} == {
        "nope": "absent",
        "two": "restore",
    }
    assert (current(one).text, current(two).text) == ("x", "2")
    assert restore(api, {"asOf": "soon"}).status_code == 400
    future = (timezone.now() + timedelta(days=1)).isoformat()
    assert restore(api, {"asOf": future}).status_code == 400
    assert restore(api, {"asOf": t.isoformat(), "documents": "two"}).status_code == 400


@pytest.mark.parametrize("resource_id", ["incidents", "proposals", "operations"])
def test_a_resource_named_as_a_project_wide_list_is_restored(
    api: APIClient, project: Project, resource_id: str
) -> None:
    """Any resource id reaches its own routes: a resource called "incidents" is restored
    to a moment, not taken for an incident called "restore"."""
    api.post(
        "/api/managed-agents/projects/acme/deployments",
        {
            "agent": "support-bot",
            "memory": [{"id": resource_id, "description": "Lists of things."}],
            "promote": "development",
        },
        format="json",
    )
    resource = Resource.objects.get(resource_id=resource_id, environment="development")
    document = document_create(resource=resource, doc_id="one", title="One", text="1", actor="t")
    t = moment()
    document_replace(
        resource=resource, doc_id="one", expected_revision=document.revision, text="x", actor="t"
    )
    response = api.post(
        f"/api/managed-agents/projects/acme/memory/{resource_id}/restore{DEV}",
        data=json.dumps({"asOf": t.isoformat()}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.json()
    assert {d["documentId"]: d["action"] for d in response.json()["documents"]} == {
        "one": "restore"
    }
    assert current(document).text == "1"


def test_a_document_whose_version_then_was_redacted_is_redacted_in_the_plan_and_the_run(
    api: APIClient, notes: Resource, make_document: Any
) -> None:
    secret = make_document("secret", text="the password is hunter2")
    t = moment()
    fixed = document_replace(
        resource=notes, doc_id="secret", expected_revision=secret.revision, text="gone", actor="t"
    )
    version_redact(
        resource=notes, doc_id="secret", revision=secret.revision, reason="a password", actor="t"
    )
    plans = [restore(api, {"asOf": t.isoformat(), "dryRun": dry}).json() for dry in (True, False)]
    for plan in plans:
        assert plan["documents"] == [
            {
                "documentId": "secret",
                "action": "redacted",
                "restoreRevision": secret.revision,
                "currentRevision": fixed.revision,
                "revision": None,
            }
        ]
    assert (current(secret).text, current(secret).revision) == ("gone", fixed.revision)


def test_page_and_cli_show_and_restore_a_moment(
    owner: Any, web: Any, history: dict[str, Any]
) -> None:
    t = history["t"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    base = "/projects/acme/development/resources/notes/as-of/"
    html = html_of(owner.get(base, {"asOf": t}))
    assert "deleted since" in html
    assert "changed: compare with now" in html
    assert "later" not in html
    plan = html_of(owner.get(base + "restore/", {"asOf": t, "documents": ["changed"]}))
    assert "Restore plan" in plan
    assert current(history["changed"]).text == "now"
    assert web("support").post(base + "restore/", {"asOf": t}).status_code == 403
    done = owner.post(base + "restore/", form_posted(plan, base + "restore/"))
    assert done.status_code == 200
    assert current(history["changed"]).text == "then"
    assert owner.get(base, {"asOf": "nonsense"}).status_code == 400
    out = StringIO()
    call_command("memory", "--project", "acme", "list", "notes", "--as-of", t, "--json", stdout=out)
    assert [d["id"] for d in json.loads(out.getvalue())["documents"]] == ["changed", "gone", "kept"]
    out = StringIO()
    call_command(
        "memory",
        "--project",
        "acme",
        "restore-as-of",
        "notes",
        "--as-of",
        t,
        "--dry-run",
        stdout=out,
    )
    assert "later  created_since" in out.getvalue()


def table(text: str) -> list[list[str]]:
    """A printed table's cells, cut where its heading's cells start: only a table whose
    rows line up with its heading comes back as the cells it was given."""
    heading, *rows = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", heading)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [[line[a:b].strip() for a, b in bounds] for line in [heading, *rows]]


def test_the_cli_lists_a_resource_as_it_was_as_its_plain_list_does(
    notes: Resource, history: dict[str, Any]
) -> None:
    """`list RESOURCE --as-of T` prints `list RESOURCE`'s table, a heading and aligned
    columns, with each document's revision then and its state since added at the end."""
    out = StringIO()
    call_command("memory", "--project", "acme", "list", "notes", stdout=out)
    plain = table(out.getvalue())
    out = StringIO()
    argv = ["--project", "acme", "list", "notes", "--as-of", history["t"].isoformat()]
    call_command("memory", *argv, stdout=out)
    heading, *rows = table(out.getvalue())
    assert heading == [*plain[0], "REVISION", "STATE"]
    # A deleted document's versions keep no title (document_delete wipes them).
    titles = {"changed": "Changed", "gone": "", "kept": "Kept"}
    states = {"changed": "changed since", "gone": "deleted since", "kept": "unchanged"}
    expected = []
    for doc_id, title in titles.items():
        then = history[doc_id]
        size = f"{then.bytes}/8192"
        updated = iso_ms(then.updated_at)
        state = states[doc_id]
        expected.append([doc_id, title, size, "enabled", updated, "owner", then.revision, state])
    assert rows == expected
    kept = next(row for row in plain if row[0] == "kept")
    assert rows[2][:6] == kept  # the same cells as now, where nothing changed
    assert Document.objects.filter(resource=notes).count() == 4  # a listing writes nothing


def test_the_page_restores_what_its_plan_showed_and_never_the_whole_resource_unasked(
    owner: Any, history: dict[str, Any]
) -> None:
    """A plan of no chosen documents offers nothing to restore, and a restore that names
    neither documents nor the whole resource is refused: it restored the whole resource."""
    t = history["t"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    base = "/projects/acme/development/resources/notes/as-of/restore/"
    nothing = html_of(owner.get(base, {"asOf": t, "scope": "chosen"}))
    assert "Nothing to restore." in nothing
    assert "Restore as shown" not in nothing
    refused = owner.post(base, {"asOf": t})
    assert refused.status_code == 400
    assert "Choose the documents to restore" in refused.content.decode()
    assert current(history["changed"]).text == "now"
    # The whole resource's plan says so in its form, and its restore does what it showed.
    whole = html_of(owner.get(base, {"asOf": t, "scope": "all"}))
    assert '<input type="hidden" name="scope" value="all">' in whole
    assert owner.post(base, form_posted(whole, base)).status_code == 200
    assert current(history["changed"]).text == "then"


@pytest.mark.parametrize("doc_id", ["chan\x00ged", "chan\udcffged"])
def test_a_restore_naming_an_id_that_breaks_the_string_rule_is_refused(
    owner: Any, history: dict[str, Any], doc_id: str
) -> None:
    """The page's form and the CLI's arguments pass ids on as given: the restore refuses
    one the database cannot take (400, exit code 6), not a server error."""
    t = history["t"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command(
            "memory", "--project", "acme", "restore-as-of", "notes", "--as-of", t,
            "--document", doc_id,
        )  # fmt: skip
    assert refused.value.returncode == 6
    assert "documents[0]: the value contains" in str(refused.value)
    if "\x00" in doc_id:  # a form's value may hold NUL, never a lone surrogate
        base = "/projects/acme/development/resources/notes/as-of/restore/"
        response = owner.post(base, {"asOf": t, "documents": ["changed", doc_id]})
        assert response.status_code == 400
        assert "documents[1]: the value contains a NUL" in response.content.decode()
    assert current(history["changed"]).text == "now"
    assert not AuditEntry.objects.filter(action="resource.restore_as_of").exists()


# The property: at any instant, the as-of listing is what the version history says.

OPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "replace", "patch", "delete"]),
        st.integers(min_value=0, max_value=3),
        st.text(alphabet="ab\n", max_size=6),
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, probe=st.integers(min_value=0, max_value=12))
def test_as_of_listings_agree_with_the_history_at_every_instant(
    project: Project, ops: list[tuple[str, int, str]], probe: int
) -> None:
    # Examples share the test's transaction: each gets a resource of its own.
    resource = Resource.objects.create(
        project=project,
        environment="development",
        resource_id=f"r{Resource.objects.count()}",
        kind="document",
        max_bytes=100,
    )
    # The model: after each op, each id -> the revision it had (None: did not exist).
    live: dict[str, str] = {}
    deleted: set[str] = set()
    snapshots: list[tuple[datetime, dict[str, str]]] = [(moment(), {})]
    for action, number, text in ops:
        doc_id = f"d{number}"
        if action == "create" and doc_id not in live and doc_id not in deleted:
            live[doc_id] = document_create(
                resource=resource, doc_id=doc_id, title="t", text=text, actor="p"
            ).revision
        elif action == "replace" and doc_id in live:
            live[doc_id] = document_replace(
                resource=resource,
                doc_id=doc_id,
                expected_revision=live[doc_id],
                text=text,
                actor="p",
            ).revision
        elif action == "patch" and doc_id in live:
            live[doc_id] = document_patch(
                resource=resource,
                doc_id=doc_id,
                expected_revision=live[doc_id],
                title=text.replace("\n", "") or "t",
                actor="p",
            ).revision
        elif action == "delete" and doc_id in live:
            document_delete(
                resource=resource, doc_id=doc_id, expected_revision=live[doc_id], actor="p"
            )
            del live[doc_id]
            deleted.add(doc_id)
        snapshots.append((moment(), dict(live)))
    at, expected = snapshots[min(probe, len(snapshots) - 1)]
    entries, _ = document_list_as_of(resource=resource, as_of=at, limit=100)
    assert {e.document.doc_id: e.version.revision for e in entries} == expected
    for entry in entries:
        assert entry.document.deleted == (entry.document.doc_id in deleted)
        if entry.document.deleted:
            assert entry.version.text == ""


def test_a_chosen_id_with_a_nul_refuses_the_whole_restore(
    owner: Any, history: dict[str, Any]
) -> None:
    """The page's form sends the chosen ids as they came: one holding a NUL is a 400
    naming the field, before any document is read or restored (PostgreSQL answered 500;
    SQLite restored the others and planned that one as absent)."""
    t = history["t"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    base = "/projects/acme/development/resources/notes/as-of/restore/"
    audited = AuditEntry.objects.count()
    refused = owner.post(base, {"asOf": t, "documents": ["changed", "kept\x00"]})
    assert refused.status_code == 400, refused.content
    assert "documents[1]: the value contains a NUL character" in refused.content.decode()
    assert current(history["changed"]).text == "now"
    assert AuditEntry.objects.count() == audited


@pytest.mark.parametrize("scope", ["chosen", "all"])
def test_the_page_restores_over_the_revisions_its_plan_showed_never_a_later_write(
    owner: Any, api: APIClient, history: dict[str, Any], scope: str
) -> None:
    """A write between the plan and its "Restore as shown" is not restored over unseen:
    nothing is written, and the page shows the plan again as it is now (409)."""
    t = history["t"].strftime("%Y-%m-%dT%H:%M:%S.%f")
    base = "/projects/acme/development/resources/notes/as-of/restore/"
    asked = {"asOf": t, "scope": scope, **({"documents": ["changed"]} if scope == "chosen" else {})}
    plan = html_of(owner.get(base, asked))
    seen = current(history["changed"]).revision
    # Someone else writes the document the plan showed, through the API.
    put = api.put(
        f"{DOCS}/changed{DEV}",
        data=json.dumps({"text": "written meanwhile"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{seen}"',
    )
    assert put.status_code == 200
    later = put.json()["revision"]
    response = owner.post(base, form_posted(plan, base))
    html = html_of(response, 409)
    assert "The documents changed since you saw this plan: nothing was restored." in html
    assert "Restore as shown" in html
    assert current(history["changed"]).text == "written meanwhile"
    assert current(history["changed"]).revision == later
    assert not AuditEntry.objects.filter(action="resource.restore_as_of").exists()
    # The plan shown again restores over the write it now shows.
    assert owner.post(base, form_posted(html, base)).status_code == 200
    assert current(history["changed"]).text == "then"
