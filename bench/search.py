"""Search latency at scale, as ratios against the plain list's first page in the same run.

    .venv/bin/python bench/search.py [--documents 100000] [--requests 200]

Seeds one resource with many documents of varied words (a throwaway test
database: SQLite, or test_<name> on PostgreSQL with DATABASE_URL), serves the
real WSGI application on a loopback port and times over HTTP: the first page
of the list (the reference), a selective search (a word in about 1 in 10,000
documents), an unselective one (a word in every document), a prefix search,
a phrase, and the environment-wide search. Goal: p50 and p99 at most 3x the
list's first page.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
# The bench measures request cost, not the per-key rate limit or request logs.
os.environ.setdefault("MEMORYADMIN_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PAGE_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_PAGE_RATE", "1000000/second")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

GOAL = 3.0


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def timed(requests: int, call: Any) -> list[float]:
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


def vocabulary(size: int = 3000) -> list[str]:
    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(4, 9))) for _ in range(size)]


def seed(documents: int) -> str:
    from memoryadmin.memory.models import Document, Resource
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.memory.services.documents import new_revision
    from memoryadmin.memory.services.keys import api_key_create
    from memoryadmin.memory.services.projects import project_create

    project = project_create(project_id="bench", actor="bench")
    memory = [{"id": "notes", "description": "Bench notes.", "provider": {"maxBytes": 16384}}]
    deployment_create(
        project=project, agent="bench", memory=memory, promote="development", actor="bench"
    )
    resource = Resource.objects.get(resource_id="notes")
    words = vocabulary()
    rng = random.Random(11)
    now = timezone.now()
    batch = []
    for i in range(documents):
        stamp = now - timedelta(seconds=i)
        body = " ".join(rng.choice(words) for _ in range(120))
        # "common" is in every document; "zephyrine" in one of 10,000.
        rare = " zephyrine lantern" if i % 10_000 == 5 else ""
        batch.append(
            Document(
                resource=resource,
                doc_id=f"doc-{i:06d}",
                title=f"{rng.choice(words).title()} {rng.choice(words)} {i}",
                text=f"common {body}{rare}",
                summary=" ".join(rng.choice(words) for _ in range(12)),
                revision=new_revision(),
                bytes=len(body),
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
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return api_key_create(project_id="bench")[1]


def run(documents: int, requests: int) -> None:
    key = seed(documents)
    server = ThreadedWSGIServer(("127.0.0.1", 0), QuietHandler)
    server.set_app(WSGIHandler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    limits = httpx.Limits(max_keepalive_connections=0)
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{server.server_port}",
        headers={"x-api-key": key},
        timeout=60,
        limits=limits,
    )
    docs = "/api/managed-agents/projects/bench/memory/notes/documents?environment=development"
    search = "/api/managed-agents/projects/bench/memory/search?environment=development"
    cases = [
        ("list, first page", docs),
        ("search, selective", f"{docs}&q=zephyrine"),
        ("search, unselective", f"{docs}&q=common"),
        ("search, prefix", f"{docs}&q=zephyr*"),
        ("search, phrase", f'{docs}&q="zephyrine lantern"'),
        ("environment search", f"{search}&q=zephyrine"),
        ("environment, unselective", f"{search}&q=common"),
    ]
    rows: list[tuple[str, float, float, int]] = []
    for name, url in cases:
        response = client.get(url)
        assert response.status_code == 200, response.text
        hits = len(response.json()["documents"])
        samples = timed(requests, lambda url=url: client.get(url))
        rows.append((name, statistics.median(samples) * 1000, ms(samples, 0.99), hits))
    reference_p50, reference_p99 = rows[0][1], rows[0][2]
    print(
        f"\nsearch, {documents} documents in one resource, {requests} requests each, "
        f"{connection.vendor}"
    )
    print(f"{'case':26} {'p50 ms':>8} {'p99 ms':>8} {'p50 x':>7} {'p99 x':>7} {'hits':>5}")
    for name, p50, p99, hits in rows:
        print(
            f"{name:26} {p50:8.2f} {p99:8.2f} {p50 / reference_p50:7.2f} "
            f"{p99 / reference_p99:7.2f} {hits:5}"
        )
    worst = max(rows[1:], key=lambda r: max(r[1] / reference_p50, r[2] / reference_p99))
    ratio = max(worst[1] / reference_p50, worst[2] / reference_p99)
    verdict = "within" if ratio <= GOAL else "over"
    print(
        f"\nsummary: slowest search {worst[0]!r} at {ratio:.2f}x the list's first page "
        f"(p50 or p99), {verdict} the goal of {GOAL:.0f}x"
    )
    client.close()
    server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(args.documents, args.requests)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
