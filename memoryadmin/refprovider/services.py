"""The reference provider: the endpoint side of the HTTP memory provider protocol.

Every operation is scoped to the request's partition; arguments can never
name another one. Writes take the partition's row lock, so the cursor check,
the write, the version bump and the operation record commit together.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from memoryadmin.core.errors import error_envelope
from memoryadmin.core.inputs import InvalidInput, parse_instant
from memoryadmin.core.jsonbody import BODY_MAX_BYTES
from memoryadmin.memory.limits import MAX_BYTES_MAX, MAX_BYTES_MIN, utf8_len
from memoryadmin.memory.representations import iso_ms
from memoryadmin.refprovider.declaration import REFERENCE_TOOLS
from memoryadmin.refprovider.models import Fact, Operation, Partition

SOURCES_MAX = 100
SCAN_MAX = 2000
SEARCH_LIMIT_DEFAULT = 5
TITLE_FROM_TEXT = 60
FACT_ID_RE = re.compile(r"fact:([1-9][0-9]{0,18})")
PARTITION_RE = re.compile(r"[A-Za-z0-9_-]{1,256}")
WORD_RE = re.compile(r"\w+")
# Words too common to say which fact a question is about.
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from",
    "how", "in", "is", "it", "of", "on", "or", "the", "this", "to", "was", "we", "what",
    "when", "where", "which", "who", "why", "will", "with", "you",
})
# fmt: on
COMMON_FIELDS = {"version", "operation", "operationId", "partition", "access", "deadlineAt"}
RECALL_FIELDS = COMMON_FIELDS | {"input", "maxBytes"}
TOOL_FIELDS = COMMON_FIELDS | {"tool", "arguments", "cursor"}
TOOLS = {tool["name"]: tool for tool in REFERENCE_TOOLS}
Payload = dict[str, Any]


class ProtocolError(Exception):
    """Answered with the protocol's error envelope."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def envelope(self) -> Payload:
        return error_envelope(self.code, self.message)


def _invalid(message: str) -> ProtocolError:
    return ProtocolError(400, "invalid_request", message)


@dataclass(frozen=True)
class Call:
    operation: str
    operation_id: str
    partition: str
    access: str
    deadline_at: datetime
    body: Payload


def _deadline(value: object, now: datetime) -> datetime:
    try:
        deadline = parse_instant(value, field="deadlineAt", zone_required=True)
    except InvalidInput as exc:
        raise _invalid(exc.message) from exc
    if deadline <= now:
        raise ProtocolError(400, "deadline_expired", "deadlineAt has passed; nothing was done.")
    return deadline


def call_parse(body: object, *, now: datetime) -> Call:
    if not isinstance(body, dict):
        raise _invalid("The body must be a JSON object.")
    if body.get("version") != 1:
        raise _invalid("version must be 1.")
    operation = body.get("operation")
    if operation not in {"recall", "tool"}:
        raise _invalid("operation must be 'recall' or 'tool'.")
    unknown = set(body) - (RECALL_FIELDS if operation == "recall" else TOOL_FIELDS)
    if unknown:
        raise _invalid(f"Unknown fields: {', '.join(sorted(unknown))}.")
    operation_id = body.get("operationId")
    if not isinstance(operation_id, str) or not 1 <= len(operation_id) <= 1024:
        raise _invalid("operationId must be a string of 1-1024 characters.")
    partition = body.get("partition")
    if not isinstance(partition, str) or not PARTITION_RE.fullmatch(partition):
        raise _invalid("partition must be 1-256 letters, digits, '-' or '_'.")
    access = body.get("access")
    if access not in {"read", "read-write"}:
        raise _invalid("access must be 'read' or 'read-write'.")
    deadline_at = _deadline(body.get("deadlineAt"), now)
    return Call(str(operation), operation_id, partition, str(access), deadline_at, body)


# Ranking.


def _words(text: str) -> set[str]:
    return {w for w in WORD_RE.findall(text.lower()) if w not in STOPWORDS}


def _ranked(partition: Partition | None, query: str | None) -> list[tuple[int, Fact]]:
    """(score, fact), most relevant first, then newest; score = shared words."""
    if partition is None:
        return []
    facts = list(partition.facts.order_by("-created_at", "-id")[:SCAN_MAX])
    wanted = _words(query or "")
    scored = [(len(wanted & _words(f"{f.title} {f.text}")), f) for f in facts]
    # sorted() is stable, so equal scores keep the newest-first order.
    return sorted(scored, key=lambda pair: -pair[0])


def _fact_title(fact: Fact) -> str:
    if fact.title:
        return fact.title
    line = " ".join(fact.text.split())
    return line if len(line) <= TITLE_FROM_TEXT else line[: TITLE_FROM_TEXT - 1] + "…"


def _cursor(partition: Partition | None) -> str:
    return f"v{partition.version if partition else 0}"


def answer_bytes(payload: object) -> bytes:
    """A body as the endpoint sends it (UTF-8 JSON), and as its size is counted."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _size(value: object) -> int:
    return len(answer_bytes(value))


# Recall.


def recall(call: Call) -> Payload:
    """The partition's most relevant facts for input.text, whole facts only, within maxBytes."""
    raw_input = call.body.get("input")
    if not isinstance(raw_input, dict) or set(raw_input) - {"text"}:
        raise _invalid("input must be an object with a text field.")
    text = raw_input.get("text")
    if text is not None and not isinstance(text, str):
        raise _invalid("input.text must be a string or null.")
    max_bytes = call.body.get("maxBytes")
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise _invalid("maxBytes must be an integer.")
    if not MAX_BYTES_MIN <= max_bytes <= MAX_BYTES_MAX:
        raise _invalid(f"maxBytes must be from {MAX_BYTES_MIN} to {MAX_BYTES_MAX}.")
    partition = Partition.objects.filter(key=call.partition).first()
    cursor = _cursor(partition)
    lines: list[str] = []
    sources: list[dict[str, str]] = []
    size = 0
    # The protocol's 64 KiB hold the whole body, sources included: a fact whose escaped
    # line and source would not fit is left out, as one over maxBytes is.
    body = _size({"text": "", "sources": [], "cursor": cursor})
    for _, fact in _ranked(partition, text):
        line = "- " + " ".join(fact.text.split())
        added = utf8_len(line) + (1 if lines else 0)
        if size + added > max_bytes:
            continue
        source = {
            "id": f"fact:{fact.pk}",
            "title": _fact_title(fact),
            "updatedAt": iso_ms(fact.created_at),
        }
        # The line without its quotes, the source, and after the first the "\n" and ",".
        grown = _size(line) - 2 + _size(source) + (3 if lines else 0)
        if body + grown > BODY_MAX_BYTES:
            continue
        size += added
        body += grown
        lines.append(line)
        sources.append(source)
        if len(sources) == SOURCES_MAX:
            break
    return {"text": "\n".join(lines), "sources": sources, "cursor": cursor}


# Tools.


def _arguments(call: Call) -> tuple[dict[str, Any], dict[str, Any]]:
    name = call.body.get("tool")
    tool = TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise ProtocolError(404, "unknown_tool", f"This provider has no tool {name!r}.")
    arguments = call.body.get("arguments")
    if not isinstance(arguments, dict):
        raise _invalid("arguments must be an object.")
    # Imported here: only tool calls need jsonschema, not every process that loads the URLconf.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    error = best_match(Draft202012Validator(tool["input"]).iter_errors(arguments))
    if error is not None:
        raise ProtocolError(400, "invalid_arguments", f"{tool['name']}: {error.message}")
    return tool, arguments


def tool_call(call: Call, *, now: datetime) -> Payload:
    tool, arguments = _arguments(call)
    cursor = call.body.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise _invalid("cursor must be a string.")
    if tool["access"] == "read":
        return _search(Partition.objects.filter(key=call.partition).first(), arguments)
    if call.access != "read-write":
        raise ProtocolError(403, "forbidden", f"{tool['name']} writes; this call has read access.")
    return _write(call, tool["name"], arguments, cursor, now=now)


def _search(partition: Partition | None, arguments: dict[str, Any]) -> Payload:
    limit = arguments.get("limit", SEARCH_LIMIT_DEFAULT)
    shown: list[dict[str, str]] = []
    # Whole facts, as many of the most relevant as the protocol's 64 KiB body holds.
    body = _size({"result": {"facts": []}})
    for score, fact in _ranked(partition, arguments["query"]):
        if score == 0 or len(shown) == limit:
            break
        entry = {
            "id": f"fact:{fact.pk}",
            "title": _fact_title(fact),
            "text": fact.text,
            "updatedAt": iso_ms(fact.created_at),
        }
        grown = _size(entry) + (1 if shown else 0)
        if body + grown > BODY_MAX_BYTES:
            continue
        body += grown
        shown.append(entry)
    return {"result": {"facts": shown}}


def _fingerprint(name: str, arguments: dict[str, Any], cursor: str | None) -> str:
    canonical = json.dumps(
        {"tool": name, "arguments": arguments, "cursor": cursor},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _write(
    call: Call, name: str, arguments: dict[str, Any], cursor: str | None, *, now: datetime
) -> Payload:
    """Runs a write once per (partition, operationId); a retry gets the original result."""
    fingerprint = _fingerprint(name, arguments, cursor)
    for attempt in range(2):
        try:
            with transaction.atomic():
                return _write_locked(call, name, arguments, cursor, fingerprint, now=now)
        except IntegrityError:
            # Two first attempts raced to create the partition or the operation
            # record; the loser runs again and finds the winner's.
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _write_locked(
    call: Call,
    name: str,
    arguments: dict[str, Any],
    cursor: str | None,
    fingerprint: str,
    *,
    now: datetime,
) -> Payload:
    Partition.objects.get_or_create(key=call.partition)
    partition = Partition.objects.select_for_update().get(key=call.partition)
    partition.operations.filter(deadline_at__lte=now).delete()
    done = partition.operations.filter(operation_id=call.operation_id).first()
    if done is not None:
        if done.fingerprint != fingerprint:
            raise ProtocolError(
                409,
                "idempotency_conflict",
                "This operationId was used with a different tool, arguments or cursor.",
            )
        return {"result": done.result}
    if cursor is not None and cursor != _cursor(partition):
        raise ProtocolError(409, "conflict", "Knowledge changed since this recall; reconcile it.")
    result = (
        _remember(partition, arguments, now)
        if name == "remember"
        else _forget(partition, arguments)
    )
    partition.version += 1
    partition.save(update_fields=["version"])
    Operation.objects.create(
        partition=partition,
        operation_id=call.operation_id,
        fingerprint=fingerprint,
        result=result,
        deadline_at=call.deadline_at,
    )
    return {"result": result}


def _remember(partition: Partition, arguments: dict[str, Any], now: datetime) -> Payload:
    fact = Fact.objects.create(
        partition=partition,
        title=arguments.get("title", ""),
        text=arguments["fact"],
        created_at=now,
    )
    return {"status": "stored", "id": f"fact:{fact.pk}"}


def _forget(partition: Partition, arguments: dict[str, Any]) -> Payload:
    match = FACT_ID_RE.fullmatch(arguments["id"])
    deleted = 0
    if match is not None:
        deleted, _ = partition.facts.filter(pk=int(match.group(1))).delete()
    if not deleted:
        raise ProtocolError(404, "not_found", f"No fact {arguments['id']!r} in this memory.")
    return {"status": "forgotten", "id": arguments["id"]}


def call_handle(body: object) -> Payload:
    """Runs one protocol request; raises ProtocolError for the error envelope."""
    now = timezone.now()
    call = call_parse(body, now=now)
    if call.operation == "recall":
        return recall(call)
    return tool_call(call, now=now)
