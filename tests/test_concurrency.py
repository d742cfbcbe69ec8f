"""Concurrent writers against a real PostgreSQL over real HTTP."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import httpx
import pytest

from memoryadmin.memory.models import Document, DocumentVersion, Resource
from memoryadmin.memory.services.documents import document_create
from memoryadmin.memory.services.keys import api_key_create
from tests.helpers import DEV, DOCS, run_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_twenty_concurrent_replaces_with_one_revision_commit_once(
    live_server: Any, notes: Resource
) -> None:
    document = document_create(resource=notes, doc_id="race", title="Race", text="0", actor="t")
    key = api_key_create(project_id="acme")[1]
    url = f"{live_server.url}{DOCS}/race{DEV}"

    def replace(index: int) -> tuple[int, str]:
        with httpx.Client(timeout=60) as client:
            response = client.put(
                url,
                json={"text": f"writer {index}"},
                headers={"x-api-key": key, "If-Match": f'"{document.revision}"'},
            )
        return response.status_code, response.text

    results = run_threads(20, replace)
    statuses = Counter(status for status, _ in results)
    assert statuses == {200: 1, 412: 19}
    winner = next(body for status, body in results if status == 200)
    stored = Document.objects.get(pk=document.pk)
    assert stored.text.startswith("writer ")
    assert httpx.Response(200, text=winner).json()["text"] == stored.text
    # One version for the create, exactly one for the winning replace.
    versions = DocumentVersion.objects.filter(document=document).order_by("id")
    assert versions.count() == 2
    assert versions.last().text == stored.text  # type: ignore[union-attr]


def test_twenty_concurrent_creates_of_one_id_create_one(live_server: Any, notes: Resource) -> None:
    key = api_key_create(project_id="acme")[1]
    url = f"{live_server.url}{DOCS}/fresh{DEV}"

    def create(index: int) -> int:
        with httpx.Client(timeout=60) as client:
            return client.put(
                url,
                json={"title": f"t{index}", "text": f"creator {index}"},
                headers={"x-api-key": key, "If-None-Match": "*"},
            ).status_code

    statuses = Counter(run_threads(20, create))
    assert statuses == {201: 1, 412: 19}
    document = Document.objects.get(resource=notes, doc_id="fresh")
    assert DocumentVersion.objects.filter(document=document).count() == 1


def test_paging_while_documents_change_returns_no_duplicates(
    live_server: Any, notes: Resource
) -> None:
    for i in range(300):
        document_create(resource=notes, doc_id=f"d{i:03d}", title=f"D{i}", actor="t")
    key = api_key_create(project_id="acme")[1]
    stop = threading.Event()
    touched: set[str] = set()
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=60, headers={"x-api-key": key}) as client:
            while not stop.is_set():
                doc_id = f"d{rng.randrange(300):03d}"
                current = client.get(f"{live_server.url}{DOCS}/{doc_id}{DEV}")
                with lock:
                    touched.add(doc_id)
                client.put(
                    f"{live_server.url}{DOCS}/{doc_id}{DEV}",
                    json={"text": f"edit {rng.random()}"},
                    headers={"If-Match": current.headers["ETag"]},
                )

    writers = [threading.Thread(target=writer, args=(seed,)) for seed in range(3)]
    for thread in writers:
        thread.start()
    seen: list[str] = []
    try:
        with httpx.Client(timeout=60, headers={"x-api-key": key}) as client:
            for _ in range(5):
                seen.clear()
                cursor = None
                while True:
                    query = DEV + (f"&cursor={cursor}" if cursor else "")
                    body = client.get(f"{live_server.url}{DOCS}{query}").json()
                    seen.extend(d["id"] for d in body["documents"])
                    cursor = body["nextCursor"]
                    if cursor is None:
                        break
                counts = Counter(seen)
                assert max(counts.values()) == 1, "a document appeared twice"
    finally:
        stop.set()
        for thread in writers:
            thread.join(timeout=60)
    untouched = {f"d{i:03d}" for i in range(300)} - touched
    assert untouched, "the writers touched every document; the check would prove nothing"
    assert untouched <= set(seen)
