"""Every provider kind holds the rules the runtime owns: one suite, run against each kind.

Each registered kind (document, http against a scripted provider, the four
external kinds against the fakes of tests/fake_providers.py) and the suite's
`echo` kind (tests/echo_provider.py, which writes none of these rules) is
bound the same way and asked the same things through the runtime: an ended
session takes no tool call and recalls nothing, a read binding never writes
and its memory is not writable, a recall and a tool call are refused at the
project's bounds (429), and a recall or a tool call when cancelled, before anything
reaches the provider. The last tests bind
an http and an external provider together: one deadline and one reservation
for the whole recall, both called at once.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from memoryadmin.agents.errors import RecallBusy, RecallFailed, SessionClosed
from memoryadmin.agents.models import EventType, ProviderOperation, Recall, Session, SessionEvent
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.agents.services.sessions import session_create, session_end
from memoryadmin.core.cancellation import cancel_request
from memoryadmin.core.concurrency import Deadline, ProviderCalls, concurrency_limit
from memoryadmin.core.errors import ProviderBusy
from memoryadmin.memory.models import Document, Project, Proposal
from memoryadmin.memory.providers import provider_kinds
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.documents import document_create
from memoryadmin.providers.services.secrets import secret_set
from tests.fake_providers import FakeMem0Oss, FakeServer, running
from tests.helpers import ScriptedProvider, deploy_external, serve
from tests.loopback import LoopbackServer

KINDS = [
    "document",
    "echo",
    "hindsight",
    "http",
    "mem0-oss",
    "mem0-platform",
    "vertex-memory-bank",
]
NAMESPACE = {"scope": "namespace", "id": "team"}
INPUT = {"type": "object", "properties": {"fact": {"type": "string"}}, "required": ["fact"]}
HTTP_TOOLS = [
    {"name": "remember", "description": "Keep.", "access": "write", "input": INPUT},
    {"name": "lookup", "description": "Find.", "access": "read", "input": INPUT},
]


@dataclass
class Kind:
    """One kind, deployed as resource `mem` of agent `archivist` in development."""

    name: str
    binding: dict[str, str]
    # A write tool and its arguments; the refusal a read binding's call of it gets.
    write: tuple[str, dict[str, Any]]
    refusal: str
    # What has reached the kind's store or provider so far (compared before and after).
    state: Callable[[], Any]
    # A read tool and its arguments, where the binding offers one.
    read: tuple[str, dict[str, Any]] | None = None
    # Whether a recall calls out (document memory is read here, in one query).
    calls_out: bool = True
    sessions: list[str] = field(default_factory=list)

    def session(self, project: Project, access: str) -> Session:
        session, _ = session_create(
            project=project,
            agent_id="archivist@development",
            memory={"mem": {**self.binding, "access": access}},
            labels={},
            idempotency_key=f"conform-{access}-{len(self.sessions)}",
            actor="test",
        )
        self.sessions.append(session.id)
        return session


def _sent(server: FakeServer) -> Callable[[], int]:
    return lambda: len(server.calls)


def _document(request: pytest.FixtureRequest, project: Project) -> Kind:
    resource = deploy_external(project, {"kind": "document"})
    document_create(
        resource=resource, doc_id="workshop", title="Workshop", text="Node 22.", actor="test"
    )

    def state() -> Any:
        document = Document.objects.get(resource=resource, doc_id="workshop")
        return document.revision, Proposal.objects.count()

    return Kind(
        name="document",
        binding={"scope": "document", "id": "workshop"},
        write=("memory_save", {"text": "Node 24."}),
        refusal="read_only",
        state=state,
        calls_out=False,
    )


def _http(request: pytest.FixtureRequest, project: Project) -> Kind:
    scripted: ScriptedProvider = request.getfixturevalue("scripted")
    declaration = scripted.declaration(HTTP_TOOLS)
    deploy_external(project, declaration["provider"])
    return Kind(
        name="http",
        binding=NAMESPACE,
        write=("memory_remember", {"fact": "Tabs."}),
        read=("memory_lookup", {"fact": "Tabs."}),
        refusal="not_bound",
        state=lambda: len(scripted.seen),
    )


def _external(
    name: str, fixture: str, provider: Callable[[Any], dict[str, Any]], secret: Callable[[Any], str]
) -> Callable[[pytest.FixtureRequest, Project], Kind]:
    def build(request: pytest.FixtureRequest, project: Project) -> Kind:
        server = request.getfixturevalue(fixture)
        declaration = provider(server)
        secret_name = next(
            value["secret"]
            for value in [*declaration.get("headers", {}).values(), *declaration.values()]
            if isinstance(value, dict) and "secret" in value
        )
        deploy_external(
            project, declaration, secrets_by_origin={server.origin: {secret_name: secret(server)}}
        )
        return Kind(
            name=name,
            binding=NAMESPACE,
            write=("memory_add", {"text": "Use tabs."}),
            read=("memory_search", {"query": "tabs"}),
            refusal="not_bound",
            state=_sent(server),
        )

    return build


def _echo(request: pytest.FixtureRequest, project: Project) -> Kind:
    echo = request.getfixturevalue("echo_kind")
    deploy_external(project, {"kind": "echo"})
    return Kind(
        name="echo",
        binding=NAMESPACE,
        write=("memory_note", {"text": "Use tabs."}),
        read=("memory_notes", {}),
        refusal="not_bound",
        state=lambda: json.dumps(sorted(echo.notes.items())),
    )


BUILDERS: dict[str, Callable[[pytest.FixtureRequest, Project], Kind]] = {
    "document": _document,
    "echo": _echo,
    "hindsight": _external(
        "hindsight",
        "hindsight",
        lambda s: {
            "kind": "hindsight",
            "baseUrl": s.origin,
            "bankId": "team-{namespace}",
            "headers": {"Authorization": {"secret": "HINDSIGHT_TOKEN", "scheme": "Bearer"}},
        },
        lambda s: "hindsight-test",
    ),
    "http": _http,
    "mem0-oss": _external(
        "mem0-oss",
        "mem0_oss",
        lambda s: {
            "kind": "mem0-oss",
            "baseUrl": s.origin,
            "scope": {"user_id": "{namespace}"},
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        lambda s: "mem0-test-key",
    ),
    "mem0-platform": _external(
        "mem0-platform",
        "mem0_platform",
        lambda s: {
            "kind": "mem0-platform",
            "baseUrl": s.origin,
            "apiKey": {"secret": "MEM0_API_KEY"},
            "orgId": "org-1",
            "projectId": "proj-1",
            "scope": {"user_id": "{namespace}"},
        },
        lambda s: "mem0-platform-key",
    ),
    "vertex-memory-bank": _external(
        "vertex-memory-bank",
        "vertex",
        lambda s: {
            "kind": "vertex-memory-bank",
            "baseUrl": s.origin,
            "project": "acme-prod",
            "location": "us-central1",
            "reasoningEngine": "4242",
            "credentials": {"secret": "VERTEX_SA", "type": "service-account"},
            "scope": {"user_id": "{namespace}"},
        },
        lambda s: s.account_json(),
    ),
}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, project: Project) -> Kind:
    return BUILDERS[request.param](request, project)


def call(session: Session, recall_id: str, name: str, arguments: dict[str, Any]) -> Any:
    return tool_call(
        session=session, recall_id=recall_id, call_id="c1", name=name, arguments=arguments
    )


def test_every_registered_kind_is_in_the_suite(echo_kind: Any) -> None:
    assert sorted(provider_kinds()) == KINDS


def test_a_read_write_binding_recalls_writable_memory_and_writes(
    kind: Kind, project: Project
) -> None:
    session = kind.session(project, "read-write")
    recalled = recall_create(session=session, use=["mem"], input_text="tabs")
    assert recalled["memory"]["mem"]["writable"] is True
    assert kind.write[0] in [tool["name"] for tool in recalled["tools"]]
    before = kind.state()
    result = call(session, recalled["recallId"], *kind.write)
    assert result.get("status") != "rejected", result
    assert "error" not in result, result
    assert kind.state() != before


def test_a_read_binding_never_writes(kind: Kind, project: Project) -> None:
    session = kind.session(project, "read")
    recalled = recall_create(session=session, use=["mem"], input_text="tabs")
    assert recalled["memory"]["mem"]["writable"] is False
    assert kind.write[0] not in [tool["name"] for tool in recalled["tools"]]
    before = kind.state()
    result = call(session, recalled["recallId"], *kind.write)
    assert result == {"status": "rejected", "reason": kind.refusal, "bound": []}
    assert kind.state() == before
    if kind.read is not None:
        assert kind.read[0] in [tool["name"] for tool in recalled["tools"]]


def test_an_ended_session_takes_no_tool_call(kind: Kind, project: Project) -> None:
    session = kind.session(project, "read-write")
    recalled = recall_create(session=session, use=["mem"], input_text="tabs")
    session_end(session=session, actor="test")
    before = kind.state()
    for name, arguments in [kind.write, *([kind.read] if kind.read else [])]:
        result = call(session, recalled["recallId"], name, arguments)
        assert result == {"status": "rejected", "reason": "session_closed"}, name
    assert kind.state() == before


def test_an_ended_session_recalls_nothing(kind: Kind, project: Project) -> None:
    session = kind.session(project, "read-write")
    session_end(session=session, actor="test")
    before = kind.state()
    with pytest.raises(SessionClosed):
        recall_create(session=Session.objects.get(pk=session.pk), use=["mem"])
    assert kind.state() == before
    assert not Recall.objects.filter(session=session).exists()


def test_a_recall_at_the_projects_bound_is_refused_before_anything_is_sent(
    kind: Kind, project: Project
) -> None:
    session = kind.session(project, "read-write")
    before = kind.state()
    held = ProviderCalls[Any](
        project_id=project.id, count=concurrency_limit(), deadline=Deadline.after()
    )
    with held:
        if not kind.calls_out:
            assert recall_create(session=session, use=["mem"])["memory"]["mem"]["text"]
            return
        with pytest.raises(RecallBusy) as refused:
            recall_create(session=session, use=["mem"], input_text="tabs")
    assert refused.value.status == 429
    assert refused.value.details["resource"] == "mem"
    assert refused.value.details["reason"] == "concurrency_limit"
    assert kind.state() == before
    assert not Recall.objects.filter(session=session).exists()


def test_a_tool_call_at_the_projects_bound_is_refused_before_anything_is_sent(
    kind: Kind, project: Project
) -> None:
    session = kind.session(project, "read-write")
    recalled = recall_create(session=session, use=["mem"], input_text="tabs")
    before = kind.state()
    held = ProviderCalls[Any](
        project_id=project.id, count=concurrency_limit(), deadline=Deadline.after()
    )
    with held:
        if not kind.calls_out:
            assert call(session, recalled["recallId"], *kind.write)["status"] == "saved"
            return
        for name, arguments in [kind.write, *([kind.read] if kind.read else [])]:
            with pytest.raises(ProviderBusy) as refused:
                call(session, recalled["recallId"], name, arguments)
            # The API's 429 with Retry-After, MCP's refusal: never a tool result.
            assert refused.value.status == 429, name
            assert refused.value.code == "provider_failed"
            assert refused.value.details["reason"] == "concurrency_limit"
    assert kind.state() == before


def test_a_cancelled_recall_fails_as_cancelled_before_anything_is_sent(
    kind: Kind, project: Project
) -> None:
    session = kind.session(project, "read-write")
    cancel_request(session_id=session.id, ref="model-request-1")
    before = kind.state()
    if not kind.calls_out:
        # Nothing is in flight to cancel: memory read here is read.
        recall_create(session=session, use=["mem"], request_id="model-request-1")
        return
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["mem"], request_id="model-request-1")
    assert failed.value.details == {"resource": "mem", "reason": "cancelled"}
    assert kind.state() == before
    assert not Recall.objects.filter(session=session).exists()


def test_a_cancelled_tool_call_is_answered_cancelled_before_anything_is_sent(
    kind: Kind, project: Project
) -> None:
    """A call its caller cancelled (by its callId) before it started is not sent, and
    leaves no open operation: nothing reached the provider, so nothing is uncertain."""
    session = kind.session(project, "read-write")
    recalled = recall_create(session=session, use=["mem"], input_text="tabs")
    cancel_request(session_id=session.id, ref="c1")
    before = kind.state()
    if not kind.calls_out:
        # Nothing is in flight to cancel: memory kept here is written here.
        assert call(session, recalled["recallId"], *kind.write)["status"] == "saved"
        return
    for name, arguments in [kind.write, *([kind.read] if kind.read else [])]:
        result = call(session, recalled["recallId"], name, arguments)
        assert result == {"status": "cancelled"}, name
    assert kind.state() == before
    assert not ProviderOperation.objects.exists()
    assert not SessionEvent.objects.filter(session=session, type=EventType.RECORD_SAVED).exists()


# One recall binding an http and an external provider: one deadline, one reservation,
# both called at once.


class SlowHttpProvider(LoopbackServer):
    """An http provider answering every recall after `delay` seconds; remembers each body
    and when it arrived."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, delay: float) -> None:
        super().__init__(("127.0.0.1", 0), _SlowHandler)
        self.delay = delay
        self.arrived: list[tuple[float, dict[str, Any]]] = []

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _SlowHandler(BaseHTTPRequestHandler):
    server: SlowHttpProvider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.arrived.append((time.monotonic(), body))
        time.sleep(self.server.delay)
        data = json.dumps({"text": "From http.", "sources": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the host left at its deadline
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SlowMem0(FakeMem0Oss):
    """Mem0 OSS answering every request after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(api_key="mem0-test-key")
        self.delay = delay
        self.arrivals: list[float] = []

    def dispatch(self, call: Any) -> tuple[int, Any]:
        self.arrivals.append(time.monotonic())
        time.sleep(self.delay)
        return super().dispatch(call)


@pytest.fixture
def both(project: Project, request: pytest.FixtureRequest) -> Iterator[Any]:
    """An http provider answering after `http_delay` and Mem0 OSS after `mem0_delay`
    (the test's parameters), bound together in one session."""
    http_delay, mem0_delay = request.param
    with running(SlowMem0(mem0_delay)) as mem0:
        for http in serve(SlowHttpProvider(http_delay)):
            secret_set(
                project=project,
                environment="development",
                name="MEM0_KEY",
                value="mem0-test-key",
                origins=[mem0.origin],
                actor="t",
            )
            ledger = {
                "id": "ledger",
                "description": "Facts.",
                "provider": {
                    "kind": "http",
                    "connection": {
                        "id": "slow",
                        "origin": http.origin,
                        "methods": ["POST"],
                        "pathPrefix": "/memory",
                    },
                    "path": "/memory",
                },
            }
            mem = {
                "id": "mem",
                "description": "External.",
                "provider": {
                    "kind": "mem0-oss",
                    "baseUrl": mem0.origin,
                    "scope": {"user_id": "{namespace}"},
                    "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
                },
            }
            deployment_create(
                project=project,
                agent="archivist",
                memory=[ledger, mem],
                promote="development",
                actor="t",
            )
            session, _ = session_create(
                project=project,
                agent_id="archivist@development",
                memory={
                    "ledger": {**NAMESPACE, "access": "read-write"},
                    "mem": {**NAMESPACE, "access": "read-write"},
                },
                labels={},
                idempotency_key="both",
                actor="test",
            )
            yield session, http, mem0


@pytest.mark.parametrize("both", [(7.0, 7.0)], indirect=True)
def test_an_http_and_an_external_provider_answering_in_7_s_recall_in_7_s(
    both: Any, project: Project
) -> None:
    session, http, mem0 = both
    started = time.monotonic()
    at_start = datetime.now(UTC)
    recalled = recall_create(session=session, use=["ledger", "mem"], input_text="tabs")
    took = time.monotonic() - started
    assert recalled["memory"]["ledger"]["text"] == "From http."
    assert recalled["memory"]["mem"]["text"] == ""
    assert 6.9 < took < 9.5, took
    # Called together, within the one deadline the http request carries.
    [(http_arrived, body)] = http.arrived
    assert len(mem0.arrivals) == 1
    assert abs(http_arrived - mem0.arrivals[0]) < 1.0
    deadline = datetime.fromisoformat(body["deadlineAt"].replace("Z", "+00:00"))
    assert 9.0 < (deadline - at_start).total_seconds() < 11.0
    assert Recall.objects.filter(session=session).count() == 1


@pytest.mark.parametrize("both", [(1.0, 6.0)], indirect=True)
def test_the_external_call_ends_at_the_deadline_the_http_request_carried(
    both: Any, project: Project, settings: Any
) -> None:
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 3
    session, http, _ = both
    with pytest.raises(RecallFailed) as failed:
        recall_create(session=session, use=["ledger", "mem"], input_text="tabs")
    ended = datetime.now(UTC)
    assert failed.value.details["resource"] == "mem"
    assert failed.value.details["reason"] == "provider_failed"
    [(_, body)] = http.arrived
    deadline = datetime.fromisoformat(body["deadlineAt"].replace("Z", "+00:00"))
    # Cut at the http request's deadline, not at a deadline of its own begun later.
    assert abs((ended - deadline).total_seconds()) < 0.6, (ended, deadline)
    assert not Recall.objects.filter(session=session).exists()


def test_one_reservation_holds_every_kinds_calls_of_a_recall(
    project: Project, scripted: ScriptedProvider, echo_kind: Any
) -> None:
    """An http and an echo binding take two call slots of one reservation: with one slot
    free the recall is refused whole, before either is called."""
    ledger = scripted.declaration(HTTP_TOOLS)
    echo = {"id": "scratch", "description": "Echoed.", "provider": {"kind": "echo"}}
    deployment_create(
        project=project, agent="archivist", memory=[ledger, echo], promote="development", actor="t"
    )
    session, _ = session_create(
        project=project,
        agent_id="archivist@development",
        memory={
            "ledger": {**NAMESPACE, "access": "read-write"},
            "scratch": {**NAMESPACE, "access": "read-write"},
        },
        labels={},
        idempotency_key="one-reservation",
        actor="test",
    )
    held = ProviderCalls[Any](
        project_id=project.id, count=concurrency_limit() - 1, deadline=Deadline.after()
    )
    with held, pytest.raises(RecallBusy):
        recall_create(session=session, use=["ledger", "scratch"])
    assert scripted.seen == []
    assert not Recall.objects.filter(session=session).exists()
    recall_create(session=session, use=["ledger", "scratch"])
    assert len(scripted.requests("recall")) == 1
