"""A query parameter is given once: given twice on any API route it is 400 in the error
envelope naming it, before anything is read or written (the last value won before),
unless the route takes it repeated (the export's `resource`, the MCP URL's `memory`)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session
from memoryadmin.memory.models import AuditEntry, Document
from tests.helpers import DEV, DOCS, Keys, streamed

PROJECT = "/api/managed-agents/projects/acme"
DAY, NEXT = "2026-01-01", "2026-01-02"

REPEATED = [
    (f"{DOCS}{DEV}&cursor=a&cursor=b", "cursor"),
    (f"{DOCS}{DEV}&limit=10&limit=20", "limit"),  # a parameter no route reads
    (f"{DOCS}{DEV}&asOf={DAY}&asOf={NEXT}", "asOf"),
    (f"{DOCS}{DEV}&q=node&q=node", "q"),  # the same value twice too
    (f"{DOCS}{DEV}&writer=owner&writer=agent", "writer"),  # a filter
    (f"{DOCS}{DEV}&environment=development", "environment"),
    (f"{DOCS}/workshop/versions{DEV}&include=text&include=text", "include"),
    (f"{PROJECT}/memory/search{DEV}&q=a&q=b", "q"),
    (f"{PROJECT}/audit{DEV}&since={DAY}&since={NEXT}", "since"),
    (f"{PROJECT}/deployments?agent=support-bot&agent=other", "agent"),
    ("/api/managed-agents/sessions?projectId=acme&projectId=acme", "projectId"),
    # Two names repeated: the first by name is told.
    (f"{DOCS}{DEV}&q=a&q=b&cursor=a&cursor=b", "cursor"),
]


@pytest.mark.parametrize(("url", "name"), REPEATED)
def test_a_parameter_given_twice_is_400_naming_it(
    api: APIClient, make_document: Callable[..., Any], url: str, name: str
) -> None:
    make_document("workshop", text="one")
    response = api.get(url)
    assert response.status_code == 400, response.content
    assert response.json() == {
        "error": {
            "code": "invalid_request",
            "message": f"{name} must be given once.",
            "details": {"field": name},
        }
    }


def test_a_write_with_a_parameter_given_twice_writes_nothing(
    api: APIClient, make_document: Callable[..., Any]
) -> None:
    document = make_document("workshop", text="one")
    audited = AuditEntry.objects.count()
    created = api.put(
        f"{DOCS}/new{DEV}&dryRun=true&dryRun=false",
        data=json.dumps({"title": "New"}),
        content_type="application/json",
        HTTP_IF_NONE_MATCH="*",
    )
    assert created.status_code == 400
    assert created.json()["error"]["details"] == {"field": "dryRun"}
    replaced = api.put(
        f"{DOCS}/workshop{DEV}&x=1&x=1",
        data=json.dumps({"text": "two"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{document.revision}"',
    )
    assert replaced.status_code == 400
    assert replaced.json()["error"]["details"] == {"field": "x"}
    assert list(Document.objects.values_list("doc_id", "text", "revision")) == [
        ("workshop", "one", document.revision)
    ]
    assert AuditEntry.objects.count() == audited


def test_the_key_and_its_reach_are_checked_before_the_query(
    client_for: Callable[[str | None], APIClient], keys: Keys
) -> None:
    url = f"{DOCS}{DEV}&cursor=a&cursor=b"
    assert client_for(None).get(url).status_code == 401
    assert client_for(keys.other).get(url).status_code == 403


def test_a_repeatable_parameter_still_takes_every_value(
    api: APIClient, make_document: Callable[..., Any], keys: Keys
) -> None:
    make_document("workshop", text="one")
    response = api.post(f"{PROJECT}/memory/export{DEV}&resource=notes&resource=kb")
    assert response.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(streamed(response)))
    manifest = json.loads(archive.read("manifest.json"))
    assert sorted(manifest["resources"]) == ["kb", "notes"]
    assert "notes/workshop.json" in archive.namelist()
    # Its route's other parameters are given once still.
    twice = api.post(f"{PROJECT}/memory/export{DEV}&resource=notes&environment=development")
    assert twice.status_code == 400
    assert twice.json()["error"]["details"] == {"field": "environment"}
    assert not Session.objects.exists()
