"""Management API latency, as ratios against floors measured in the same run.

    .venv/bin/python bench/api.py [--documents 5000] [--requests 300]

Starts the real WSGI application on a loopback port (a throwaway test
database: SQLite in memory, or test_<name> on PostgreSQL with DATABASE_URL),
seeds one resource with many documents and times each endpoint over
keep-alive HTTP. The floor is a bare Django view on the same server; on
PostgreSQL a raw psycopg statement doing the list query is a second floor.
Query counts come from the same requests made in-process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
# The bench measures request cost, not the per-key rate limit, and one log line
# per request would be part of what it times.
os.environ.setdefault("MEMORYADMIN_API_RATE", "1000000/second")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.db import connection  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import include, path  # noqa: E402
from django.utils import timezone  # noqa: E402


def floor_view(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"ok": True})


urlpatterns = [path("bench/floor", floor_view), path("", include("memoryadmin.urls"))]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def seed(documents: int) -> tuple[str, str]:
    from memoryadmin.memory.models import Document, Resource
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.memory.services.documents import new_revision
    from memoryadmin.memory.services.keys import api_key_create
    from memoryadmin.memory.services.projects import project_create

    project = project_create(project_id="bench")
    memory = [{"id": "notes", "description": "Bench notes.", "provider": {"maxBytes": 16384}}]
    deployment_create(
        project=project, agent="bench", memory=memory, promote="development", actor="bench"
    )
    resource = Resource.objects.get(resource_id="notes")
    now = timezone.now()
    batch = []
    for i in range(documents):
        stamp = now - timedelta(seconds=i)
        batch.append(
            Document(
                resource=resource,
                doc_id=f"doc-{i:06d}",
                title=f"Document {i}",
                text="x" * 2000,
                summary="A benchmark document.",
                revision=new_revision(),
                bytes=2000,
                updated_at=stamp,
                created_at=stamp,
                writer_kind="owner",
            )
        )
        if len(batch) == 1000:
            Document.objects.bulk_create(batch)
            batch = []
            print(f"\rseeding {i + 1}/{documents}", end="", file=sys.stderr, flush=True)
    Document.objects.bulk_create(batch)
    print(file=sys.stderr)
    if connection.vendor == "postgresql":
        # What autovacuum does soon after a bulk load in production.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return api_key_create(project_id="bench")[1], "doc-000100"


def timed(requests: int, call: Callable[[], Any]) -> list[float]:
    for _ in range(min(20, requests)):
        call()
    samples = []
    for _ in range(requests):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def ms(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def raw_list_floor(requests: int) -> list[float] | None:
    if connection.vendor != "postgresql":
        return None
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    from memoryadmin.memory.models import Resource

    resource_pk = Resource.objects.get(resource_id="notes").pk
    sql = (
        "SELECT doc_id, title, summary, agent_writes, revision, bytes, updated_at,"
        " writer_kind, writer_session_id FROM memory_document"
        f" WHERE resource_id = {resource_pk} AND NOT deleted"
        " ORDER BY updated_at DESC, doc_id LIMIT 51"
    )
    with psycopg.connect(**{k: v for k, v in params.items() if k != "pool"}) as raw:
        plan = raw.execute("EXPLAIN " + sql).fetchall()
        print("list plan:", " / ".join(row[0].strip() for row in plan[:3]), file=sys.stderr)
        return timed(requests, lambda: raw.execute(sql).fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    settings.ROOT_URLCONF = __name__
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(args.documents, args.requests)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(documents: int, requests: int) -> None:
    key, doc_id = seed(documents)
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler)
    server.set_app(WSGIHandler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    docs = "/api/managed-agents/projects/bench/memory/notes/documents"
    env = "?environment=development"
    headers = {"x-api-key": key}
    # One connection per request: the development server answers keep-alive
    # requests only after a delayed ACK, which would swamp every number.
    no_keepalive = httpx.Limits(max_keepalive_connections=0)
    client = httpx.Client(base_url=base, headers=headers, timeout=30, limits=no_keepalive)
    first_page = client.get(f"{docs}{env}").json()
    deep_cursor = first_page["nextCursor"]
    for _ in range(documents // 100):
        deep_cursor = client.get(f"{docs}{env}&cursor={deep_cursor}").json()["nextCursor"]
    etag = {"value": client.get(f"{docs}/{doc_id}{env}").headers["ETag"]}

    def replace() -> Any:
        response = client.put(
            f"{docs}/{doc_id}{env}", json={"text": "y" * 2000}, headers={"If-Match": etag["value"]}
        )
        assert response.status_code == 200, response.text
        etag["value"] = response.headers["ETag"]

    def get(url: str) -> Callable[[], Any]:
        return lambda: client.get(url)

    cases: list[tuple[str, str, Callable[[], Any]]] = [
        (name, url, get(url))
        for name, url in [
            ("floor: bare Django view", "/bench/floor"),
            ("inventory", f"/api/managed-agents/projects/bench/memory{env}"),
            ("list, first page", f"{docs}{env}"),
            ("list, page deep in", f"{docs}{env}&cursor={deep_cursor}"),
            ("read one document", f"{docs}/{doc_id}{env}"),
        ]
    ]
    cases.append(("replace (If-Match)", "", replace))
    in_process = Client(HTTP_X_API_KEY=key)
    rows = []
    for name, url, call in cases:
        samples = timed(requests, call)
        queries = "-"
        if url:
            with CaptureQueriesContext(connection) as captured:
                in_process.get(url)
            queries = str(len(captured))
        rows.append((name, statistics.median(samples) * 1000, ms(samples, 0.95), queries))
    floor = rows[0][1]
    raw = raw_list_floor(requests)

    print(f"\nmanagement API, {documents} documents, {requests} requests each, {connection.vendor}")
    print(f"{'case':28} {'p50 ms':>8} {'p95 ms':>8} {'x floor':>8} {'queries':>8}")
    for name, p50, p95, queries in rows:
        print(f"{name:28} {p50:8.2f} {p95:8.2f} {p50 / floor:8.2f} {queries:>8}")
    if raw is not None:
        raw_p50 = statistics.median(raw) * 1000
        print(f"{'floor: raw psycopg list':28} {raw_p50:8.2f} {ms(raw, 0.95):8.2f}")
    worst = max(rows[1:], key=lambda r: r[1])
    first, deep = rows[2][1], rows[3][1]
    print(
        f"\nsummary: slowest endpoint {worst[0]!r} at {worst[1] / floor:.1f}x the bare view; "
        f"deep page / first page = {deep / first:.2f}"
    )
    client.close()
    server.shutdown()


if __name__ == "__main__":
    main()
