"""An owner's edit or delete of a provider's record acts on the text its person read: the
provider keeps no revision, so the write is conditional on the text (`record_seen`), read
again just before it is sent, under the record's claim. A change made at the provider or by
another person since the read is never written over: 412, nothing sent."""

from __future__ import annotations

import re
import threading
import time
import types
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from memoryadmin.agents.services import records as record_services
from memoryadmin.core.errors import PreconditionFailed
from memoryadmin.memory.models import AuditEntry, Project, Resource
from tests.fake_providers import FakeMem0Oss
from tests.helpers import DEV, deploy_external, wait_until

RECORDS = "/api/managed-agents/projects/acme/memory/mem/records"
ALICE = DEV + "&namespace=alice"
MEM0_KEY = "mem0-test-key"


def _mem0(project: Project, server: FakeMem0Oss) -> Resource:
    declaration = {
        "kind": "mem0-oss",
        "baseUrl": server.origin,
        "scope": {"user_id": "{namespace}", "agent_id": "archivist"},
        "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
    }
    return deploy_external(
        project, declaration, secrets_by_origin={server.origin: {"MEM0_KEY": MEM0_KEY}}
    )


def _added(api: APIClient, text: str) -> str:
    made = api.post(RECORDS + ALICE, {"text": text}, format="json")
    assert made.status_code == 201, made.json()
    return str(made.json()["records"][0]["id"])


def _page_seen(owner: Client, record_id: str) -> str:
    url = reverse("web:record", args=["acme", "development", "mem", record_id])
    page = owner.get(url + "?namespace=alice")
    assert page.status_code == 200
    [edit, delete] = re.findall(r'name="seen" value="([0-9a-f]+)"', page.content.decode())
    assert edit == delete
    return edit


def _post(owner: Client, name: str, record_id: str, data: dict[str, str]) -> Any:
    url = reverse(f"web:{name}", args=["acme", "development", "mem", record_id])
    return owner.post(url, {"namespace": "alice", **data})


def test_the_pages_edit_and_delete_keep_a_change_made_since_the_record_was_shown(
    api: APIClient, owner: Client, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    _mem0(project, mem0_oss)
    record_id = _added(api, "Alice likes tea.")
    [external] = mem0_oss.memories
    seen = _page_seen(owner, record_id)
    # Changed at the provider (or by another person) while the page was open.
    mem0_oss.memories[external]["memory"] = "Alice likes green tea."
    puts = len(mem0_oss.seen("PUT", f"/memories/{external}"))

    edited = _post(owner, "record-edit", record_id, {"seen": seen, "text": "Alice likes coffee."})
    # Shown again: the text it has now, the person's own kept in the form.
    assert edited.status_code == 409
    html = edited.content.decode()
    assert "changed since it was read" in html
    assert '<pre class="document-text" tabindex="0">Alice likes green tea.</pre>' in html
    assert ">Alice likes coffee.</textarea>" in html
    now_seen = record_services.record_seen("Alice likes green tea.")
    assert re.findall(r'name="seen" value="([0-9a-f]+)"', html) == [now_seen, now_seen]
    deleted = _post(owner, "record-delete", record_id, {"seen": seen})
    assert deleted.status_code == 409
    # Nothing was sent: the change made meanwhile is kept.
    assert mem0_oss.memories[external]["memory"] == "Alice likes green tea."
    assert len(mem0_oss.seen("PUT", f"/memories/{external}")) == puts
    assert not mem0_oss.seen("DELETE", f"/memories/{external}")
    assert not AuditEntry.objects.filter(action__in=["record.update", "record.delete"]).exists()

    # Shown again, the text now read is the one written over.
    seen = _page_seen(owner, record_id)
    edited = _post(owner, "record-edit", record_id, {"seen": seen, "text": "Alice likes coffee."})
    assert edited.status_code == 302
    assert mem0_oss.memories[external]["memory"] == "Alice likes coffee."
    deleted = _post(owner, "record-delete", record_id, {"seen": _page_seen(owner, record_id)})
    assert deleted.status_code == 302
    assert mem0_oss.memories == {}


def test_a_page_form_without_the_text_it_was_shown_changes_nothing(
    api: APIClient, owner: Client, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    _mem0(project, mem0_oss)
    record_id = _added(api, "Alice likes tea.")
    [external] = mem0_oss.memories
    edited = _post(owner, "record-edit", record_id, {"text": "Alice likes coffee."})
    deleted = _post(owner, "record-delete", record_id, {})
    assert (edited.status_code, deleted.status_code) == (400, 400)
    assert mem0_oss.memories[external]["memory"] == "Alice likes tea."
    assert not mem0_oss.seen("PUT", f"/memories/{external}")


def test_an_api_write_with_if_match_keeps_a_change_made_since_the_read(
    api: APIClient, project: Project, mem0_oss: FakeMem0Oss
) -> None:
    _mem0(project, mem0_oss)
    record_id = _added(api, "Alice likes tea.")
    [external] = mem0_oss.memories
    read = api.get(f"{RECORDS}/{record_id}{ALICE}")
    assert read.status_code == 200
    tag = read["ETag"]
    assert tag == f'"{record_services.record_seen("Alice likes tea.")}"'
    mem0_oss.memories[external]["memory"] = "Alice likes green tea."

    url = f"{RECORDS}/{record_id}{ALICE}"
    patched = api.patch(url, {"text": "Coffee."}, format="json", HTTP_IF_MATCH=tag)
    assert patched.status_code == 412, patched.json()
    assert patched.json()["error"]["code"] == "precondition_failed"
    deleted = api.delete(url, HTTP_IF_MATCH=tag)
    assert deleted.status_code == 412, deleted.json()
    assert mem0_oss.memories[external]["memory"] == "Alice likes green tea."
    assert not AuditEntry.objects.filter(action__in=["record.update", "record.delete"]).exists()

    tag = api.get(url)["ETag"]
    patched = api.patch(url, {"text": "Coffee."}, format="json", HTTP_IF_MATCH=tag)
    assert patched.status_code == 200, patched.json()
    assert mem0_oss.memories[external]["memory"] == "Coffee."


@pytest.mark.django_db(transaction=True)
def test_two_people_editing_the_text_they_both_read_at_once_one_is_refused(
    project: Project, mem0_oss: FakeMem0Oss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both read "tea"; the first's update is held at the provider while the second asks.
    The second waits for the record's claim, then reads the first's text and is refused:
    it never writes over it (where it read "tea" and sent its own after the first's)."""
    resource = _mem0(project, mem0_oss)
    added = record_services.record_create(
        resource=resource, namespace="alice", text="Alice likes tea.", actor="owner:a"
    )
    record_id = added["records"][0]["id"]
    [external] = mem0_oss.memories
    seen = record_services.record_seen("Alice likes tea.")
    waiting = threading.Event()

    def sleep(seconds: float) -> None:  # the claim's poll: the second waits for the first
        waiting.set()
        time.sleep(seconds)

    monkeypatch.setattr(
        record_services, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep)
    )
    stall = mem0_oss.stall(f"/memories/{external}", method="PUT")
    outcomes: dict[str, object] = {}

    def edit(who: str, text: str) -> None:
        from django.db import connection

        try:
            outcomes[who] = record_services.record_update(
                resource=resource,
                namespace="alice",
                record_id=record_id,
                text=text,
                actor=f"owner:{who}",
                seen=seen,
            )["status"]
        except PreconditionFailed as exc:
            outcomes[who] = exc.status
        finally:
            connection.close()

    first = threading.Thread(target=edit, args=("first", "Alice likes coffee."))
    first.start()
    stall.arrived.wait(15)
    gets = f"/memories/{external}"
    read = len(mem0_oss.seen("GET", gets))
    second = threading.Thread(target=edit, args=("second", "Alice likes cocoa."))
    second.start()
    wait_until(
        lambda: waiting.is_set() or len(mem0_oss.seen("GET", gets)) > read,
        "the second edit to wait for the claim or read the record",
    )
    stall.release.set()
    first.join(30)
    second.join(30)
    assert outcomes == {"first": "stored", "second": 412}
    assert mem0_oss.memories[external]["memory"] == "Alice likes coffee."
    assert len(mem0_oss.seen("PUT", f"/memories/{external}")) == 1
