"""Redaction: an old version's content gone for good, from every row the database keeps,
through the API, the Memory page and the CLI."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from rest_framework.test import APIClient

from memoryadmin.agents.services.runtime import recall_create
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.incidents.models import Incident
from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Project, Resource
from memoryadmin.memory.services.documents import document_patch, document_replace
from memoryadmin.memory.services.redaction import version_redact
from memoryadmin.webhooks.models import Delivery
from memoryadmin.webhooks.services import endpoint_create
from tests.helpers import (
    DEV,
    DOCS,
    Keys,
    html_of,
    lock_waiter_seen,
    raw_rows_with,
    streamed,
    support_session,
)

pytestmark = pytest.mark.django_db

SECRETS = ("hunter2zebra", "zebrasummary", "Zebracorn")


@pytest.fixture
def history(project: Project, notes: Resource, make_document: Callable[..., Any]) -> list[str]:
    """workshop: v1 to v3 hold the secrets (v2's title was set by a patch and kept by v3),
    v4 is clean; agents recalled v1 through a document and a collection binding."""
    v1 = make_document(
        "workshop", title="Plan", text="password hunter2zebra", summary="zebrasummary"
    )
    recall_create(session=support_session(project), use=["notes"])
    collection, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory={"notes": {"scope": "collection"}},
        idempotency_key="c1",
        actor="t",
    )
    recall_create(session=collection, use=["notes"])
    v2 = document_patch(
        resource=notes,
        doc_id="workshop",
        expected_revision=v1.revision,
        title="Zebracorn",
        actor="t",
    )
    v3 = document_replace(
        resource=notes,
        doc_id="workshop",
        expected_revision=v2.revision,
        text="clean",
        summary="clean",
        actor="t",
    )
    v4 = document_patch(
        resource=notes, doc_id="workshop", expected_revision=v3.revision, title="Plan", actor="t"
    )
    return [v1.revision, v2.revision, v3.revision, v4.revision]


def redact_url(revision: str) -> str:
    return f"{DOCS}/workshop/versions/{revision}/redact{DEV}"


def redact(api: APIClient, revision: str, reason: Any = "Leaked credentials.") -> Any:
    return api.post(redact_url(revision), {"reason": reason}, format="json")


def test_redaction_leaves_no_trace_in_any_table(api: APIClient, history: list[str]) -> None:
    for secret in SECRETS:
        assert raw_rows_with(secret) != [], secret  # the scan can see them before
    for revision in history[:3]:
        response = redact(api, revision)
        assert response.status_code == 200, response.content
    assert {secret: raw_rows_with(secret) for secret in SECRETS} == {
        secret: [] for secret in SECRETS
    }


def test_a_redacted_version_keeps_its_metadata_and_shows_the_marker(
    api: APIClient, history: list[str]
) -> None:
    before = DocumentVersion.objects.get(revision=history[0])
    body = redact(api, history[0]).json()
    assert (body["title"], body["summary"], body["text"]) == ("[redacted]",) * 3
    assert body["revision"] == history[0]
    assert body["bytes"] == before.bytes == len("password hunter2zebra")
    assert body["writer"] == {"kind": "owner"}
    assert body["redacted"]["reason"] == "Leaked credentials."
    assert body["redacted"]["by"].startswith("key:mak_")
    listed = api.get(f"{DOCS}/workshop/versions{DEV}&include=text").json()["versions"]
    assert [v["redacted"] is not None for v in listed] == [False, False, False, True]
    entry = AuditEntry.objects.get(action="version.redact")
    assert (entry.revision, entry.detail["reason"]) == (history[0], "Leaked credentials.")
    assert Document.objects.get(doc_id="workshop").title == "Plan"


def test_the_current_version_and_its_text_cannot_be_redacted(
    api: APIClient, notes: Resource, history: list[str]
) -> None:
    response = redact(api, history[3])
    assert response.status_code == 409
    assert "edit the document first" in response.json()["error"]["message"]
    assert redact(api, history[0]).status_code == 200
    again = redact(api, history[0])
    assert again.status_code == 409
    assert "already redacted" in again.json()["error"]["message"]
    assert DocumentVersion.objects.filter(redacted_at__isnull=False).count() == 1


def test_a_redacted_version_cannot_be_restored(api: APIClient, history: list[str]) -> None:
    redact(api, history[0])
    current = Document.objects.get(doc_id="workshop").revision
    response = api.post(
        f"{DOCS}/workshop/versions/{history[0]}/restore{DEV}", HTTP_IF_MATCH=f'"{current}"'
    )
    assert response.status_code == 409
    assert Document.objects.get(doc_id="workshop").revision == current


@pytest.mark.parametrize("reason", ["", "   ", None, 5, "x" * 501])
def test_a_redaction_needs_a_reason(api: APIClient, history: list[str], reason: Any) -> None:
    assert redact(api, history[0], reason).status_code == 400
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()


def test_redaction_needs_a_read_write_key_of_the_project(
    client_for: Callable[[str | None], APIClient], keys: Keys, history: list[str]
) -> None:
    assert redact(client_for(keys.read_only), history[0]).status_code == 403
    assert redact(client_for(keys.other), history[0]).status_code == 403
    assert redact(client_for(keys.owner), "f" * 20).status_code == 404
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()


def test_exports_never_hold_redacted_text(api: APIClient, history: list[str]) -> None:
    redact(api, history[0])
    redact(api, history[1])
    body = streamed(api.post(f"/api/managed-agents/projects/acme/memory/export{DEV}"))
    archive = zipfile.ZipFile(io.BytesIO(body))
    everything = b"".join(archive.read(name) for name in archive.namelist())
    assert b"workshop" in everything
    assert not any(secret.encode() in everything for secret in SECRETS)


# The Memory page and the CLI


def page_url(revision: str) -> str:
    return (
        f"/projects/acme/development/resources/notes/documents/workshop/versions/{revision}/redact/"
    )


def test_page_redacts_after_a_typed_confirmation(
    web: Callable[[str], Any], history: list[str]
) -> None:
    owner = web("owner")
    html = html_of(owner.get(page_url(history[0])))
    assert "Type <code>REDACT</code> to confirm" in html
    refused = owner.post(page_url(history[0]), {"reason": "Leak.", "confirm": "redact"})
    assert refused.status_code == 422
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()
    done = owner.post(page_url(history[0]), {"reason": "Leak.", "confirm": "REDACT"})
    assert done.status_code == 302
    version = DocumentVersion.objects.get(revision=history[0])
    assert (version.text, version.redaction_reason, version.redacted_by) == (
        "[redacted]",
        "Leak.",
        "user:olivia",
    )
    page = html_of(owner.get(done["Location"]))
    assert "Redacted" in page
    assert "Leak." in page


def test_page_redaction_is_for_owners_only(web: Callable[[str], Any], history: list[str]) -> None:
    response = web("support").post(page_url(history[0]), {"reason": "Leak.", "confirm": "REDACT"})
    assert response.status_code == 403
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()


def test_cli_redacts_with_a_reason(history: list[str], capsys: Any) -> None:
    call_command(
        "memory", "--project", "acme", "redact", "notes", "workshop", history[0],
        "--reason", "Leak.", "--yes", "--json",
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert (out["redacted"]["reason"], out["text"]) == ("Leak.", "[redacted]")
    assert DocumentVersion.objects.get(revision=history[0]).redacted_by.startswith("cli:")


def test_cli_refuses_the_current_version(history: list[str]) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError) as refused:
        call_command(
            "memory", "--project", "acme", "redact", "notes", "workshop", history[3],
            "--reason", "Leak.", "--yes",
        )  # fmt: skip
    assert refused.value.returncode == 7
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()


@pytest.mark.parametrize("reason", ["Leak\udcff.", "Leak\x00."])
def test_a_reason_breaking_the_string_rule_is_refused_at_every_door(
    notes: Resource, history: list[str], reason: str
) -> None:
    """The CLI passes its arguments on as given (a byte that is not UTF-8 arrives as a lone
    surrogate): the redaction refuses a reason the audit log cannot keep, not a traceback."""
    from django.core.management.base import CommandError

    from memoryadmin.core.errors import InvalidRequest

    with pytest.raises(CommandError) as refused:
        call_command(
            "memory", "--project", "acme", "redact", "notes", "workshop", history[0],
            "--reason", reason, "--yes",
        )  # fmt: skip
    assert refused.value.returncode == 6
    with pytest.raises(InvalidRequest):
        version_redact(
            resource=notes, doc_id="workshop", revision=history[0], reason=reason, actor="t"
        )
    assert not DocumentVersion.objects.filter(redacted_at__isnull=False).exists()
    assert not AuditEntry.objects.filter(action="version.redact").exists()


def test_service_redaction_of_a_deleted_document_is_404(
    notes: Resource, history: list[str]
) -> None:
    from memoryadmin.core.errors import NotFound
    from memoryadmin.memory.services.documents import document_delete

    document_delete(resource=notes, doc_id="workshop", expected_revision=history[3], actor="t")
    with pytest.raises(NotFound):
        version_redact(
            resource=notes, doc_id="workshop", revision=history[0], reason="x", actor="t"
        )


def test_a_recall_that_read_a_version_redacted_before_its_store_recalls_again(
    project: Project, make_document: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version was current when the recall read it; a write made it old and an owner
    redacted it before the recall stored what it read: the recall stores nothing of it,
    reads its memory again and shows the write's text."""
    from memoryadmin.agents.models import Recall
    from memoryadmin.agents.services import runtime

    document = make_document("workshop", text="Leaked card 4111 1111 1111 1111.")
    session = support_session(project)
    stored = runtime.recall_store
    redacted: list[str] = []

    def redacted_first(**kwargs: Any) -> Any:
        if not redacted:
            assert "4111" in kwargs["recall"].memory["notes"]["text"]
            newer = document_replace(
                resource=document.resource, doc_id="workshop",
                expected_revision=document.revision, text="Card removed.", actor="t",
            )  # fmt: skip
            version_redact(
                resource=document.resource, doc_id="workshop", revision=document.revision,
                reason="a card number", actor="t",
            )  # fmt: skip
            redacted.append(newer.revision)
        return stored(**kwargs)

    monkeypatch.setattr(runtime, "recall_store", redacted_first)
    answer = recall_create(session=session, use=["notes"])
    assert answer["memory"]["notes"]["text"] == "Card removed."
    assert Recall.objects.get(session=session).memory == answer["memory"]
    assert raw_rows_with("4111") == []


# Redaction against concurrent restores, with real threads on PostgreSQL.


def _redaction_committed_under(restore: Callable[[], Any], redact_it: Callable[[], Any]) -> Any:
    """Runs `redact_it` in a transaction that commits only once `restore`, started after
    it wrote, waits for its lock; returns what `restore` returned or raised."""
    import threading

    from django.db import connections, transaction

    written = threading.Event()
    outcome: dict[str, Any] = {}

    def redactor() -> None:
        try:
            with transaction.atomic():
                redact_it()
                written.set()
                # The restore, behind the redaction's lock on the document.
                assert lock_waiter_seen(looks=300), "the restore never waited for the redaction"
        except Exception as exc:
            outcome["redactor"] = exc
        finally:
            written.set()
            connections.close_all()

    def restorer() -> None:
        written.wait(timeout=30)
        try:
            outcome["value"] = restore()
        except Exception as exc:
            outcome["value"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=redactor), threading.Thread(target=restorer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert "redactor" not in outcome, outcome["redactor"]
    return outcome["value"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_restore_racing_the_redaction_of_its_version_never_writes_the_redacted_text(
    notes: Resource, make_document: Callable[..., Any]
) -> None:
    """The restore read the version before the redaction committed: it must not write
    that text once the redaction has committed (409, the document as it was)."""
    from memoryadmin.core.errors import Conflict
    from memoryadmin.memory.services.documents import document_restore

    first = make_document("plan", text="password hunter2zebra")
    now = document_replace(
        resource=notes, doc_id="plan", expected_revision=first.revision, text="clean", actor="t"
    )
    result = _redaction_committed_under(
        lambda: document_restore(
            resource=notes,
            doc_id="plan",
            revision=first.revision,
            expected_revision=now.revision,
            actor="t",
        ),
        lambda: version_redact(
            resource=notes, doc_id="plan", revision=first.revision, reason="Leak.", actor="t"
        ),
    )
    assert isinstance(result, Conflict), result
    stored = Document.objects.get(doc_id="plan")
    assert (stored.revision, stored.text) == (now.revision, "clean")
    assert DocumentVersion.objects.get(revision=first.revision).text == "[redacted]"
    assert raw_rows_with("hunter2zebra") == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_session_revert_racing_the_redaction_of_the_version_it_restores_is_a_conflict(
    project: Project, notes: Resource, workshop: Document, make_document: Callable[..., Any]
) -> None:
    """A revert's plan read the version before the session's write; redacted before the
    revert writes it, that version's text never becomes current again."""
    from memoryadmin.agents.services.reverts import CONFLICT, session_revert
    from tests.helpers import agent_save

    session = support_session(project)
    first = make_document("plan", text="password hunter2zebra")
    agent_save(notes, "plan", first.revision, "the agent's text", session_id=session.id)
    now = Document.objects.get(doc_id="plan")
    plan = _redaction_committed_under(
        lambda: session_revert(session=session, dry_run=False, actor="t"),
        lambda: version_redact(
            resource=notes, doc_id="plan", revision=first.revision, reason="Leak.", actor="t"
        ),
    )
    assert [item.action for item in plan.items] == [CONFLICT], plan
    stored = Document.objects.get(doc_id="plan")
    assert (stored.revision, stored.text) == (now.revision, "the agent's text")
    assert raw_rows_with("hunter2zebra") == []


# Copies other apps keep: incidents' containment reports, uploads waiting for their
# import, webhook payloads.

INCIDENTS = "/api/managed-agents/projects/acme/memory/incidents"
CODE = "Door code 7781-4412."
BAD = "Wire refunds to account 4242."


def _contained_conflict(api: APIClient, make_document: Callable[..., Any], holder: str) -> Any:
    """notes/doc: a clean version, a tainted one (BAD), then an owner's edit; an incident
    traced from the tainted version, contained (revert): a conflict whose merge holds CODE,
    from the version before the taint (`restored`) or the one then current (`current`).
    Answers (the version that holds CODE, the incident's id, the containment report)."""
    lines = ["Tea.", "Rules.", CODE if holder == "restored" else "Cake.", "End."]
    # An endpoint hears of every write and of the containment (payloads name versions).
    endpoint_create(
        project=Project.objects.get(pk="acme"),
        url="http://127.0.0.1:9/hooks",
        events=["document.created", "document.updated", "incident.contained"],
        actor="t",
    )
    v1 = make_document("doc", text="\n".join(lines))
    notes = v1.resource
    bad = document_replace(
        resource=notes,
        doc_id="doc",
        expected_revision=v1.revision,
        text="\n".join([*lines[:2], BAD, lines[3]]),
        actor="key:bad",
    )
    first = f"Tea. {CODE}" if holder == "current" else "Green tea."
    then = document_replace(
        resource=notes,
        doc_id="doc",
        expected_revision=bad.revision,
        text="\n".join([first, "Rules.", BAD, "End."]),
        actor="t",
    )
    version = {"resource": "notes", "document": "doc", "revision": bad.revision}
    opened = api.post(
        INCIDENTS + DEV, {"title": "Refunds", "source": {"version": version}}, format="json"
    )
    assert opened.status_code == 201, opened.content
    incident = opened.json()["id"]
    contained = api.post(
        f"{INCIDENTS}/{incident}/contain{DEV}", {"actions": ["revert"]}, format="json"
    )
    assert contained.status_code == 200, contained.content
    report = contained.json()
    (item,) = report["documents"]
    assert item["action"] == "conflict"
    assert CODE in item["merged"]  # the merge of the undo into the then-current text
    if holder == "restored":
        return v1, incident, report
    # The owner takes the code out again: the version then current is an old one now.
    document_replace(
        resource=notes, doc_id="doc", expected_revision=then.revision, text="Tea.", actor="t"
    )
    return then, incident, report


@pytest.mark.parametrize("holder", ["restored", "current"])
def test_a_redaction_reaches_the_merge_an_incident_s_containment_kept(
    api: APIClient, owner: Any, make_document: Callable[..., Any], holder: str
) -> None:
    """A containment's conflict keeps the merge of its undo into the document's text,
    made from the version before the taint, the tainted ones and the version then
    current. Redacting one of them replaces that merge with the marker in the same
    transaction; the report keeps the rest, and neither the API nor the page shows the
    text again."""
    holding, incident, report = _contained_conflict(api, make_document, holder)
    assert "incidents_incident" in raw_rows_with(CODE)
    before = Incident.objects.get(pk=incident)

    response = api.post(
        f"{DOCS}/doc/versions/{holding.revision}/redact{DEV}",
        {"reason": "A door code."},
        format="json",
    )
    assert response.status_code == 200, response.content

    kept = Incident.objects.get(pk=incident)
    (item,) = report["documents"]
    assert kept.containment == {**report, "documents": [{**item, "merged": "[redacted]"}]}
    assert (kept.title, kept.source, kept.graph) == (before.title, before.source, before.graph)
    shown = api.get(f"{INCIDENTS}/{incident}{DEV}")
    assert shown.status_code == 200
    assert shown.json()["containment"] == kept.containment
    assert CODE not in shown.content.decode()
    assert CODE not in html_of(owner.get(f"/projects/acme/development/incidents/{incident}/"))
    # Every other copy: none holds the code (webhook payloads name the version, no text).
    assert raw_rows_with(CODE) == []
    bodies = [json.loads(d.body) for d in Delivery.objects.order_by("id")]
    assert "incident.contained" in {b["type"] for b in bodies}
    assert holding.revision in {b["data"].get("revision") for b in bodies}


def test_a_redaction_leaves_a_merge_made_from_other_versions(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    """Only the merges made from the redacted version: a version of the document written
    after the containment leaves the report as it was."""
    holding, incident, report = _contained_conflict(api, make_document, "restored")
    notes = holding.resource
    after = document_replace(
        resource=notes,
        doc_id="doc",
        expected_revision=Document.objects.get(doc_id="doc").revision,
        text="Tea.",
        actor="t",
    )
    document_replace(
        resource=notes, doc_id="doc", expected_revision=after.revision, text="Cake.", actor="t"
    )
    assert redact_doc(api, after.revision).status_code == 200
    assert Incident.objects.get(pk=incident).containment == report


def test_a_redaction_deletes_an_upload_waiting_for_its_import_that_holds_the_version(
    api: APIClient,
    owner: Any,
    make_document: Callable[..., Any],
    settings: Any,
    tmp_path: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """An export downloaded while the version was current and uploaded on the Memory page
    waits on the server for its import: it holds that version (the same revision). The
    redaction deletes it once it commits (upload it again); an upload of another version
    of the document stays."""
    settings.VAR_DIR = tmp_path
    v1 = make_document("doc", text=CODE)

    def export() -> bytes:
        response = api.post(f"/api/managed-agents/projects/acme/memory/export{DEV}")
        assert response.status_code == 200
        return streamed(response)

    holding = export()
    document_replace(
        resource=v1.resource, doc_id="doc", expected_revision=v1.revision, text="Tea.", actor="t"
    )
    later = export()
    imports = "/projects/acme/development/import/"
    tokens = []
    for content in (holding, later):
        upload = SimpleUploadedFile("memory.zip", content, "application/zip")
        page = html_of(owner.post(imports, {"export": upload}))
        tokens.append(page.split('name="upload" value="', 1)[1].split('"', 1)[0])
    folder = tmp_path / "imports" / "acme" / "development"
    # One upload waits at a time (a new one replaces it): put the first one back beside it.
    (folder / f"{tokens[0]}.zip").write_bytes(holding)
    assert len(list(folder.glob("*.zip"))) == 2

    with django_capture_on_commit_callbacks(execute=True):
        assert redact_doc(api, v1.revision).status_code == 200
        # Deleted once the redaction commits, not before: a redaction rolled back keeps it.
        assert (folder / f"{tokens[0]}.zip").is_file()
    assert list(folder.glob("*.zip")) == [folder / f"{tokens[1]}.zip"]
    gone = owner.post(imports, {"upload": tokens[0], "confirm": "yes"})
    assert "no longer waiting" in html_of(gone, 404)
    assert raw_rows_with(CODE) == []


def redact_doc(api: APIClient, revision: str) -> Any:
    return api.post(f"{DOCS}/doc/versions/{revision}/redact{DEV}", {"reason": "r"}, format="json")
