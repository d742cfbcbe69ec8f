"""The memory runtime: recall before each model request, then the model's tool calls.

The runtime knows no provider kind: it asks each binding's provider (see
memoryadmin/memory/providers.py) for its projection and its tools, chooses a
tool call's target one way for every kind, and hands the call to the
target's provider. What holds for every kind is decided here, once: an ended
session recalls nothing and takes no tool call, a read binding never writes
and its memory is not writable, and a recall's calls to all its providers run
at once within one deadline and one reservation of the project's provider
calls, and stop when the caller cancels.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import re
import secrets
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from memoryadmin.agents.document_provider import TOOLS, rejected
from memoryadmin.agents.errors import (
    IdempotencyConflict,
    InvalidToolArguments,
    NotBound,
    RecallBusy,
    RecallFailed,
    SessionClosed,
)
from memoryadmin.agents.kinds import (
    MemoryProvider,
    Projection,
    RecallCall,
    ToolTarget,
    provider_for,
    provider_kinds,
    providers,
)
from memoryadmin.agents.models import Access, Binding, Recall, Session
from memoryadmin.agents.services.provenance import recall_sources, recall_store
from memoryadmin.agents.services.sessions import session_bindings, session_get_with_bindings
from memoryadmin.core.cancellation import Cancellation, cancel_request, cancellation_scope
from memoryadmin.core.concurrency import Deadline, ProviderCalls
from memoryadmin.core.errors import InvalidRequest, NotFound, ProviderBusy
from memoryadmin.core.jsonbody import BODY_MAX_BYTES
from memoryadmin.core.rows import (
    Compiled,
    column,
    columns,
    concrete_names,
    database_vendor,
    fetch_instance,
    joined_instance,
    joined_names,
    table,
)

__all__ = [
    "TOOLS",
    "Projection",
    "recall_create",
    "tool_call",
    "tool_call_ended",
    "tool_definitions",
]

Result = dict[str, Any]
CALL_ID_MAX = 256
REQUEST_ID_MAX = 256
REQUEST_ID_RE = re.compile(r"[\x21-\x7e]{1,256}")
# The longest input text a recall takes, in UTF-8 bytes as JSON writes it (escapes counted):
# the recall request of an http provider carries it within the protocol's 64 KiB body,
# with room for the request's other fields (well under 1 KiB).
INPUT_TEXT_MAX_BYTES = BODY_MAX_BYTES - 4 * 1024
# A tool call's result when its caller cancelled it.
CANCELLED: Result = {"status": "cancelled"}
# How many times a recall is made before an erasure that commits while it is made, each
# time, fails it (`recall_create`).
RECALL_ATTEMPTS = 2


def new_recall_id() -> str:
    return "mrq_" + secrets.token_hex(12)


def _bindings(session: Session) -> list[Binding]:
    return session_bindings(session=session)


def _selected(bindings: list[Binding], use: list[str]) -> list[Binding]:
    by_id = {b.resource.resource_id: b for b in bindings}
    missing = [resource for resource in use if resource not in by_id]
    if missing:
        bound = ", ".join(by_id) or "none"
        raise NotBound(
            f"Not bound to this session: {', '.join(missing)}. Bound resources: {bound}."
        )
    return [by_id[resource] for resource in use]


def _check_use(use: object) -> list[str]:
    if use is None:
        return []
    if not isinstance(use, list) or not all(isinstance(item, str) for item in use):
        raise InvalidRequest("use must be a list of resource ids.")
    return list(dict.fromkeys(use))


def _check_input_text(input_text: str | None) -> None:
    """The caller's input fits every provider's recall request, checked before any call
    (so the provider is never blamed for the caller's input)."""
    if input_text is None:
        return
    size = len(json.dumps(input_text, ensure_ascii=False).encode()) - 2
    if size > INPUT_TEXT_MAX_BYTES:
        raise InvalidRequest(
            f"input.text is {size} bytes (UTF-8, as JSON writes it); a recall's input text "
            f"takes at most {INPUT_TEXT_MAX_BYTES} bytes: send less."
        )


def _fingerprint(use: list[str], input_text: str | None) -> str:
    body = json.dumps({"use": use, "input": input_text}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


def _check_request_id(request_id: object) -> str:
    if request_id is None:
        return ""
    if not isinstance(request_id, str) or not REQUEST_ID_RE.fullmatch(request_id):
        raise InvalidRequest(f"requestId must be 1-{REQUEST_ID_MAX} printable ASCII characters.")
    return request_id


def _reused(session: Session, recall: Recall, fingerprint: str, bindings: list[Binding]) -> Result:
    """The accepted recall of a retried model request; a changed body is a conflict."""
    if recall.fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"requestId '{recall.request_id}' was recalled with another body; "
            "a new model request needs a new requestId.",
            differs=["body"],
        )
    selected = _selected(bindings, list(recall.use))
    return {
        "recallId": recall.id,
        "memory": recall.memory,
        "tools": tool_definitions(session=session, selected=selected),
    }


def _public(session: Session, binding: Binding, projection: Projection) -> Result:
    """What the model sees of a projection. Memory is writable only in an active
    session, through a read-write binding, where the kind allows writes."""
    writable = session.is_active and binding.access == Access.READ_WRITE and projection.writable
    return {"text": projection.text, "sources": projection.sources, "writable": writable}


def _cancelled(resource: str) -> RecallFailed:
    return RecallFailed(
        f"The recall of '{resource}' was cancelled.", resource=resource, reason="cancelled"
    )


def _recall_calls(
    *,
    session: Session,
    kinds: list[tuple[MemoryProvider, list[Binding]]],
    recall_id: str,
    input_text: str | None,
    cancellation: Cancellation | None,
) -> dict[str, Projection]:
    """Every binding of the kinds that call out, called at once within one deadline and
    one reservation of the project's provider calls; the first failure blocks the recall
    (the calls still running are abandoned) and a cancellation fails it as cancelled."""
    bindings = [binding for _, kind_bindings in kinds for binding in kind_bindings]
    first = bindings[0].resource.resource_id
    if cancellation is not None and cancellation.poll():
        raise _cancelled(first)
    deadline = Deadline.after()
    # Taken before any call is prepared: whatever a kind sends while preparing counts.
    try:
        reservation = ProviderCalls[Any](
            project_id=session.project_id, count=len(bindings), deadline=deadline
        )
    except ProviderBusy as exc:
        # 429 naming the first remote binding.
        raise RecallBusy(exc.message, resource=first, retry_after=exc.retry_after) from exc
    prepared: list[RecallCall[Any]] = []
    projections: dict[str, Projection] = {}
    # A kind's call honours its event; the caller's cancellation sets it.
    watch = (
        cancellation.watch(reservation.cancelled.set)
        if cancellation is not None
        else contextlib.nullcontext()
    )
    try:
        with reservation, watch:
            for provider, kind_bindings in kinds:
                calls = provider.recall_calls(
                    session=session,
                    bindings=kind_bindings,
                    recall_id=recall_id,
                    input_text=input_text,
                    deadline=deadline,
                )
                assert len(calls) == len(kind_bindings), provider.kind
                prepared.extend(calls)
            for index, outcome in reservation.run([call.send for call in prepared]):
                resource = bindings[index].resource.resource_id
                try:
                    projections[resource] = prepared[index].projection(outcome)
                except RecallFailed as exc:
                    if cancellation is not None and cancellation.poll():
                        raise _cancelled(resource) from exc
                    raise
    except ProviderBusy as exc:
        raise RecallBusy(exc.message, resource=first, retry_after=exc.retry_after) from exc
    finally:
        for call in prepared:
            if call.settle is not None:
                call.settle()
    if cancellation is not None and cancellation.poll():
        raise _cancelled(first)
    return projections


@functools.cache
def _accepted_sql(vendor: str) -> str:
    """The look-up of the recall accepted for a session's request id. Its unique index
    is partial (ids are optional): the statement repeats the index's condition in its
    text, or the plan a prepared statement settles on for any parameters cannot use the
    index and reads all of the session's recalls (one recall slower than the last)."""
    request_id = column(Recall, "request_id")
    return (
        f"SELECT {columns(Recall)} FROM {table(Recall)}"
        f" WHERE {column(Recall, 'session')} = %s AND {request_id} = %s AND {request_id} <> ''"
    )


def _accepted(session: Session, request: str) -> Recall | None:
    """The recall accepted for this request id of the session, if any."""
    return fetch_instance(Recall, _accepted_sql(database_vendor()), [session.id, request])


def recall_create(
    *,
    session: Session,
    use: object,
    input_text: str | None = None,
    request_id: object = None,
    bindings: list[Binding] | None = None,
) -> Result:
    """Recalls every bound resource; any failure blocks the recall and stores nothing.

    `input_text` is what the model request is about; document memory does not
    need it, providers that select context do. With `request_id` (the model
    request's id), a retry of the same request reuses the recall accepted for
    it instead of recalling again; the same id with another body is 409.

    An erasure of the project that commits while the recall is made (after it read its
    memory, before it stored what it read) may have erased what it read: nothing is
    stored and the recall is made again from the start, its memory read again; where
    that happens on every one of RECALL_ATTEMPTS, it is 409 `recall_failed`, reason
    `erasure`, retryable.
    """
    if not session.is_active:
        raise SessionClosed(f"Session {session.id} has ended; it recalls no memory.")
    selected_ids = _check_use(use)
    request = _check_request_id(request_id)
    _check_input_text(input_text)
    fingerprint = _fingerprint(selected_ids, input_text) if request else ""
    for attempt in range(RECALL_ATTEMPTS):
        if attempt or bindings is None or session.erasure_epoch is None:
            # The session with its project's erasure epoch and its bindings, read before
            # any memory (their documents are read by their provider, next).
            session, bindings = session_get_with_bindings(
                session_id=session.pk, with_documents=False
            )
            if not session.is_active:
                raise SessionClosed(f"Session {session.id} has ended; it recalls no memory.")
        result = _recall_once(session, bindings, selected_ids, input_text, request, fingerprint)
        if result is not None:
            return result
    first = bindings[0].resource.resource_id if bindings else ""
    raise RecallFailed(
        "An erasure of this project committed while the recall was made; nothing was "
        "stored. Recall again.",
        resource=first,
        reason="erasure",
        retryable=True,
    )


def _recall_once(
    session: Session,
    bindings: list[Binding],
    selected_ids: list[str],
    input_text: str | None,
    request: str,
    fingerprint: str,
) -> Result | None:
    """One attempt of `recall_create` with the bindings read with the session (and its
    erasure epoch); None where an erasure committed since, storing nothing."""
    assert session.erasure_epoch is not None
    if request:
        accepted = _accepted(session, request)
        if accepted is not None:
            return _reused(session, accepted, fingerprint, bindings)
    selected = _selected(bindings, selected_ids)
    recall_id = new_recall_id()
    by_kind: dict[str, list[Binding]] = {}
    for binding in bindings:
        if _provider(binding) is None:
            raise RecallFailed(
                f"No provider can recall '{binding.resource.resource_id}' "
                f"(a {binding.resource.kind} provider).",
                resource=binding.resource.resource_id,
                reason="provider_unavailable",
            )
        by_kind.setdefault(binding.resource.kind, []).append(binding)
    kinds = [(p, by_kind[p.kind]) for p in providers() if p.kind in by_kind]
    projections: dict[str, Projection] = {}
    # Memory read here first: a missing document blocks the recall before any
    # provider is called.
    for provider, kind_bindings in kinds:
        if provider.recalls_here:
            projections.update(provider.recall(session=session, bindings=kind_bindings))
    # The caller may cancel the recall by its requestId.
    with cancellation_scope(session_id=session.id, ref=request) as cancellation:
        remote = [(p, b) for p, b in kinds if not p.recalls_here]
        if remote:
            projections.update(
                _recall_calls(
                    session=session,
                    kinds=remote,
                    recall_id=recall_id,
                    input_text=input_text,
                    cancellation=cancellation,
                )
            )
    projections = {b.resource.resource_id: projections[b.resource.resource_id] for b in bindings}
    memory = {
        b.resource.resource_id: _public(session, b, projections[b.resource.resource_id])
        for b in bindings
    }
    recall = Recall(
        id=recall_id,
        session=session,
        use=selected_ids,
        memory=memory,
        revisions={r: p.revision for r, p in projections.items() if p.revision is not None},
        cursors={r: p.cursor for r, p in projections.items() if p.cursor is not None},
        request_id=request,
        fingerprint=fingerprint,
        created_at=timezone.now(),
    )
    sources = {r: p.sources for r, p in projections.items()}
    try:
        stored = recall_store(
            recall=recall,
            sources=recall_sources(bindings=bindings, sources=sources),
            erasure_epoch=session.erasure_epoch,
        )
    except IntegrityError:
        # A concurrent retry of the same request was accepted first: use its recall.
        accepted = _accepted(session, request) if request else None
        if accepted is None:
            raise
        return _reused(session, accepted, fingerprint, bindings)
    if stored == "session_ended":  # ended while the recall was made: an end committed first wins
        raise SessionClosed(f"Session {session.id} has ended; it recalls no memory.")
    if stored == "erased":
        return None
    return {
        "recallId": recall.id,
        "memory": memory,
        "tools": tool_definitions(session=session, selected=selected),
    }


# Tools: what each binding's provider offers, one way of choosing a call's target.


def _provider(binding: Binding) -> MemoryProvider | None:
    kind = binding.resource.kind
    return provider_for(kind) if kind in provider_kinds() else None


def _offers(bindings: list[Binding]) -> dict[str, list[ToolTarget]]:
    """Every tool the bindings offer, by model-facing name, in binding order."""
    offers: dict[str, list[ToolTarget]] = {}
    for binding in bindings:
        provider = _provider(binding)
        for offer in provider.tools(binding=binding) if provider else []:
            offers.setdefault(offer.name, []).append(ToolTarget(binding=binding, offer=offer))
    return offers


def _tool_order(name: str, targets: list[ToolTarget]) -> tuple[int, int]:
    """Tools by provider (local ones first), then as the provider lists its own tools."""
    provider = _provider(targets[0].binding)
    ranked = providers()
    index = ranked.index(provider) if provider in ranked else len(ranked)
    reserved = provider.reserved_tools if provider else ()
    return index, reserved.index(name) if name in reserved else len(reserved)


def tool_definitions(*, session: Session, selected: list[Binding]) -> list[Result]:
    """The tools a render that selected these resources offers the model.

    A tool the binding's access does not permit is not offered at all.
    """
    permitted = {
        name: [target for target in targets if target.permitted]
        for name, targets in _offers(selected).items()
    }
    offered = [(name, targets) for name, targets in permitted.items() if targets]
    offered.sort(key=lambda item: _tool_order(*item))
    definitions = []
    for name, targets in offered:
        provider = _provider(targets[0].binding)
        assert provider is not None
        definitions.append(provider.tool_definition(name=name, targets=targets))
    return definitions


def _target(
    name: str, use: list[str], bindings: list[Binding], offered: list[ToolTarget], requested: object
) -> ToolTarget | Result:
    """The target a call acts on, or the rejection explaining why there is none.

    `memory` names the target; it may be left out when exactly one selected
    resource offers the tool. A wrong target, or one whose access does not
    permit the tool, is rejected, never redirected.
    """
    if requested is not None and not isinstance(requested, str):
        raise InvalidToolArguments(f"{name}: 'memory' must be a string.")
    by_id = {b.resource.resource_id: b for b in bindings}
    selected = [resource for resource in use if resource in by_id]
    offers = {target.resource_id: target for target in offered}
    eligible = [r for r in selected if r in offers and offers[r].permitted]
    if requested is None:
        if len(eligible) == 1:
            return offers[eligible[0]]
        if len(eligible) > 1:
            raise InvalidToolArguments(
                f"{name} needs 'memory': more than one resource offers it ({', '.join(eligible)})."
            )
        if len(selected) != 1:
            return rejected("not_bound", bound=eligible)
        requested = selected[0]
    chosen = offers.get(requested) if isinstance(requested, str) and requested in selected else None
    if chosen is None:
        return rejected("not_bound", bound=eligible)
    if not chosen.permitted:
        return rejected(chosen.offer.refusal, bound=eligible)
    return chosen


@functools.cache
def _recall_names() -> tuple[str, ...]:
    """A recall's fields but `memory` (what the model was shown, up to the recall's
    whole projection), which no tool call reads: loaded if ever used."""
    return tuple(name for name in concrete_names(Recall) if name != "memory")


_RECALL_IN_SESSION = Compiled(
    lambda recall_id, session_id: Recall.objects.filter(
        pk=recall_id, session_id=session_id
    ).values_list(*joined_names(Recall, "session", _recall_names())),
    (str, str),
)


def _recall_in(session: Session, recall_id: str) -> Recall:
    """The session's recall `recall_id` with its session read with it, its state as it
    is now (the caller's may be older), or NotFound."""
    row = _RECALL_IN_SESSION.row(recall_id, session.pk)
    if row is None:
        raise NotFound(f"No recall '{recall_id}' in session {session.id}.")
    return joined_instance(Recall, "session", row, _recall_names())


def _judged(
    *, name: str, arguments: object, use: list[str], bindings: list[Binding], active: bool
) -> ToolTarget | Result:
    """The target of a call under a recall that selected `use`, or the answer it gets
    without reaching a kind: the tool and its arguments checked (errors), the target
    chosen (a rejection where there is none), then an ended session's rejection."""
    offers = _offers(bindings)
    offered = offers.get(name, [])
    # The kinds that know this tool: those offering it here, and those reserving its name.
    kinds = [p for p in providers() if name in p.reserved_tools]
    for target in offered:
        provider = _provider(target.binding)
        if provider is not None and provider not in kinds:
            kinds.append(provider)
    if not kinds:
        known = sorted({*(n for p in providers() for n in p.reserved_tools), *offers})
        raise InvalidRequest(f"Unknown tool '{name}'. Memory tools: {', '.join(known)}.")
    if not isinstance(arguments, dict):
        raise InvalidToolArguments(f"{name} arguments must be a JSON object.")
    for provider in kinds:
        provider.tool_check(name=name, arguments=arguments)
    chosen = _target(name, use, bindings, offered, arguments.get("memory"))
    if isinstance(chosen, ToolTarget) and not active:
        # An ended session takes no tool call, whatever the kind.
        return rejected("session_closed")
    return chosen


def tool_call(
    *,
    session: Session,
    recall_id: str,
    call_id: str,
    name: str,
    arguments: object,
    bindings: list[Binding] | None = None,
) -> Result:
    """Runs one memory tool call the model made in the response to a recall (`bindings`:
    the session's, as `session_bindings` reads them, where the caller has them)."""
    recall = _recall_in(session, recall_id)
    if not 1 <= len(call_id) <= CALL_ID_MAX:
        raise InvalidRequest(f"callId must be 1-{CALL_ID_MAX} characters.")
    if bindings is None:
        bindings = _bindings(session)
    chosen = _judged(
        name=name,
        arguments=arguments,
        use=recall.use,
        bindings=bindings,
        active=recall.session.is_active,
    )
    if not isinstance(chosen, ToolTarget):
        return chosen
    assert isinstance(arguments, dict)  # a call with a target has an object's arguments
    provider = _provider(chosen.binding)
    assert provider is not None

    def execute(_: object = None) -> Result:
        return provider.tool_execute(
            session=session, recall=recall, target=chosen, call_id=call_id, arguments=arguments
        )

    # The caller may cancel the call by its callId.
    with cancellation_scope(session_id=session.id, ref=call_id) as cancellation:
        if provider.recalls_here:
            return execute()
        if cancellation is not None and cancellation.poll():
            # Cancelled before it was sent, whatever the kind: nothing reached the
            # provider, so nothing is uncertain and no operation is left open.
            return dict(CANCELLED)
        # A kind that calls out counts against the project's bounds on provider calls,
        # whatever the kind: past them ProviderBusy (429) before anything is sent.
        deadline = Deadline.after()
        with ProviderCalls[Result](
            project_id=session.project_id, count=1, deadline=deadline
        ) as calls:
            return calls.one(execute)


def tool_call_ended(
    *, session: Session, name: str, arguments: object, bindings: list[Binding]
) -> Result:
    """The answer to a tool call with no recall to answer to, in a session that has ended
    (`session` and its `bindings` read after its recall was refused as closed): a door
    whose every call answers to a recall of every bound resource, made at its first
    call, has none where the session ended before that call. The call is judged as it
    is under such a recall, so it is answered as every call of an ended session is:
    an error for a malformed call, else a rejection (`session_closed` where it has a
    target). An active session's call answers to a recall (`tool_call`)."""
    if session.is_active:
        raise InvalidRequest("A tool call answers to a recall of its session: recall first.")
    use = [binding.resource.resource_id for binding in bindings]
    chosen = _judged(name=name, arguments=arguments, use=use, bindings=bindings, active=False)
    assert not isinstance(chosen, ToolTarget)
    return chosen


def call_cancel(*, session: Session, request_id: object = None, call_id: object = None) -> None:
    """Cancels a session's in-flight recall (by requestId) or tool call (by callId), on
    whichever instance runs it; nothing happens to calls that already ended."""
    if (request_id is None) == (call_id is None):
        raise InvalidRequest("Name exactly one of requestId (a recall) or callId (a tool call).")
    if request_id is not None:
        ref = _check_request_id(request_id)
    elif isinstance(call_id, str) and 1 <= len(call_id) <= CALL_ID_MAX:
        ref = call_id
    else:
        raise InvalidRequest(f"callId must be 1-{CALL_ID_MAX} characters.")
    cancel_request(session_id=session.id, ref=ref)
