"""The reference provider, served by a live server, driven by the host client and by raw HTTP."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from memoryadmin.core.partitions import partition_key
from memoryadmin.demo.project import demo_manifest, demo_setup
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.representations import iso_ms
from memoryadmin.providers.client import ProviderFailure, provider_recall, provider_tool
from memoryadmin.providers.services.secrets import secret_resolve, secret_set
from memoryadmin.refprovider.declaration import (
    ENDPOINT,
    TOKEN_SECRET_NAME,
    reference_token,
)
from memoryadmin.refprovider.models import Fact, Operation, Partition
from tests.helpers import deploy_reference_provider

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = partition_key(
    project_id="acme", environment="development", resource_id="facts", namespace="owner"
)
OTHER = partition_key(
    project_id="acme", environment="development", resource_id="facts", namespace="other"
)


@pytest.fixture
def facts(live_server: Any, project: Project) -> Resource:
    return deploy_reference_provider(project, live_server.url, max_bytes=120)


def recall(resource: Resource, text: str | None = None, partition: str = OWNER) -> Any:
    return provider_recall(
        resource=resource,
        partition=partition,
        access="read-write",
        operation_id="mrq_1:facts",
        input_text=text,
    )


def call(
    resource: Resource,
    tool: str,
    arguments: dict[str, Any],
    *,
    cursor: str | None = None,
    operation_id: str = "toolcall_1:facts",
    partition: str = OWNER,
) -> Any:
    return provider_tool(
        resource=resource,
        tool=tool,
        partition=partition,
        access="read-write",
        operation_id=operation_id,
        arguments=arguments,
        cursor=cursor,
    )


def remember(resource: Resource, fact: str, n: int, **kwargs: Any) -> Any:
    return call(resource, "remember", {"fact": fact}, operation_id=f"tc_{n}:facts", **kwargs)


# Through the host client.


def test_an_empty_partition_recalls_empty_memory(facts: Resource) -> None:
    outcome = recall(facts, "anything")
    assert (outcome.text, outcome.sources, outcome.cursor) == ("", [], "v0")
    assert not Partition.objects.exists()


def test_remembered_fact_is_recalled_with_its_source(facts: Resource) -> None:
    stored = remember(facts, "Use the free hosting tier for the demo.", 1)
    assert stored.kind == "result"
    assert stored.payload["status"] == "stored"
    fact = Fact.objects.get()
    assert stored.payload["id"] == f"fact:{fact.pk}"
    assert fact.partition.key == OWNER
    outcome = recall(facts, "Which hosting tier?")
    assert outcome.text == "- Use the free hosting tier for the demo."
    assert outcome.sources == [
        {
            "id": f"fact:{fact.pk}",
            "title": "Use the free hosting tier for the demo.",
            "updatedAt": iso_ms(fact.created_at),
        }
    ]
    assert outcome.cursor == "v1"


def test_recall_puts_relevant_facts_first_within_max_bytes(facts: Resource) -> None:
    remember(facts, "Hosting: the free tier of the cloud provider.", 1)
    remember(facts, "The customer prefers email over phone calls.", 2)
    remember(facts, "Invoices go out on the first working day.", 3)
    outcome = recall(facts, "What hosting do we use?")
    lines = outcome.text.split("\n")
    assert lines[0] == "- Hosting: the free tier of the cloud provider."
    assert len(outcome.text.encode()) <= 120
    # Whole facts only: the three lines do not fit 120 bytes, so one is left out.
    assert len(lines) == len(outcome.sources) == 2
    assert all(line.startswith("- ") for line in lines)


def _stored(texts: list[str]) -> list[Fact]:
    """Facts of the owner's partition, newest last, as remember stores them."""
    partition, _ = Partition.objects.get_or_create(key=OWNER)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return Fact.objects.bulk_create(
        Fact(partition=partition, text=text, created_at=start + timedelta(seconds=n))
        for n, text in enumerate(texts)
    )


def test_a_recall_keeps_within_64_kib_whatever_its_text_escapes_to(
    live_server: Any, project: Project
) -> None:
    # Text within maxBytes may take six bytes of JSON a byte (a control character) and
    # sources add their titles: the whole response must still be at most 64 KiB (spec 000),
    # or the host refuses it and every recall of the partition fails.
    facts = deploy_reference_provider(project, live_server.url, max_bytes=16_384)
    _stored([f"{n:03d} " + "記" * 56 for n in range(100)] + ["\x01" * 2_000] * 8)
    outcome = recall(facts)
    raw = {k: v for k, v in _body().items() if k not in ("tool", "arguments")}
    recall_body = {**raw, "operation": "recall", "input": {"text": None}, "maxBytes": 16_384}
    response = post(live_server, recall_body)
    assert response.status_code == 200
    # Full, yet within the limit: facts are left out only where they would not fit.
    assert 60 * 1024 < len(response.content) <= 64 * 1024
    assert response.json()["text"] == outcome.text
    shown = outcome.text.split("\n")
    assert len(shown) == len(outcome.sources)
    assert len(outcome.text.encode()) <= 16_384
    # The newest first: as many of the eight escaped facts as fit, then shorter ones.
    assert shown[:5] == ["- " + "\x01" * 2_000] * 5
    assert shown[5].startswith("- 099 ")


def test_a_search_answer_keeps_within_64_kib(live_server: Any, project: Project) -> None:
    facts = deploy_reference_provider(project, live_server.url)
    stored = _stored(["記 refunds " + "記" * 1_990] * 20)
    found = call(facts, "search", {"query": "refunds", "limit": 20})
    assert found.kind == "result", found.payload
    ids = [fact["id"] for fact in found.payload["facts"]]
    # Newest first, as many whole facts as 64 KiB holds.
    assert 5 <= len(ids) < 20
    assert ids == [f"fact:{fact.pk}" for fact in reversed(stored)][: len(ids)]
    raw = post(live_server, _body(tool="search", arguments={"query": "refunds", "limit": 20}))
    assert raw.status_code == 200
    assert len(raw.content) <= 64 * 1024


def test_stale_cursor_is_a_conflict_that_reaches_the_model(facts: Resource) -> None:
    cursor = recall(facts).cursor
    assert remember(facts, "First.", 1, cursor=cursor).kind == "result"
    second = remember(facts, "Second.", 2, cursor=cursor)
    assert second.kind == "error"
    assert second.http_status == 409
    assert second.payload["error"]["code"] == "conflict"
    assert list(Fact.objects.values_list("text", flat=True)) == ["First."]
    assert recall(facts).cursor == "v1"


def test_retry_of_an_idempotent_write_replays_the_original_result(facts: Resource) -> None:
    first = remember(facts, "Only once.", 7)
    again = remember(facts, "Only once.", 7)
    assert again.payload == first.payload
    assert Fact.objects.count() == 1
    assert Operation.objects.get().operation_id == "tc_7:facts"
    changed = remember(facts, "Something else.", 7)
    assert changed.kind == "error"
    assert changed.http_status == 409
    assert changed.payload["error"]["code"] == "idempotency_conflict"
    assert Fact.objects.count() == 1


def test_search_and_forget(facts: Resource) -> None:
    fact_id = remember(facts, "Refunds take five days.", 1).payload["id"]
    remember(facts, "Shipping is free.", 2)
    found = call(facts, "search", {"query": "refunds"})
    assert [f["id"] for f in found.payload["facts"]] == [fact_id]
    forgotten = call(facts, "forget", {"id": fact_id}, operation_id="tc_3:facts")
    assert forgotten.payload == {"status": "forgotten", "id": fact_id}
    assert "Refunds" not in recall(facts).text
    again = call(facts, "forget", {"id": fact_id}, operation_id="tc_4:facts")
    assert (again.kind, again.http_status) == ("error", 404)
    assert again.payload["error"]["code"] == "not_found"


def test_partitions_are_isolated(facts: Resource) -> None:
    fact_id = remember(facts, "Owner secret plan.", 1).payload["id"]
    assert recall(facts, "plan", partition=OTHER).text == ""
    assert call(facts, "search", {"query": "plan"}, partition=OTHER).payload == {"facts": []}
    stolen = call(facts, "forget", {"id": fact_id}, operation_id="tc_2:facts", partition=OTHER)
    assert stolen.http_status == 404
    assert Fact.objects.filter(pk=int(fact_id.split(":")[1])).exists()


def test_wrong_token_blocks_the_recall(facts: Resource, project: Project) -> None:
    secret_set(
        project=project,
        environment="development",
        name=TOKEN_SECRET_NAME,
        value="nope",
        origins=[facts.config["connection"]["origin"]],
        server_level=True,
        actor="t",
    )
    with pytest.raises(ProviderFailure) as raised:
        recall(facts)
    assert (raised.value.reason, raised.value.http_status, raised.value.attempts) == (
        "http_error",
        401,
        1,
    )


# The endpoint itself, over raw HTTP.


def _body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "operation": "tool",
        "operationId": "raw_1:facts",
        "partition": OWNER,
        "access": "read-write",
        # Far enough ahead for bodies built when the tests are collected.
        "deadlineAt": iso_ms(datetime.now(UTC) + timedelta(hours=1)),
        "tool": "remember",
        "arguments": {"fact": "Raw fact."},
    }
    body.update(overrides)
    return body


def post(live_server: Any, body: Any, **headers: str) -> httpx.Response:
    headers.setdefault("Authorization", f"Bearer {reference_token()}")
    headers.setdefault("Content-Type", "application/json")
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(live_server.url + ENDPOINT, content=content, headers=headers)


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (_body(deadlineAt="2020-01-01T00:00:00.000Z"), {}, 400, "deadline_expired"),
        (_body(access="read"), {}, 403, "forbidden"),
        (_body(arguments={"fact": "x", "partition": OTHER}), {}, 400, "invalid_arguments"),
        (_body(tool="drop_all"), {}, 404, "unknown_tool"),
        (_body(version=2), {}, 400, "invalid_request"),
        (_body(extra=1), {}, 400, "invalid_request"),
        (_body(), {"Authorization": "Bearer wrong"}, 401, "unauthorized"),
        (_body(), {"Authorization": ""}, 401, "unauthorized"),
        (_body(), {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        (b"{", {}, 400, "invalid_request"),
        (b" " * (64 * 1024 + 1), {}, 413, "too_large"),
    ],
)
def test_refused_requests_store_nothing(
    live_server: Any, body: Any, headers: dict[str, str], status: int, code: str
) -> None:
    response = post(live_server, body, **headers)
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert not Fact.objects.exists()
    assert not Operation.objects.exists()


def test_get_is_405(live_server: Any) -> None:
    response = httpx.get(live_server.url + ENDPOINT)
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_replay_ends_with_the_deadline(live_server: Any) -> None:
    first = post(live_server, _body())
    assert first.status_code == 200
    # The window of the first request closed: the same operationId with a
    # new deadline is a new write.
    Operation.objects.update(deadline_at=datetime.now(UTC) - timedelta(seconds=1))
    second = post(live_server, _body())
    assert second.status_code == 200
    assert second.json() != first.json()
    assert Fact.objects.count() == 2
    assert Operation.objects.count() == 1


@pytest.mark.postgres
def test_concurrent_retries_of_one_operation_write_once(live_server: Any) -> None:
    barrier = threading.Barrier(4)
    responses: list[httpx.Response] = []
    body = _body(operationId="raced:facts")

    def send() -> None:
        barrier.wait()
        responses.append(post(live_server, body))

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in responses] == [200] * 4
    assert all(r.json() == responses[0].json() for r in responses)
    assert Fact.objects.count() == 1
    assert Partition.objects.get().version == 1


# The demo.


def test_demo_declares_the_reference_provider_with_its_token(settings: Any, tmp_path: Any) -> None:
    settings.VAR_DIR = tmp_path
    result = demo_setup()
    assert any(name.startswith("secret") for name in result.created)
    facts = Resource.objects.get(project_id="demo", environment="development", resource_id="facts")
    assert facts.kind == "http"
    assert facts.config["connection"]["origin"] == "http://127.0.0.1:8000"
    assert facts.config["path"] == ENDPOINT
    assert [t["name"] for t in facts.config["tools"]] == ["remember", "search", "forget"]
    for environment in ("development", "production"):
        token = secret_resolve(project_id="demo", environment=environment, name=TOKEN_SECRET_NAME)
        assert token == reference_token()
    assert any(d["id"] == "facts" for d in demo_manifest()["memory"])
    assert not any(name.startswith("secret") for name in demo_setup().created)
