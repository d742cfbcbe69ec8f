"""The hot paths as ratios against floors measured in the same run.

    .venv/bin/python bench/api.py [--documents 10000] [--seconds 1] [--pairs 14]
        [--json PATH] [--only TEXT ...]

Seeds a throwaway database (bench_<name> on PostgreSQL with DATABASE_URL, a
SQLite file under var/ otherwise) and serves it with gunicorn (2 sync
workers) with the floor views of memoryadmin/benchfloors.py switched on by
MEMORYADMIN_BENCH_FLOORS. wrk (when on PATH) drives the throughput rows of
reads, Python clients the writes and the one-at-a-time latencies, all over
real loopback sockets. Each row of the table is measured in pairs and reports the
median of the pairs' ratios: a throughput row's pair is two runs, interleaved (floor,
then measure, then measure, then floor, ...), a latency row's one run in which the two
sides take turns (`alternated`). Database round trips per request come from the same
requests made in-process. The table is printed and written as JSON.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
# The bench measures request cost, not the per-key rate limit. Its own process logs
# warnings only; the servers log every request, as shipped (server_env).
os.environ.setdefault("MEMORYADMIN_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_API_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PAGE_RATE", "1000000/second")
os.environ.setdefault("MEMORYADMIN_PROJECT_PAGE_RATE", "1000000/second")
os.environ.setdefault("LOG_LEVEL", "WARNING")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402

PROJECT = "bench"
ENV = "development"
BOUND = 8  # document bindings of the recall session
BOUND_IDS = [f"bound-{i}" for i in range(BOUND)]  # their resources
TINY = "bound-0"  # a resource of one document (the export's start-up cost)
SMALL = 1000  # documents of the small resource (list @1k)
DEEP_PAGE = 500
API = "/api/managed-agents"
FLOORS = f"{API}/bench"  # memoryadmin/benchfloors.py, on an API route as the API is


# Load generation: each client thread keeps one connection open while the server
# allows (gthread keeps it alive, as behind a proxy; sync workers close it after each
# answer), and writes each request's bytes built in one piece.


@dataclass
class Call:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class Wire:
    """One client's connection to the server: HTTP/1.1 requests, answers read by length."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket | None = None
        self.buffer = b""

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.sock, self.buffer = None, b""

    def exchange(self, call: Call) -> tuple[int, dict[str, str], bytes]:
        head = [f"{call.method} {call.path} HTTP/1.1", "Host: 127.0.0.1"]
        head += [f"{k}: {v}" for k, v in call.headers.items()]
        head.append(f"Content-Length: {len(call.body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + call.body
        fresh = self.sock is None
        try:
            return self._exchange(data)
        except (ConnectionError, EOFError):
            # A kept-alive connection the server closed while it was idle: once more.
            self.close()
            if fresh:
                raise
            return self._exchange(data)

    def _exchange(self, data: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.sock is None:
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(data)
        buffer = self.buffer
        while b"\r\n\r\n" not in buffer:
            buffer += self._recv()
        head, _, rest = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            length = int(headers["content-length"])
            while len(rest) < length:
                rest += self._recv()
            body, self.buffer = rest[:length], rest[length:]
        else:  # no length: the body runs to the end of the connection
            while chunk := self._recv(eof_ok=True):
                rest += chunk
            body = rest
            headers["connection"] = "close"
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, body

    def _recv(self, eof_ok: bool = False) -> bytes:
        assert self.sock is not None
        chunk = self.sock.recv(262144)
        if not chunk and not eof_ok:
            raise EOFError("the server closed the connection")
        return chunk


_wires = threading.local()


def send(port: int, call: Call) -> tuple[int, dict[str, str], bytes]:
    wires = _wires.__dict__.setdefault("by_port", {})
    wire = wires.get(port) or wires.setdefault(port, Wire(port))
    try:
        return wire.exchange(call)
    except BaseException:
        wire.close()
        raise


def checked(port: int, call: Call) -> tuple[dict[str, str], bytes]:
    status, headers, body = send(port, call)
    if status != 200:
        raise SystemExit(f"{call.method} {call.path}: {status} {body[:300]!r}")
    return headers, body


# A load client: make(i) returns client i's next-request function.
Client_ = Callable[[int], Callable[[], object]]


@dataclass
class Load:
    rate: float  # requests per second, all clients together
    latencies: list[float]  # seconds of each request, sorted (the Python clients)
    quantiles: dict[float, float] = field(default_factory=dict)  # seconds (wrk's)
    longest: float = 0.0

    def percentile(self, p: float) -> float:
        if self.quantiles:
            return self.quantiles[p]
        return self.latencies[min(len(self.latencies) - 1, int(len(self.latencies) * p))]

    @property
    def most(self) -> float:
        return self.longest or self.latencies[-1]


WRK = shutil.which("wrk")
LOADER = "wrk" if WRK else "Python clients (no wrk on PATH)"
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    number = text.rstrip("usm")
    return float(number) * _UNITS[text[len(number) :]]


def wrk_load(port: int, call: Call, seconds: float, c: int) -> Load:
    """`c` kept-alive connections of wrk (one thread) for `seconds`: a load generator
    that costs the shared cores far less than Python clients, so the rows measure the
    server. Every answer must be 2xx."""
    assert WRK is not None
    assert not call.body
    command = [
        WRK,
        "-t1",
        f"-c{c}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "--timeout",
        "10s",
    ]
    for name, value in call.headers.items():
        command += ["-H", f"{name}: {value}"]
    out = subprocess.run(
        [*command, f"http://127.0.0.1:{port}{call.path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"{call.method} {call.path} under wrk:\n{out}")
    quantiles, rate, longest = {}, 0.0, 0.0
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["Latency"] and len(words) >= 4:
            longest = _seconds(words[3])
        elif len(words) == 2 and words[0] in ("50%", "99%"):
            quantiles[float(words[0][:-1]) / 100] = _seconds(words[1])
        elif words[:1] == ["Requests/sec:"]:
            rate = float(words[1])
    return Load(rate, [], quantiles, longest)


def read_load(port: int, call: Call, seconds: float, c: int) -> Load:
    """`c` concurrent clients repeating one read: wrk when it is on PATH, else Python."""
    if WRK is not None and not call.body:
        return wrk_load(port, call, seconds, c)
    return load(port, lambda i: lambda: checked(port, call), seconds, c)


def throughput(port: int, make: Client_, seconds: float, c: int) -> float:
    """Requests per second of `c` concurrent clients for `seconds`; make(i) is client i."""
    return load(port, make, seconds, c).rate


def load(port: int, make: Client_, seconds: float, c: int) -> Load:
    """`c` concurrent clients for `seconds`: their rate and each request's latency."""
    done: list[list[float]] = [[] for _ in range(c)]
    errors: list[BaseException] = []
    ready = threading.Barrier(c + 1)
    stop = [0.0]

    def client(i: int) -> None:
        try:
            next_call = make(i)
        except BaseException as exc:
            errors.append(exc)
        ready.wait()
        if errors:
            return
        mine = done[i]
        clock = time.perf_counter
        try:
            while (started := clock()) < stop[0]:
                next_call()
                mine.append(clock() - started)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(c)]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    stop[0] = start + seconds
    ready.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    latencies = sorted(t for mine in done for t in mine)
    return Load(len(latencies) / (time.perf_counter() - start), latencies)


# Requests of one side in a row, in `alternated`; the first few of each run are not
# counted (the other side's leftovers in caches and connections).
RUN_OF, UNCOUNTED = 25, 3


def alternated(
    floor: Callable[[], object], measure: Callable[[], object], seconds: float
) -> tuple[float, float]:
    """Median seconds of one `floor()` and of one `measure()`, one request at a time,
    the two sides taking turns in runs of `RUN_OF` requests (each first every other
    time), for about `seconds` in all (at least 15 counted of each): whatever slows the
    machine for a moment slows both sides, and each side is still measured in a row of
    its own requests, not right after the other's."""
    samples: tuple[list[float], list[float]] = ([], [])
    sides = ((0, floor), (1, measure))
    stop = time.perf_counter() + seconds
    turn = 0
    while time.perf_counter() < stop or len(samples[1]) < 15:
        for side, request in sides if turn % 2 == 0 else sides[::-1]:
            for i in range(RUN_OF):
                start = time.perf_counter()
                request()
                if i >= UNCOUNTED:
                    samples[side].append(time.perf_counter() - start)
        turn += 1
    return statistics.median(samples[0]), statistics.median(samples[1])


# The measurements: each a pair of (floor, measure) runs returning numbers.


@dataclass
class Row:
    name: str
    goal: str
    check: Callable[[float], bool]
    pairs: list[tuple[float, float]] = field(default_factory=list)
    ratio: float = 0.0
    detail: str = ""
    spread: tuple[float, float] | None = None  # the least and greatest pair's ratio
    note: str = ""

    def result(self, pairs: list[tuple[float, float]], ratio: Callable[[float, float], float]):
        self.pairs = pairs
        ratios = [ratio(floor, measured) for floor, measured in pairs]
        self.ratio = statistics.median(ratios)
        self.spread = (min(ratios), max(ratios))
        return self

    @property
    def shown(self) -> str:
        if self.detail:
            return self.detail
        value = f"{self.ratio:.2f}"
        if self.spread is not None and len(self.pairs) > 1:
            value += f" ({self.spread[0]:.2f} to {self.spread[1]:.2f})"
        return f"{value}; {self.note}" if self.note else value

    @property
    def met(self) -> bool:
        return self.check(self.ratio)


def interleaved(
    n: int, floor: Callable[[], float], measure: Callable[[], float], warm: bool = False
):
    """n pairs, alternating which side runs first, so drift hits both sides alike;
    `warm`: one run of each side first, not counted (connections, caches, plans)."""
    if warm:
        floor()
        measure()
    pairs = []
    for i in range(n):
        if i % 2 == 0:
            f = floor()
            m = measure()
        else:
            m = measure()
            f = floor()
        pairs.append((f, m))
    return pairs


# The data.


@dataclass
class Setup:
    key: str
    notes_pk: int
    small_pk: int
    tiny_pk: int
    doc_id: str
    session_id: str
    cookie: str
    deep_cursor: str
    deep_page: int


def documents_bulk(resource: Any, count: int, prefix: str = "doc") -> None:
    from memoryadmin.memory.models import Document
    from memoryadmin.memory.services.documents import new_revision

    now = timezone.now()
    batch = []
    for i in range(count):
        stamp = now - timedelta(seconds=i)
        batch.append(
            Document(
                resource=resource,
                doc_id=f"{prefix}-{i:06d}",
                title=f"Document {i} about topic {i % 97}",
                text="x" * 2000,
                summary="A benchmark document.",
                revision=new_revision(),
                bytes=2000,
                updated_at=stamp,
                created_at=stamp,
                # As in use: agents write most of a memory, from a few sessions (the
                # Memory page links each row's session).
                writer_kind="owner" if i % 2 else "agent",
                writer_session_id="" if i % 2 else f"ses_{i % 5:024x}",
            )
        )
        if len(batch) == 1000:
            Document.objects.bulk_create(batch)
            batch = []
            print(f"\rseeding {resource.resource_id} {i + 1}/{count}", end="", file=sys.stderr)
    Document.objects.bulk_create(batch)
    print(file=sys.stderr)


def recall_session(project: Any, resources: dict[str, Any]) -> Any:
    """The recall's session, of the deployment in `ENV`: each of the `BOUND_IDS`
    resources (in `resources`, by id) gets a document "card" of 2,000 characters, and
    the session binds each of them by document."""
    from memoryadmin.agents.services.sessions import session_create
    from memoryadmin.memory.services.documents import document_create

    for rid in BOUND_IDS:
        document_create(
            resource=resources[rid], doc_id="card", title="Card", text="y" * 2000, actor="bench"
        )
    session, _ = session_create(
        project=project,
        agent_id=f"bench@{ENV}",
        memory={rid: {"scope": "document", "id": "card"} for rid in BOUND_IDS},
        idempotency_key="bench",
        actor="bench",
    )
    return session


def page_cookie() -> str:
    """The Cookie header of the Memory page's reader: the project's owner, logged in, with
    the CSRF cookie a browser holds after its first page (later pages reuse its secret)."""
    from django.contrib.auth import get_user_model

    from memoryadmin.web.services.roles import role_grant

    user = get_user_model().objects.create_user("bench", password=None)
    role_grant(username="bench", project_id=PROJECT, role="owner", actor="bench")
    web = Client()
    web.force_login(user)
    first = web.get(reverse("web:inventory", args=[PROJECT, ENV]))
    assert first.status_code == 200, first.status_code
    cookies = [settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME]
    return "; ".join(f"{name}={web.cookies[name].value}" for name in cookies)


def seed(documents: int, concurrency: int) -> Setup:
    from memoryadmin.core.cursors import cursor_dump
    from memoryadmin.memory.models import Document, Resource
    from memoryadmin.memory.services.deployments import deployment_create
    from memoryadmin.memory.services.documents import document_create
    from memoryadmin.memory.services.keys import api_key_create
    from memoryadmin.memory.services.projects import project_create

    project = project_create(project_id=PROJECT, actor="bench")
    memory = [
        {"id": rid, "description": "Bench memory.", "provider": {"maxBytes": 16384}}
        for rid in ["notes", "small", *BOUND_IDS]
    ]
    deployment_create(project=project, agent="bench", memory=memory, promote=ENV, actor="bench")
    resources = {r.resource_id: r for r in Resource.objects.filter(project=project)}
    documents_bulk(resources["notes"], documents)
    documents_bulk(resources["small"], SMALL)
    # Each load client writes a document of its own, through the API and the floor.
    for i in range(concurrency):
        for prefix in ("put", "floor-put"):
            document_create(
                resource=resources["notes"], doc_id=f"{prefix}-{i}", title="Written", actor="bench"
            )
    session = recall_session(project, resources)
    cookie = page_cookie()
    notes = resources["notes"]
    deep_page = min(DEEP_PAGE, max(1, documents // 50 - 1))
    last = (
        Document.objects.live()
        .filter(resource=notes)
        .order_by("-updated_at", "doc_id")
        .values("updated_at", "doc_id")[deep_page * 50 - 1]
    )
    deep_cursor = cursor_dump(
        [last["updated_at"].isoformat(), last["doc_id"]], scope=f"documents:{notes.pk}"
    )
    if connection.vendor == "postgresql":
        # What autovacuum does soon after a bulk load in production.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    return Setup(
        key=api_key_create(project_id=PROJECT)[1],
        notes_pk=notes.pk,
        small_pk=resources["small"].pk,
        tiny_pk=resources[TINY].pk,
        doc_id=f"doc-{documents // 2:06d}",
        session_id=session.id,
        cookie=cookie,
        deep_cursor=deep_cursor,
        deep_page=deep_page,
    )


# The server.


def prose(seed: int, chars: int = 2000) -> str:
    """`chars` characters of made-up prose, the same for the same `seed`: words of 2 to 10
    letters from a vocabulary of 30,000, drawn with Zipf's law as a language's are, so
    that a document holds a few hundred distinct words (the bench's other texts are one
    character repeated: one word for the search index)."""
    vocabulary, weights = _vocabulary()
    words = random.Random(seed).choices(vocabulary, cum_weights=weights, k=chars)
    return " ".join(words)[: chars - 1].capitalize() + "."


@functools.cache
def _vocabulary() -> tuple[list[str], list[float]]:
    """The 30,000 words, and their cumulative weights (1 / rank)."""
    pick = random.Random(7)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words: dict[str, None] = {}
    while len(words) < 30_000:
        alphabet = letters[: pick.randint(8, 26)]
        words["".join(pick.choice(alphabet) for _ in range(pick.randint(2, 10)))] = None
    weights = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))
    return list(words), weights


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        user = db.get("USER") or ""
        auth = f"{user}:{db['PASSWORD']}@" if db.get("PASSWORD") else f"{user}@" if user else ""
        host = f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}"
        return f"postgres://{auth}{host}/{db['NAME']}"
    return f"sqlite:///{db['NAME']}"


def server_env(shipped: bool = False) -> dict[str, str]:
    """The servers' environment: request logs on (to /dev/null), as in production.
    `shipped` leaves every gunicorn setting to gunicorn.conf.py's defaults."""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        MEMORYADMIN_BENCH_FLOORS="1",
        GUNICORN_MAX_REQUESTS="0",
        GUNICORN_LOG_LEVEL="warning",
        DJANGO_DEBUG="0",
        LOG_LEVEL=os.environ.get("BENCH_SERVER_LOG_LEVEL", "INFO"),
    )
    if shipped:
        for name in list(env):
            if name.startswith("GUNICORN_") and name != "GUNICORN_LOG_LEVEL":
                del env[name]
        env.pop("WEB_CONCURRENCY", None)
    return env


def collect_static() -> None:
    """As `make serve` does: pages (the seed's and the server's) render with the
    production static files storage, which needs its manifest."""
    manage = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    subprocess.run(manage, cwd=ROOT, env=server_env(), check=True)


def gunicorn(port: int, shipped: bool = False, app: str = "") -> subprocess.Popen[bytes]:
    """2 sync workers, or (`shipped`) gunicorn.conf.py with its defaults as shipped;
    serving `app` (an application of a bench/ module, as gunicorn names one) instead of
    the project's when given."""
    command = [str(ROOT / ".venv/bin/gunicorn"), "--config", str(ROOT / "gunicorn.conf.py")]
    if not shipped:
        # One thread each: gunicorn runs "sync" as gthread when threads are more than one.
        command += ["--workers", "2", "--worker-class", "sync", "--threads", "1"]
    command += ["--bind", f"127.0.0.1:{port}"]
    env = server_env(shipped)
    if app:
        command.append(app)
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent)
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if send(port, Call("GET", "/healthz"))[0] == 200:
                return server
        except OSError:
            pass
        if server.poll() is not None:
            raise SystemExit("gunicorn did not start")
        time.sleep(0.1)
    server.terminate()
    raise SystemExit("gunicorn did not answer /healthz")


# Export: the CLI against the database's own bulk copy of the same rows.


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of a command.

    A child's ru_maxrss also counts the copy of this (large) process it was
    forked from before it ran the command, so on Linux the peak is the
    command's own: the high-water mark of its memory after exec (VmHWM),
    read as it exits by `PEAK_WRAPPER` for Python commands.
    """
    peak_file = Path(tempfile.mkstemp(prefix="memoryadmin-bench-peak-")[1])
    if cmd[0] == sys.executable:
        cmd = [sys.executable, "-c", PEAK_WRAPPER, str(peak_file), *cmd[1:]]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited with {child.returncode}")
    own = peak_file.read_text().strip()
    peak_file.unlink(missing_ok=True)
    return wall, int(own) * 1024 if own else usage.ru_maxrss * 1024


# Runs a Python script (argv[2:]) and writes its peak RSS in KiB (VmHWM) to argv[1].
PEAK_WRAPPER = """
import atexit, runpy, sys
out, script = sys.argv[1], sys.argv[2]
def peak():
    try:
        with open("/proc/self/status") as status:
            kib = next((l.split()[1] for l in status if l.startswith("VmHWM:")), "")
    except OSError:
        kib = ""
    with open(out, "w") as f:
        f.write(kib)
atexit.register(peak)
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


EXPORT_COLUMNS = (
    "doc_id, title, summary, text, agent_writes, revision, bytes, updated_at,"
    " writer_kind, writer_session_id"
)


def copy_command(out: Path, resource_pk: int) -> list[str] | None:
    query = (
        f"SELECT {EXPORT_COLUMNS} FROM memory_document"
        f" WHERE resource_id = {resource_pk} AND NOT deleted ORDER BY doc_id"
    )
    if connection.vendor == "postgresql":
        psql = shutil.which("psql")
        if psql is None:
            return None
        return [psql, "-q", database_url(), "-c", f"\\copy ({query}) TO '{out}'"]
    # SQLite has no \copy: its own shell's CSV output of the same query.
    sqlite = shutil.which("sqlite3")
    if sqlite is None:
        return None
    return [sqlite, "-csv", connection.settings_dict["NAME"], f".once {out}", query]


def export_command(out: Path, resource: str = "notes") -> list[str]:
    return [
        sys.executable,
        "manage.py",
        "memory",
        "export",
        "--project",
        PROJECT,
        "--environment",
        ENV,
        "--resource",
        resource,
        "--format",
        "jsonl",
        "--out",
        str(out),
    ]


# Round trips: the same requests made in-process.


def round_trips(setup: Setup, calls: dict[str, Call]) -> dict[str, int]:
    counts = {}
    api = Client(HTTP_X_API_KEY=setup.key)
    web = Client(HTTP_COOKIE=setup.cookie)
    for name, call in calls.items():
        client = web if "Cookie" in call.headers else api
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in call.headers.items()}
        extra.pop("HTTP_X_API_KEY", None)
        extra.pop("HTTP_COOKIE", None)
        # Warm: the key's last use is written once a minute, not per request. (The page's
        # session was read by this process when the seed opened its first page.)
        api.generic("GET", calls["GET document"].path)
        if name == "PUT document":
            got = api.get(call.path)
            extra["HTTP_IF_MATCH"] = got.headers["ETag"]
        with CaptureQueriesContext(connection) as captured:
            response = client.generic(
                call.method, call.path, call.body, content_type="application/json", **extra
            )
        assert response.status_code == 200, (name, response.status_code, response.content[:300])
        counts[name] = len(captured)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10000)
    # Many short pairs: at the same time measured, 14 pairs of 1 s runs (wrk's shortest)
    # put the GET row's median within 0.023 over four runs, 7 pairs of 2 s within 0.045.
    parser.add_argument("--seconds", type=float, default=1.0, help="per run")
    parser.add_argument("--pairs", type=int, default=14)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", default=str(ROOT / "var" / "bench.json"))
    parser.add_argument(
        "--only",
        action="append",
        metavar="TEXT",
        help="measure only the rows whose name contains TEXT (repeatable; e.g. GET, export)",
    )
    args = parser.parse_args()
    if args.documents < 200:
        parser.error("--documents must be at least 200")

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    old_name = throwaway_database("bench")
    try:
        run(args)
    finally:
        connection.close()
        connection.creation.destroy_test_db(old_name, verbosity=0)


def throwaway_database(name: str, *, keepdb: bool = False) -> str:
    """Creates (or, with `keepdb`, reuses) the database a bench seeds: <name>_<database>
    on PostgreSQL, var/<name>.sqlite3 with SQLite; returns what `destroy_test_db` takes."""
    test = connection.settings_dict.setdefault("TEST", {})
    if connection.vendor == "postgresql":
        test["NAME"] = f"{name}_{connection.settings_dict['NAME']}"
    else:
        (ROOT / "var").mkdir(exist_ok=True)
        test["NAME"] = str(ROOT / "var" / f"{name}.sqlite3")
    return connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=keepdb)


def run(args: argparse.Namespace) -> None:
    collect_static()
    started = time.perf_counter()
    setup = seed(args.documents, args.concurrency)
    seeded = time.perf_counter() - started
    port = free_port()
    servers = [gunicorn(port)]

    shipped: list[int] = []

    def shipped_port() -> int:
        """The server as gunicorn.conf.py ships it, started for the first row that uses
        it (a run of `--only` rows that do not starts none); its rows warm it first."""
        if not shipped:
            shipped.append(free_port())
            servers.append(gunicorn(shipped[0], shipped=True))
        return shipped[0]

    try:
        rows, trips = measure(args, setup, port, shipped_port)
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait()
    report(args, rows, trips, seeded, time.perf_counter() - started)


def wanted(args: argparse.Namespace, name: str) -> bool:
    return not args.only or any(text.lower() in name.lower() for text in args.only)


def measure(
    args: argparse.Namespace, setup: Setup, port: int, shipped_port: Callable[[], int]
) -> tuple[list[Row], dict[str, int]]:
    key = {"x-api-key": setup.key}
    docs = f"{API}/projects/{PROJECT}/memory/notes/documents"
    small = f"{API}/projects/{PROJECT}/memory/small/documents"
    q = f"?environment={ENV}"
    page_url = reverse("web:documents", args=[PROJECT, ENV, "notes"])
    cookie = {"Cookie": setup.cookie}
    calls = {
        "GET document": Call("GET", f"{docs}/{setup.doc_id}{q}", key),
        "PUT document": Call("PUT", f"{docs}/put-0{q}", key, b'{"text": "z"}'),
        "list first page": Call("GET", f"{docs}{q}", key),
        "list deep page": Call("GET", f"{docs}{q}&cursor={setup.deep_cursor}", key),
        "list @1k first page": Call("GET", f"{small}{q}", key),
        "recall (8 documents)": Call(
            "POST", f"{API}/sessions/{setup.session_id}/memory/recall", key, b"{}"
        ),
        "page document list": Call("GET", page_url, cookie),
        "page filter, no match": Call("GET", f"{page_url}?q=zzzqqqzzz", cookie),
        "page filter, matches": Call("GET", f"{page_url}?q=topic+42", cookie),
    }
    for call in calls.values():
        if call.body:
            call.headers = {**call.headers, "Content-Type": "application/json"}
    floor_get = Call("GET", f"{FLOORS}/floor/{setup.notes_pk}/{setup.doc_id}")
    s, n, c = args.seconds, args.pairs, args.concurrency
    text = json.dumps({"text": "w" * 2000}).encode()
    # Two texts of prose that the prose row's writers alternate: each write replaces the
    # text with another, as an edit does.
    prose_texts = [json.dumps({"text": prose(seed)}).encode() for seed in (1, 2)]

    def writer(
        read: Callable[[int], str], write: Callable[[int], str], bodies: list[bytes] | None = None
    ) -> Client_:
        """Client i replaces its own document, always with the revision it last saw, with
        `bodies` in turn (the bench's one-character text by default)."""
        texts = bodies or [text]

        def make(i: int) -> Callable[[], object]:
            etag = checked(port, Call("GET", read(i), key))[0]["etag"]
            written = 0

            def one() -> object:
                nonlocal etag, written
                headers = {**key, "If-Match": etag, "Content-Type": "application/json"}
                body = texts[written % len(texts)]
                etag = checked(port, Call("PUT", write(i), headers, body))[0]["etag"]
                written += 1
                return None

            return one

        return make

    def api_writer(bodies: list[bytes] | None = None) -> Client_:
        return writer(lambda i: f"{docs}/put-{i}{q}", lambda i: f"{docs}/put-{i}{q}", bodies)

    def floor_writer(bodies: list[bytes] | None = None) -> Client_:
        return writer(
            lambda i: f"{FLOORS}/floor/{setup.notes_pk}/floor-put-{i}",
            lambda i: f"{FLOORS}/floor-put/{setup.notes_pk}/floor-put-{i}",
            bodies,
        )

    api_put, floor_put = api_writer(), floor_writer()
    one = {name: (lambda call=call: checked(port, call)) for name, call in calls.items()}

    def turns(floor: Callable[[], object], measure: Callable[[], object]) -> Any:
        """n pairs of latencies, each from one run in which the two sides take turns."""
        return lambda: [alternated(floor, measure, 2 * s) for _ in range(n)]

    rows: list[Row] = []

    def row(
        name: str, goal: str, check: Callable[[float], bool], pairs: Any, ratio: Any
    ) -> Row | None:
        if not wanted(args, name):
            return None
        print(f"measuring: {name}", file=sys.stderr, flush=True)
        result = Row(name, goal, check).result(pairs(), ratio)
        rows.append(result)
        return result

    per_second = lambda f, m: m / f  # noqa: E731 - the measure's share of the floor's rate
    slower = lambda f, m: m / f  # noqa: E731 - the measure's latency over the floor's
    row(
        "GET one document req/s ÷ bare view, one SELECT by key",
        ">= 0.85",
        lambda r: r >= 0.85,
        lambda: interleaved(
            n,
            lambda: read_load(port, floor_get, s, c).rate,
            lambda: read_load(port, calls["GET document"], s, c).rate,
        ),
        per_second,
    )
    row(
        "conditional PUT req/s ÷ bare view, one UPDATE ... WHERE revision=",
        ">= 0.8",
        lambda r: r >= 0.8,
        lambda: interleaved(
            n,
            lambda: throughput(port, floor_put, s, c),
            lambda: throughput(port, api_put, s, c),
        ),
        per_second,
    )
    row(
        "conditional PUT of 2,000 characters of prose req/s ÷ bare view writing the same",
        "(context)",
        lambda r: True,
        lambda: interleaved(
            n,
            lambda: throughput(port, floor_writer(prose_texts), s, c),
            lambda: throughput(port, api_writer(prose_texts), s, c),
        ),
        per_second,
    )
    row(
        f"recall with {BOUND} document bindings ÷ one document GET (latency)",
        "<= 1.5",
        lambda r: r <= 1.5,
        turns(one["GET document"], one["recall (8 documents)"]),
        slower,
    )
    row(
        "recall's floor: bare one-UPDATE view ÷ one document GET (latency)",
        "(context)",
        lambda r: True,
        # A writer for each pair, which reads the document's revision first (the PUT
        # rows write the same document before).
        lambda: [alternated(one["GET document"], floor_put(0), 2 * s) for _ in range(n)],
        slower,
    )
    row(
        f"Memory page document list @{args.documents} ÷ API list first page (latency)",
        "<= 1.2",
        lambda r: r <= 1.2,
        turns(one["list first page"], one["page document list"]),
        slower,
    )
    row(
        f"Memory page filter matching nothing @{args.documents} ÷ API list first page",
        "<= 2",
        lambda r: r <= 2.0,
        turns(one["list first page"], one["page filter, no match"]),
        slower,
    )
    row(
        "Memory page filter matching ÷ API list first page",
        "(context)",
        lambda r: True,
        turns(one["list first page"], one["page filter, matches"]),
        slower,
    )
    if wanted(args, "export"):
        export_row(args, setup, rows)
    row(
        f"list first page @{args.documents} ÷ @{SMALL}",
        "<= 1.2",
        lambda r: r <= 1.2,
        turns(one["list @1k first page"], one["list first page"]),
        slower,
    )
    row(
        f"list page {setup.deep_page} ÷ page 1",
        "<= 1.2",
        lambda r: r <= 1.2,
        turns(one["list first page"], one["list deep page"]),
        slower,
    )
    stack_rows(args, row, port, shipped_port, calls["GET document"])
    trips = round_trips(setup, calls)
    trips["floor GET (bench)"] = 1
    trips["floor PUT (bench)"] = 1
    return rows, trips


def stack_rows(
    args: argparse.Namespace,
    row: Callable[..., Row | None],
    port: int,
    shipped: Callable[[], int],
    get: Call,
) -> None:
    """What the stack costs before any view runs (a constant view through every
    middleware against the raw WSGI answer, on each server), and the shipped
    configuration's tail and throughput against sync workers."""
    from memoryadmin.benchfloors import BARE_PATH, CONSTANT_API_PATH, RAW_PATH

    s, n, c = args.seconds, args.pairs, args.concurrency

    def rate(p: int, call: Call) -> Callable[[], float]:
        return lambda: read_load(p, call, s, c).rate

    raw, constant = Call("GET", RAW_PATH), Call("GET", CONSTANT_API_PATH)
    servers = (("2 sync workers", lambda: port), ("gunicorn.conf.py as shipped", shipped))
    for server, p in servers:
        row(
            f"constant JSON view through the full stack ÷ raw WSGI, {server} (req/s)",
            ">= 0.5",
            lambda r: r >= 0.5,
            lambda p=p: interleaved(n, rate(p(), raw), rate(p(), constant), warm=True),
            lambda f, m: m / f,
        )
    # What Django's handler costs before any middleware, on each server: the part of
    # the stack's cost no middleware can take back.
    bare = Call("GET", BARE_PATH)
    for server, p in servers:
        row(
            f"constant JSON view through Django without middleware ÷ raw WSGI, {server} (req/s)",
            "(context)",
            lambda r: True,
            lambda p=p: interleaved(n, rate(p(), raw), rate(p(), bare), warm=True),
            lambda f, m: m / f,
        )
    # The tail as shipped, and with sync workers for context: on the same two cores, the
    # workers, the database and the load generator take turns, whatever the server.
    for server, p, goal, met in (
        ("gunicorn.conf.py as shipped", shipped, "<= 3", lambda r: r <= 3),
        ("2 sync workers", lambda: port, "(context)", lambda r: True),
    ):
        runs: list[Load] = []

        def tail(p: Callable[[], int] = p, runs: list[Load] = runs) -> tuple[float, float]:
            got = read_load(p(), get, s, c)
            runs.append(got)
            return got.percentile(0.5), got.percentile(0.99)

        def tail_pairs(
            tail: Callable[[], tuple[float, float]] = tail, runs: list[Load] = runs
        ) -> list[tuple[float, float]]:
            tail()  # warm
            runs.clear()
            return [tail() for _ in range(n)]

        tail_row = row(
            f"GET one document p99 ÷ p50 at {c} connections, {server}",
            goal,
            met,
            tail_pairs,
            lambda p50, p99: p99 / p50,
        )
        if tail_row is not None:
            worst = max(runs, key=lambda r: r.most)
            tail_row.note = (
                f"p50 {statistics.median(r.percentile(0.5) for r in runs) * 1000:.1f} ms,"
                f" p99 {statistics.median(r.percentile(0.99) for r in runs) * 1000:.1f} ms,"
                f" max {worst.most * 1000:.0f} ms"
            )
    row(
        "GET one document req/s, gunicorn.conf.py as shipped ÷ 2 sync workers",
        ">= 1.0",
        lambda r: r >= 1.0,
        lambda: interleaved(n, rate(port, get), rate(shipped(), get), warm=True),
        lambda f, m: m / f,
    )


def export_row(args: argparse.Namespace, setup: Setup, rows: list[Row]) -> None:
    print("measuring: export", file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix="memoryadmin-bench-"))
    env = server_env()
    env.pop("MEMORYADMIN_BENCH_FLOORS")
    copy = copy_command(work / "copy.out", setup.notes_pk)
    peaks: list[int] = []
    try:

        def cli(resource: str = "notes") -> float:
            out = work / "export.jsonl"
            out.unlink(missing_ok=True)
            wall, peak = run_measured(export_command(out, resource), env)
            peaks.append(peak)
            return wall

        def floor(command: list[str] | None = copy) -> float:
            assert command is not None
            return run_measured(command, env)[0]

        name = f"export {args.documents} documents via CLI ÷ raw \\copy of the same rows (wall)"
        if copy is None:
            rows.append(Row(name, "<= 5", lambda r: True, detail="no psql/sqlite3 on PATH"))
        else:
            result = Row(name, "<= 5", lambda r: r <= 5).result(
                interleaved(args.pairs, floor, cli), lambda f, m: m / f
            )
            rows.append(result)
            # The same, less what exporting one document costs on each side (the
            # CLI's fixed start-up: Python, Django, every app): how the export
            # compares as it grows.
            tiny = copy_command(work / "tiny.out", setup.tiny_pk)
            rows.append(
                Row(
                    f"export {args.documents} documents less export of 1, CLI ÷ \\copy (wall)",
                    "(context)",
                    lambda r: True,
                ).result(
                    interleaved(
                        args.pairs,
                        lambda: floor() - floor(tiny),
                        lambda: cli() - cli(TINY),
                    ),
                    lambda f, m: m / f,
                )
            )
        if not peaks:
            cli()
        peak = Row(f"export peak RSS @{args.documents} (MiB)", "< 100", lambda r: r < 100)
        peak.ratio = max(peaks) / 2**20
        rows.append(peak)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace, rows: list[Row], trips: dict[str, int], seeded: float, total: float
) -> None:
    where = f"{connection.vendor}, {args.documents} documents, gunicorn 2 sync workers"
    where += f", reads under load by {LOADER}"
    print(
        f"\n{where} (and gunicorn.conf.py as shipped where a row says so); median of"
        f" {args.pairs} pairs (least to greatest), {args.seconds:g} s runs"
        " (a latency row's pair: one run of twice that, the two sides taking turns)\n"
    )
    print("| measure | now | goal | met |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r.name} | {r.shown} | {r.goal} | {'yes' if r.met else 'NO'} |")
    print("\n| endpoint | database round trips per request |")
    print("| --- | --- |")
    for name, count in trips.items():
        print(f"| {name} | {count} |")
    print(f"\nseeding {seeded:.0f} s, whole run {total:.0f} s")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "database": connection.vendor,
                "documents": args.documents,
                "pairs": args.pairs,
                "seconds": args.seconds,
                "concurrency": args.concurrency,
                "loadGenerator": LOADER,
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "rows": [
                    {
                        "measure": r.name,
                        "ratio": r.ratio,
                        "goal": r.goal,
                        "met": r.met,
                        "pairs": r.pairs,
                        "detail": r.detail,
                        "spread": r.spread,
                        "note": r.note,
                    }
                    for r in rows
                ],
                "roundTrips": trips,
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n"
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
