"""What the external provider kinds share: declarations, recall, tools and record management.

Each kind (mem0_oss.py, mem0_platform.py, vertex.py, hindsight.py) is one
module with a `RemoteStore` (the provider's REST API for one namespace) and
a small `ExternalProvider` subclass (its declaration and credentials).
Everything here speaks of records in our terms: a stable id of ours
(ids.py), the text, times, and `metadata.providerExternalId`.

A namespace (a session's binding id, or the `namespace` the management API
names) selects the provider's own partition through the declaration's
`scope` templates (`{"user_id": "{namespace}"}`), so a team's existing
memory (a Mem0 user, a Vertex scope, a Hindsight bank) is what the
namespace reaches.
"""

from __future__ import annotations

import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar
from urllib.parse import quote

from memoryadmin.agents.bindings import BindingSpec, admit_namespace_only
from memoryadmin.agents.errors import RecallFailed
from memoryadmin.agents.kinds import (
    MemoryProvider,
    NotSupported,
    OperationCheck,
    Projection,
    RecallCall,
    Result,
    ToolOffer,
    ToolTarget,
)
from memoryadmin.agents.models import (
    Binding,
    OperationAction,
    OperationKind,
    ProviderOperation,
    Recall,
    Session,
)
from memoryadmin.agents.services.operations import operation_record
from memoryadmin.agents.services.records import delete_claimed
from memoryadmin.agents.services.sessions import record_saved
from memoryadmin.core.cancellation import Cancelled
from memoryadmin.core.concurrency import Deadline
from memoryadmin.core.cursors import cursor_dump, cursor_load
from memoryadmin.core.errors import InvalidRequest, NotFound, envelope_of
from memoryadmin.core.tools import http_tool_definition, tool_arguments_validate
from memoryadmin.external.ids import (
    external_id_of,
    external_id_valid,
    record_forget,
    records_map,
)
from memoryadmin.external.models import EXTERNAL_ID_MAX_BYTES
from memoryadmin.external.transport import (
    Connection,
    ExternalFailure,
    Reply,
    connection_open,
    reply_usable,
)
from memoryadmin.external.urls import base_url_check
from memoryadmin.memory.limits import MAX_BYTES_DEFAULT, check_max_bytes, utf8_len
from memoryadmin.memory.models import Project, Resource
from memoryadmin.providers.declarations import (
    REDACTED,
    _check_fields,
    _headers_normalize,
)
from memoryadmin.providers.services.secrets import secret_bindings_check

PAGE_SIZE = 50
SEARCH_LIMIT_DEFAULT = 10
SEARCH_LIMIT_MAX = 50
TEXT_MAX = 4000
TEMPLATE_RE = re.compile(r"[A-Za-z0-9_.:@/{}-]{1,256}")
NAMESPACE_TOKEN = "{namespace}"

ADD_INPUT = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 1, "maxLength": TEXT_MAX}},
    "required": ["text"],
    "additionalProperties": False,
}
SEARCH_INPUT = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 1000},
        "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX},
    },
    "required": ["query"],
    "additionalProperties": False,
}
# What each writing tool does to the provider's records (OperationAction).
TOOL_ACTIONS = {"add": OperationAction.ADD, "forget": OperationAction.DELETE}
FORGET_INPUT = {
    "type": "object",
    "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 64}},
    "required": ["id"],
    "additionalProperties": False,
}


@dataclass
class Remote:
    """One record as the provider has it. `external_id` is as the provider answered it,
    checked before it is mapped (`RemoteStore.checked`)."""

    external_id: str
    text: str
    created_at: str | None = None
    updated_at: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pending:
    """A write the provider accepted and finishes later (a queued add, a long-running
    operation): a provider fact until reconciled, never a success."""

    operation: str
    kind: str


@dataclass(frozen=True)
class OperationState:
    done: bool
    failed: bool = False
    error: str = ""
    # Records a finished operation produced (a queued add's memories).
    records: list[Remote] = field(default_factory=list)


class RemoteStore(ABC):
    """One namespace of one provider, over one connection."""

    # What a record id of this kind's answers is (`record_id_valid`), for the invalid
    # answer's description.
    record_ids: ClassVar[str] = f"a string of 1 to {EXTERNAL_ID_MAX_BYTES} UTF-8 bytes"
    # Whether the kind's API answers a GET of a record it does not have with 200 `null`
    # (`found`); its 404s say so only as `says_missing` recognises.
    missing_is_null: ClassVar[bool] = False

    def __init__(self, connection: Connection, config: dict[str, Any], namespace: str) -> None:
        self.connection = connection
        self.config = config
        self.namespace = namespace

    # Helpers for the kinds.

    def scope(self, template: dict[str, str]) -> dict[str, str]:
        return {k: v.replace(NAMESPACE_TOKEN, self.namespace) for k, v in template.items()}

    def send(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        retryable: bool,
        params: dict[str, str] | None = None,
        body: Any = None,
        missing_ok: bool = False,
        origin: str | None = None,
    ) -> Any:
        """The JSON answer of a 2xx reply; None when `missing_ok` and the provider answered
        that it has no such record or document (`missing`).

        Raises Cancelled when the caller cancelled, ExternalFailure otherwise.
        """
        reply = self.connection.call(
            method,
            path,
            operation=operation,
            params=params,
            body=body,
            retryable=retryable,
            origin=origin,
        )
        return self.answer(reply, operation=operation, missing_ok=missing_ok)

    def answer(self, reply: Reply, *, operation: str, missing_ok: bool = False) -> Any:
        reply_usable(self.connection, reply, operation=operation)
        assert reply.status is not None
        if missing_ok and self.missing(reply):
            return None
        if not 200 <= reply.status <= 299:
            raise self.connection.failure(
                "http_error", f"answered HTTP {reply.status}", operation=operation, reply=reply
            )
        if not reply.body:
            return {}
        try:
            return reply.json(suffixed=True)
        except ValueError as exc:
            raise self.connection.failure(
                "invalid_response",
                f"sent an invalid answer: {exc}",
                operation=operation,
                reply=reply,
            ) from None

    def missing(self, reply: Reply) -> bool:
        """Whether `reply` is the provider's own answer that it has no such record (or
        document): a 404 whose JSON body is the one its API answers so (`says_missing`).
        Any other 404 (an HTML page, an empty body, a framework's answer for a route it
        does not have) comes from a wrong base URL, a proxy in front or an unknown route,
        and says nothing of the record: it is the call's failure, never a record gone."""
        if reply.status != 404:
            return False
        try:
            body = reply.json(suffixed=True)
        except ValueError:
            return False
        return self.says_missing(body)

    @abstractmethod
    def says_missing(self, body: Any) -> bool:
        """Whether the JSON body of a 404 is the kind's API saying it has no such record
        (or document, for a kind that deletes records with their document)."""

    def found(self, path: str, *, operation: str) -> dict[str, Any] | None:
        """The record a GET of one record (`path`) answers, the JSON object it is; None
        only where the provider's API says it has no such record: its own 404 (`missing`),
        or `null` for a kind that answers so (`missing_is_null`). Any other answer (a
        string, a list, a number, `null` elsewhere, a 404 of no such body) is a failure,
        never a record that is gone: a delete reads its record first, and would forget it
        and report it deleted while it stays."""
        reply = self.connection.call("GET", path, operation=operation, retryable=True)
        data = self.answer(reply, operation=operation, missing_ok=True)
        if data is None and (reply.status == 404 or self.missing_is_null):
            return None
        if not isinstance(data, dict):
            raise self.invalid(operation, "the memory is not a JSON object")
        return data

    def segment(self, value: str, *, operation: str) -> str:
        """An id the provider gave (a record's, an operation's, a document's) or the
        declaration names (a bank), as one segment of a request path (`path_segment`);
        one that cannot be one fails the call, before anything is sent."""
        try:
            return path_segment(value)
        except ValueError:
            raise self.invalid(
                operation, f"an id that cannot be sent in a path ({value!r})"
            ) from None

    def objects(self, items: object, *, operation: str, what: str) -> list[dict[str, Any]]:
        """The items of a list an answer holds (its memories, revisions, changes: `what`),
        when it is a list of JSON objects; otherwise the answer is invalid, before
        anything of it is read. Never an item left out: the caller would show the rest
        as the provider's whole answer."""
        if not isinstance(items, list):
            raise self.invalid(operation, f"its {what} are not a list")
        if not all(isinstance(item, dict) for item in items):
            raise self.invalid(operation, f"one of its {what} is not an object")
        return items

    def record_id_valid(self, external_id: object) -> bool:
        """Whether a record id of an answer can be mapped: one the mapping can remember
        (`ids.external_id_valid`); a kind whose ids have a form of their own narrows it."""
        return external_id_valid(external_id)

    def checked(self, remotes: list[Remote], *, operation: str) -> list[Remote]:
        """`remotes`, when every record id the provider answered can be mapped
        (`record_id_valid`); otherwise the answer is invalid, before anything of it is
        mapped or shown. Never a record left out: the caller would show an answer short
        of it as the provider's whole answer."""
        if not all(self.record_id_valid(remote.external_id) for remote in remotes):
            raise self.invalid(operation, f"a record id that is not {self.record_ids}")
        return remotes

    def mapped(self, remotes: list[Remote], *, operation: str) -> dict[str, str]:
        """Our ids of the records of an answer (checked), each remembered in this
        namespace (ids.records_map)."""
        return records_map(
            resource=self.connection.resource,
            namespace=self.namespace,
            external_ids=[r.external_id for r in self.checked(remotes, operation=operation)],
        )

    def invalid(self, operation: str, what: str) -> ExternalFailure:
        return self.connection.failure(
            "invalid_response", f"sent an invalid answer: {what}", operation=operation
        )

    # The operations.

    @abstractmethod
    def add(self, text: str) -> list[Remote] | Pending: ...

    @abstractmethod
    def search(self, query: str, limit: int) -> list[Remote]: ...

    @abstractmethod
    def page(self, token: str | None) -> tuple[list[Remote], str | None]: ...

    @abstractmethod
    def get(self, external_id: str) -> Remote | None: ...

    def update(self, external_id: str, text: str) -> Remote | Pending:
        raise NotSupported(f"{self.kind_name()} does not support updating a record.")

    @abstractmethod
    def delete(self, external_id: str) -> Pending | None:
        """None once deleted (also when it was already gone)."""

    def history(self, external_id: str) -> list[Result]:
        raise NotSupported(f"{self.kind_name()} keeps no history of its records.")

    def poll(self, operation: str) -> OperationState:
        raise NotSupported(f"{self.kind_name()} has no asynchronous operations.")

    def kind_name(self) -> str:
        return type(self).__name__.removesuffix("Store")


def path_segment(value: str) -> str:
    """`value` as one segment of a request path: every character but RFC 3986's
    unreserved ones (letters, digits, `-._~`) percent-encoded, so a `/`, `?`, `#` or `%`
    stays inside the segment. ValueError for `.`, `..` and the empty string: servers and
    proxies take the first two (written so or encoded) for steps in the path, and an
    empty segment changes the route."""
    if value in {"", ".", ".."}:
        raise ValueError(f"{value!r} cannot be a path segment")
    return quote(value, safe="")


def text_at(body: Any, *keys: str) -> str:
    """The string at `keys` in an answer's nested JSON objects; "" when there is none."""
    for key in keys:
        body = body.get(key) if isinstance(body, dict) else None
    return body if isinstance(body, str) else ""


def fit_text(remotes: list[Remote], max_bytes: int) -> list[Remote]:
    """Whole records, best first, while their lines fit in `max_bytes` (never cut)."""
    kept: list[Remote] = []
    used = 0
    for remote in remotes:
        line = " ".join(remote.text.split())
        size = utf8_len(line) + (1 if kept else 0)
        if used + size > max_bytes:
            continue
        kept.append(Remote(remote.external_id, line, remote.created_at, remote.updated_at))
        used += size
    return kept


def _scope_normalize(raw: object, where: str, *, allowed: set[str] | None) -> dict[str, str]:
    if not isinstance(raw, dict) or not raw:
        raise InvalidRequest(f'{where} must be an object such as {{"user_id": "{{namespace}}"}}.')
    if allowed is not None and set(raw) - allowed:
        raise InvalidRequest(f"{where} may only name {', '.join(sorted(allowed))}.")
    for key, value in raw.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", key):
            raise InvalidRequest(f"{where} has an invalid key.")
        if not isinstance(value, str) or not TEMPLATE_RE.fullmatch(value):
            raise InvalidRequest(
                f"{where}.{key} must be 1-256 letters, digits or _.:@/- , "
                f"optionally holding {NAMESPACE_TOKEN}."
            )
    return dict(raw)


@dataclass
class _ToolCall:
    """One model tool call: its deadline, its slot against the project's cap, and the
    operations it leaves open in the durable operation store."""

    session: Session
    binding: Binding
    name: str
    call_id: str
    recall_id: str = ""
    # What a write is (an OperationAction) and the record it changes, for its operation.
    action: str = ""
    record_id: str = ""
    deadline: Deadline = field(default_factory=Deadline.after)

    def run[T](self, store: RemoteStore, work: Callable[[], T]) -> T:
        """Within the runtime's reservation of the project's provider calls."""
        return work()

    def _record(self, kind: str, provider_operation: str) -> ProviderOperation:
        return operation_record(
            session=self.session,
            binding=self.binding,
            kind=kind,
            provider_operation=provider_operation,
            tool=self.name,
            call_id=self.call_id,
            recall_id=self.recall_id,
            action=self.action,
            record_id=self.record_id,
        )

    def accepted(self, pending: Pending) -> Result:
        """A write the provider queued: open until reconciliation sees it finish."""
        operation = self._record(OperationKind.ACCEPTED_WRITE, pending.operation)
        return {"status": "accepted", "operation": operation.id}

    def unsettled(self, spec: dict[str, Any], kind: str, result: Result) -> Result:
        """A write whose outcome nobody knows (cancelled, or its answer lost): recorded
        as an open operation, never as a success or a failure. Reads just say so."""
        if spec["access"] == "write":
            self._record(kind, f"{self.call_id}:{self.binding.resource.resource_id}")
        return result


class ExternalProvider(MemoryProvider):
    """An external provider kind: records live with the provider, managed through it."""

    manages_records = True
    url_rule: ClassVar[str]
    store_class: ClassVar[type[RemoteStore]]
    # Fields of the declaration beyond kind, maxBytes, baseUrl and headers.
    fields: ClassVar[set[str]] = set()
    default_base_url: ClassVar[str | None] = None
    # Whether `add` may be retried (the provider deduplicates): otherwise a lost
    # answer makes it uncertain.
    add_idempotent: ClassVar[bool] = False
    # What the model is told about a write's visibility.
    add_visibility: ClassVar[str] = "Saved facts appear in the next recall."

    # Declarations.

    @abstractmethod
    def settings_normalize(self, provider: dict[str, Any], at: str) -> dict[str, Any]:
        """The kind's own fields, checked (the base URL and headers are checked already)."""

    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        at = f"{where}.provider"
        _check_fields(provider, {"kind", "maxBytes", "baseUrl", "headers", *self.fields}, at)
        raw_url = provider.get("baseUrl", self.default_base_url)
        # The URL first: nothing else matters, and no secret is looked at, if it is refused.
        base_url_check(
            raw_url, where=f"{at}.baseUrl", rule=self.url_rule, resolve_names_for=project
        )
        headers = _headers_normalize(provider.get("headers"), f"{at}.headers")
        max_bytes = provider.get("maxBytes", MAX_BYTES_DEFAULT)
        try:
            check_max_bytes(max_bytes)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{at}.{exc.message}") from exc
        return {
            "kind": self.kind,
            "maxBytes": max_bytes,
            "baseUrl": str(raw_url).rstrip("/"),
            "headers": headers,
            **self.settings_normalize(provider, at),
        }

    def promote_check(
        self, *, project: Project, environment: str, provider: dict[str, Any], where: str
    ) -> None:
        origin, path = base_url_check(provider["baseUrl"], where="baseUrl", rule=self.url_rule)
        secret_bindings_check(
            project=project,
            environment=environment,
            provider={
                "connection": {"origin": origin, "headers": self.secret_headers(provider)},
                "path": path or "/",
            },
            where=where,
        )

    def secret_headers(self, provider: dict[str, Any]) -> dict[str, Any]:
        """Every header that will carry a secret, as declaration references."""
        return dict(provider.get("headers", {}))

    def public(self, provider: dict[str, Any]) -> dict[str, Any]:
        headers = {
            name: value if isinstance(value, dict) else dict(REDACTED)
            for name, value in provider.get("headers", {}).items()
        }
        return {**provider, "headers": headers}

    def declared_tools(self, resource: Resource) -> list[dict[str, Any]]:
        return self.tool_specs()

    # Connections.

    def open(
        self,
        resource: Resource,
        namespace: str,
        *,
        deadline: Deadline | None = None,
        cancelled: threading.Event | None = None,
    ) -> RemoteStore:
        """The namespace's store; the URL is checked again before any secret is read."""
        config = resource.config
        try:
            origin, path = base_url_check(
                config.get("baseUrl"), where="baseUrl", rule=self.url_rule
            )
        except InvalidRequest as exc:
            probe = Connection(resource=resource, origin="", base_path="", headers={})
            raise probe.failure("invalid_configuration", exc.message, operation="connect") from None
        connection = connection_open(
            resource=resource,
            origin=origin,
            base_path=path,
            headers=config.get("headers", {}),
            deadline=deadline,
            cancelled=cancelled,
        )
        self.authorize(connection)
        return self.store_class(connection, config, namespace)

    def authorize(self, connection: Connection) -> None:
        """Adds the kind's own credentials (beyond the declared headers)."""
        return None

    # Bindings.

    def admit(self, *, bindings: list[tuple[BindingSpec, Resource]]) -> None:
        admit_namespace_only(bindings)

    # Recall: the provider's search with the input, whole records within maxBytes.

    def recall_calls(
        self,
        *,
        session: Session,
        bindings: list[Binding],
        recall_id: str,
        input_text: str | None,
        deadline: Deadline,
    ) -> list[RecallCall[Any]]:
        calls: list[RecallCall[Any]] = []
        for binding in bindings:
            try:
                store = self.open(binding.resource, binding.target_id, deadline=deadline)
            except (ExternalFailure, Cancelled) as exc:
                raise _recall_failed(binding, exc) from exc
            # Failures of calls in other threads wait for the caller's thread to audit them.
            store.connection.deferred = []
            calls.append(
                RecallCall(
                    send=partial(_recall_one, store, input_text),
                    projection=partial(_projection, store, binding),
                    # Calls abandoned after a failure may still fail later; theirs are not kept.
                    settle=store.connection.flush,
                )
            )
        return calls

    # Tools: add, search and forget, as the model sees them.

    def tool_specs(self) -> list[dict[str, Any]]:
        return [
            {
                "name": "add",
                "description": f"Remember a fact in this memory. {self.add_visibility}",
                "access": "write",
                "input": ADD_INPUT,
            },
            {
                "name": "search",
                "description": "Search this memory; returns matching records with their ids.",
                "access": "read",
                "input": SEARCH_INPUT,
            },
            {
                "name": "forget",
                "description": "Delete one record of this memory by the id a recall or "
                "search gave.",
                "access": "write",
                "input": FORGET_INPUT,
            },
        ]

    def tools(self, *, binding: Binding) -> list[ToolOffer]:
        return [
            ToolOffer(
                name="memory_" + spec["name"],
                schema=spec["input"],
                writes=spec["access"] == "write",
                spec=spec,
            )
            for spec in self.tool_specs()
        ]

    def tool_definition(self, *, name: str, targets: list[ToolTarget]) -> Result:
        return http_tool_definition(
            name=name, targets=[(target.resource_id, target.offer.spec) for target in targets]
        )

    def tool_execute(
        self,
        *,
        session: Session,
        recall: Recall,
        target: ToolTarget,
        call_id: str,
        arguments: dict[str, Any],
    ) -> Result:
        spec = target.offer.spec
        args = tool_arguments_validate(tool=spec, arguments=arguments)
        binding = target.binding
        call = _ToolCall(
            session=session,
            binding=binding,
            name=target.offer.name,
            call_id=call_id,
            recall_id=recall.id,
            action=TOOL_ACTIONS.get(spec["name"], ""),
            record_id=args.get("id", ""),
        )
        try:
            if spec["name"] == "forget":
                return self._tool_forget(call, args["id"])
            store = self.open(binding.resource, binding.target_id, deadline=call.deadline)
            if spec["name"] == "add":
                return self._tool_add(store, call, args["text"])
            remotes = call.run(store, lambda: store.search(args["query"], _limit(args)))
            return {"results": self._shapes(store, remotes, operation="search")}
        except Cancelled:
            return call.unsettled(spec, OperationKind.CANCELLED_WRITE, {"status": "cancelled"})
        except ExternalFailure as exc:
            if spec["access"] == "write" and exc.reason in {"timeout", "transport_error"}:
                return call.unsettled(spec, OperationKind.UNCERTAIN_WRITE, {"status": "uncertain"})
            return envelope_of(exc)
        except NotFound as exc:
            return envelope_of(exc, code="not_found")

    def _tool_add(self, store: RemoteStore, call: _ToolCall, text: str) -> Result:
        outcome = call.run(store, lambda: store.add(text))
        if isinstance(outcome, Pending):
            return call.accepted(outcome)
        resource, namespace = call.binding.resource, call.binding.target_id
        ids = store.mapped(outcome, operation="add")
        stored = [ids[r.external_id] for r in outcome]
        record_saved(
            session=call.session,
            resource=resource.resource_id,
            namespace=namespace,
            tool=call.name,
            call_id=call.call_id,
            recall_id=call.recall_id,
            record_ids=stored,
        )
        return {"status": "stored", "ids": stored}

    def _tool_forget(self, call: _ToolCall, record_id: str) -> Result:
        """The record's delete, under the rule every delete of it follows (`delete_claimed`):
        one open already (an owner's, an erasure's, a containment's or a session's) answers
        `accepted` with its operation and nothing is sent, as the model's own delete the
        provider queued would (the record is being forgotten). The store is opened once
        the claim is held, so its deadline starts after any wait for another's claim."""
        resource, namespace = call.binding.resource, call.binding.target_id
        with delete_claimed(resource, namespace, record_id) as open_delete:
            if open_delete is not None:
                return {"status": "accepted", "operation": open_delete.id}
            external_id = external_id_of(
                resource=resource, namespace=namespace, record_id=record_id
            )
            store = self.open(resource, namespace)
            outcome = call.run(store, lambda: store.delete(external_id))
            if isinstance(outcome, Pending):
                return call.accepted(outcome)
            record_forget(resource=resource, record_id=record_id)
        return {"status": "deleted", "id": record_id}

    # Records that live with the provider.

    def record_shape(self, record_id: str, remote: Remote) -> Result:
        return {
            "id": record_id,
            "text": remote.text,
            "createdAt": remote.created_at,
            "updatedAt": remote.updated_at,
            "metadata": {**remote.metadata, "providerExternalId": remote.external_id},
        }

    def _shapes(self, store: RemoteStore, remotes: list[Remote], *, operation: str) -> list[Result]:
        ids = store.mapped(remotes, operation=operation)
        return [self.record_shape(ids[r.external_id], r) for r in remotes]

    def records_list(
        self, *, resource: Resource, namespace: str, cursor: str | None = None
    ) -> tuple[list[Result], str | None]:
        scope = f"external:{resource.pk}:{namespace}"
        token = None
        if cursor is not None:
            position = cursor_load(cursor, scope=scope)
            if len(position) != 1 or not isinstance(position[0], str):
                raise InvalidRequest("cursor is not valid here.")
            token = position[0]
        store = self.open(resource, namespace)
        remotes, next_token = store.page(token)
        records = self._shapes(store, remotes, operation="list")
        return records, (cursor_dump([next_token], scope=scope) if next_token else None)

    def records_search(
        self, *, resource: Resource, namespace: str, query: str, limit: int = SEARCH_LIMIT_DEFAULT
    ) -> list[Result]:
        store = self.open(resource, namespace)
        return self._shapes(store, store.search(query, limit), operation="search")

    def record_create(self, *, resource: Resource, namespace: str, text: str) -> Result:
        store = self.open(resource, namespace)
        outcome = store.add(text)
        if isinstance(outcome, Pending):
            return {"status": "queued", "operation": outcome.operation}
        return {"status": "stored", "records": self._shapes(store, outcome, operation="add")}

    def record_get(self, *, resource: Resource, namespace: str, record_id: str) -> Result:
        external_id = external_id_of(resource=resource, namespace=namespace, record_id=record_id)
        store = self.open(resource, namespace)
        remote = store.get(external_id)
        if remote is None:
            raise NotFound(f"Record '{record_id}' no longer exists at the provider.")
        return self.record_shape(record_id, store.checked([remote], operation="get")[0])

    def record_update(
        self, *, resource: Resource, namespace: str, record_id: str, changes: dict[str, Any]
    ) -> Result:
        if set(changes) != {"text"} or not isinstance(changes["text"], str) or not changes["text"]:
            raise InvalidRequest("An update takes exactly one field: text (a nonempty string).")
        if len(changes["text"]) > TEXT_MAX:
            raise InvalidRequest(f"text is over {TEXT_MAX} characters.")
        external_id = external_id_of(resource=resource, namespace=namespace, record_id=record_id)
        store = self.open(resource, namespace)
        outcome = store.update(external_id, changes["text"])
        if isinstance(outcome, Pending):
            return {"status": "queued", "operation": outcome.operation}
        record = store.checked([outcome], operation="update")[0]
        return {"status": "stored", "record": self.record_shape(record_id, record)}

    def record_delete(self, *, resource: Resource, namespace: str, record_id: str) -> Result:
        external_id = external_id_of(resource=resource, namespace=namespace, record_id=record_id)
        outcome = self.open(resource, namespace).delete(external_id)
        if isinstance(outcome, Pending):
            return {"status": "queued", "operation": outcome.operation}
        record_forget(resource=resource, record_id=record_id)
        return {"status": "deleted", "id": record_id}

    def operation_check(self, *, operation: ProviderOperation) -> OperationCheck:
        """Where a provider operation stands, for the reconciliation of the operation store.

        `operation` has `resource`, `namespace` and `provider_operation`. A
        finished write's records are mapped to our ids, so they can be managed
        at once; a finished delete forgets its record, as a delete answered at
        once does; a failure keeps the provider's words for the owners.
        """
        if operation.kind != OperationKind.ACCEPTED_WRITE:
            # A write whose answer was lost or cancelled left no provider operation to
            # ask about: it stays open until its attempts run out, then a dead letter
            # an owner settles after looking at the records.
            raise NotSupported("The provider keeps no operation for this write; check its records.")
        resource, namespace = operation.resource, operation.namespace
        store = self.open(resource, namespace)
        state = store.poll(operation.provider_operation)
        if not state.done:
            return OperationCheck(state="queued")
        if state.failed:
            return OperationCheck(state="failed", detail=state.error or "the provider failed it")
        ids = store.mapped(state.records, operation="operation")
        if operation.action == OperationAction.DELETE and operation.record_id:
            record_forget(resource=resource, record_id=operation.record_id)
        stored = tuple(dict.fromkeys(ids[r.external_id] for r in state.records))
        return OperationCheck(state="succeeded", detail=", ".join(stored), record_ids=stored)

    def record_history(self, *, resource: Resource, namespace: str, record_id: str) -> list[Result]:
        external_id = external_id_of(resource=resource, namespace=namespace, record_id=record_id)
        return self.open(resource, namespace).history(external_id)


def _limit(args: dict[str, Any]) -> int:
    return int(args.get("limit", SEARCH_LIMIT_DEFAULT))


def _recall_one(store: RemoteStore, input_text: str | None, cancelled: threading.Event) -> Any:
    store.connection.cancelled = cancelled
    try:
        query = (input_text or "").strip()
        if query:
            return store.search(query, SEARCH_LIMIT_MAX)
        return store.page(None)[0]
    except (ExternalFailure, Cancelled) as exc:
        return exc


def _projection(
    store: RemoteStore, binding: Binding, outcome: list[Remote] | BaseException
) -> Projection:
    if isinstance(outcome, BaseException):
        raise _recall_failed(binding, outcome) from outcome
    resource = binding.resource
    try:
        answered = store.checked(outcome, operation="recall")
    except ExternalFailure as exc:
        raise _recall_failed(binding, exc) from exc
    kept = fit_text(answered, resource.max_bytes)
    ids = records_map(
        resource=resource, namespace=binding.target_id, external_ids=[r.external_id for r in kept]
    )
    sources = []
    for remote in kept:
        source = {"id": ids[remote.external_id]}
        if remote.updated_at or remote.created_at:
            source["updatedAt"] = str(remote.updated_at or remote.created_at)
        sources.append(source)
    return Projection(text="\n".join(r.text for r in kept), sources=sources)


def _recall_failed(binding: Binding, exc: BaseException) -> RecallFailed:
    resource_id = binding.resource.resource_id
    if isinstance(exc, ExternalFailure):
        return RecallFailed(
            exc.message, resource=resource_id, reason="provider_failed", retryable=exc.retryable
        )
    return RecallFailed(
        f"The recall of '{resource_id}' was cancelled.", resource=resource_id, reason="cancelled"
    )
