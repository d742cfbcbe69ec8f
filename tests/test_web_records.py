"""The Memory page for external providers: a namespace's records, search, a record with its
history, add, edit and delete at the provider; support reads but never changes text; what a
provider lacks says so."""

from __future__ import annotations

from typing import Any

import pytest

from memoryadmin.agents.services.records import record_seen
from memoryadmin.memory.models import AuditEntry, Project, Resource
from tests.fake_providers import FakeHindsight, FakeMem0Oss
from tests.helpers import deploy_external, html_of

BASE = "/projects/acme/development/resources/mem/"


@pytest.fixture
def mem(project: Project, mem0_oss: FakeMem0Oss, people: Any) -> Resource:
    return deploy_external(
        project,
        {
            "kind": "mem0-oss",
            "baseUrl": mem0_oss.origin,
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": "mem0-test-key"}},
    )


def test_the_resource_page_points_to_its_records(owner: Any, mem: Resource) -> None:
    page = html_of(owner.get(BASE))
    assert "its records live with the provider" in page
    assert f'href="{BASE}records/"' in page
    # The tools the kind gives agents, with their access, as for declared http tools.
    assert "declares no tools" not in page
    for name, access in [("add", "write"), ("search", "read"), ("forget", "write")]:
        assert f'<th scope="row"><code>{name}</code></th><td>{access}</td>' in page


def test_records_are_listed_searched_and_read_with_history(
    owner: Any, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    mem0_oss.seed("Alice plays the cello.", user_id="alice")
    mem0_oss.seed("Alice walks to work.", user_id="alice")
    listing = html_of(owner.get(BASE + "records/?namespace=alice"))
    assert "Alice plays the cello." in listing
    assert "Alice walks to work." in listing
    search = html_of(owner.get(BASE + "records/?namespace=alice&q=cello"))
    assert "Alice plays the cello." in search
    assert "Alice walks to work." not in search
    record_id = search.split("<code>xm_")[1].split("<")[0]
    detail = html_of(owner.get(f"{BASE}records/xm_{record_id}/?namespace=alice"))
    assert "Alice plays the cello." in detail
    assert "Delete at the provider" in detail
    assert "<td>create</td>" in detail


def test_owner_adds_edits_and_deletes_at_the_provider(
    owner: Any, mem: Resource, mem0_oss: FakeMem0Oss, people: Any
) -> None:
    owner_name = people.owner.get_username()
    added = owner.post(BASE + "records/new/", {"namespace": "alice", "text": "Likes figs."})
    assert added.status_code == 302
    assert added["Location"] == BASE + "records/?namespace=alice"
    [external] = mem0_oss.memories
    listing = html_of(owner.get(added["Location"]))
    record_id = "xm_" + listing.split("<code>xm_")[1].split("<")[0]

    edited = owner.post(
        f"{BASE}records/{record_id}/edit/",
        {"namespace": "alice", "text": "Likes dates.", "seen": record_seen("Likes figs.")},
    )
    assert edited.status_code == 302
    assert mem0_oss.memories[external]["memory"] == "Likes dates."
    assert "Saved at the provider." in html_of(owner.get(edited["Location"]))

    deleted = owner.post(
        f"{BASE}records/{record_id}/delete/",
        {"namespace": "alice", "seen": record_seen("Likes dates.")},
    )
    assert deleted.status_code == 302
    assert mem0_oss.memories == {}
    actors = set(
        AuditEntry.objects.filter(action__startswith="record.").values_list("actor", flat=True)
    )
    assert actors == {f"user:{owner_name}"}


def test_support_reads_but_cannot_change_records(
    support: Any, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    mem0_oss.seed("Alice note.", user_id="alice")
    listing = html_of(support.get(BASE + "records/?namespace=alice"))
    assert "Alice note." in listing
    assert "Add a record" not in listing
    refused = support.post(BASE + "records/new/", {"namespace": "alice", "text": "x"})
    assert refused.status_code == 403
    assert len(mem0_oss.memories) == 1


def test_an_edit_the_provider_lacks_is_a_clear_error(
    owner: Any, project: Project, hindsight: FakeHindsight
) -> None:
    deploy_external(
        project,
        {
            "kind": "hindsight",
            "baseUrl": hindsight.origin,
            "headers": {"Authorization": {"secret": "HS", "scheme": "Bearer"}},
        },
        resource_id="facts",
        secrets_by_origin={hindsight.origin: {"HS": "hindsight-test"}},
    )
    unit = hindsight.seed("alice", "Alice is left-handed.")[0]
    base = "/projects/acme/development/resources/facts/"
    listing = html_of(owner.get(base + "records/?namespace=alice"))
    record_id = "xm_" + listing.split("<code>xm_")[1].split("<")[0]
    response = owner.post(
        f"{base}records/{record_id}/edit/",
        {"namespace": "alice", "text": "y", "seen": record_seen("Alice is left-handed.")},
    )
    assert response.status_code == 400
    assert "cannot edit a memory" in response.content.decode()
    assert hindsight.bank("alice")["units"][unit]["text"] == "Alice is left-handed."


def test_a_text_with_nul_is_refused_before_the_provider_hears_of_it(
    owner: Any, mem: Resource, mem0_oss: FakeMem0Oss
) -> None:
    """A form's text is sent to the provider as it came: the string rule refuses a NUL (400,
    naming the text) before the provider stores it, not after, when its answer repeats it."""
    seeded = mem0_oss.seed("Alice plays the cello.", user_id="alice")
    listing = html_of(owner.get(BASE + "records/?namespace=alice"))
    record_id = "xm_" + listing.split("<code>xm_")[1].split("<")[0]
    audited = AuditEntry.objects.count()
    added = owner.post(BASE + "records/new/", {"namespace": "alice", "text": "Likes\x00 figs."})
    edited = owner.post(
        f"{BASE}records/{record_id}/edit/",
        {
            "namespace": "alice",
            "text": "Likes\x00 dates.",
            "seen": record_seen("Alice plays the cello."),
        },
    )
    for response in (added, edited):
        assert response.status_code == 400, response.content
        assert "text: the value contains a NUL character" in response.content.decode()
    assert list(mem0_oss.memories) == [seeded]
    assert mem0_oss.memories[seeded]["memory"] == "Alice plays the cello."
    assert AuditEntry.objects.count() == audited
