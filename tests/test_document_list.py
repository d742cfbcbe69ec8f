"""The document list: keyset order, signed cursors, page size."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core import signing
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.memory.models import Document, Resource
from tests.helpers import DEV, DOCS


def pages(api: APIClient, path: str = DOCS) -> list[list[dict[str, Any]]]:
    result = []
    cursor = None
    while True:
        url = f"{path}{DEV}" + (f"&cursor={cursor}" if cursor else "")
        response = api.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        result.append(body["documents"])
        cursor = body["nextCursor"]
        if cursor is None:
            return result


def test_list_orders_by_updated_desc_then_id_and_pages_by_50(
    api: APIClient, make_document: Any, notes: Resource
) -> None:
    for i in range(120):
        make_document(f"doc-{i:03d}")
    now = timezone.now()
    # Three documents share one timestamp: the id breaks the tie, ascending.
    for i in range(120):
        stamp = now - timedelta(seconds=i if i >= 3 else 0)
        Document.objects.filter(doc_id=f"doc-{i:03d}").update(updated_at=stamp)
    result = pages(api)
    assert [len(p) for p in result] == [50, 50, 20]
    listed = [d["id"] for page in result for d in page]
    assert listed == [f"doc-{i:03d}" for i in range(120)]
    assert all("text" not in d for page in result for d in page)
    assert set(result[0][0]) == {
        "id", "title", "summary", "agentWrites", "revision", "bytes", "maxBytes", "updatedAt",
        "writer",
    }  # fmt: skip


def test_empty_list(api: APIClient, notes: Resource) -> None:
    response = api.get(f"{DOCS}{DEV}")
    assert response.status_code == 200
    assert response.json() == {"documents": [], "nextCursor": None}


def test_exactly_one_page_has_no_next_cursor(api: APIClient, make_document: Any) -> None:
    for i in range(50):
        make_document(f"d{i}")
    body = api.get(f"{DOCS}{DEV}").json()
    assert len(body["documents"]) == 50
    assert body["nextCursor"] is None


def _first_cursor(api: APIClient, make_document: Any) -> str:
    for i in range(51):
        make_document(f"d{i}")
    cursor = api.get(f"{DOCS}{DEV}").json()["nextCursor"]
    assert isinstance(cursor, str)
    return cursor


def test_tampered_cursor_is_400(api: APIClient, make_document: Any) -> None:
    cursor = _first_cursor(api, make_document)
    tampered = cursor[:-3] + ("AAA" if not cursor.endswith("AAA") else "BBB")
    response = api.get(f"{DOCS}{DEV}&cursor={tampered}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_forged_cursor_is_400(api: APIClient, make_document: Any) -> None:
    forged = signing.dumps(["2999-01-01T00:00:00+00:00", ""], salt="something else")
    response = api.get(f"{DOCS}{DEV}&cursor={forged}")
    assert response.status_code == 400


def test_cursor_of_another_resource_is_400(api: APIClient, make_document: Any) -> None:
    cursor = _first_cursor(api, make_document)
    response = api.get(
        f"/api/managed-agents/projects/acme/memory/kb/documents{DEV}&cursor={cursor}"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_updated_document_moves_to_the_front(api: APIClient, make_document: Any) -> None:
    first = make_document("first")
    make_document("second")
    put = api.put(
        f"{DOCS}/first{DEV}", {"text": "x"}, format="json", HTTP_IF_MATCH=f'"{first.revision}"'
    )
    assert put.status_code == 200
    ids = [d["id"] for d in api.get(f"{DOCS}{DEV}").json()["documents"]]
    assert ids == ["first", "second"]


def test_the_filter_matches_the_same_documents_whatever_the_index(
    notes: Resource, make_document: Any
) -> None:
    """On SQLite a term of three characters or more is looked up in the search's
    trigram table first; the matches are those of the plain LIKE conditions."""
    from memoryadmin.memory.services.documents import document_list

    titles = {
        "cafe": "Café au lait",
        "quoted": 'She said "hi" twice',
        "percent": "100% sure",
        "plain": "100 sure",
        "under": "under_score",
        "unders": "underscore",
        "ab-1": "Short",
    }
    for doc_id, title in titles.items():
        make_document(doc_id, title=title)

    def ids(query: str) -> set[str]:
        rows, _ = document_list(resource=notes, query=query)
        return {row["doc_id"] for row in rows}

    assert ids("CAF") == {"cafe"}
    assert ids('d "hi" t') == {"quoted"}
    assert ids("0% s") == {"percent"}
    assert ids("r_s") == {"under"}
    assert ids("sure") == {"percent", "plain"}
    assert ids("UNDER") == {"under", "unders"}
    assert ids("ab") == {"ab-1"}  # too short for trigrams: the plain conditions alone
    assert ids("zzzqqq") == set()


def test_an_entry_is_the_document_object_without_its_text() -> None:
    """document_entries (the API list, `memory list`) makes each row's object as
    document_dict does, whatever the resource's review default and the row's modes."""
    from memoryadmin.memory.representations import document_dict, document_entries
    from memoryadmin.memory.services.documents import LIST_FIELDS

    at = timezone.now()
    rows = [
        dict(zip(LIST_FIELDS, values, strict=True))
        for values in [
            ("a", "A", "", True, None, "r1", 10, at, "owner", ""),
            ("b", "B", "s", True, True, "r2", 20, at - timedelta(days=3), "agent", "ses_1"),
            ("c", "C", "s", True, False, "r3", 0, at, "key", ""),
            ("d", "<D>", "&", False, None, "r4", 4096, at, "agent", "ses_2"),
        ]
    ]
    for config in ({}, {"agentWrites": "review"}):
        resource = Resource(max_bytes=4096, config=config)
        expected = [
            document_dict(
                row,
                max_bytes=4096,
                include_text=False,
                review_default=resource.review_default,
            )
            for row in rows
        ]
        assert document_entries(rows, resource) == expected
        assert [entry["agentWrites"] for entry in expected] == (
            ["enabled", "review", "enabled", "disabled"]
            if not config
            else ["review", "review", "enabled", "disabled"]
        )
        assert "text" not in expected[0]
