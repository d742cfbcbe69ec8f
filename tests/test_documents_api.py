"""Documents through the management API: status, body and database state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryadmin.memory.models import AuditEntry, Document, DocumentVersion, Resource
from tests.helpers import DEV, DOCS


def put(api: APIClient, doc_id: str, body: Any, **headers: Any) -> Any:
    return api.put(
        f"{DOCS}/{doc_id}{DEV}", data=json.dumps(body), content_type="application/json", **headers
    )


def patch(api: APIClient, doc_id: str, body: Any, **headers: Any) -> Any:
    return api.patch(
        f"{DOCS}/{doc_id}{DEV}", data=json.dumps(body), content_type="application/json", **headers
    )


def create(api: APIClient, doc_id: str = "workshop", **body: Any) -> Any:
    body.setdefault("title", "Workshop notes")
    return put(api, doc_id, body, HTTP_IF_NONE_MATCH="*")


def test_create_returns_201_document_and_etag(api: APIClient, notes: Resource) -> None:
    response = create(api, text="Exercises must run on Node.js 22.", summary="Runtime.")
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {
        "id", "title", "text", "summary", "agentWrites", "revision",
        "bytes", "maxBytes", "updatedAt", "writer",
    }  # fmt: skip
    assert body["id"] == "workshop"
    assert body["text"] == "Exercises must run on Node.js 22."
    assert body["bytes"] == 33
    assert body["maxBytes"] == 8192
    assert body["agentWrites"] == "enabled"
    assert body["writer"] == {"kind": "owner"}
    assert body["updatedAt"].endswith("Z")
    assert len(body["updatedAt"]) == 24
    assert response["ETag"] == f'"{body["revision"]}"'
    stored = Document.objects.get(resource=notes, doc_id="workshop")
    assert stored.revision == body["revision"]
    assert stored.versions.count() == 1
    assert AuditEntry.objects.filter(action="document.create", document_id="workshop").count() == 1


def test_create_defaults_text_summary_and_agent_writes(api: APIClient) -> None:
    response = create(api)
    assert response.status_code == 201
    body = response.json()
    assert (body["text"], body["summary"], body["agentWrites"], body["bytes"]) == (
        "",
        "",
        "enabled",
        0,
    )


def test_create_requires_title(api: APIClient) -> None:
    response = put(api, "workshop", {"text": "x"}, HTTP_IF_NONE_MATCH="*")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Document.objects.exists()


def test_create_with_frozen_policy(api: APIClient) -> None:
    response = create(api, agentWrites="disabled")
    assert response.status_code == 201
    assert response.json()["agentWrites"] == "disabled"
    assert Document.objects.get().agent_writes is False


def test_create_on_existing_id_is_412(api: APIClient, make_document: Any) -> None:
    make_document("workshop", text="original")
    response = create(api, text="other")
    assert response.status_code == 412
    assert response.json()["error"]["code"] == "precondition_failed"
    assert Document.objects.get().text == "original"


def test_read_returns_document_and_etag(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="héllo")
    response = api.get(f"{DOCS}/workshop{DEV}")
    assert response.status_code == 200
    assert response.json()["text"] == "héllo"
    assert response.json()["bytes"] == 6
    assert response["ETag"] == f'"{document.revision}"'


def test_read_missing_is_404(api: APIClient, notes: Resource) -> None:
    response = api.get(f"{DOCS}/nope{DEV}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_replace_with_current_revision(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="one", summary="keep me")
    response = put(api, "workshop", {"text": "two"}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert response.status_code == 200
    body = response.json()
    assert body["text"] == "two"
    assert body["summary"] == "keep me"
    assert body["revision"] != document.revision
    assert response["ETag"] == f'"{body["revision"]}"'
    stored = Document.objects.get(pk=document.pk)
    assert (stored.text, stored.summary, stored.revision) == ("two", "keep me", body["revision"])
    assert list(stored.versions.order_by("id").values_list("text", flat=True)) == ["one", "two"]


def test_replace_with_empty_summary_clears_it(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", summary="old")
    response = put(
        api, "workshop", {"text": "x", "summary": ""}, HTTP_IF_MATCH=f'"{document.revision}"'
    )
    assert response.status_code == 200
    assert Document.objects.get(pk=document.pk).summary == ""


def test_replace_with_stale_revision_is_412(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="one")
    first = put(api, "workshop", {"text": "two"}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert first.status_code == 200
    stale = put(api, "workshop", {"text": "three"}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert stale.status_code == 412
    assert stale.json()["error"]["code"] == "precondition_failed"
    assert Document.objects.get(pk=document.pk).text == "two"
    assert DocumentVersion.objects.filter(document=document).count() == 2


def test_replace_requires_text(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="one")
    response = put(api, "workshop", {"summary": "s"}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert response.status_code == 400
    assert Document.objects.get(pk=document.pk).summary == ""


def test_replace_rejects_title_field(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="one")
    response = put(
        api, "workshop", {"text": "x", "title": "t"}, HTTP_IF_MATCH=f'"{document.revision}"'
    )
    assert response.status_code == 400
    assert "title" in response.json()["error"]["message"]
    assert Document.objects.get(pk=document.pk).text == "one"


def test_put_without_condition_is_428(api: APIClient, make_document: Any) -> None:
    make_document("workshop", text="one")
    response = put(api, "workshop", {"text": "x"})
    assert response.status_code == 428
    assert response.json()["error"]["code"] == "precondition_required"
    assert Document.objects.get().text == "one"


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("*", 400),
        ('W/"{rev}"', 412),
        ("{rev}", 412),
        ('"nope"', 412),
        ('"{rev}", "{rev}"', 412),
        ("", 412),
    ],
)
def test_if_match_values(api: APIClient, make_document: Any, header: str, status: int) -> None:
    document = make_document("workshop", text="one")
    value = header.format(rev=document.revision)
    response = put(api, "workshop", {"text": "x"}, HTTP_IF_MATCH=value)
    assert response.status_code == status
    expected = "invalid_request" if status == 400 else "precondition_failed"
    assert response.json()["error"]["code"] == expected
    assert Document.objects.get().text == "one"


def test_if_none_match_other_than_star_is_400(api: APIClient, notes: Resource) -> None:
    response = put(api, "workshop", {"title": "t"}, HTTP_IF_NONE_MATCH='"abc"')
    assert response.status_code == 400
    assert not Document.objects.exists()


def test_text_over_max_bytes_is_413(api: APIClient, notes: Resource) -> None:
    response = create(api, text="é" * 4097)  # 8194 bytes, 4097 characters
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "memory_limit_exceeded"
    assert not Document.objects.exists()


def test_text_over_max_bytes_names_field_bytes_and_limit_in_details(
    api: APIClient, notes: Resource
) -> None:
    response = create(api, text="é" * 4097)
    assert response.status_code == 413
    assert response.json() == {
        "error": {
            "code": "memory_limit_exceeded",
            "message": "text is 8194 UTF-8 bytes; this resource allows 8192.",
            "details": {"field": "text", "bytes": 8194, "maxBytes": 8192},
        }
    }
    assert not Document.objects.exists()


def test_replace_over_max_bytes_keeps_details_and_the_document(
    api: APIClient, make_document: Any
) -> None:
    document = make_document("workshop", text="one")
    response = put(api, "workshop", {"text": "a" * 8193}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "memory_limit_exceeded"
    assert error["details"] == {"field": "text", "bytes": 8193, "maxBytes": 8192}
    stored = Document.objects.get(pk=document.pk)
    assert (stored.text, stored.revision) == ("one", document.revision)
    assert stored.versions.count() == 1


def test_text_at_max_bytes_is_accepted(api: APIClient, notes: Resource) -> None:
    response = create(api, text="é" * 4096)
    assert response.status_code == 201
    assert response.json()["bytes"] == 8192


@pytest.mark.parametrize("field", ["title", "summary"])
def test_title_and_summary_over_240_bytes_are_413(
    api: APIClient, notes: Resource, field: str
) -> None:
    body = {"title": "t", field: "ü" * 121}  # 242 bytes
    response = put(api, "workshop", body, HTTP_IF_NONE_MATCH="*")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "memory_limit_exceeded"
    assert response.json()["error"]["details"] == {"field": field, "bytes": 242, "maxBytes": 240}
    assert not Document.objects.exists()


def test_empty_title_is_400(api: APIClient, notes: Resource) -> None:
    response = create(api, title="")
    assert response.status_code == 400
    assert not Document.objects.exists()


def test_body_over_64_kib_is_413_before_parsing(api: APIClient, notes: Resource) -> None:
    raw = b'{"title": "t", "text": "' + b"a" * (64 * 1024) + b'"}'
    response = api.generic(
        "PUT",
        f"{DOCS}/big{DEV}",
        raw,  # type: ignore[arg-type]  # sent as it is; the stubs take str
        content_type="application/json",
        HTTP_IF_NONE_MATCH="*",
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "memory_limit_exceeded"
    assert not Document.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"[1, 2]",
        b'"text"',
        b'{"title": NaN}',
        b'{"title": 1}',
        b'{"title": null}',
        b'{"title": "a\\u0000b"}',
        b"\xff\xfe",
    ],
)
def test_bad_bodies_are_400(api: APIClient, notes: Resource, raw: bytes) -> None:
    response = api.generic(
        "PUT",
        f"{DOCS}/w{DEV}",
        raw,  # type: ignore[arg-type]  # sent as it is; the stubs take str
        content_type="application/json",
        HTTP_IF_NONE_MATCH="*",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert not Document.objects.exists()


def test_unknown_field_is_400(api: APIClient, notes: Resource) -> None:
    response = create(api, colour="blue")
    assert response.status_code == 400
    assert "colour" in response.json()["error"]["message"]
    assert not Document.objects.exists()


def test_non_json_content_type_is_415(api: APIClient, notes: Resource) -> None:
    response = api.generic(
        "PUT", f"{DOCS}/w{DEV}", "title=t", content_type="text/plain", HTTP_IF_NONE_MATCH="*"
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize("doc_id", ["a" * 129, "has space", "dot.ted", "ünï"])
def test_bad_document_id_is_400(api: APIClient, notes: Resource, doc_id: str) -> None:
    response = create(api, doc_id)
    assert response.status_code == 400
    assert not Document.objects.exists()


def test_longest_document_id_is_accepted(api: APIClient, notes: Resource) -> None:
    response = create(api, "A_z-9" * 25 + "abc")
    assert response.status_code == 201


def test_patch_title_and_freeze(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="keep")
    response = patch(
        api,
        "workshop",
        {"title": "New", "agentWrites": "disabled"},
        HTTP_IF_MATCH=f'"{document.revision}"',
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["title"], body["agentWrites"], body["text"]) == ("New", "disabled", "keep")
    assert body["revision"] != document.revision
    stored = Document.objects.get(pk=document.pk)
    assert (stored.title, stored.agent_writes, stored.revision) == ("New", False, body["revision"])


def test_patch_freeze_is_audited_as_freeze(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop")
    response = patch(
        api, "workshop", {"agentWrites": "disabled"}, HTTP_IF_MATCH=f'"{document.revision}"'
    )
    assert response.status_code == 200
    assert AuditEntry.objects.filter(action="document.freeze", document_id="workshop").exists()


def test_empty_patch_is_400(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop")
    response = patch(api, "workshop", {}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert response.status_code == 400
    assert Document.objects.get(pk=document.pk).revision == document.revision


def test_patch_bad_agent_writes_is_400(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop")
    response = patch(
        api, "workshop", {"agentWrites": "off"}, HTTP_IF_MATCH=f'"{document.revision}"'
    )
    assert response.status_code == 400
    assert Document.objects.get(pk=document.pk).agent_writes is True


def test_patch_without_if_match_is_428(api: APIClient, make_document: Any) -> None:
    make_document("workshop")
    response = patch(api, "workshop", {"title": "x"})
    assert response.status_code == 428


def test_delete_makes_a_tombstone(api: APIClient, make_document: Any, notes: Resource) -> None:
    document = make_document("workshop", text="secret", summary="s")
    rev = document.revision
    second = put(api, "workshop", {"text": "secret 2"}, HTTP_IF_MATCH=f'"{rev}"')
    response = api.delete(f"{DOCS}/workshop{DEV}", HTTP_IF_MATCH=f'"{second.json()["revision"]}"')
    assert response.status_code == 204
    assert response.content == b""
    assert "ETag" not in response
    stored = Document.objects.get(pk=document.pk)
    assert stored.deleted
    assert (stored.title, stored.text, stored.summary) == ("", "", "")
    versions = DocumentVersion.objects.filter(document=document)
    assert versions.count() == 2
    assert all((v.text, v.title, v.summary) == ("", "", "") for v in versions)
    # Read 404, create again 412, absent from lists and counts.
    assert api.get(f"{DOCS}/workshop{DEV}").status_code == 404
    assert create(api, "workshop").status_code == 412
    assert api.get(f"{DOCS}{DEV}").json()["documents"] == []
    inventory = api.get(f"/api/managed-agents/projects/acme/memory{DEV}").json()
    assert next(r for r in inventory["resources"] if r["id"] == "notes")["documents"] == 0
    assert api.get(f"{DOCS}/workshop/versions{DEV}").status_code == 404


def test_delete_with_stale_revision_is_412(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop")
    response = api.delete(f"{DOCS}/workshop{DEV}", HTTP_IF_MATCH='"stale"')
    assert response.status_code == 412
    assert not Document.objects.get(pk=document.pk).deleted


def test_delete_without_if_match_is_428(api: APIClient, make_document: Any) -> None:
    make_document("workshop")
    response = api.delete(f"{DOCS}/workshop{DEV}")
    assert response.status_code == 428
    assert not Document.objects.get().deleted


def test_mutations_on_deleted_document_are_404(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop")
    api.delete(f"{DOCS}/workshop{DEV}", HTTP_IF_MATCH=f'"{document.revision}"')
    rev = Document.objects.get(pk=document.pk).revision
    assert put(api, "workshop", {"text": "x"}, HTTP_IF_MATCH=f'"{rev}"').status_code == 404
    assert patch(api, "workshop", {"title": "x"}, HTTP_IF_MATCH=f'"{rev}"').status_code == 404
    assert api.delete(f"{DOCS}/workshop{DEV}", HTTP_IF_MATCH=f'"{rev}"').status_code == 404


def test_unknown_resource_is_404(api: APIClient, notes: Resource) -> None:
    response = api.get(f"/api/managed-agents/projects/acme/memory/ghost/documents{DEV}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_bad_resource_id_is_400(api: APIClient, notes: Resource) -> None:
    response = api.get(f"/api/managed-agents/projects/acme/memory/Bad--id/documents{DEV}")
    assert response.status_code == 400


@pytest.mark.parametrize("query", ["", "?environment=staging", "?environment="])
def test_environment_is_required(api: APIClient, notes: Resource, query: str) -> None:
    response = api.get(f"{DOCS}{query}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "query",
    [
        "?environment=production&environment=development",
        "?environment=development&environment=production",
        "?environment=development&environment=development",
    ],
)
def test_environment_given_twice_is_400_and_writes_nothing(
    api: APIClient, make_document: Any, query: str
) -> None:
    """Which store a request reaches is never a guess between two environments."""
    document = make_document("workshop", text="one")
    urls = [
        f"{DOCS}{query}",
        f"{DOCS}/workshop{query}",
        f"/api/managed-agents/projects/acme/memory{query}",
    ]
    for url in urls:
        response = api.get(url)
        assert response.status_code == 400, url
        assert response.json() == {
            "error": {
                "code": "invalid_request",
                "message": "environment must be given once.",
                "details": {"field": "environment"},
            }
        }
    body = json.dumps({"title": "New"})
    created = api.put(
        f"{DOCS}/new{query}", data=body, content_type="application/json", HTTP_IF_NONE_MATCH="*"
    )
    assert created.status_code == 400
    assert created.json()["error"]["code"] == "invalid_request"
    replaced = api.put(
        f"{DOCS}/workshop{query}",
        data=json.dumps({"text": "two"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{document.revision}"',
    )
    assert replaced.status_code == 400
    deleted = api.delete(f"{DOCS}/workshop{query}", HTTP_IF_MATCH=f'"{document.revision}"')
    assert deleted.status_code == 400
    stored = Document.objects.get()
    assert (stored.doc_id, stored.text, stored.revision, stored.deleted) == (
        "workshop",
        "one",
        document.revision,
        False,
    )


def test_environments_are_separate(api: APIClient, make_document: Any) -> None:
    make_document("workshop")
    response = api.get(f"{DOCS}/workshop?environment=production")
    # The resource was only promoted to development.
    assert response.status_code == 404


def test_lowering_max_bytes_keeps_oversized_text(
    api: APIClient, make_document: Any, notes: Resource
) -> None:
    document = make_document("workshop", text="x" * 100)
    deploy = api.post(
        "/api/managed-agents/projects/acme/deployments",
        {
            "agent": "support-bot",
            "memory": [{"id": "notes", "description": "d", "provider": {"maxBytes": 10}}],
            "promote": "development",
        },
        format="json",
    )
    assert deploy.status_code == 201
    read = api.get(f"{DOCS}/workshop{DEV}")
    assert read.status_code == 200
    assert (read.json()["text"], read.json()["maxBytes"]) == ("x" * 100, 10)
    too_big = put(api, "workshop", {"text": "y" * 11}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert too_big.status_code == 413
    fits = put(api, "workshop", {"text": "y" * 10}, HTTP_IF_MATCH=f'"{document.revision}"')
    assert fits.status_code == 200


def test_versions_newest_first_with_optional_text(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="v1")
    r2 = put(api, "workshop", {"text": "v2"}, HTTP_IF_MATCH=f'"{document.revision}"').json()
    response = api.get(f"{DOCS}/workshop/versions{DEV}")
    assert response.status_code == 200
    body = response.json()
    assert body["nextCursor"] is None
    assert [v["revision"] for v in body["versions"]] == [r2["revision"], document.revision]
    assert "text" not in body["versions"][0]
    assert {"revision", "writer", "bytes", "title", "summary", "createdAt"} <= set(
        body["versions"][0]
    )
    with_text = api.get(f"{DOCS}/workshop/versions{DEV}&include=text").json()
    assert [v["text"] for v in with_text["versions"]] == ["v2", "v1"]


def test_versions_paginate(api: APIClient, make_document: Any) -> None:
    document = make_document("workshop", text="0")
    revision = document.revision
    for i in range(1, 55):
        revision = put(api, "workshop", {"text": str(i)}, HTTP_IF_MATCH=f'"{revision}"').json()[
            "revision"
        ]
    first = api.get(f"{DOCS}/workshop/versions{DEV}&include=text").json()
    assert len(first["versions"]) == 50
    second = api.get(
        f"{DOCS}/workshop/versions{DEV}&include=text&cursor={first['nextCursor']}"
    ).json()
    assert second["nextCursor"] is None
    texts = [v["text"] for v in first["versions"] + second["versions"]]
    assert texts == [str(i) for i in range(54, -1, -1)]
