"""What test modules share that is not a fixture: constants, small builders and checks.

Fixtures live in conftest.py; test modules import from here, never from
conftest.py or from each other.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from memoryadmin.agents.models import Session
from memoryadmin.agents.services.sessions import session_create
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.documents import document_patch
from memoryadmin.providers.services.secrets import secret_set
from memoryadmin.refprovider.declaration import (
    TOKEN_SECRET_NAME,
    reference_declaration,
    reference_token,
)

MANIFEST_MEMORY = [
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
    return document_patch(
        resource=document.resource,
        doc_id=document.doc_id,
        expected_revision=document.revision,
        agent_writes=False,
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
    options = {} if max_bytes is None else {"max_bytes": max_bytes}
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


def fragment_of(response: Any) -> str:
    """An htmx fragment's HTML: 200 and no page around it."""
    html = html_of(response)
    assert "<html" not in html
    return html


# The browser tests.

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# The marks of every browser test module (its `pytestmark`).
BROWSER_TESTS = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]


def shoot(page: Any, name: str, *, full_page: bool = False) -> None:
    """Saves a screenshot of the page for docs/memory-page.md."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


# A provider of the tests' own: a real server on 127.0.0.1 that records what it was sent.

RECORDED_RECALL = {"text": "Internal.", "sources": [{"id": "fact:1"}]}


class RecordingProvider(ThreadingHTTPServer):
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


def serve(server: RecordingProvider) -> Iterator[RecordingProvider]:
    """Runs a test server for the duration of a fixture."""
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
