"""Fake servers of the external memory providers, written from their published APIs.

Each is a real HTTP server on 127.0.0.1 (https with a test certificate where
the provider is only reached over TLS) that speaks the provider's paths,
bodies, status codes, pagination and asynchronous behaviour, keeps its
records in memory, and records every request it was sent:

- `FakeMem0Oss`: the self-hosted Mem0 REST server (mem0ai/mem0 server/main.py).
- `FakeMem0Platform`: api.mem0.ai v3 add/search/list and v1 memory routes, with
  queued adds reported through `GET /v1/event/{event_id}/` and direct imports
  (`infer: false`) answered SUCCEEDED with their memories at once.
- `FakeVertexMemoryBank`: aiplatform v1beta1 reasoningEngines memories with
  long-running operations, and the OAuth token endpoint of a service account.
- `FakeHindsight`: the Hindsight HTTP API 0.8 (banks, retain, recall, list,
  documents), with asynchronous retains tracked at `GET .../operations/{operation_id}`
  and, as with `HINDSIGHT_API_RETAIN_BATCH_ENABLED=true`, synchronous ones refused.

Faults are injected the way a real misbehaving server shows them:
`fail_next` answers the next requests with given statuses, `stall` holds
requests to a path until released, `change` rewrites the answers of a route (an answer
its API does not allow), `answer` answers a route as something in front of the server
would (a proxy's HTML 404), with a `Raw` body where it is not JSON.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import json
import re
import select
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.loopback import LoopbackServer

Handler = Callable[["Call"], tuple[int, Any]]


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def overlap(query: str, text: str) -> float:
    asked = words(query)
    return len(asked & words(text)) / len(asked) if asked else 0.0


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    match: re.Match[str] | None = None
    # True once the client closed its connection (while a stall holds the request).
    gone: Callable[[], bool] = lambda: False

    def group(self, name: str) -> str:
        """A parameter of the route, percent-decoded, as the real servers' routers hand
        it to their handlers; routes match the path as sent (`path`), one segment each."""
        assert self.match is not None
        return unquote(self.match.group(name))


@dataclass(frozen=True)
class Raw:
    """An answer's body as it is sent (an HTML page, nothing at all), not JSON."""

    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"


@dataclass
class Stall:
    pattern: str
    # Only requests of this method are held (any, when None).
    method: str | None = None
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    # Held requests whose client closed the connection before the release.
    abandoned: int = 0


class FakeServer(LoopbackServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.calls: list[Call] = []
        self.fail_next: list[int] = []
        # Headers sent with every answer (e.g. Retry-After), when set.
        self.headers: dict[str, str] = {}
        self.stalls: list[Stall] = []
        # (method, path pattern, edit): answers of matching requests, as `edit` returns them.
        self.changes: list[tuple[str, str, Callable[[Any], Any]]] = []
        self.lock = threading.RLock()
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def origin(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method, re.compile(pattern), handler))

    def stall(self, pattern: str, method: str | None = None) -> Stall:
        stall = Stall(pattern, method)
        self.stalls.append(stall)
        return stall

    def change(self, method: str, pattern: str, edit: Callable[[Any], Any]) -> None:
        """Answers to `method` on paths matching `pattern` are what `edit` makes of the
        answer the server would give."""
        self.changes.append((method, pattern, edit))

    def answer(self, method: str, pattern: str, status: int, payload: Any) -> None:
        """Requests of `method` to paths matching `pattern` are answered `status` and
        `payload`, before any route of the server sees them."""
        self.routes.insert(0, (method, re.compile(pattern), lambda call: (status, payload)))

    def authorized(self, call: Call) -> bool:
        return True

    def unauthorized(self) -> tuple[int, Any]:
        return 401, {"detail": "Authentication required."}

    def not_found(self, call: Call) -> tuple[int, Any]:
        return 404, {"detail": "Not Found"}

    def dispatch(self, call: Call) -> tuple[int, Any]:
        for stall in self.stalls:
            if re.fullmatch(stall.pattern, call.path) and stall.method in {None, call.method}:
                stall.arrived.set()
                deadline = time.monotonic() + 30
                while not stall.release.wait(0.05) and time.monotonic() < deadline:
                    if call.gone():
                        stall.abandoned += 1
                        return 499, {"detail": "the client went away"}
        with self.lock:
            if self.fail_next:
                return self.fail_next.pop(0), {"detail": "injected failure"}
        if not self.authorized(call):
            return self.unauthorized()
        for method, pattern, handler in self.routes:
            match = pattern.fullmatch(call.path)
            if match and method == call.method:
                call.match = match
                with self.lock:
                    status, payload = handler(call)
                    for changed, where, edit in self.changes:
                        if changed == call.method and re.fullmatch(where, call.path):
                            payload = edit(payload)
                    return status, payload
        return self.not_found(call)

    def seen(self, method: str, pattern: str) -> list[Call]:
        return [c for c in self.calls if c.method == method and re.fullmatch(pattern, c.path)]


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        call = Call(self.command, parts.path, query, dict(self.headers), body, gone=self._gone)
        self.server.calls.append(call)
        status, payload = self.server.dispatch(call)
        if isinstance(payload, Raw):
            data, content_type = payload.body, payload.content_type
        else:
            data, content_type = json.dumps(payload).encode(), "application/json"
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in self.server.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away (a cancelled attempt)

    def _gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except ValueError:
            return False  # a TLS socket cannot peek: never seen going away
        except OSError:
            return True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def running[S: FakeServer](server: S) -> Iterator[S]:
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        for stall in server.stalls:
            stall.release.set()
        server.shutdown()
        server.server_close()


# TLS for the providers reached over https only: one self-signed certificate for 127.0.0.1.


def test_certificate(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake provider")])
    start = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "provider.pem", folder / "provider.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


# Mem0 OSS (server/main.py): unprefixed routes, FastAPI errors {"detail": ...}.

ENTITY_KEYS = ("user_id", "agent_id", "run_id")


class FakeMem0Oss(FakeServer):
    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key
        self.memories: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.route("POST", r"/memories", self.add)
        self.route("GET", r"/memories", self.get_all)
        self.route("GET", r"/memories/(?P<id>[^/]+)", self.get)
        self.route("PUT", r"/memories/(?P<id>[^/]+)", self.update)
        self.route("DELETE", r"/memories/(?P<id>[^/]+)", self.delete)
        self.route("GET", r"/memories/(?P<id>[^/]+)/history", self.get_history)
        self.route("POST", r"/search", self.search)

    def authorized(self, call: Call) -> bool:
        return self.api_key is None or call.headers.get("X-API-Key") == self.api_key

    def _log(self, memory_id: str, event: str, old: str | None, new: str | None) -> None:
        self.history.setdefault(memory_id, []).append(
            {
                "id": str(uuid.uuid4()),
                "memory_id": memory_id,
                "old_memory": old,
                "new_memory": new,
                "event": event,
                "created_at": now(),
                "updated_at": None,
                "is_deleted": event == "DELETE",
                "actor_id": None,
                "role": None,
            }
        )

    def seed(self, text: str, memory_id: str | None = None, **entities: str) -> str:
        """A memory of `entities`; `memory_id` is the id the server gives it (a uuid)."""
        memory_id = memory_id or str(uuid.uuid4())
        self.memories[memory_id] = {
            "id": memory_id,
            "memory": text,
            "hash": hashlib.md5(text.encode()).hexdigest(),
            "metadata": None,
            "created_at": now(),
            "updated_at": None,
            **entities,
        }
        self._log(memory_id, "ADD", None, text)
        return memory_id

    def add(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        entities = {k: body[k] for k in ENTITY_KEYS if body.get(k)}
        if not entities:
            return 400, {
                "detail": "At least one identifier (user_id, agent_id, run_id) is required."
            }
        results = []
        for message in body.get("messages", []):
            memory_id = self.seed(message["content"], **entities)
            results.append({"id": memory_id, "memory": message["content"], "event": "ADD"})
        return 200, {"results": results}

    def _matching(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            m
            for m in self.memories.values()
            if all(m.get(k) == v for k, v in filters.items() if k in ENTITY_KEYS)
        ]

    def get_all(self, call: Call) -> tuple[int, Any]:
        filters = {k: call.query[k] for k in ENTITY_KEYS if call.query.get(k)}
        if not filters:
            return 403, {"detail": "Admin role required to list all memories."}
        top_k = int(call.query.get("top_k", "100"))
        found = self._matching(filters)
        return 200, {"results": found[:top_k]}

    def get(self, call: Call) -> tuple[int, Any]:
        return 200, self.memories.get(call.group("id"))

    def search(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        filters = body.get("filters") or {}
        if not any(filters.get(k) for k in ENTITY_KEYS):
            return 400, {
                "detail": "At least one of 'user_id', 'agent_id', or 'run_id' must be provided."
            }
        scored = [
            {**m, "score": overlap(body["query"], m["memory"])} for m in self._matching(filters)
        ]
        scored = [m for m in scored if m["score"] > 0]
        scored.sort(key=lambda m: -m["score"])
        return 200, {"results": scored[: int(body.get("top_k") or 20)]}

    def update(self, call: Call) -> tuple[int, Any]:
        memory = self.memories.get(call.group("id"))
        if memory is None:
            return 404, {
                "detail": f"Memory with id {call.group('id')} not found. "
                "Please provide a valid 'memory_id'"
            }
        old = memory["memory"]
        memory.update(memory=call.body["text"], updated_at=now())
        self._log(memory["id"], "UPDATE", old, memory["memory"])
        return 200, {"message": "Memory updated successfully!"}

    def delete(self, call: Call) -> tuple[int, Any]:
        memory = self.memories.pop(call.group("id"), None)
        if memory is None:
            return 404, {"detail": f"Memory with id {call.group('id')} not found"}
        self._log(memory["id"], "DELETE", memory["memory"], None)
        return 200, {"message": "Memory deleted successfully"}

    def get_history(self, call: Call) -> tuple[int, Any]:
        return 200, self.history.get(call.group("id"), [])


# Hindsight 0.8 (hindsight_api/api/http.py at v0.8.0): banks, retain, recall, list, documents,
# operations (engine/memory_engine.py: submit_async_retain, get_operation_status).


class FakeHindsight(FakeServer):
    BANK = r"/v1/default/banks/(?P<bank>[^/]+)"

    def __init__(self, *, token: str | None = None, polls_to_finish: int = 2) -> None:
        super().__init__()
        self.token = token
        # HINDSIGHT_API_RETAIN_BATCH_ENABLED=true: a synchronous retain is refused (400).
        self.batch_retain = False
        # Seconds a synchronous retain takes to extract its facts before it answers.
        self.extraction_seconds = 0.0
        # Asynchronous retains: pending until read `polls_to_finish` times, then completed
        # (their facts retained) or, with `fail_operations`, failed.
        self.polls_to_finish = polls_to_finish
        self.fail_operations = False
        # bank -> {"units": {id: unit}, "documents": {id: document}}
        self.banks: dict[str, dict[str, dict[str, Any]]] = {}
        # operation id -> the async_operations row of a batch_retain parent
        self.operations: dict[str, dict[str, Any]] = {}
        self.route("POST", self.BANK + r"/memories", self.retain)
        self.route("GET", self.BANK + r"/operations/(?P<op>[^/]+)", self.operation)
        self.route("POST", self.BANK + r"/memories/recall", self.recall)
        self.route("GET", self.BANK + r"/memories/list", self.list_units)
        self.route("GET", self.BANK + r"/memories/(?P<id>[^/]+)", self.get_unit)
        self.route("GET", self.BANK + r"/memories/(?P<id>[^/]+)/history", self.history)
        self.route("DELETE", self.BANK + r"/documents/(?P<doc>.+)", self.delete_document)
        self.route("GET", r"/v1/default/banks", self.list_banks)

    def authorized(self, call: Call) -> bool:
        return self.token is None or call.headers.get("Authorization") == f"Bearer {self.token}"

    def bank(self, name: str) -> dict[str, dict[str, Any]]:
        return self.banks.setdefault(name, {"units": {}, "documents": {}})

    def units(self, bank: str) -> list[dict[str, Any]]:
        return list(self.bank(bank)["units"].values())

    def seed(self, bank: str, content: str, document_id: str | None = None) -> list[str]:
        """Retains `content` as a document: one fact per sentence, as extraction would."""
        store = self.bank(bank)
        document_id = document_id or f"doc-{uuid.uuid4().hex[:8]}"
        for unit_id in [
            u["id"] for u in store["units"].values() if u["document_id"] == document_id
        ]:
            del store["units"][unit_id]  # retain with a known document_id is an upsert
        store["documents"][document_id] = {"id": document_id, "original_text": content}
        made = []
        for sentence in [s.strip() for s in re.split(r"(?<=[.!?])\s+", content) if s.strip()]:
            unit_id = str(uuid.uuid4())
            store["units"][unit_id] = {
                "id": unit_id,
                "text": sentence,
                "context": "",
                "date": now(),
                "fact_type": "world",
                "mentioned_at": now(),
                "document_id": document_id,
                "tags": [],
            }
            made.append(unit_id)
        return made

    def dispatch(self, call: Call) -> tuple[int, Any]:
        body = call.body if isinstance(call.body, dict) else {}
        retain = call.method == "POST" and re.fullmatch(self.BANK + r"/memories", call.path)
        if self.extraction_seconds and retain and not body.get("async"):
            # A synchronous retain answers once extraction is done (outside the lock).
            time.sleep(self.extraction_seconds)
        return super().dispatch(call)

    def retain(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        items = body.get("items")
        if not isinstance(items, list):
            return 422, {"detail": [{"loc": ["body", "items"], "msg": "Field required"}]}
        bank = call.group("bank")
        if body.get("async"):
            # submit_async_retain: a batch_retain parent row, pending until its child
            # sub-batch is done; the answer names the parent.
            operation_id = str(uuid.uuid4())
            self.operations[operation_id] = {
                "operation_id": operation_id,
                "bank_id": bank,
                "child_id": str(uuid.uuid4()),
                "status": "pending",
                "items": items,
                "polls": 0,
                "created_at": now(),
                "updated_at": now(),
                "completed_at": None,
                "error_message": None,
            }
            return 200, {
                "success": True,
                "bank_id": bank,
                "items_count": len(items),
                "async": True,
                "operation_id": operation_id,
                "operation_ids": None,
                "usage": None,
            }
        if self.batch_retain:
            return 400, {
                "detail": "Batch API is enabled (HINDSIGHT_API_RETAIN_BATCH_ENABLED=true) but "
                "async=false. Batch operations can take several minutes to hours and will "
                "timeout in synchronous mode. Please set async=true in your request to use "
                "background processing, or disable batch API by setting "
                "HINDSIGHT_API_RETAIN_BATCH_ENABLED=false in your environment."
            }
        for item in items:
            self.seed(bank, item["content"], item.get("document_id"))
        return 200, {
            "success": True,
            "bank_id": bank,
            "items_count": len(items),
            "async": False,
            "operation_id": None,
            "operation_ids": None,
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
        }

    def operation(self, call: Call) -> tuple[int, Any]:
        """`api_get_operation_status`: an unknown operation (or another bank's) is 200
        `not_found`, a malformed id 400."""
        operation_id = call.group("op")
        try:
            uuid.UUID(operation_id)
        except ValueError:
            return 400, {"detail": f"Invalid operation_id format: {operation_id}"}
        row = self.operations.get(operation_id)
        if row is None or row["bank_id"] != call.group("bank"):
            return 200, {
                "operation_id": operation_id,
                "status": "not_found",
                "operation_type": None,
                "created_at": None,
                "updated_at": None,
                "completed_at": None,
                "error_message": None,
            }
        row["polls"] += 1
        if row["status"] == "pending" and row["polls"] >= self.polls_to_finish:
            row["updated_at"] = now()
            if self.fail_operations:
                row["status"] = "failed"
                row["error_message"] = (
                    "Extraction failed: model unavailable\n\nTraceback:\n"
                    'Traceback (most recent call last):\n  File "memory_engine.py", ...'
                )
            else:
                for item in row["items"]:
                    self.seed(row["bank_id"], item["content"], item.get("document_id"))
                row["status"] = "completed"
                row["completed_at"] = now()
        child_status = {"pending": "processing"}.get(row["status"], row["status"])
        return 200, {
            "operation_id": operation_id,
            "status": row["status"],
            "operation_type": "batch_retain",
            "created_at": row["created_at"],
            "updated_at": row["updated_at"],
            "completed_at": row["completed_at"],
            "error_message": row["error_message"],
            "retry_count": 0,
            "next_retry_at": None,
            "progress": None,
            "result_metadata": {
                "items_count": len(row["items"]),
                "is_parent": True,
                "num_sub_batches": 1,
            },
            "child_operations": [
                {
                    "operation_id": row["child_id"],
                    "status": child_status,
                    "sub_batch_index": 1,
                    "items_count": len(row["items"]),
                    "error_message": row["error_message"],
                }
            ],
            "task_payload": None,
        }

    def recall(self, call: Call) -> tuple[int, Any]:
        query = (call.body or {}).get("query", "")
        if not words(query):
            return 422, {"detail": "query must contain at least one word character"}
        scored = [(overlap(query, u["text"]), u) for u in self.units(call.group("bank"))]
        results = [
            {
                "id": u["id"],
                "text": u["text"],
                "type": u["fact_type"],
                "mentioned_at": u["mentioned_at"],
                "document_id": u["document_id"],
            }
            for score, u in sorted(scored, key=lambda pair: -pair[0])
            if score > 0
        ]
        return 200, {"results": results}

    def list_units(self, call: Call) -> tuple[int, Any]:
        limit, offset = int(call.query.get("limit", "100")), int(call.query.get("offset", "0"))
        units = sorted(
            self.units(call.group("bank")), key=lambda u: u["mentioned_at"], reverse=True
        )
        items = [
            {k: v for k, v in u.items() if k != "document_id"}
            for u in units[offset : offset + limit]
        ]
        return 200, {"items": items, "total": len(units), "limit": limit, "offset": offset}

    def get_unit(self, call: Call) -> tuple[int, Any]:
        unit = self.bank(call.group("bank"))["units"].get(call.group("id"))
        if unit is None:
            return 404, {"detail": f"Memory unit '{call.group('id')}' not found"}
        return 200, {**{k: v for k, v in unit.items() if k != "fact_type"}, "type": "world"}

    def history(self, call: Call) -> tuple[int, Any]:
        if call.group("id") not in self.bank(call.group("bank"))["units"]:
            return 404, {"detail": f"Memory unit '{call.group('id')}' not found"}
        return 200, []

    def delete_document(self, call: Call) -> tuple[int, Any]:
        store = self.bank(call.group("bank"))
        document_id = call.group("doc")
        if store["documents"].pop(document_id, None) is None:
            return 404, {"detail": "Document not found"}
        gone = [u for u, unit in store["units"].items() if unit["document_id"] == document_id]
        for unit_id in gone:
            del store["units"][unit_id]
        return 200, {
            "success": True,
            "message": f"Document '{document_id}' and {len(gone)} associated memory units "
            "deleted successfully",
            "document_id": document_id,
            "memory_units_deleted": len(gone),
        }

    def list_banks(self, call: Call) -> tuple[int, Any]:
        return 200, {"banks": [{"bank_id": name} for name in self.banks]}


# Mem0 Platform (docs/openapi.json, api-reference): v3 add/search/list, v1 memories, events.

PLATFORM_ENTITIES = ("user_id", "agent_id", "app_id", "run_id")


def platform_filter_match(filters: dict[str, Any], memory: dict[str, Any]) -> bool:
    if "AND" in filters:
        return all(platform_filter_match(part, memory) for part in filters["AND"])
    answer = {"run_id": "session_id"}
    return all(memory.get(answer.get(k, k)) == v for k, v in filters.items())


class FakeMem0Platform(FakeServer):
    def __init__(self, *, api_key: str, tls: ssl.SSLContext, polls_to_finish: int = 2) -> None:
        super().__init__(tls=tls)
        self.api_key = api_key
        self.polls_to_finish = polls_to_finish
        self.fail_events = False
        # A direct import (`infer: false`) is stored during the request and answered
        # SUCCEEDED with its memories; with `queued_imports` it is queued like an inferred
        # add (PENDING, finished through its event), as a platform that queues every add.
        self.queued_imports = False
        self.memories: dict[str, dict[str, Any]] = {}
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.route("POST", r"/v3/memories/add/", self.add)
        self.route("GET", r"/v1/event/(?P<id>[^/]+)/", self.event)
        self.route("POST", r"/v3/memories/search/", self.search)
        self.route("POST", r"/v3/memories/", self.list_memories)
        self.route("GET", r"/v1/memories/(?P<id>[^/]+)/", self.get)
        self.route("PUT", r"/v1/memories/(?P<id>[^/]+)/", self.update)
        self.route("DELETE", r"/v1/memories/(?P<id>[^/]+)/", self.delete)
        self.route("GET", r"/v1/memories/(?P<id>[^/]+)/history/", self.get_history)

    def authorized(self, call: Call) -> bool:
        return call.headers.get("Authorization") == f"Token {self.api_key}"

    def unauthorized(self) -> tuple[int, Any]:
        return 401, {"detail": "Invalid token."}

    def not_found(self, call: Call) -> tuple[int, Any]:
        return 404, {"error": "Not found."}

    def seed(self, text: str, memory_id: str | None = None, **entities: str) -> str:
        """A memory of `entities`; `memory_id` is the id the server gives it (a uuid)."""
        memory_id = memory_id or str(uuid.uuid4())
        self.memories[memory_id] = {
            "id": memory_id,
            "memory": text,
            "user_id": entities.get("user_id"),
            "agent_id": entities.get("agent_id"),
            "app_id": entities.get("app_id"),
            "session_id": entities.get("run_id"),
            "metadata": {},
            "categories": [],
            "created_at": now(),
            "updated_at": now(),
            "expiration_date": None,
        }
        self.history[memory_id] = [
            {
                "id": str(uuid.uuid4()),
                "memory_id": memory_id,
                "old_memory": None,
                "new_memory": text,
                "event": "ADD",
                "created_at": now(),
                "updated_at": now(),
            }
        ]
        return memory_id

    def add(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        entities = {k: body[k] for k in PLATFORM_ENTITIES if body.get(k)}
        if not entities or not isinstance(body.get("messages"), list):
            return 400, {
                "error": "400 Bad Request",
                "details": {"message": "Invalid input data."},
            }
        event_id = str(uuid.uuid4())
        event = self.events[event_id] = {
            "id": event_id,
            "event_type": "ADD",
            "status": "PENDING",
            "payload": body,
            "results": [],
            "polls": 0,
            "error": None,
            "created_at": now(),
        }
        if body.get("infer", True) is False and not self.queued_imports:
            # Direct import (docs/platform/features/direct-import.mdx): every user and
            # assistant message stored verbatim at once, system messages dropped.
            self._finish(event)
            return 200, {
                "message": "Memories stored successfully",
                "status": event["status"],
                "event_id": event_id,
                "results": event["results"],
            }
        return 200, {"event_id": event_id, "status": "PENDING"}

    def event(self, call: Call) -> tuple[int, Any]:
        event = self.events.get(call.group("id"))
        if event is None:
            return 404, {"error": "Event not found or you don't have permission to access it."}
        event["polls"] += 1
        if event["status"] in {"PENDING", "RUNNING"}:
            if event["polls"] >= self.polls_to_finish:
                self._finish(event)
            else:
                event["status"] = "RUNNING"
        return 200, {k: v for k, v in event.items() if k != "polls"}

    def _finish(self, event: dict[str, Any]) -> None:
        if self.fail_events:
            event.update(status="FAILED", error="Extraction failed: model unavailable")
            return
        payload = event["payload"]
        entities = {k: payload[k] for k in PLATFORM_ENTITIES if payload.get(k)}
        for message in payload["messages"]:
            if message.get("role") == "system":
                continue
            memory_id = self.seed(message["content"], **entities)
            event["results"].append(
                {"id": memory_id, "data": {"memory": message["content"]}, "event": "ADD"}
            )
        event.update(status="SUCCEEDED", completed_at=now())

    def _filtered(self, body: Any) -> tuple[list[dict[str, Any]], tuple[int, Any] | None]:
        body = body or {}
        if any(k in body for k in PLATFORM_ENTITIES):
            return [], (
                400,
                {"error": "Top-level entity parameters are not supported; use filters."},
            )
        filters = body.get("filters")
        if not isinstance(filters, dict) or not filters:
            return [], (400, {"error": "filters with at least one entity id are required."})
        return [m for m in self.memories.values() if platform_filter_match(filters, m)], None

    def search(self, call: Call) -> tuple[int, Any]:
        found, error = self._filtered(call.body)
        if error:
            return error
        query = call.body["query"]
        scored = [{**m, "score": overlap(query, m["memory"])} for m in found]
        scored = [m for m in scored if m["score"] >= 0.1]
        scored.sort(key=lambda m: -m["score"])
        return 200, {"results": scored[: int(call.body.get("top_k", 10))]}

    def list_memories(self, call: Call) -> tuple[int, Any]:
        found, error = self._filtered(call.body)
        if error:
            return error
        page, size = int(call.query.get("page", "1")), int(call.query.get("page_size", "100"))
        chunk = found[(page - 1) * size : page * size]
        more = page * size < len(found)
        base = f"{self.origin}/v3/memories/?page_size={size}&page="
        return 200, {
            "count": len(found),
            "next": f"{base}{page + 1}" if more else None,
            "previous": f"{base}{page - 1}" if page > 1 else None,
            "results": chunk,
        }

    def get(self, call: Call) -> tuple[int, Any]:
        memory = self.memories.get(call.group("id"))
        return (200, memory) if memory else (404, {"error": "Memory not found!"})

    def update(self, call: Call) -> tuple[int, Any]:
        memory = self.memories.get(call.group("id"))
        if memory is None:
            return 404, {"error": "Memory not found!"}
        old = memory["memory"]
        memory.update(memory=call.body["text"], updated_at=now())
        self.history[memory["id"]].append(
            {
                "id": str(uuid.uuid4()),
                "memory_id": memory["id"],
                "old_memory": old,
                "new_memory": memory["memory"],
                "event": "UPDATE",
                "created_at": now(),
                "updated_at": now(),
            }
        )
        return 200, memory

    def delete(self, call: Call) -> tuple[int, Any]:
        if self.memories.pop(call.group("id"), None) is None:
            return 404, {"error": "Memory not found!"}
        return 200, {"message": "Memory deleted successfully!"}

    def get_history(self, call: Call) -> tuple[int, Any]:
        if call.group("id") not in self.history:
            return 404, {"error": "Memory not found!"}
        return 200, self.history[call.group("id")]


# Vertex AI Agent Engine Memory Bank (aiplatform v1beta1 reasoningEngines.memories) and the
# OAuth token endpoint a service account key names.


def google_error(code: int, status: str, message: str) -> tuple[int, Any]:
    return code, {"error": {"code": code, "message": message, "status": status}}


def service_account(token_uri: str) -> tuple[dict[str, str], Any]:
    """A service account key file (as a dict) and its public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    account = {
        "type": "service_account",
        "project_id": "acme-prod",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": "memoryadmin@acme-prod.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    }
    return account, key.public_key()


AIPLATFORM = "type.googleapis.com/google.cloud.aiplatform.v1beta1."


class FakeVertexMemoryBank(FakeServer):
    PARENT = "projects/acme-prod/locations/us-central1/reasoningEngines/4242"

    def __init__(self, *, tls: ssl.SSLContext, polls_to_finish: int = 2) -> None:
        super().__init__(tls=tls)
        self.polls_to_finish = polls_to_finish
        self.fail_operations = False
        self.account, self.public_key = service_account(f"{self.origin}/token")
        self.tokens: set[str] = set()
        # The access token the next grants hand out, when set (a token endpoint's mistake).
        self.issue: Any = None
        self.memories: dict[str, dict[str, Any]] = {}
        self.revisions: dict[str, list[dict[str, Any]]] = {}
        self.operations: dict[str, dict[str, Any]] = {}
        root = "/v1beta1/" + self.PARENT
        memory = root + r"/memories/(?P<id>[A-Za-z0-9_-]+)"
        self.route("POST", r"/token", self.token)
        self.route("POST", root + r"/memories", self.create)
        self.route("POST", root + r"/memories:generate", self.generate)
        self.route("POST", root + r"/memories:retrieve", self.retrieve)
        self.route("GET", memory, self.get)
        self.route("PATCH", memory, self.patch)
        self.route("DELETE", memory, self.delete)
        self.route("GET", memory + r"/revisions", self.list_revisions)
        self.route(
            "GET", r"/v1beta1/(?P<op>" + self.PARENT + r"/.*operations/[^/]+)", self.operation
        )

    def account_json(self) -> str:
        return json.dumps(self.account, separators=(",", ":"))

    def authorized(self, call: Call) -> bool:
        if call.path == "/token":
            return True
        auth = call.headers.get("Authorization", "")
        return auth.startswith("Bearer ") and auth[7:] in self.tokens

    def unauthorized(self) -> tuple[int, Any]:
        return google_error(
            401, "UNAUTHENTICATED", "Request had invalid authentication credentials."
        )

    def not_found(self, call: Call) -> tuple[int, Any]:
        # Google's front end answers a path no API serves with its HTML page.
        return 404, Raw(
            b"<!DOCTYPE html>\n<html lang=en><meta charset=utf-8><title>Error 404 (Not "
            b"Found)!!1</title><p><b>404.</b> <ins>That\xe2\x80\x99s an error.</ins><p>The "
            b"requested URL <code>" + call.path.encode() + b"</code> was not found on this "
            b"server. <ins>That\xe2\x80\x99s all we know.</ins>"
        )

    def token(self, call: Call) -> tuple[int, Any]:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        form = {k: v[-1] for k, v in parse_qs(call.body.decode()).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return 400, {"error": "unsupported_grant_type"}
        head, claims, signature = form["assertion"].split(".")
        pad = lambda part: part + "=" * (-len(part) % 4)  # noqa: E731
        try:
            self.public_key.verify(
                base64.urlsafe_b64decode(pad(signature)),
                f"{head}.{claims}".encode(),
                padding.PKCS1v15(),
                hashes.SHA256(),
            )
        except InvalidSignature:
            return 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}
        decoded = json.loads(base64.urlsafe_b64decode(pad(claims)))
        if (
            decoded["iss"] != self.account["client_email"]
            or decoded["aud"] != self.account["token_uri"]
        ):
            return 400, {"error": "invalid_grant"}
        if self.issue is not None:
            return 200, {"access_token": self.issue, "expires_in": 3599, "token_type": "Bearer"}
        token = "ya29." + uuid.uuid4().hex
        self.tokens.add(token)
        return 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"}

    # Long-running operations: done after `polls_to_finish` reads, or failed.

    def _start(self, name: str, apply: Callable[[], Any]) -> dict[str, Any]:
        operation = {"name": name, "polls": 0, "apply": apply, "done": False}
        self.operations[name] = operation
        return {
            "name": name,
            "metadata": {
                "@type": AIPLATFORM + "GenericOperationMetadata",
                "createTime": now(),
            },
        }

    def operation(self, call: Call) -> tuple[int, Any]:
        operation = self.operations.get(call.group("op"))
        if operation is None:
            return google_error(404, "NOT_FOUND", "Operation not found.")
        operation["polls"] += 1
        if not operation["done"] and operation["polls"] >= self.polls_to_finish:
            operation["done"] = True
            if self.fail_operations:
                operation["error"] = {"code": 9, "message": "Memory Bank is not configured."}
            else:
                operation["response"] = operation["apply"]()
        answer = {"name": operation["name"], "done": operation["done"]}
        for key in ("error", "response"):
            if key in operation:
                answer[key] = operation[key]
        return 200, answer

    def _new_memory(self, fact: str, scope: dict[str, str]) -> dict[str, Any]:
        memory_id = str(uuid.uuid4().int)[:19]
        memory = {
            "name": f"{self.PARENT}/memories/{memory_id}",
            "fact": fact,
            "scope": scope,
            "createTime": now(),
            "updateTime": now(),
        }
        self.memories[memory_id] = memory
        self.revisions[memory_id] = [{"fact": fact, "createTime": now()}]
        return memory

    def seed(self, fact: str, scope: dict[str, str]) -> str:
        return memory_id_tail(self._new_memory(fact, scope)["name"])

    def create(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        if not body.get("fact") or not isinstance(body.get("scope"), dict):
            return google_error(400, "INVALID_ARGUMENT", "fact and scope are required.")
        reserved = str(uuid.uuid4().int)[:19]
        name = f"{self.PARENT}/memories/{reserved}/operations/{uuid.uuid4().int % 10**19}"

        def apply() -> Any:
            memory = self._new_memory(body["fact"], body["scope"])
            return {"@type": AIPLATFORM + "Memory", **memory}

        return 200, self._start(name, apply)

    def generate(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        events = (body.get("directContentsSource") or {}).get("events")
        if not events or not isinstance(body.get("scope"), dict):
            return google_error(400, "INVALID_ARGUMENT", "a source and scope are required.")
        name = f"{self.PARENT}/operations/{uuid.uuid4().int % 10**19}"

        def apply() -> Any:
            generated = []
            for event in events:
                for part in event["content"]["parts"]:
                    memory = self._new_memory(part["text"], body["scope"])
                    generated.append({"memory": {"name": memory["name"]}, "action": "CREATED"})
            return {"generatedMemories": generated}

        return 200, self._start(name, apply)

    def retrieve(self, call: Call) -> tuple[int, Any]:
        body = call.body or {}
        scope = body.get("scope")
        if not isinstance(scope, dict) or not scope:
            return google_error(400, "INVALID_ARGUMENT", "scope is required.")
        mine = [m for m in self.memories.values() if m["scope"] == scope]
        similarity = body.get("similaritySearchParams")
        if similarity:
            query = similarity["searchQuery"]
            ranked = sorted(mine, key=lambda m: -overlap(query, m["fact"]))
            hits = [m for m in ranked if overlap(query, m["fact"]) > 0][: similarity.get("topK", 3)]
            return 200, {
                "retrievedMemories": [
                    {"memory": m, "distance": 1 - overlap(query, m["fact"])} for m in hits
                ]
            }
        simple = body.get("simpleRetrievalParams") or {}
        size = int(simple.get("pageSize", 3))
        start = int(simple.get("pageToken") or 0)
        chunk = mine[start : start + size]
        answer: dict[str, Any] = {"retrievedMemories": [{"memory": m} for m in chunk]}
        if start + size < len(mine):
            answer["nextPageToken"] = str(start + size)
        return 200, answer

    def _memory(self, call: Call) -> dict[str, Any] | None:
        return self.memories.get(call.group("id"))

    def get(self, call: Call) -> tuple[int, Any]:
        memory = self._memory(call)
        if memory is None:
            return google_error(404, "NOT_FOUND", "Memory not found.")
        return 200, memory

    def patch(self, call: Call) -> tuple[int, Any]:
        memory = self._memory(call)
        if memory is None:
            return google_error(404, "NOT_FOUND", "Memory not found.")
        if call.query.get("updateMask") != "fact":
            return google_error(400, "INVALID_ARGUMENT", "updateMask must name fact.")
        fact = call.body["fact"]
        name = f"{memory['name']}/operations/{uuid.uuid4().int % 10**19}"

        def apply() -> Any:
            memory.update(fact=fact, updateTime=now())
            self.revisions[call.group("id")].append({"fact": fact, "createTime": now()})
            return memory

        return 200, self._start(name, apply)

    def delete(self, call: Call) -> tuple[int, Any]:
        memory = self._memory(call)
        if memory is None:
            return google_error(404, "NOT_FOUND", "Memory not found.")
        name = f"{memory['name']}/operations/{uuid.uuid4().int % 10**19}"

        def apply() -> Any:
            self.memories.pop(call.group("id"), None)
            return {"@type": "type.googleapis.com/google.protobuf.Empty"}

        return 200, self._start(name, apply)

    def list_revisions(self, call: Call) -> tuple[int, Any]:
        revisions = self.revisions.get(call.group("id"))
        if revisions is None:
            return google_error(404, "NOT_FOUND", "Memory not found.")
        base = f"{self.PARENT}/memories/{call.group('id')}/revisions"
        return 200, {
            "memoryRevisions": [
                {"name": f"{base}/{i + 1}", **revision} for i, revision in enumerate(revisions)
            ]
        }


def memory_id_tail(name: str) -> str:
    return name.rsplit("/", 1)[1]
