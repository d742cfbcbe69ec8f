"""What test modules share that is not a fixture: constants, small builders and checks.

Fixtures live in conftest.py; test modules import from here, never from
conftest.py or from each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx
import pytest
from django.db import connection, connections
from django.http import StreamingHttpResponse

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.external.base import ExternalProvider
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.providers import provider_for
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import Writer, document_patch, document_replace
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.refprovider.declaration import (
    TOKEN_SECRET_NAME,
    reference_declaration,
    reference_token,
)
from tests.loopback import LoopbackServer

MANIFEST_MEMORY: list[dict[str, Any]] = [
    {
        "id": "notes",
        "description": "Workshop requirements and decisions.",
        "provider": {"kind": "document", "maxBytes": 8192},
    },
    {
        "id": "kb",
        "description": "Product knowledge.",
        "provider": {"kind": "document", "maxBytes": 64},
    },
]

DOCS = "/api/managed-agents/projects/acme/memory/notes/documents"
DEV = "?environment=development"

# The Memory page personas' password (see the `people` fixture).
PASSWORD = "a-long-test-password-1"


@dataclass
class Keys:
    owner: str  # read-write, this project
    read_only: str  # read-only, this project
    other: str  # read-write, another project
    all_projects: str  # read-write, every project


@dataclass
class People:
    """A user per role on "acme", and an outsider who owns another project."""

    owner: Any
    support: Any
    viewer: Any
    outsider: Any


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


# The local Redis the tests that need one use (database 5 unless told otherwise).
TEST_REDIS_URL = os.environ.get("MEMORYADMIN_TEST_REDIS_URL", "redis://127.0.0.1:6379/5")


@contextmanager
def redis_prefix(label: str) -> Iterator[tuple[Any, str]]:
    """A client of the test Redis and a cache prefix of one test (`<label>-<random>`);
    skips without a Redis; afterwards deletes the keys under the prefix, and only them."""
    import redis

    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.skip(f"needs Redis at {TEST_REDIS_URL} (redis-server; .ci/run starts one): {exc}")
    prefix = f"{label}-{secrets.token_hex(6)}"
    try:
        yield client, prefix
    finally:
        for name in client.scan_iter(match=f"{prefix}:*"):
            client.delete(name)
        client.close()


def run_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Runs work(i) in `count` real threads released together by a barrier."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def runner(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return results


def retire_kb(project: Project) -> None:
    """Promotes a deployment that no longer declares kb: kb becomes retired."""
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[MANIFEST_MEMORY[0]],
        promote="development",
        actor="test",
    )


def freeze(document: Document) -> Document:
    """Turns agent writes off under the document's current revision (an owner's PATCH)."""
    return _agent_writes(document, False)


def unfreeze(document: Document) -> Document:
    """Turns agent writes back on under the document's current revision (an owner's PATCH)."""
    return _agent_writes(document, True)


def agent_save(
    resource: Resource,
    doc_id: str,
    expected_revision: str,
    text: str,
    *,
    session_id: str,
    actor: str = "agent",
    **more: Any,
) -> Document:
    """The document's text replaced as an agent's save from the session `session_id`."""
    return document_replace(
        resource=resource,
        doc_id=doc_id,
        expected_revision=expected_revision,
        text=text,
        actor=actor,
        writer=Writer(kind="agent", session_id=session_id),
        **more,
    )


def _agent_writes(document: Document, on: bool) -> Document:
    return document_patch(
        resource=document.resource,
        doc_id=document.doc_id,
        expected_revision=document.revision,
        agent_writes=on,
        actor="t",
    )


def deploy_reference_provider(
    project: Project,
    base_url: str,
    *,
    max_bytes: int | None = None,
    extra: Sequence[dict[str, Any]] = (),
) -> Resource:
    """Deploys agent "researcher" with the reference provider as resource "facts" (plus
    `extra` declarations) in development, with its token stored as the secret it names."""
    options: dict[str, Any] = {} if max_bytes is None else {"max_bytes": max_bytes}
    facts = reference_declaration(
        resource_id="facts", base_url=base_url, description="Facts.", **options
    )
    deployment_create(
        project=project,
        agent="researcher",
        memory=[facts, *extra],
        promote="development",
        actor="t",
    )
    secret_set(
        project=project,
        environment="development",
        name=TOKEN_SECRET_NAME,
        value=reference_token(),
        origins=[base_url.rstrip("/")],
        server_level=True,
        actor="t",
    )
    return resource_get(project=project, environment="development", resource_id="facts")


def proposed_save(project: Project, *, call_id: str = "call_7") -> tuple[Session, str]:
    """support-bot deployed with notes under review, and one of its saves to notes/workshop
    (which must exist) waiting in the inbox: the session and the proposal's id."""
    from memoryadmin.agents.services.runtime import recall_create, tool_call

    notes = {**MANIFEST_MEMORY[0], "provider": {"kind": "document", "agentWrites": "review"}}
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[notes, MANIFEST_MEMORY[1]],
        promote="development",
        actor="t",
    )
    session = support_session(project)
    recall = recall_create(session=session, use=["notes"])
    result = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id=call_id,
        name="memory_save",
        arguments={"text": "Exercises must run on Node.js 24."},
    )
    assert result["status"] == "proposed", result
    return session, str(result["proposalId"])


def support_session(project: Project, *, idempotency_key: str = "ticket-42") -> Session:
    """A support-bot session bound read-write to notes/workshop (which must exist) and to
    the kb collection, labelled with its ticket."""
    session, _ = session_create(
        project=project,
        agent_id="support-bot@development",
        memory={
            "notes": {"scope": "document", "id": "workshop", "access": "read-write"},
            "kb": {"scope": "collection"},
        },
        labels={"ticket": "T-42"},
        idempotency_key=idempotency_key,
        actor="test",
    )
    return session


def html_of(response: Any, status: int = 200) -> str:
    """A page's HTML, once its status is the expected one."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    return str(response.content.decode())


def form_posted(html: str, action: str) -> dict[str, list[str]]:
    """What a page's POST form to `action` sends as it is (its hidden fields), as a
    browser sends it: what the person was shown goes back with the request."""
    form = re.search(
        rf'<form method="post" action="{re.escape(action)}"[^>]*>(.*?)</form>', html, re.S
    )
    assert form is not None, f"no form posting to {action}"
    posted: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form[1]):
        posted.setdefault(name, []).append(unescape(value))
    return posted


def fragment_of(response: Any) -> str:
    """An htmx fragment's HTML: 200 and no page around it."""
    html = html_of(response)
    assert "<html" not in html
    return html


def stream_of(response: object) -> Iterator[bytes]:
    """A streaming response's chunks, read as they are produced (the test clients'
    responses are synchronous)."""
    assert isinstance(response, StreamingHttpResponse), type(response)
    return cast(Iterator[bytes], response.streaming_content)


def streamed(response: object) -> bytes:
    """A streaming response's body, read whole."""
    return b"".join(stream_of(response))


# The browser tests.

# Chromium's headless shell (Debian's chromium-headless-shell, the build Playwright itself
# runs headless): the same engine as the full browser without its window, profile and UI
# machinery, at about two thirds of its CPU over the browser tests. The full browser where
# only it is installed.
_CHROMIUMS = (Path("/usr/bin/chromium-headless-shell"), Path("/usr/bin/chromium"))
CHROMIUM = next((path for path in _CHROMIUMS if path.exists()), _CHROMIUMS[0])
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
# Chromium keeps the last --disable-features it is given, and Playwright passes its own
# first: the suite's list repeats Playwright's (1.65) and adds its own.
# `chromium_features_kept` fails the browser tests when a Playwright upgrade adds one.
PLAYWRIGHT_DISABLED_FEATURES = [
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
]
DISABLED_FEATURES = [
    *PLAYWRIGHT_DISABLED_FEATURES,
    # The address bar's drop-down is a page of its own, loaded in a renderer of its own in
    # every new window, so in every browser context the tests open: headless, nobody sees
    # it, and it cost more CPU than the test's own page.
    "WebUIOmniboxPopup",
    "WebUIOmniboxAimPopup",
]
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
]
# The marks of every browser test module (its `pytestmark`).
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Chromium (apt-get install chromium-headless-shell, or chromium)",
    ),
]


def chromium_features_kept() -> None:
    """Fails unless the Chromium this process started last got every feature that Playwright
    disables in the --disable-features that it keeps (the last one), and does nothing where
    no such process is found (no /proc)."""
    command_lines = []
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            arguments = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            if "--remote-debugging-pipe" in arguments and _descends_from_here(int(entry.name)):
                command_lines.append(arguments)
    for arguments in command_lines:
        given = [
            a.split("=", 1)[1].split(",") for a in arguments if a.startswith("--disable-features=")
        ]
        missing = set(given[0]) - set(given[-1])
        assert not missing, (
            f"add {sorted(missing)} to PLAYWRIGHT_DISABLED_FEATURES (tests/helpers.py)"
        )


def _descends_from_here(pid: int) -> bool:
    while pid > 1:
        if pid == os.getpid():
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def shoot(page: Any, name: str, *, full_page: bool = False) -> None:
    """Takes a screenshot of the page. It replaces docs/screenshots/<name>.png only with
    UPDATE_SCREENSHOTS=1, so that running the suite leaves the checkout unchanged."""
    image = page.screenshot(full_page=full_page)
    assert image.startswith(b"\x89PNG"), name
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / f"{name}.png").write_bytes(image)


# How far the page's widest table reaches past the page's column (main, inside its
# padding), in CSS pixels: 0 or less when every table fits.
TABLES_PAST_COLUMN = """() => {
  const main = document.querySelector("main");
  const padding = parseFloat(getComputedStyle(main).paddingRight);
  const edge = main.getBoundingClientRect().right - padding;
  const tables = Array.from(main.querySelectorAll("table"));
  return Math.max(0, ...tables.map(table => table.getBoundingClientRect().right - edge));
}"""


def password_login(client: Any, username: str, password: str) -> bool:
    """Logs in through the login form (as a browser does, so lockouts apply)."""
    response = client.post("/login/", {"username": username, "password": password})
    return bool(response.status_code == 302 and "_auth_user_id" in client.session)


# Real servers: the production environment of docs/deploy.md and gunicorn started with
# the production command on a loopback port.

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
GUNICORN = str(Path(sys.executable).parent / "gunicorn")


def production_env() -> dict[str, str]:
    """The environment block of docs/deploy.md, with `<secret>` placeholders filled in."""
    text = DEPLOY_DOC.read_text()
    block = text.split("<!-- production-env:start -->", 1)[1].split("<!-- production-env:end")[0]
    env = {}
    for line in block.splitlines():
        match = re.match(r"([A-Z_]+)=(\S*)", line)
        if match:
            name, value = match.groups()
            env[name] = secrets.token_urlsafe(50) if value == "'<secret>'" else value
    assert "DJANGO_SECRET_KEY" in env, block
    return env


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of memoryadmin's settings, plus `extra`."""
    names = set(production_env()) | {
        "DJANGO_DEBUG",
        "DJANGO_SETTINGS_MODULE",
        "MEMORYADMIN_DEV_SECRETS",
        "MEMORYADMIN_VAR_DIR",
        "DJANGO_STATIC_ROOT",
        "REDIS_URL",
        "MEMORYADMIN_METRICS_TOKEN",
    }
    env = {k: v for k, v in os.environ.items() if k not in names and not k.startswith("GUNICORN")}
    env.update(extra)
    return env


def python(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """This Python with `args`, in the checkout, its output captured (two minutes at most)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return python("manage.py", *args, env=env)


def worker_start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A real `manage.py worker` process (sweeping every 0.2 s), its output appended to
    `log`."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--interval", "0.2"],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def worker_stop(process: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM, as an operator stops a worker, then waits for it to exit."""
    process.send_signal(signal.SIGTERM)
    worker_stopped(process, log)


def worker_stopped(process: subprocess.Popen[bytes], log: Path) -> None:
    """Waits for the worker to exit. One that does not has its threads' stacks written
    to its log (faulthandler, on SIGABRT, with PYTHONFAULTHANDLER=1), and the test fails
    with them."""
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=10)
        raise AssertionError("the worker did not stop:\n" + log.read_text()[-6000:]) from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A worker process for the block, stopped (SIGTERM) after it."""
    process = worker_start(env, log)
    try:
        yield process
    finally:
        worker_stop(process, log)


def run_example(name: str, base_url: str, api_key: str) -> subprocess.CompletedProcess[str]:
    """One of examples/ against a live server of the project "acme"."""
    options = ["--base-url", base_url, "--api-key", api_key, "--project", "acme"]
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@contextmanager
def uvicorn_thread(app: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn on a free loopback port, in a thread of this process
    (so it sees the test database); yields its base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], what: str, seconds: float = 15) -> None:
    """Polls `condition` every 50 ms until it is true; fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def probe_client(timeout: float = 1) -> httpx.Client:
    """A client for polling a loopback server until it answers: one for the whole wait
    (`httpx.get` makes a client a call, and a client loads the system's certificate
    authorities, about 27 ms of CPU, which a poll every 50 ms takes from the starting
    server on a two-core machine), without certificates to load (plain HTTP)."""
    return httpx.Client(timeout=timeout, verify=False, trust_env=False)


def wait_until_up(url: str, process: subprocess.Popen[Any], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    with probe_client() as probe:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise AssertionError(f"server exited with {process.returncode}")
            try:
                probe.get(url)
                return
            except httpx.TransportError:
                time.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {seconds} s")


@contextmanager
def gunicorn(env: dict[str, str], *, workers: int = 1, threads: int = 2) -> Iterator[str]:
    """gunicorn with gunicorn.conf.py and `env` on a free loopback port; yields its base
    URL, stops it gracefully on exit. Its log goes to this process's standard error."""
    port = free_port()
    env = {
        **env,
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": str(workers),
        "GUNICORN_THREADS": str(threads),
    }
    process = subprocess.Popen(
        [GUNICORN, "--config", "gunicorn.conf.py"], cwd=ROOT, env=env, text=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base + "/healthz", process)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# A TCP proxy on loopback that a test can cut and restore: a real database outage for
# one server, without touching the database server others use.


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._server: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        """Listens again on the same port."""
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        """Stops listening (new connections are refused) and breaks every open connection."""
        assert self._server is not None
        self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._server = None
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            self._close(sock)

    def close(self) -> None:
        if self._server is not None:
            self.cut()

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                self._close(client)
                continue
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            self._close(source)
            self._close(sink)


# A provider of the tests' own: a real server on 127.0.0.1 that records what it was sent.

RECORDED_RECALL = {"text": "Internal.", "sources": [{"id": "fact:1"}]}


class RecordingProvider(LoopbackServer):
    """Answers every POST with a good recall and remembers what it was sent."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.seen: list[dict[str, str]] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class _RecordingHandler(BaseHTTPRequestHandler):
    server: RecordingProvider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.seen.append(dict(self.headers))
        body = json.dumps(RECORDED_RECALL).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve[S: ThreadingHTTPServer](server: S) -> Iterator[S]:
    """Runs a test server for the duration of a fixture."""
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# A held http provider: answers each recall only once the test releases it, so a test
# proves what happens while calls are open.

HELD_WAIT = 30.0


class HeldProvider(LoopbackServer):
    """Answers each recall with its operationId once `release` is set."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *, release_after: int | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _HeldHandler)
        self.bodies: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        self.open_calls = 0
        self.most_open = 0
        self.release = threading.Event()
        self.arrival = threading.Event()
        # Release every held call once this many have arrived.
        self.release_after = release_after
        self.status = 200

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def wait_for(self, count: int, timeout: float = HELD_WAIT) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.bodies) >= count, timeout=timeout)


class _HeldHandler(BaseHTTPRequestHandler):
    server: HeldProvider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        with server.arrived:
            server.bodies.append(body)
            server.open_calls += 1
            server.most_open = max(server.most_open, server.open_calls)
            server.arrival.set()
            if server.release_after is not None and len(server.bodies) >= server.release_after:
                server.release.set()
            server.arrived.notify_all()
        server.release.wait(2 * HELD_WAIT)
        with server.arrived:
            server.open_calls -= 1
        payload = json.dumps({"text": body["operationId"], "sources": []}).encode()
        try:
            self.send_response(server.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller gave up at its deadline

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def held_provider(**kwargs: Any) -> Iterator[HeldProvider]:
    """A HeldProvider served on loopback; every held call is released on exit."""
    server = HeldProvider(**kwargs)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


# A scripted provider: a real server on 127.0.0.1 speaking the http provider
# protocol, whose tool and status answers a test lines up in advance.


Answer = tuple[int, Any] | None | str


class ScriptedProvider(LoopbackServer):
    """Recall answers `recall` (a script of one); each tool call and each status request
    takes the next answer of its script (the last one repeats). An answer is (HTTP status,
    JSON body), None to hang up without answering, or "hold" to wait for `release` first
    and then answer the next one."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ScriptedHandler)
        self.recall: list[Answer] = [(200, {"text": "", "sources": []})]
        self.tool: list[Answer] = [(200, {"result": {"status": "stored"}})]
        self.status: list[Answer] = [(200, {"result": {"status": "stored"}})]
        self.seen: list[dict[str, Any]] = []
        # Headers sent with every answer (e.g. Retry-After), when set.
        self.headers: dict[str, str] = {}
        self.release = threading.Event()
        # Held requests whose connection the host closed before the answer.
        self.abandoned = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def requests(self, operation: str) -> list[dict[str, Any]]:
        return [body for body in self.seen if body.get("operation") == operation]

    def declaration(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "ledger",
            "description": "Facts kept by the scripted provider.",
            "provider": {
                "kind": "http",
                "connection": {
                    "id": "scripted",
                    "origin": self.origin,
                    "methods": ["POST"],
                    "pathPrefix": "/memory",
                },
                "path": "/memory",
                "tools": tools,
            },
        }


class _ScriptedHandler(BaseHTTPRequestHandler):
    server: ScriptedProvider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self.server.seen.append(body)
        scripts = {"recall": self.server.recall, "tool": self.server.tool}
        script = scripts.get(body["operation"], self.server.status)
        answer = script.pop(0) if len(script) > 1 else script[0]
        if answer == "hold":
            if not self._hold():
                return
            answer = script.pop(0) if len(script) > 1 else script[0]
        if answer is None or answer == "hold":
            self.close_connection = True
            return
        assert isinstance(answer, tuple), answer
        status, payload = answer
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in self.server.headers.items():
            self.send_header(name, value)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def _hold(self) -> bool:
        """Waits for `release`; False (counted in `abandoned`) when the host closes the
        connection first."""
        while not self.server.release.wait(0.05):
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                self.server.abandoned += 1
                self.close_connection = True
                return False
        return True

    def log_message(self, format: str, *args: Any) -> None:
        pass


def scripted_session(
    api: Any, project: Project, scripted: ScriptedProvider, tools: list[Any]
) -> str:
    """Deploys agent "scribe" with the scripted provider as resource "ledger" (with `tools`)
    and starts a session bound read-write to its namespace "team"; the session id."""
    deployment_create(
        project=project,
        agent="scribe",
        memory=[scripted.declaration(tools)],
        promote="development",
        actor="t",
    )
    binding = {"scope": "namespace", "id": "team", "access": "read-write"}
    body = {"agentId": "scribe@development", "memory": {"ledger": binding}}
    response = api.post(
        "/api/managed-agents/sessions",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="scribe-1",
    )
    assert response.status_code == 201, response.json()
    return str(response.json()["session"]["id"])


def suite_database_url() -> str:
    """The URL of the suite's test database (PostgreSQL's test_<name>[_gwN], or the test
    process's SQLite file), for servers and workers started as subprocesses to see the
    test's committed rows."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite://{db['NAME']}"
    password = f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    host, port = db["HOST"] or "127.0.0.1", db["PORT"] or "5432"
    return f"postgres://{quote(db['USER'] or '')}{password}@{host}:{port}/{quote(db['NAME'])}"


# External providers (tests/fake_providers.py): a resource declared against a fake server.


def deploy_external(
    project: Project,
    provider: dict[str, Any],
    *,
    resource_id: str = "mem",
    secrets_by_origin: dict[str, dict[str, str]] | None = None,
) -> Resource:
    """Deploys agent "archivist" with one external resource in development, after setting
    the secrets its declaration names (bound to the origins given)."""
    for origin, values in (secrets_by_origin or {}).items():
        for name, value in values.items():
            secret_set(
                project=project,
                environment="development",
                name=name,
                value=value,
                origins=[origin],
                actor="t",
            )
    declaration = {"id": resource_id, "description": "External memory.", "provider": provider}
    deployment_create(
        project=project, agent="archivist", memory=[declaration], promote="development", actor="t"
    )
    return resource_get(project=project, environment="development", resource_id=resource_id)


def external_provider(kind: str) -> ExternalProvider:
    """The registered external provider kind `kind`."""
    provider = provider_for(kind)
    assert isinstance(provider, ExternalProvider), kind
    return provider


def external_session(project: Project, namespace: str, *, resource_id: str = "mem") -> Session:
    session, _ = session_create(
        project=project,
        agent_id="archivist@development",
        memory={resource_id: {"scope": "namespace", "id": namespace, "access": "read-write"}},
        labels={},
        idempotency_key=f"external-{namespace}",
        actor="test",
    )
    return session


# A webhook receiver: a real server on 127.0.0.1 (tests/test_webhooks.py).


class Receiver(LoopbackServer):
    """Records every POST (headers, body) and answers with the next status of
    `statuses` (the last one repeats)."""

    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _ReceiverHandler)
        self.statuses = [200]
        # A Retry-After header for answers that are not 2xx, when set.
        self.retry_after: str | None = None
        # The body of every answer, and headers it comes with.
        self.reply_body = b""
        self.reply_headers: dict[str, str] = {}
        self.received: list[tuple[dict[str, str], bytes, int]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks?team=ops"

    def events(self, *, status: int | None = 200) -> list[dict[str, Any]]:
        return [
            json.loads(body)
            for _, body, answered in self.received
            if status is None or answered == status
        ]


class _ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            statuses = self.server.statuses
            status = statuses.pop(0) if len(statuses) > 1 else statuses[0]
            self.server.received.append(({**self.headers, "path": self.path}, body, status))
        self.send_response(status)
        if self.server.retry_after is not None and not 200 <= status <= 299:
            self.send_header("Retry-After", self.server.retry_after)
        for name, value in self.server.reply_headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(self.server.reply_body)))
        self.end_headers()
        self.wfile.write(self.server.reply_body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


# What the database keeps of a text (tests/test_redaction.py, tests/test_erasures.py).


def _holds(cell: object, needle: str) -> bool:
    if isinstance(cell, bytes):  # FTS5 keeps its index in blobs
        return needle.lower().encode() in cell.lower()
    return isinstance(cell, str) and needle.lower() in cell.lower()


def raw_rows_with(needle: str) -> list[str]:
    """Every table of the database, read raw, every column (on SQLite the full-text
    index's own shadow tables too, their blobs included; on PostgreSQL every table of
    the schema, each row as text): the tables where `needle` occurs, ignoring case."""
    found = []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            for (table,) in cursor.fetchall():
                cursor.execute(f'SELECT * FROM "{table}"')
                if any(_holds(cell, needle) for row in cursor.fetchall() for cell in row):
                    found.append(table)
        else:
            cursor.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
            )
            for (table,) in cursor.fetchall():
                cursor.execute(
                    f'SELECT t::text FROM "{table}" t WHERE t::text ILIKE %s', [f"%{needle}%"]
                )
                found += [table for _ in cursor.fetchall()]
    return sorted(set(found))


def erase_now(project: Project, text: str) -> Any:
    """An erasure of `text` in the project's development environment, applied at once
    (the service, not a door): its Erasure row."""
    from memoryadmin.erasures.services import erasure_run

    outcome = erasure_run(
        project=project,
        environment="development",
        match={"text": text},
        reason="ASI06 incident",
        dry_run=False,
        actor="t",
    )
    assert outcome.erasure is not None
    return outcome.erasure


# Retention of provider operations (tests/test_erasures.py, tests/test_incidents.py).


def unnamed_dead_letter(resource: Resource, namespace: str) -> str:
    """A dead letter of `resource` that no receipt or report names: its id."""
    from memoryadmin.agents.models import OperationAction, OperationKind
    from memoryadmin.agents.services.operations import operation_dead_letter

    return operation_dead_letter(
        resource=resource,
        namespace=namespace,
        principal="t",
        kind=OperationKind.ERASURE_DELETE,
        action=OperationAction.DELETE,
        record_id="xm_unnamed",
        error="down",
    ).id


def discarded_long_ago(operation_ids: Sequence[str], *, days: int = 31) -> dict[str, int]:
    """The dead letters discarded (settled) `days` ago, past the 30 days operations are
    kept: their jobs by id."""
    from datetime import timedelta

    from django.utils import timezone

    from memoryadmin.agents.models import ProviderOperation
    from memoryadmin.agents.services.operations import operation_discard

    for operation in ProviderOperation.objects.filter(pk__in=operation_ids):
        assert operation_discard(operation=operation, actor="t").state == "discarded"
    at = timezone.now() - timedelta(days=days)
    aged = ProviderOperation.objects.filter(pk__in=operation_ids)
    assert aged.update(created_at=at, updated_at=at) == len(set(operation_ids))
    return dict(aged.values_list("id", "job_id"))


class SlowNames:
    """Names under `.slow.test` answer 127.0.0.1; once `hang` is set, only after they are
    released (or thirty seconds), but for those `spared`. Counts the lookups in flight, and
    those started per name."""

    def __init__(self) -> None:
        self.hang = False
        self.spared: set[str] = set()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight = 0
        self.started: dict[str, int] = {}


@contextmanager
def slow_lookups(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowNames]:
    """Steers the C library's lookups of names under `.slow.test` (see SlowNames); every
    other name resolves as usual. Hanging lookups are released on the way out."""
    names = SlowNames()
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if not isinstance(name, str) or not name.endswith(".slow.test"):
            return real(host, port, *args, **kwargs)
        with names.lock:
            names.in_flight += 1
            names.started[name] = names.started.get(name, 0) + 1
        try:
            if names.hang and name not in names.spared:
                names.release.wait(30)
        finally:
            with names.lock:
                names.in_flight -= 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", int(port or 0)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        yield names
    finally:
        names.release.set()


def rows_reader(
    querysets: dict[str, Any],
) -> Callable[[], dict[str, list[tuple[Any, ...]]]]:
    """A reader of each query's rows as the database returns them, by name, its SQL
    compiled once: a test that reads every table after each of hundreds of requests
    spent half its time compiling the same queries again."""
    compiled = [
        (name, queryset.db, *queryset.query.get_compiler(queryset.db).as_sql())
        for name, queryset in querysets.items()
    ]

    def read() -> dict[str, list[tuple[Any, ...]]]:
        rows = {}
        for name, alias, sql, params in compiled:
            with connections[alias].cursor() as cursor:
                cursor.execute(sql, params)
                rows[name] = cursor.fetchall()
        return rows

    return read


def url_routes(resolver: Any = None, prefix: str = "") -> list[tuple[str, Any, tuple[Any, ...]]]:
    """Every URL pattern of the site (or of `resolver`): its whole route, the pattern, and
    the namespaces of the resolvers it sits under (None for one without)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    found: list[tuple[str, Any, tuple[Any, ...]]] = []
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            for inner, leaf, spaces in url_routes(pattern, route):
                found.append((inner, leaf, (pattern.namespace, *spaces)))
        elif isinstance(pattern, URLPattern):
            found.append((route, pattern, ()))
    return found


def lock_waiter_seen(
    thread: threading.Thread | None = None, *, looks: int = 6000, waiters: int = 1
) -> bool:
    """True once `waiters` other PostgreSQL connections wait on a lock; False when `thread`
    ended first or after `looks` looks, 10 ms apart. Usable inside a transaction: each look
    clears the snapshot of the statistics, which a transaction otherwise reads once."""
    query = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock' "
        "AND pid <> pg_backend_pid()"
    )
    with connection.cursor() as cursor:
        for _ in range(looks):
            if thread is not None and not thread.is_alive():
                return False
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(query)
            if cursor.fetchone()[0] >= waiters:
                return True
            if thread is not None:
                thread.join(timeout=0.01)
            else:
                time.sleep(0.01)
    return False
