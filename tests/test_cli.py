"""The owner CLI, `manage.py memory ...`: through call_command and through real processes.

In-process tests run on the suite's database. Process tests run manage.py
against a SQLite file of their own (migrated once per module, copied per
test), read its state with sqlite3, and give it a terminal through a pty
where a test needs one; on PostgreSQL runs one more process test uses the
suite's own test database.
"""

from __future__ import annotations

import getpass
import io
import json
import logging
import os
import resource
import shlex
import shutil
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection
from rest_framework.test import APIClient

from memoryadmin.core import cli
from memoryadmin.memory.limits import agent_write_fields
from memoryadmin.memory.models import AuditEntry, Document, Project, Resource
from memoryadmin.memory.services.deployments import resource_get
from memoryadmin.memory.services.documents import document_replace
from tests.helpers import (
    DEV,
    DOCS,
    MANIFEST_MEMORY,
    deploy_reference_provider,
    free_port,
    retire_kb,
)

REPO = Path(__file__).resolve().parent.parent
ACTOR = f"cli:{getpass.getuser()}"


# In-process: call_command on the suite's database.


def memory(*args: str, stdin: str | None = None) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(
        "memory",
        "--project",
        "acme",
        *args,
        stdout=out,
        stderr=err,
        stdin=None if stdin is None else StringIO(stdin),
    )
    return out.getvalue(), err.getvalue()


def memory_fails(*args: str, stdin: str | None = None) -> CommandError:
    with pytest.raises(CommandError) as info:
        memory(*args, stdin=stdin)
    return info.value


def stored(notes: Resource, doc_id: str = "workshop") -> Document:
    return Document.objects.get(resource=notes, doc_id=doc_id)


@pytest.fixture
def kb(project: Project) -> Resource:
    return resource_get(project=project, environment="development", resource_id="kb")


@pytest.fixture
def editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Sets $EDITOR to a Python script with the given body (sys.argv[1] is the file)."""

    def make(body: str) -> None:
        script = tmp_path / "editor.py"
        script.write_text("import sys\npath = sys.argv[1]\n" + body)
        monkeypatch.delenv("VISUAL", raising=False)
        monkeypatch.setenv("EDITOR", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}")

    return make


def test_show_of_a_deleted_document_says_who_deleted_it_and_when(
    make_document: Any, notes: Resource
) -> None:
    make_document("gone")
    memory("remove", "notes", "gone", "--yes")
    error = memory_fails("show", "notes", "gone")
    entry = AuditEntry.objects.get(action="document.delete", document_id="gone")
    assert str(error) == (
        f"Document 'gone' in resource 'notes' was deleted by {ACTOR} at "
        f"{entry.created_at:%Y-%m-%d %H:%M:%S} UTC. Its text is gone and its id stays "
        "reserved: no document can be created with it again."
    )
    assert error.returncode == 3
    assert stored(notes, "gone").deleted is True


def test_list_prints_a_table_of_live_documents(make_document: Any, notes: Resource) -> None:
    make_document("workshop", title="Workshop notes", text="abc")
    make_document("agenda", title="Agenda")
    gone = make_document("gone")
    memory("remove", "notes", "gone", "--yes")
    out, err = memory("list", "notes")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "TITLE", "BYTES", "AGENT", "WRITES", "UPDATED", "WRITER"]
    assert [line.split()[0] for line in lines[1:]] == ["agenda", "workshop"]
    assert "3/8192" in lines[2]
    assert err == ""
    assert stored(notes, gone.doc_id).deleted is True


def test_list_json_follows_every_page(make_document: Any) -> None:
    for index in range(55):
        make_document(f"doc-{index:02d}")
    out, _ = memory("list", "notes", "--json")
    documents = json.loads(out)["documents"]
    assert len(documents) == 55
    assert {d["id"] for d in documents} == {f"doc-{index:02d}" for index in range(55)}
    assert "text" not in documents[0]
    assert [d["updatedAt"] for d in documents] == sorted(
        (d["updatedAt"] for d in documents), reverse=True
    )


def test_list_without_resource_shows_resources_retired_included(
    project: Project, make_document: Any
) -> None:
    make_document("workshop")
    retire_kb(project)
    out, _ = memory("list", "--json")
    assert json.loads(out) == {
        "resources": [
            {"id": "kb", "provider": {"kind": "document", "maxBytes": 64}, "declared": False,
             "documents": 0},
            {"id": "notes", "provider": {"kind": "document", "maxBytes": 8192}, "declared": True,
             "documents": 1},
        ]
    }  # fmt: skip
    table, _ = memory("list")
    assert "retired" in table.splitlines()[1]


def test_list_prints_no_count_for_a_resource_whose_records_live_with_the_provider(
    project: Project, make_document: Any
) -> None:
    """An http resource keeps no documents here: the table shows "-", not a false 0; the
    JSON is the API's inventory, which counts the documents kept here."""
    make_document("workshop")
    deploy_reference_provider(project, "http://127.0.0.1:9", extra=[MANIFEST_MEMORY[0]])
    table, _ = memory("list")
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows["facts"] == ["facts", "http", "4096", "declared", "-"]
    assert rows["notes"] == ["notes", "document", "8192", "declared", "1"]
    assert rows["kb"][-1] == "0"
    out, _ = memory("list", "--json")
    counts = {r["id"]: r["documents"] for r in json.loads(out)["resources"]}
    assert counts == {"facts": 0, "kb": 0, "notes": 1}


def test_show_json_is_the_document_object_of_the_api(make_document: Any, api: APIClient) -> None:
    make_document("workshop", text="Node 22.", summary="Runtime.")
    out, _ = memory("show", "notes", "workshop", "--json")
    assert json.loads(out) == api.get(f"{DOCS}/workshop{DEV}").json()


def test_show_prints_fields_then_text(make_document: Any) -> None:
    document = make_document("workshop", title="Workshop notes", text="line one\nline two")
    out, _ = memory("show", "notes", "workshop")
    assert out.startswith("notes/workshop: Workshop notes\n")
    assert f"revision:     {document.revision}" in out
    assert "size:         17 of 8192 bytes" in out
    assert out.endswith("\n\nline one\nline two\n")


def test_options_may_follow_the_subcommand(make_document: Any) -> None:
    make_document("workshop")
    out, _ = memory("show", "notes", "workshop", "--environment", "development", "--json")
    assert json.loads(out)["id"] == "workshop"
    error = memory_fails("show", "notes", "workshop", "--environment", "production")
    assert error.returncode == cli.EXIT_NOT_FOUND


def test_create_from_file_with_summary_frozen_audited_as_os_user(
    notes: Resource, tmp_path: Path
) -> None:
    source = tmp_path / "text.md"
    source.write_text("Exercises run on Node.js 22.\n", encoding="utf-8")
    out, _ = memory(
        "create", "notes", "workshop", "--title", "Workshop", "--text-file", str(source),
        "--summary", "Runtime.", "--frozen",
    )  # fmt: skip
    document = stored(notes)
    assert out == f"Created notes/workshop (revision {document.revision}, 29 bytes).\n"
    assert (document.title, document.text, document.summary) == (
        "Workshop", "Exercises run on Node.js 22.\n", "Runtime."
    )  # fmt: skip
    assert document.agent_writes is False
    entry = AuditEntry.objects.get(action="document.create")
    assert (entry.actor, entry.environment, entry.document_id) == (ACTOR, "development", "workshop")


def test_create_from_stdin_keeps_text_exactly(notes: Resource) -> None:
    out, _ = memory(
        "create", "notes", "workshop", "--title", "W", "--text-stdin", "--json", stdin="héllo\n"
    )
    assert json.loads(out)["bytes"] == 7
    assert stored(notes).text == "héllo\n"
    assert stored(notes).agent_writes is True


def test_create_on_taken_id_is_precondition_failed(make_document: Any, notes: Resource) -> None:
    make_document("workshop", text="original")
    error = memory_fails("create", "notes", "workshop", "--title", "Again")
    assert error.returncode == cli.EXIT_PRECONDITION == 4
    assert "already in use or was deleted" in str(error)
    assert stored(notes).text == "original"


def test_create_over_the_limit_is_too_large(kb: Resource) -> None:
    error = memory_fails("create", "kb", "faq", "--title", "FAQ", "--text-stdin", stdin="x" * 65)
    assert error.returncode == cli.EXIT_TOO_LARGE == 5
    assert str(error) == "text is 65 UTF-8 bytes; this resource allows 64."
    assert not Document.objects.filter(resource=kb).exists()


class _Endless:
    """Standard input that never ends (`yes |`), as a text stream."""

    def __init__(self) -> None:
        self.given = 0

    def read(self, size: int = -1) -> str:
        assert size > 0, "read whole"
        self.given += size
        return "y" * size


def test_an_endless_input_is_refused_once_the_bound_is_read(
    notes: Resource, make_document: Any, tmp_path: Path
) -> None:
    make_document(doc_id="workshop", text="Node 22")
    audit = AuditEntry.objects.count()
    over = f"is over {cli.INPUT_MAX_BYTES} bytes; no input of a command may be that long."
    error = memory_fails("create", "notes", "endless", "--title", "E", "--text-file", "/dev/zero")
    assert (error.returncode, str(error)) == (cli.EXIT_TOO_LARGE, f"/dev/zero {over}")
    stdin = _Endless()
    with pytest.raises(CommandError) as info:
        call_command(
            "memory", "--project", "acme", "edit", "notes", "workshop", "--text-stdin",
            stdin=stdin, stdout=StringIO(), stderr=StringIO(),
        )  # fmt: skip
    assert (info.value.returncode, str(info.value)) == (5, f"Standard input {over}")
    assert cli.INPUT_MAX_BYTES < stdin.given <= cli.INPUT_MAX_BYTES + 64 * 1024
    assert stored(notes).text == "Node 22"
    assert not Document.objects.filter(resource=notes, doc_id="endless").exists()
    assert AuditEntry.objects.count() == audit
    # An input of the bound itself is read whole: the resource's own limit refuses it.
    largest = tmp_path / "largest.txt"
    largest.write_bytes(b"x" * cli.INPUT_MAX_BYTES)
    error = memory_fails("create", "notes", "large", "--title", "L", "--text-file", str(largest))
    assert str(error) == f"text is {cli.INPUT_MAX_BYTES} UTF-8 bytes; this resource allows 8192."


@pytest.mark.parametrize(
    "args",
    [
        ["create", "notes", "bad id", "--title", "T"],
        ["create", "notes", "workshop", "--title", ""],
        ["create", "notes", "workshop", "--title", "T", "--text-file", "/nonexistent/file"],
        ["list", "Not_A_Resource"],
    ],
)
def test_malformed_input_is_invalid(notes: Resource, args: list[str]) -> None:
    error = memory_fails(*args)
    assert error.returncode == cli.EXIT_INVALID == 6
    assert not Document.objects.exists()


def test_unknown_project_resource_and_document_are_not_found(project: Project) -> None:
    with pytest.raises(CommandError) as info:
        call_command("memory", "--project", "nope", "list", stdout=StringIO())
    assert info.value.returncode == cli.EXIT_NOT_FOUND == 3
    assert memory_fails("list", "missing").returncode == cli.EXIT_NOT_FOUND
    assert memory_fails("show", "notes", "missing").returncode == cli.EXIT_NOT_FOUND


def test_project_is_required(project: Project) -> None:
    with pytest.raises(CommandError) as info:
        call_command("memory", "list", stdout=StringIO())
    assert info.value.returncode == cli.EXIT_USAGE


def test_edit_from_stdin_replaces_text_and_keeps_summary(
    make_document: Any, notes: Resource
) -> None:
    before = make_document("workshop", text="one", summary="keep")
    out, _ = memory("edit", "notes", "workshop", "--text-stdin", stdin="two")
    after = stored(notes)
    assert (after.text, after.summary) == ("two", "keep")
    assert after.revision != before.revision
    assert out == f"Saved notes/workshop (revision {after.revision}, 3 bytes).\n"
    assert list(after.versions.order_by("id").values_list("text", flat=True)) == ["one", "two"]
    assert AuditEntry.objects.get(action="document.replace").actor == ACTOR


def test_edit_with_a_stale_revision_saves_nothing(make_document: Any, notes: Resource) -> None:
    before = make_document("workshop", text="one")
    document_replace(
        resource=notes, doc_id="workshop", expected_revision=before.revision, text="theirs",
        actor="test",
    )  # fmt: skip
    error = memory_fails(
        "edit", "notes", "workshop", "--revision", before.revision, "--text-stdin", stdin="mine"
    )
    assert error.returncode == cli.EXIT_PRECONDITION
    assert stored(notes).text == "theirs"


def test_edit_with_unchanged_text_saves_nothing(make_document: Any, notes: Resource) -> None:
    before = make_document("workshop", text="same", summary="s")
    out, _ = memory("edit", "notes", "workshop", "--text-stdin", "--summary", "s", stdin="same")
    assert out == "No changes; nothing saved.\n"
    assert stored(notes).revision == before.revision
    assert stored(notes).versions.count() == 1


def test_edit_of_summary_alone_saves(make_document: Any, notes: Resource) -> None:
    make_document("workshop", text="same", summary="old")
    memory("edit", "notes", "workshop", "--text-stdin", "--summary", "new", stdin="same")
    assert (stored(notes).text, stored(notes).summary) == ("same", "new")


def test_edit_in_the_editor_saves_the_edited_text(
    make_document: Any, notes: Resource, editor: Callable[[str], None], tmp_path: Path
) -> None:
    make_document("workshop", text="Node 22")
    log = tmp_path / "seen.json"
    editor(
        "import json\n"
        "text = open(path).read()\n"
        f"json.dump([path, text], open({str(log)!r}, 'w'))\n"
        "open(path, 'w').write(text.replace('22', '24') + '\\n')\n"
    )
    out, _ = memory("edit", "notes", "workshop")
    draft, opened_with = json.loads(log.read_text())
    assert opened_with == "Node 22"
    # The editor's trailing newline is not the user's: it is dropped.
    assert stored(notes).text == "Node 24"
    assert out.startswith("Saved notes/workshop")
    assert Path(draft).name.startswith("memory-notes-workshop-")
    assert not Path(draft).exists()  # saved, so the draft is gone


def test_edit_when_the_editor_changes_nothing_saves_nothing(
    make_document: Any, notes: Resource, editor: Callable[[str], None]
) -> None:
    before = make_document("workshop", text="Node 22")
    editor("open(path, 'a').write('\\n')\n")
    out, _ = memory("edit", "notes", "workshop")
    assert out == "No changes; nothing saved.\n"
    assert stored(notes).revision == before.revision


def test_edit_when_the_editor_fails_saves_nothing(
    make_document: Any, notes: Resource, editor: Callable[[str], None]
) -> None:
    before = make_document("workshop", text="Node 22")
    editor("open(path, 'w').write('half done')\nsys.exit(3)\n")
    error = memory_fails("edit", "notes", "workshop")
    assert str(error) == "The editor exited with status 3; nothing saved."
    assert error.returncode == cli.EXIT_ERROR
    assert stored(notes).revision == before.revision


def test_edit_without_an_editor_asks_for_one(
    make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_document("workshop")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    error = memory_fails("edit", "notes", "workshop")
    assert error.returncode == cli.EXIT_INVALID
    assert "$EDITOR" in str(error)


def test_freeze_and_unfreeze_toggle_agent_writes_with_audit(
    make_document: Any, notes: Resource
) -> None:
    make_document("workshop")
    out, _ = memory("freeze", "notes", "workshop")
    assert out.startswith("Frozen notes/workshop: no later agent save can commit")
    assert stored(notes).agent_writes is False
    again, _ = memory("freeze", "notes", "workshop")
    assert again == "Agent writes to notes/workshop were already disabled; nothing changed.\n"
    out, _ = memory("unfreeze", "notes", "workshop", "--json")
    assert json.loads(out)["agentWrites"] == "enabled"
    assert stored(notes).agent_writes is True
    actions = AuditEntry.objects.filter(actor=ACTOR).order_by("id")
    assert list(actions.values_list("action", flat=True)) == [
        "document.freeze",
        "document.unfreeze",
    ]


def test_remove_with_yes_deletes_and_reserves_the_id(make_document: Any, notes: Resource) -> None:
    make_document("workshop", text="secret")
    out, _ = memory("remove", "notes", "workshop", "--yes")
    assert "The id 'workshop' stays reserved" in out
    document = stored(notes)
    assert (document.deleted, document.text, document.title) == (True, "", "")
    assert AuditEntry.objects.get(action="document.delete").actor == ACTOR
    error = memory_fails("create", "notes", "workshop", "--title", "Again")
    assert error.returncode == cli.EXIT_PRECONDITION


def test_remove_without_yes_off_a_terminal_deletes_nothing(
    make_document: Any, notes: Resource
) -> None:
    make_document("workshop")
    error = memory_fails("remove", "notes", "workshop", stdin="y\n")
    assert error.returncode == cli.EXIT_INVALID
    assert "pass --yes" in str(error)
    assert stored(notes).deleted is False


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that lets everyone read what is made (022, a common default)."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_export_writes_documents_and_manifest(
    project: Project, make_document: Any, kb: Resource, tmp_path: Path, open_umask: None
) -> None:
    make_document("workshop", text="Node 22.")
    make_document("faq", resource=kb, text="short")
    make_document("gone")
    memory("remove", "notes", "gone", "--yes")
    retire_kb(project)
    out_dir = tmp_path / "memory"
    out, err = memory("export", "--out", str(out_dir))
    # Nested in the test's own transaction, the export cannot be a snapshot.
    assert out == f"Exported 2 documents from 2 resources to {out_dir} (individual reads).\n"
    assert err == ""  # no progress bar off a terminal
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*.json"))
    assert files == ["kb/faq.json", "manifest.json", "notes/workshop.json"]
    document = json.loads((out_dir / "notes/workshop.json").read_text(encoding="utf-8"))
    assert document["text"] == "Node 22."
    assert document["revision"] == stored(resource_get(
        project=project, environment="development", resource_id="notes"
    )).revision  # fmt: skip
    manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    assert (manifest["project"], manifest["resources"], manifest["documents"]) == (
        "acme", ["kb", "notes"], 2
    )  # fmt: skip
    assert AuditEntry.objects.get(action="memory.export").actor == ACTOR
    # Every note of the environment: this user's only, whatever the umask lets others read.
    modes = {
        str(p.relative_to(out_dir)): stat.S_IMODE(p.stat().st_mode) for p in out_dir.rglob("*")
    }
    assert modes == {
        "kb": 0o700, "notes": 0o700,
        "kb/faq.json": 0o600, "notes/workshop.json": 0o600, "manifest.json": 0o600,
    }  # fmt: skip
    assert stat.S_IMODE(out_dir.stat().st_mode) == 0o700


def test_export_as_json_lines_is_one_file_manifest_first(
    project: Project, make_document: Any, kb: Resource, tmp_path: Path, open_umask: None
) -> None:
    make_document("workshop", text="Node 22.\nLine two.")
    make_document("faq", resource=kb, text="short")
    make_document("gone")
    memory("remove", "notes", "gone", "--yes")
    target = tmp_path / "memory.jsonl"
    out, _ = memory("export", "--format", "jsonl", "--out", str(target))
    assert out == f"Exported 2 documents from 2 resources to {target} (JSON Lines).\n"
    lines = target.read_bytes().split(b"\n")
    assert lines[-1] == b""
    manifest, *documents = [json.loads(line) for line in lines[:-1]]
    assert (manifest["layout"], manifest["resources"], manifest["documents"]) == (
        "jsonl", ["kb", "notes"], 2
    )  # fmt: skip
    assert [(d["resource"], d["id"], d["text"]) for d in documents] == [
        ("kb", "faq", "short"),
        ("notes", "workshop", "Node 22.\nLine two."),
    ]
    notes = resource_get(project=project, environment="development", resource_id="notes")
    assert documents[1]["revision"] == stored(notes).revision
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert AuditEntry.objects.filter(action="memory.export").count() == 1
    # Never over an existing file.
    error = memory_fails("export", "--format", "jsonl", "--out", str(target))
    assert error.returncode == cli.EXIT_INVALID
    assert AuditEntry.objects.filter(action="memory.export").count() == 1


def test_both_export_layouts_write_the_api_document_objects_byte_for_byte(
    make_document: Any, kb: Resource, notes: Resource, api: APIClient, tmp_path: Path
) -> None:
    """Exports make document objects from database rows, not models: each is the API's
    object for the document (a frozen one's with the mode its unfreeze returns to), as
    compact (JSON Lines) or indented (files) UTF-8 JSON."""
    make_document(
        "unicode",
        title="Zürich — 東京 🦀",
        text='RTL \u05e9\u05dc\u05d5\u05dd,\u2028\x7f "q" \\ </script>\n\tend \U0001f600',
        summary="Résumé ✓",
    )
    make_document("frozen", text="Kept.", **agent_write_fields("disabled"))
    make_document("reviewed", text="Checked.", **agent_write_fields("review"))
    make_document("empty", text="", summary="")
    make_document("by-agent", text="Saved by an agent.")
    Document.objects.filter(doc_id="by-agent").update(
        writer_kind="agent", writer_session_id="ses_0123456789abcdef01234567"
    )
    make_document("faq", resource=kb, text="x" * 64)
    make_document("gone", text="secret")
    memory("remove", "notes", "gone", "--yes")
    expected = {
        (resource.resource_id, doc_id): api.get(
            f"/api/managed-agents/projects/acme/memory/{resource.resource_id}/documents/"
            f"{doc_id}?environment=development"
        ).json()
        for resource, doc_id in [
            (kb, "faq"),
            *((notes, d) for d in ["by-agent", "empty", "frozen", "reviewed", "unicode"]),
        ]
    }
    assert expected[("notes", "frozen")]["agentWrites"] == "disabled"
    assert expected[("notes", "reviewed")]["agentWrites"] == "review"
    assert expected[("notes", "by-agent")]["writer"]["kind"] == "agent"
    expected[("notes", "frozen")]["agentWritesUnfrozen"] = "enabled"

    target = tmp_path / "memory.jsonl"
    memory("export", "--format", "jsonl", "--out", str(target))
    manifest, *lines = target.read_bytes().split(b"\n")[:-1]
    assert json.loads(manifest)["documents"] == 6
    assert lines == [
        json.dumps(
            {"resource": resource_id, **document}, ensure_ascii=False, separators=(",", ":")
        ).encode()
        for (resource_id, _), document in expected.items()
    ]
    out_dir = tmp_path / "memory"
    memory("export", "--out", str(out_dir))
    for (resource_id, doc_id), document in expected.items():
        written = (out_dir / resource_id / f"{doc_id}.json").read_bytes()
        assert written == (json.dumps(document, ensure_ascii=False, indent=2) + "\n").encode()
    assert not (out_dir / "notes" / "gone.json").exists()


def test_export_of_named_resources_only(make_document: Any, kb: Resource, tmp_path: Path) -> None:
    make_document("workshop")
    make_document("faq", resource=kb)
    out, _ = memory("export", "--out", str(tmp_path / "m"), "--resource", "kb", "--json")
    assert json.loads(out)["resources"] == ["kb"]
    assert sorted(p.name for p in (tmp_path / "m").rglob("*.json")) == ["faq.json", "manifest.json"]


def test_export_refuses_a_directory_that_is_not_empty(project: Project, tmp_path: Path) -> None:
    (tmp_path / "old.json").write_text("{}")
    error = memory_fails("export", "--out", str(tmp_path))
    assert error.returncode == cli.EXIT_INVALID
    assert not AuditEntry.objects.filter(action="memory.export").exists()


def test_an_export_the_file_system_refuses_is_one_error_line(
    make_document: Any, tmp_path: Path
) -> None:
    make_document(doc_id="workshop", text="Node 22")
    for args, out in [
        (["--out"], "/proc/no-such-folder"),
        (["--format", "jsonl", "--out"], f"{tmp_path}/missing/memory.jsonl"),
    ]:
        error = memory_fails("export", *args, out)
        assert error.returncode == cli.EXIT_ERROR
        assert str(error) == (
            f"Cannot write the export to {out}: No such file or directory; it is not complete."
        )
    assert not (tmp_path / "missing").exists()


def test_an_export_to_a_pipe_its_reader_left_is_one_error_line(
    make_document: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memory export --out - | head -c 100`: the reader leaves before the export is
    written, and the command says so (exit 1) rather than ending as if it were whole."""
    make_document(doc_id="workshop", text="Node 22")
    read_end, write_end = os.pipe()
    os.close(read_end)
    # A pipe no one reads any more, unbuffered: what is written goes to it at once.
    with io.TextIOWrapper(io.FileIO(write_end, "w"), encoding="utf-8") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        error = memory_fails("export", "--format", "jsonl", "--out", "-")
        monkeypatch.undo()
        assert error.returncode == cli.EXIT_ERROR
        assert str(error) == (
            "Cannot write the export to standard output: Broken pipe; it is not complete."
        )


@pytest.mark.postgres
def test_an_export_cut_short_leaves_no_partial_file(make_document: Any, tmp_path: Path) -> None:
    """A file size limit (as a full disk) stops a JSON Lines export mid-way: one line, and
    the file it began is removed, not left looking like an export. (On PostgreSQL the
    limit holds for the export's file alone; SQLite's would meet it first.)"""
    for i in range(20):
        make_document(doc_id=f"doc-{i}", text="x" * 4000)
    out = tmp_path / "memory.jsonl"
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16384, limits[1]))
    try:
        error = memory_fails("export", "--format", "jsonl", "--out", str(out))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert error.returncode == cli.EXIT_ERROR
    assert str(error) == f"Cannot write the export to {out}: File too large; it is not complete."
    assert not out.exists()


def test_export_of_an_unknown_resource_is_not_found(project: Project, tmp_path: Path) -> None:
    error = memory_fails("export", "--out", str(tmp_path / "m"), "--resource", "nope")
    assert error.returncode == cli.EXIT_NOT_FOUND
    assert not (tmp_path / "m").exists()


def test_import_creates_only_and_reports_what_it_skipped(
    project: Project, make_document: Any, notes: Resource, kb: Resource, tmp_path: Path
) -> None:
    make_document("workshop", text="Node 22.", summary="Runtime.", agent_writes=False)
    make_document("agenda", text="Day one.")
    make_document("taken", text="exported")
    make_document("faq", resource=kb, text="short")
    memory("export", "--out", str(tmp_path / "m"))
    # The target: production declares notes only, with one id taken and one deleted.
    call_command(
        "deploy", "--project", "acme", "--environment", "production", "--manifest",
        str(_manifest_file(tmp_path, [MANIFEST_MEMORY[0]])), stdout=StringIO(),
    )  # fmt: skip
    prod = resource_get(project=project, environment="production", resource_id="notes")
    make_document("taken", resource=prod, text="production's own")
    make_document("agenda", resource=prod)
    memory("remove", "notes", "agenda", "--yes", "--environment", "production")

    out, _ = memory("import", "--from", str(tmp_path / "m"), "--environment", "production")

    assert out.splitlines() == [
        "skipped resource kb (1 document): No memory resource 'kb' in production.",
        "skipped notes/agenda: deleted here; the id is reserved",
        "skipped notes/taken: already exists; not overwritten",
        "Imported 1 document into acme/production; skipped 3 (1 existing, 1 deleted ids, "
        "1 in missing resources); 0 failed.",
    ]
    imported = stored(prod)
    assert (imported.text, imported.summary, imported.agent_writes) == (
        "Node 22.",
        "Runtime.",
        False,
    )
    assert stored(prod, "taken").text == "production's own"
    assert AuditEntry.objects.filter(
        action="document.create", environment="production", actor=ACTOR
    ).count() == 1  # fmt: skip


def test_import_reports_documents_too_large_for_the_target(
    project: Project, make_document: Any, tmp_path: Path
) -> None:
    make_document("big", text="x" * 100)
    make_document("small", text="x")
    memory("export", "--out", str(tmp_path / "m"), "--resource", "notes")
    manifest = tmp_path / "m" / "manifest.json"
    # The same export, loaded into kb (maxBytes 64) of the same environment.
    (tmp_path / "m" / "notes").rename(tmp_path / "m" / "kb")
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "resources": ["kb"]}))
    error = memory_fails("import", "--from", str(tmp_path / "m"))
    assert str(error) == "1 document could not be imported."
    assert error.returncode == cli.EXIT_ERROR
    kb = resource_get(project=project, environment="development", resource_id="kb")
    assert list(Document.objects.filter(resource=kb).values_list("doc_id", flat=True)) == ["small"]


def test_import_report_shows_a_hostile_file_name_without_its_terminal_controls(
    project: Project, make_document: Any, tmp_path: Path
) -> None:
    """A document's id in the report is its file's name in the export: characters a
    terminal would act on (an escape sequence, a carriage return) are spaces there."""
    make_document("plain", text="x")
    memory("export", "--out", str(tmp_path / "m"), "--resource", "notes")
    [exported] = (tmp_path / "m" / "notes").iterdir()
    exported.rename(exported.with_name(f"evil\x1b[31m\r{exported.name}"))
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command(
            "memory", "--project", "acme", "import", "--from", str(tmp_path / "m"), stdout=out
        )
    assert str(failed.value) == "1 document could not be imported."
    [line] = [line for line in out.getvalue().splitlines() if line.startswith("failed ")]
    assert line.startswith("failed notes/evil [31m plain")
    assert "\x1b" not in out.getvalue()
    assert "\r" not in out.getvalue()
    assert not Document.objects.filter(doc_id__startswith="evil").exists()


def test_import_of_a_directory_that_is_no_export_is_invalid(
    project: Project, tmp_path: Path
) -> None:
    error = memory_fails("import", "--from", str(tmp_path))
    assert error.returncode == cli.EXIT_INVALID
    assert "manifest.json" in str(error)


def _manifest_file(tmp_path: Path, memory_declarations: list[dict[str, Any]]) -> Path:
    path = tmp_path / "deploy.json"
    path.write_text(json.dumps({"agent": "support-bot", "memory": memory_declarations}))
    return path


# Real processes: manage.py against a SQLite file of their own.


@dataclass
class Cli:
    env: dict[str, str]
    db: Path

    def run(
        self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env={**self.env, **(env or {})},
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=120,
        )

    def memory(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run("memory", "--project", "acme", *args, **kwargs)

    def on_terminal(self, *args: str, answer: str = "") -> tuple[int, str, str]:
        """Runs with stdin and stderr on a pty; returns (exit code, stdout, terminal output)."""
        controller, terminal = os.openpty()
        process = subprocess.Popen(
            [sys.executable, "manage.py", "memory", "--project", "acme", *args],
            cwd=REPO,
            env=self.env,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=terminal,
        )
        os.close(terminal)
        if answer:
            os.write(controller, answer.encode())
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the process closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        assert process.stdout is not None
        out = process.stdout.read().decode()
        process.wait(timeout=120)
        process.stdout.close()
        os.close(controller)
        return process.returncode, out, seen.decode()

    def seed(self, code: str) -> None:
        """Runs Python with Django set up against this database (one process)."""
        result = self.run("shell", "-v0", "-c", code)
        assert result.returncode == 0, result.stderr

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.db) as db:
            return db.execute(sql, params).fetchall()

    def document(self, doc_id: str, environment: str = "development") -> tuple[Any, ...]:
        rows = self.rows(
            "SELECT d.text, d.summary, d.agent_writes, d.deleted, d.revision "
            "FROM memory_document d JOIN memory_resource r ON d.resource_id = r.id "
            "WHERE r.resource_id = 'notes' AND r.environment = ? AND d.doc_id = ?",
            environment,
            doc_id,
        )
        assert len(rows) == 1, rows
        return rows[0]


def _base_env(var_dir: Path, db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "VISUAL", "EDITOR"}}
    env.update(
        DATABASE_URL=f"sqlite:///{db}",
        DJANGO_SECRET_KEY="cli-tests",
        MEMORYADMIN_VAR_DIR=str(var_dir),
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture(scope="module")
def cli_template(
    tmp_path_factory: pytest.TempPathFactory, migrated_sqlite: Callable[[Path], Path]
) -> Path:
    """A migrated SQLite file with project acme, notes and kb in both environments."""
    root = tmp_path_factory.mktemp("cli-template")
    db = migrated_sqlite(root / "db.sqlite3")
    template = Cli(env=_base_env(root, db), db=db)
    template.seed(
        "from memoryadmin.memory.services.deployments import deployment_create\n"
        "from memoryadmin.memory.services.projects import project_create\n"
        "project = project_create(project_id='acme', actor='test')\n"
        f"for environment in ('development', 'production'):\n"
        f"    deployment_create(project=project, agent='support-bot', memory={MANIFEST_MEMORY!r},"
        " promote=environment, actor='test')\n"
    )
    return db


@pytest.fixture
def proc(cli_template: Path, tmp_path: Path) -> Cli:
    db = tmp_path / "db.sqlite3"
    shutil.copy(cli_template, db)
    return Cli(env=_base_env(tmp_path, db), db=db)


def test_process_every_subcommand_end_to_end(proc: Cli, tmp_path: Path) -> None:
    created = proc.memory(
        "create", "notes", "workshop", "--title", "Workshop", "--text-stdin", "--summary", "S",
        stdin="Node 22\n",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("Created notes/workshop (revision ")
    assert proc.document("workshop")[:4] == ("Node 22\n", "S", 1, 0)

    listed = proc.memory("list", "notes", "--json")
    assert [d["id"] for d in json.loads(listed.stdout)["documents"]] == ["workshop"]
    shown = proc.memory("show", "notes", "workshop", "--json")
    assert json.loads(shown.stdout)["revision"] == proc.document("workshop")[4]

    edited = proc.memory("edit", "notes", "workshop", "--text-stdin", stdin="Node 24\n")
    assert edited.returncode == 0, edited.stderr
    assert proc.document("workshop")[0] == "Node 24\n"

    assert proc.memory("freeze", "notes", "workshop").returncode == 0
    assert proc.document("workshop")[2] == 0
    assert proc.memory("unfreeze", "notes", "workshop").returncode == 0
    assert proc.document("workshop")[2] == 1

    exported = proc.memory("export", "--out", str(tmp_path / "m"))
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "m/notes/workshop.json").read_text())["text"] == "Node 24\n"

    imported = proc.memory("import", "--from", str(tmp_path / "m"), "--environment", "production")
    assert imported.returncode == 0, imported.stderr
    assert proc.document("workshop", "production")[0] == "Node 24\n"

    removed = proc.memory("remove", "notes", "workshop", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert proc.document("workshop")[:4] == ("", "", 1, 1)

    audited = proc.rows(
        "SELECT actor, action FROM memory_auditentry WHERE action LIKE 'document.%' "
        "OR action LIKE 'memory.%' ORDER BY id"
    )
    assert audited == [
        (ACTOR, action)
        for action in (
            "document.create", "document.replace", "document.freeze", "document.unfreeze",
            "memory.export", "document.create", "document.delete",
        )
    ]  # fmt: skip


def test_process_exit_codes_and_one_line_errors(proc: Cli) -> None:
    assert proc.memory("create", "notes", "workshop", "--title", "W").returncode == 0
    cases = [
        (["show", "notes", "missing"], 3, "No document 'missing' in resource 'notes'."),
        (["create", "notes", "workshop", "--title", "W"], 4, "already in use or was deleted"),
        (["create", "kb", "faq", "--title", "F", "--text-stdin"], 5, "this resource allows 64"),
        (["create", "notes", "bad id", "--title", "W"], 6, "Document ids are"),
    ]
    for args, code, message in cases:
        result = proc.memory(*args, stdin="x" * 65)
        assert result.returncode == code, (args, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("Error: ")
        assert message in result.stderr
        assert "Traceback" not in result.stderr
    usage = proc.memory("bogus")
    assert usage.returncode == 2
    assert "invalid choice: 'bogus'" in usage.stderr


def test_process_every_command_fails_with_one_error_line(proc: Cli, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("[]")
    session = ["session", "create", "--project", "acme", "--agent", "support-bot"]
    deploy = ["deploy", "--project", "acme", "--environment", "development"]
    cases = [
        (["session", "show", "ses_nope"], 3, "No session 'ses_nope'."),
        (
            [*session, "--memory", "notes=missing"],
            6,
            "memory.notes: document 'missing' does not exist; create it first.",
        ),
        (["secret", "delete", "--project", "acme", "T"], 3, "No secret 'T' in development."),
        (["grant", "ghost", "acme", "--revoke"], 3, "No user 'ghost'."),
        (["createproject", "acme"], 7, "Project 'acme' already exists."),
        (["createapikey", "--project", "ghost"], 3, "No project 'ghost'."),
        (
            [*deploy, "--manifest", str(manifest)],
            6,
            'The manifest must be {"agent": ..., "memory": [...]}.',
        ),
    ]
    for args, code, message in cases:
        result = proc.run(*args)
        assert (result.returncode, result.stderr) == (code, f"Error: {message}\n"), args
        assert result.stdout == ""
    tables = ("agents_session", "memory_apikey", "providers_secret", "web_projectrole")
    assert [proc.rows(f"SELECT count(*) FROM {table}")[0][0] for table in tables] == [0] * 4
    assert proc.rows("SELECT id FROM memory_project") == [("acme",)]
    assert proc.rows("SELECT count(*) FROM memory_deployment") == [(2,)]


def test_process_an_endless_pipe_or_an_unreadable_file_is_one_error_line(
    proc: Cli, tmp_path: Path
) -> None:
    """`yes | manage.py secret set ...` and files a command cannot read: one line each, the
    process's memory bounded, nothing written."""
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    assert yes.stdout is not None
    secret = [sys.executable, "manage.py", "secret", "set", "--project", "acme", "T"]
    with yes:
        result = subprocess.run(
            [*secret, "--origin", "https://memory.example.com"],
            cwd=REPO, env=proc.env, stdin=yes.stdout, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        yes.kill()
    over = f"is over {cli.INPUT_MAX_BYTES} bytes; no input of a command may be that long."
    assert (result.returncode, result.stderr) == (5, f"Error: Standard input {over}\n")
    not_utf8 = tmp_path / "receipt.json"
    not_utf8.write_bytes(b"\xff{}")
    receipt = tmp_path / "empty.json"
    receipt.write_text("{}")
    deploy = ["deploy", "--project", "acme", "--environment", "development", "--manifest"]
    cases = [
        (["erasure", "verify", str(not_utf8)], 6, f"{not_utf8} is not valid UTF-8 text."),
        (
            ["erasure", "verify", str(receipt), "--public-key", f"@{tmp_path}/none"],
            6,
            f"Cannot read {tmp_path}/none: No such file or directory.",
        ),
        ([*deploy, str(tmp_path)], 6, f"Cannot read {tmp_path}: Is a directory."),
    ]
    for args, code, message in cases:
        result = proc.run(*args)
        assert (result.returncode, result.stderr) == (code, f"Error: {message}\n"), args
    assert proc.rows("SELECT count(*) FROM providers_secret") == [(0,)]
    assert proc.rows("SELECT count(*) FROM memory_deployment") == [(2,)]


class _PoolGivesUp(cli.Command):
    """A command whose database pool failed to connect twice, then gave up."""

    def act(self, options: dict[str, Any]) -> None:
        pool_log = logging.getLogger("psycopg.pool")
        for port in (5432, 5433):
            pool_log.warning(
                "error connecting in 'pool-1': connection failed: connection to server at"
                ' "10.0.0.9", port %d failed: Connection refused',
                port,
            )
        raise OperationalError("couldn't get a connection after 3.00 sec")


def test_a_command_names_the_pools_last_failure_and_prints_none_of_its_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(CommandError) as failed:
        _PoolGivesUp().handle()
    assert str(failed.value) == (
        'The database cannot be used: connection failed: connection to server at "10.0.0.9",'
        " port 5433 failed: Connection refused. Check DATABASE_URL and that the database is up."
    )
    assert failed.value.returncode == cli.EXIT_ERROR
    assert caplog.records == []
    assert logging.getLogger("psycopg.pool").filters == []  # kept only while it acted


def test_a_command_that_serves_logs_the_pools_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """`mcp` serves until it is stopped: an outage's warnings go to its log, as the web
    server's do."""

    class Serving(_PoolGivesUp):
        serves = True

    with caplog.at_level(logging.WARNING), pytest.raises(CommandError) as failed:
        Serving().handle()
    assert [record.name for record in caplog.records] == ["psycopg.pool"] * 2
    assert str(failed.value) == (
        "The database cannot be used: couldn't get a connection after 3.00 sec. Check"
        " DATABASE_URL and that the database is up."
    )
    # The MCP server's command is one (imported here: the MCP SDK takes half a second).
    from memoryadmin.agents.management.commands.mcp import Command as McpCommand

    assert McpCommand.serves


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a command that failed printed (no traceback, no log line), checked."""
    assert result.returncode == cli.EXIT_ERROR, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("Error: "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return result.stderr


def test_process_a_database_without_the_tables_is_one_error_line(proc: Cli, tmp_path: Path) -> None:
    """A new database that `migrate` has not set up: the commands say so, and create
    nothing in it."""
    new = tmp_path / "new.sqlite3"
    env = {"DATABASE_URL": f"sqlite:///{new}"}
    for args, table in [
        (["memory", "--project", "acme", "list"], "memory_project"),
        (["session", "show", "ses_nope"], "agents_session"),
    ]:
        assert _one_error_line(proc.run(*args, env=env)) == (
            f"Error: The database is not set up (no such table: {table}): run"
            " `python manage.py migrate` first.\n"
        )
    with sqlite3.connect(new) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []


@pytest.mark.postgres
def test_process_a_database_it_cannot_reach_or_without_the_tables_is_one_error_line(
    proc: Cli,
) -> None:
    """PostgreSQL: nothing listening (the connection pool retries until its timeout,
    warning at each attempt: the line names the last attempt's error instead), a database
    that does not exist, and one without the project's tables (the server's own)."""
    db = connection.settings_dict
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or "5432"
    server = f"postgres://{db['USER'] or ''}@{host}"
    closed = free_port()
    refused = proc.memory("list", env={"DATABASE_URL": f"postgres://postgres@127.0.0.1:{closed}/x"})
    assert _one_error_line(refused) == (
        "Error: The database cannot be used: connection failed: connection to server at"
        f' "127.0.0.1", port {closed} failed: Connection refused. Check DATABASE_URL and that'
        " the database is up.\n"
    )
    missing = proc.memory("list", env={"DATABASE_URL": f"{server}:{port}/memoryadmin_none"})
    assert _one_error_line(missing).startswith("Error: The database cannot be used: ")
    assert 'database "memoryadmin_none" does not exist' in missing.stderr
    empty = proc.memory("list", env={"DATABASE_URL": f"{server}:{port}/postgres"})
    assert _one_error_line(empty) == (
        'Error: The database is not set up (relation "memory_project" does not exist): run'
        " `python manage.py migrate` first.\n"
    )


def test_process_edit_in_a_scripted_editor(proc: Cli, tmp_path: Path) -> None:
    proc.memory("create", "notes", "workshop", "--title", "W", "--text-stdin", stdin="Node 22")
    script = tmp_path / "editor.sh"
    script.write_text('#!/bin/sh\nsed -i "s/22/24/" "$1"\n')
    script.chmod(0o755)
    result = proc.memory("edit", "notes", "workshop", env={"EDITOR": str(script)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Saved notes/workshop")
    assert proc.document("workshop")[0] == "Node 24"
    unchanged = proc.memory("edit", "notes", "workshop", env={"VISUAL": "true"})
    assert unchanged.stdout == "No changes; nothing saved.\n"
    assert proc.rows("SELECT COUNT(*) FROM memory_documentversion") == [(2,)]


def test_process_edit_conflict_saves_nothing_and_keeps_the_text(proc: Cli, tmp_path: Path) -> None:
    proc.memory("create", "notes", "workshop", "--title", "W", "--text-stdin", stdin="base")
    # The editor: while the user types, someone else saves the document.
    script = tmp_path / "editor.py"
    script.write_text(
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, 'manage.py', 'memory', '--project', 'acme', 'edit',"
        f" 'notes', 'workshop', '--text-stdin'], input=b'theirs', check=True, cwd={str(REPO)!r})\n"
        "open(sys.argv[1], 'w').write('my careful work')\n"
    )
    editor = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    result = proc.memory("edit", "notes", "workshop", env={"EDITOR": editor})
    assert result.returncode == cli.EXIT_PRECONDITION
    assert result.stderr.count("\n") == 1
    assert "has changed since that revision" in result.stderr
    draft = Path(result.stderr.strip().rsplit("your text is in ", 1)[1])
    assert draft.read_text() == "my careful work"
    draft.unlink()
    assert proc.document("workshop")[0] == "theirs"


def test_process_export_progress_bar_only_on_a_terminal(proc: Cli, tmp_path: Path) -> None:
    proc.seed(
        "from memoryadmin.memory.models import Resource\n"
        "from memoryadmin.memory.services.documents import document_create\n"
        "notes = Resource.objects.get(environment='development', resource_id='notes')\n"
        "for doc_id in ('a', 'b', 'c'):\n"
        "    document_create(resource=notes, doc_id=doc_id, title=doc_id, actor='test')\n"
    )
    piped = proc.memory("export", "--out", str(tmp_path / "piped"))
    assert piped.returncode == 0
    assert piped.stderr == ""
    assert piped.stdout == (
        f"Exported 3 documents from 2 resources to {tmp_path / 'piped'} (individual reads).\n"
    )
    code, out, terminal = proc.on_terminal("export", "--out", str(tmp_path / "tty"))
    assert code == 0, terminal
    assert "Exporting [" in terminal
    assert "3/3" in terminal
    assert out.startswith("Exported 3 documents")
    assert sorted(p.name for p in (tmp_path / "tty" / "notes").iterdir()) == [
        "a.json", "b.json", "c.json"
    ]  # fmt: skip


def test_process_remove_asks_on_a_terminal(proc: Cli) -> None:
    proc.memory("create", "notes", "workshop", "--title", "Workshop")
    code, _, terminal = proc.on_terminal("remove", "notes", "workshop", answer="n\n")
    assert code == cli.EXIT_ERROR
    assert "Delete notes/workshop (Workshop)?" in terminal
    assert "Cancelled; nothing deleted." in terminal
    assert proc.document("workshop")[3] == 0
    code, out, _ = proc.on_terminal("remove", "notes", "workshop", answer="y\n")
    assert code == 0
    assert "stays reserved" in out
    assert proc.document("workshop")[3] == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_process_export_on_postgresql_is_one_snapshot(
    make_document: Any, notes: Resource, tmp_path: Path
) -> None:
    make_document("workshop", text="Node 22")
    settings = connection.settings_dict
    url = (
        f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )
    env = {**_base_env(tmp_path, tmp_path / "unused"), "DATABASE_URL": url}
    result = subprocess.run(
        [sys.executable, "manage.py", "memory", "--project", "acme", "export", "--out",
         str(tmp_path / "m"), "--json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["consistentSnapshot"] is True
    assert json.loads((tmp_path / "m/manifest.json").read_text())["consistentSnapshot"] is True
    assert AuditEntry.objects.get(action="memory.export").detail["consistentSnapshot"] is True
