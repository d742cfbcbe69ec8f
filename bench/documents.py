"""A document's GET and PUT against their floors, a recall and lists, measured in-process.

    .venv/bin/python bench/documents.py [--requests 300] [--rounds 10] [--profile NAME]

Seeds a throwaway database (bench_<name> on PostgreSQL with DATABASE_URL, a SQLite
file under var/ otherwise) with one resource, a few documents and an API key,
builds Django's WSGI handler (as gunicorn serves it) with the bench's floor views
(`memoryadmin/benchfloors.py`) and calls it directly, through the full middleware
stack: GET of a document by the API and by its one-SELECT floor, and a conditional
PUT (If-Match, 2,000 characters of text, as `make bench` sends) by the API and by
its one-UPDATE floor, and a recall of a session with eight document bindings of
2,000 characters each (as `make bench` seeds it), and the first page of the resource's
documents (60 of them, 50 a page) by the API and on the Memory page (a logged-in owner
with the CSRF cookie of a first page, as `make bench` reads it), and what an agent host pays
beside its recalls: a session create binding the eight documents read-write (a new
Idempotency-Key each time) and a `memory_save` (a recall of a session bound read-write to
one document, then its save; the recall alone is measured too, and subtracted). Time is
this thread's CPU time (`time.thread_time`, which other processes on a shared machine
barely move; the database's own time is not in it), least of the rounds' means, in
microseconds per request; `--profile` prints where the request spends it instead (cProfile,
whose cost per call inflates small functions), `--sample` the same as shares of the CPU time
sampled at the kernel's tick (`SIGPROF`: each sample counts every function on the stack
once, so a function's share is the time spent in it and what it calls, without a cost per
call), and `bench/instructions.py` counts the instructions each request executes (the same
from run to run, on any load; a memory copy counts one instruction a byte, so a copy's
share of the instructions overstates its share of the time).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("MEMORYADMIN_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PAGE_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_PAGE_RATE", "1000000/second")
# isort: off
# First: the stack as bench/middleware.py builds it (floors on, request logs at INFO).
from middleware import WSGI, environ, quiet
from api import (
    API,
    BOUND,
    BOUND_IDS,
    ENV,
    FLOORS,
    PROJECT,
    collect_static,
    documents_bulk,
    page_cookie,
    recall_session,
    throwaway_database,
)

# isort: on
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection

LISTED = 60
TEXT = json.dumps({"text": "w" * 2000}).encode()
USE_NOTES = json.dumps({"use": ["notes"]}).encode()


class Caller:
    """One kind of request, made again and again (a PUT with the ETag its last one got)."""

    def __init__(
        self,
        app: WSGI,
        make: Callable[[str], dict[str, Any]],
        etag: str = "",
        status: str = "200",
    ) -> None:
        self.app, self.make, self.etag, self.status = app, make, etag, status

    def call(self, environ: dict[str, Any], status: str) -> bytes:
        got: dict[str, Any] = {}

        def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
            got["status"], got["headers"] = status, dict(headers)

        body = self.app(environ, start_response)
        content = b"".join(body)
        getattr(body, "close", lambda: None)()
        if not got["status"].startswith(status):
            raise SystemExit(f"{got['status']}: {content!r}")
        self.etag = got["headers"].get("ETag", self.etag)
        return content

    def once(self) -> None:
        self.call(self.make(self.etag), self.status)

    def per_request(self, requests: int) -> float:
        started = time.thread_time()
        for _ in range(requests):
            self.once()
        return (time.thread_time() - started) / requests * 1e6


class SaveCaller(Caller):
    """A recall of a session bound read-write to one document, then (`save`) the
    `memory_save` of that recall, a new text each time."""

    def __init__(self, app: WSGI, key: str, session_id: str, *, save: bool) -> None:
        super().__init__(app, lambda _etag: {})
        self.key, self.save, self.saved = key, save, 0
        self.base = f"{API}/sessions/{session_id}/memory"

    def once(self) -> None:
        recall = environ(f"{self.base}/recall", "POST", USE_NOTES, x_api_key=self.key)
        recall_id = json.loads(self.call(recall, "200"))["recallId"]
        if not self.save:
            return
        self.saved += 1
        body = {
            "recallId": recall_id,
            "callId": "c",
            "name": "memory_save",
            "arguments": {"text": f"{self.saved} " + "s" * 2000},
        }
        save = environ(
            f"{self.base}/tool-calls", "POST", json.dumps(body).encode(), x_api_key=self.key
        )
        result = json.loads(self.call(save, "200"))["result"]
        if result["status"] != "saved":
            raise SystemExit(f"memory_save: {result}")


def seed() -> tuple[str, int, str, str]:
    from memoryadmin.memory.models import Resource
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.memory.services.documents import document_create
    from memoryadmin.memory.services.keys import api_key_create
    from memoryadmin.memory.services.projects import project_create

    project = project_create(project_id=PROJECT, actor="bench")
    memory = [
        {"id": rid, "description": "Bench.", "provider": {"maxBytes": 16384}}
        for rid in ["notes", *BOUND_IDS]
    ]
    deployment_create(project=project, agent="bench", memory=memory, promote=ENV, actor="bench")
    notes = Resource.objects.get(project=project, resource_id="notes")
    for doc_id in ("doc-1", "put-0", "floor-put-0"):
        document_create(resource=notes, doc_id=doc_id, title="Bench", text="x" * 2000, actor="b")
    session = recall_session(
        project, {r.resource_id: r for r in Resource.objects.filter(project=project)}
    )
    document_create(resource=notes, doc_id="save-0", title="Bench", text="x" * 2000, actor="b")
    # A list's first page is full (50 rows), as at the bench's 100,000 documents.
    documents_bulk(notes, LISTED)
    _, secret = api_key_create(project_id=PROJECT, actor="bench")
    return secret, notes.pk, session.id, page_cookie()


def create_session(key: str) -> Callable[[str], dict[str, Any]]:
    """A session create's request, binding the recall's eight documents read-write, each
    under a new Idempotency-Key (a new session each time)."""
    memory = {rid: {"scope": "document", "id": "card", "access": "read-write"} for rid in BOUND_IDS}
    body = json.dumps({"agentId": f"bench@{ENV}", "memory": memory}).encode()
    made = itertools.count()
    return lambda _etag: environ(
        f"{API}/sessions", "POST", body, x_api_key=key, idempotency_key=f"bench-{next(made)}"
    )


def callers(app: WSGI, key: str, notes_pk: int, session_id: str, cookie: str) -> dict[str, Caller]:
    from django.urls import reverse

    from memoryadmin.agents.services.sessions import session_create
    from memoryadmin.memory.models import Project

    saving = session_create(
        project=Project.objects.get(pk=PROJECT),
        agent_id=f"bench@{ENV}",
        memory={"notes": {"scope": "document", "id": "save-0", "access": "read-write"}},
        idempotency_key="bench-save",
        actor="bench",
    )[0].id

    docs = f"{API}/projects/{PROJECT}/memory/notes/documents"
    page = reverse("web:documents", args=[PROJECT, ENV, "notes"])
    q = f"?environment={ENV}"

    def get(path: str) -> Callable[[str], dict[str, Any]]:
        return lambda _etag: environ(path, x_api_key=key)

    def put(path: str) -> Callable[[str], dict[str, Any]]:
        return lambda etag: environ(path, "PUT", TEXT, x_api_key=key, if_match=etag)

    found = {
        "GET": Caller(app, get(f"{docs}/doc-1{q}")),
        "GET floor": Caller(app, get(f"{FLOORS}/floor/{notes_pk}/doc-1")),
        "PUT": Caller(app, put(f"{docs}/put-0{q}")),
        "PUT floor": Caller(app, put(f"{FLOORS}/floor-put/{notes_pk}/floor-put-0")),
        "recall": Caller(
            app,
            lambda _etag: environ(
                f"{API}/sessions/{session_id}/memory/recall", "POST", b"{}", x_api_key=key
            ),
        ),
        "list": Caller(app, get(f"{docs}{q}")),
        "page": Caller(app, lambda _etag: environ(page, cookie=cookie)),
        "session create": Caller(app, create_session(key), status="201"),
        "recall one": SaveCaller(app, key, saving, save=False),
        "recall and save": SaveCaller(app, key, saving, save=True),
    }
    for name, read in (("PUT", f"{docs}/put-0{q}"), ("PUT floor", f"{docs}/floor-put-0{q}")):
        reader = Caller(app, get(read))
        reader.once()
        found[name].etag = reader.etag
    return found


def counted(found: dict[str, Caller], names: list[str], requests: int, folder: Path) -> None:
    """For each kind: says `START kind` and waits for `go` in `folder` (where the counting
    starts), makes the requests, says `END kind` and waits for `stop` (where it is read)."""

    def wait(name: str) -> None:
        while not (folder / name).exists():
            time.sleep(0.05)
        (folder / name).unlink()

    for name in names:
        caller = found[name]
        print("START", name, flush=True)
        wait("go")
        for _ in range(requests):
            caller.once()
        print("END", name, flush=True)
        wait("stop")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    name = code.co_filename
    for prefix in SHORTENED:
        if name.startswith(prefix):
            name = name.removeprefix(prefix)
            break
    return f"{name}:{code.co_name}"


# Site packages first: the virtual environment may sit in the checkout.
SHORTENED = (
    *(path + "/" for path in sys.path if path.endswith("site-packages")),
    str(Path(__file__).resolve().parent.parent) + "/",
)


def sampled(caller: Caller, requests: int, callees: list[str]) -> None:
    """Makes `requests` of `caller`'s kind with a sample of the stack at each tick of this
    process's CPU time; prints each function's share of the samples (it or what it calls
    running: `within`; it running: `self`) in µs per request, and for each of `callees`
    the share of each function it calls."""
    within: Counter[str] = Counter()
    alone: Counter[str] = Counter()
    edges: Counter[tuple[str, str]] = Counter()
    samples = 0

    def sample(signum: int, frame: FrameType | None) -> None:
        nonlocal samples
        samples += 1
        if frame is None:
            return
        alone[_where(frame)] += 1
        seen: set[object] = set()
        inner: str | None = None
        while frame is not None:
            here = _where(frame)
            if here not in seen:
                seen.add(here)
                within[here] += 1
            if inner is not None and (here, inner) not in seen:
                seen.add((here, inner))
                edges[here, inner] += 1
            inner, frame = here, frame.f_back

    previous = signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
    try:
        us = caller.per_request(requests)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, previous)
    if not samples:
        raise SystemExit("no samples: make more requests")
    print(f"{us:.0f} us of CPU a request, sampled with it ({samples} samples)")

    def share(count: int) -> str:
        return f"| {count / samples * us:.0f} | {100 * count / samples:.1f} |"

    print("\n| within | us | % |\n| --- | --- | --- |")
    for name, count in within.most_common(45):
        print(f"| {name} {share(count)}")
    print("\n| self | us | % |\n| --- | --- | --- |")
    for name, count in alone.most_common(25):
        print(f"| {name} {share(count)}")
    for wanted in callees:
        print(f"\n| {wanted} calls | us | % |\n| --- | --- | --- |")
        for (outer, inner), count in edges.most_common():
            if outer.endswith(wanted) and count / samples >= 0.002:
                print(f"| {inner} {share(count)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per kind and round")
    parser.add_argument("--rounds", type=int, default=10)
    kinds = [
        "GET",
        "PUT",
        "GET floor",
        "PUT floor",
        "recall",
        "list",
        "page",
        "session create",
        "recall one",
        "recall and save",
    ]
    parser.add_argument("--profile", choices=kinds)
    parser.add_argument(
        "--sample",
        choices=kinds,
        help="sample where this kind's CPU time goes (--requests times --rounds requests)",
    )
    parser.add_argument("--dump", help="with --profile: write the profile's stats to this file")
    parser.add_argument("--sort", default="tottime", help="the profile's order")
    parser.add_argument(
        "--callees",
        action="append",
        help="with --profile or --sample: what these call (with --sample: path:function)",
    )
    parser.add_argument("--keepdb", action="store_true", help="keep the database for the next run")
    parser.add_argument(
        "--count",
        action="append",
        help="under bench/instructions.py: make --requests of these, one kind at a time",
    )
    parser.add_argument("--handshake", help="with --count: the folder of its handshake files")
    args = parser.parse_args()
    quiet()
    collect_static()  # the Memory page (the seed's first page, the page kind) needs them
    old_name = throwaway_database("bench_documents", keepdb=args.keepdb)
    try:
        if args.keepdb:
            from django.core.management import call_command

            call_command("flush", interactive=False, verbosity=0)
        key, notes_pk, session_id, cookie = seed()
        found = callers(WSGIHandler(), key, notes_pk, session_id, cookie)
        for caller in found.values():
            caller.per_request(100)  # warm
        if args.count:
            counted(found, args.count, args.requests, Path(args.handshake))
            return
        if args.sample:
            sampled(found[args.sample], args.requests * args.rounds, args.callees or [])
            return
        if args.profile:
            profile = cProfile.Profile(time.thread_time)
            profile.runcall(found[args.profile].per_request, args.requests * args.rounds)
            if args.dump:
                profile.dump_stats(args.dump)
            stats = pstats.Stats(profile).sort_stats(args.sort)
            stats.print_stats(45)
            for name in args.callees or []:
                stats.print_callees(name)
            return
        times: dict[str, list[float]] = {name: [] for name in found}
        for _ in range(args.rounds):
            for name, caller in found.items():
                times[name].append(caller.per_request(args.requests))
        us = {name: min(t) for name, t in times.items()}
        print(f"{connection.vendor}: least of {args.rounds} rounds of {args.requests} requests")
        print("| request | us per request (CPU) | floor's | floor / request |")
        print("| --- | --- | --- | --- |")
        for name in ("GET", "PUT"):
            floor = us[f"{name} floor"]
            print(f"| {name} | {us[name]:.0f} | {floor:.0f} | {floor / us[name]:.2f} |")
        ratio = us["recall"] / us["GET"]
        print(
            f"recall ({BOUND} document bindings): {us['recall']:.0f} us,"
            f" {ratio:.2f} times a GET (CPU; the bench's row is latency)"
        )
        print(
            f"Memory page list: {us['page']:.0f} us, {us['page'] / us['list']:.2f} times the"
            f" API list's first page ({us['list']:.0f} us; {LISTED} documents, 50 a page)"
        )
        save = us["recall and save"] - us["recall one"]
        print(
            f"session create ({BOUND} document bindings): {us['session create']:.0f} us;"
            f" memory_save: {save:.0f} us (a recall of one document and its save,"
            f" {us['recall and save']:.0f} us, less the recall alone, {us['recall one']:.0f})"
        )
    finally:
        connection.close()
        if not args.keepdb:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
