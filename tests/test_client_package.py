"""The installable client (clients/python): installed into a fresh virtual environment
and run against a live server, its async variant, and its retries of 429 and 503."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings

from memoryadmin.agents.models import Session
from memoryadmin.agents.topics import topic_session_key
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin_client import ApiError, AsyncClient, Client, retry_delay
from memoryadmin_client import topic_session_key as client_topic_session_key

ROOT = Path(__file__).resolve().parent.parent

# Run by the fresh environment's Python: the client alone, no Django, no repository.
SCRIPT = """
import importlib.util, sys
assert importlib.util.find_spec("django") is None, "django is importable"
from memoryadmin_client import Client
base_url, key = sys.argv[1:3]
with Client(base_url, key, project="acme") as client:
    started = client.start_session_on_document(
        agent="support-bot", resource="notes", document_id="installed",
        document={"title": "Installed"}, idempotency_key="installed/1",
    )
    session_id = started["session"]["session"]["id"]
    recall = client.recall(session_id, use=["notes"])
    result = client.tool_call(
        session_id, recall_id=recall["recallId"], name="memory_save",
        arguments={"text": "From a fresh venv."},
    )
    print(result["status"], [t["name"] for t in recall["tools"]])
"""


@pytest.fixture
def api_key(project: Project) -> str:
    return api_key_create(project_id=project.id)[1]


class Counting(httpx.HTTPTransport):
    """The real HTTP transport, remembering the status of every response."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


def test_topic_keys_are_derived_alike_by_client_and_server() -> None:
    for key in ("topic/workshop/1", "k" * 248):
        assert client_topic_session_key(key) == topic_session_key(key)
    for bad in ("", "k" * 249, "clé", "tab\there"):
        for derive in (client_topic_session_key, topic_session_key):
            with pytest.raises(ValueError, match="1-248 printable ASCII"):
                derive(bad)


@pytest.mark.django_db(transaction=True)
def test_installs_into_a_fresh_venv_and_runs_against_a_live_server(
    live_server: Any, api_key: str, notes: Resource, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(ROOT / "clients" / "python")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PIP_NO_CACHE_DIR": "1"},
    )
    assert installed.returncode == 0, installed.stderr
    ran = subprocess.run(
        [str(python), "-c", SCRIPT, live_server.url, api_key],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "saved ['memory_save']"
    document = Document.objects.get(resource=notes, doc_id="installed")
    assert document.text == "From a fresh venv."
    assert Session.objects.get().idempotency_key == "installed/1:session"


@pytest.mark.django_db(transaction=True)
def test_async_client_drives_a_session(live_server: Any, api_key: str, notes: Resource) -> None:
    async def run() -> tuple[Any, ...]:
        async with AsyncClient(live_server.url, api_key, project="acme") as client:
            started = await client.start_session_on_document(
                agent="support-bot",
                resource="notes",
                document_id="workshop",
                document={"title": "Workshop", "text": "v1"},
                idempotency_key="async/1",
            )
            session_id = started["session"]["session"]["id"]
            recall = await client.recall(session_id, use=["notes"])
            saved = await client.tool_call(
                session_id,
                recall_id=recall["recallId"],
                name="memory_save",
                arguments={"text": "v2"},
            )
            again = await client.tool_call(
                session_id,
                recall_id=recall["recallId"],
                name="memory_save",
                arguments={"text": "v3"},
            )
            with pytest.raises(ApiError) as bad:
                await client.tool_call(
                    session_id, recall_id=recall["recallId"], name="memory_save", arguments={}
                )
            document = await client.get_document("notes", "workshop")
            replaced = await client.replace_document(
                "notes", "workshop", revision=document, text="by the owner"
            )
            await client.end_session(session_id)
            events = [e["type"] async for e in client.iter_session_events(session_id)]
            return saved, again, bad.value, document, replaced, events

    saved, again, bad, document, replaced, events = asyncio.run(run())
    assert saved["status"] == "saved"
    assert again["status"] == "conflict"
    assert again["text"] == "v2"
    assert (bad.status, bad.code) == (400, "invalid_tool_arguments")
    assert document["revision"] == saved["revision"]
    assert replaced["text"] == "by the owner"
    assert events == ["session.created", "memory.saved", "session.ended"]
    assert Document.objects.get(resource=notes, doc_id="workshop").text == "by the owner"


@pytest.mark.django_db(transaction=True)
@override_settings(MEMORYADMIN_API_RATE="2/second")
def test_429_is_retried_after_retry_after(live_server: Any, api_key: str, notes: Resource) -> None:
    transport = Counting()
    with Client(live_server.url, api_key, project="acme", transport=transport) as client:
        ids = [client.create_document("notes", f"d{i}", title="T")["id"] for i in range(5)]
    assert ids == [f"d{i}" for i in range(5)]
    assert 429 in transport.statuses
    assert transport.statuses.count(201) == 5
    assert Document.objects.filter(resource=notes).count() == 5
    with Client(live_server.url, api_key, project="acme", retries=0) as client:
        statuses = [fetched(client, f"d{i}") for i in range(5)]
    assert 429 in statuses


def fetched(client: Client, doc_id: str) -> int:
    try:
        client.get_document("notes", doc_id)
    except ApiError as exc:
        return exc.status
    return 200


def test_503_with_a_retry_after_date_is_retried() -> None:
    answers = [
        httpx.Response(503, headers={"Retry-After": formatdate(time.time() + 1, usegmt=True)}),
        httpx.Response(200, json={"sessions": [], "nextCursor": None}),
    ]
    seen: list[float] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        return answers.pop(0)

    transport = httpx.MockTransport(answer)
    with Client("http://memory.test", "k", project="p", transport=transport) as client:
        assert client.list_sessions() == {"sessions": [], "nextCursor": None}
    assert len(seen) == 2


def test_retry_after_as_a_date() -> None:
    later = formatdate(time.time() + 5, usegmt=True)
    delay = retry_delay(httpx.Response(503, headers={"Retry-After": later}), 0, max_wait=30)
    assert delay is not None
    assert 3 < delay <= 5


@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (429, "3", 3.0),
        (503, "0", 0.0),
        (429, "", 0.25),
        (429, "soon", 0.25),
        # Only ASCII digits are seconds: not superscripts, Arabic-Indic or fullwidth digits.
        (429, "\u00b9", 0.25),
        (429, "\u0663", 0.25),
        (429, "\uff11", 0.25),
        (429, "9" * 5000, None),  # longer than max_wait
        (429, "120", None),  # longer than max_wait: give up now
        (404, "3", None),
        (500, "", None),
    ],
)
def test_retry_delay(status: int, header: str, expected: float | None) -> None:
    # As a server sends it: the header's bytes (UTF-8 for digits beyond ASCII).
    response = httpx.Response(status, headers=[(b"Retry-After", header.encode())] if header else [])
    assert retry_delay(response, 0, max_wait=30) == expected
