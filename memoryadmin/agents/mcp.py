"""The Model Context Protocol door: one session's memory over MCP, on the official SDK.

A thin door over the runtime. The tools are exactly those a recall offers (the
runtime defines them and their JSON schemas), plus `memory_recall`; a tool call
runs `runtime.tool_call` under the connection's latest recall and answers the
runtime's result object. Reading memory, through the `memory://<resource>`
resources or the `memory_recall` tool, is a new recall: saves after it are
checked against what it read, exactly as for an agent host over HTTP.

Two transports serve it: stdio for one session (`manage.py mcp`), and
streamable HTTP at `/mcp/` (`manage.py mcp --http`), one memoryadmin session per
MCP session, authenticated with the `x-api-key` header, on a Host and from an
Origin that the Django settings allow (the SDK's DNS rebinding protection). The
handlers' sync work runs on a pool of threads, each project within its share
(mcp_threads.py).
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import parse_qs

import mcp_types as types
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount
from starlette.types import Message, Receive, Scope, Send

from memoryadmin import __version__
from memoryadmin.agents.errors import SessionClosed
from memoryadmin.agents.kinds import RECALL_TOOL
from memoryadmin.agents.management.commands.session import memory_options
from memoryadmin.agents.mcp_threads import Threads
from memoryadmin.agents.models import Binding, Session
from memoryadmin.agents.services import runtime
from memoryadmin.agents.services.sessions import (
    IDEMPOTENCY_KEY_MAX,
    check_idempotency_key,
    session_create,
    session_get_with_bindings,
)
from memoryadmin.core.errors import (
    DomainError,
    InvalidRequest,
    InvalidToolArguments,
    ToolCollision,
    Unauthorized,
    envelope_of,
    error_envelope,
)
from memoryadmin.core.jsonbody import BODY_MAX_BYTES, content_coding_check
from memoryadmin.core.queries import given_once_check
from memoryadmin.core.strings import strings_check
from memoryadmin.memory.models import ApiKey, Project
from memoryadmin.memory.services.key_usage import key_usage_count
from memoryadmin.memory.services.keys import api_key_authenticate
from memoryadmin.memory.services.projects import project_for_key
from memoryadmin.memory.services.rate_limits import request_count

SERVER_NAME = "memoryadmin"
RESOURCE_SCHEME = "memory://"
# How many MCP sessions of the HTTP endpoint one process remembers (as the SDK's own cap).
HTTP_SESSIONS_MAX = 10_000
INSTRUCTIONS = (
    "This server is the memory of one agent session. Read memory first (the "
    "memory://<resource> resources, or the memory_recall tool): a save only succeeds if "
    "the document is unchanged since memory was last read. On a conflict, read memory "
    "again, reconcile, then save."
)
RECALL_DEFINITION: dict[str, Any] = {
    "name": RECALL_TOOL,
    "description": (
        "Read this session's memory again (every bound resource). Saves are checked "
        "against the memory read last: after a conflict, call this, reconcile, then save."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": "What the next step is about; some memory providers use it.",
            }
        },
        "additionalProperties": False,
    },
}
CONFLICT_HINT = (
    "The document changed since memory was last read; the current text and summary are "
    "above. Call memory_recall (or read the resource) before saving again."
)


@dataclass
class MemoryDoor:
    """One session as an MCP connection sees it: its latest recall decides saves.

    Its calls may run at once on different threads: each reads the latest recall
    when it starts, as an agent host's concurrent requests would.
    """

    session_id: str
    project_id: str
    recall: dict[str, Any] | None = field(default=None)

    def _session(self, *, with_documents: bool = False) -> tuple[Session, list[Binding]]:
        """The session and its bindings (by resource id) in one query; `with_documents`:
        with the bound documents, as a recall reads them."""
        return session_get_with_bindings(session_id=self.session_id, with_documents=with_documents)

    @staticmethod
    def _bound(bindings: list[Binding]) -> list[str]:
        return [binding.resource.resource_id for binding in bindings]

    def recall_now(self, input_text: str | None = None) -> dict[str, Any]:
        """A new recall of every bound resource; later tool calls answer to it."""
        session, bindings = self._session(with_documents=True)
        self.recall = runtime.recall_create(
            session=session, use=self._bound(bindings), input_text=input_text, bindings=bindings
        )
        return self.recall

    def tools(self) -> list[dict[str, Any]]:
        if self.recall is None:
            try:
                self.recall_now()
            except SessionClosed:
                # Ended before this connection read its memory: the tools its recall
                # would have offered, each call answered as after a recall (`call`).
                session, bindings = self._session()
                return _with_own(runtime.tool_definitions(session=session, selected=bindings))
        assert self.recall is not None
        return _with_own(self.recall["tools"])

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """The runtime's result of one tool call (an http provider's is any JSON value); a
        DomainError for a refused call."""
        strings_check(arguments, field="arguments")
        if name == RECALL_TOOL:
            unknown = set(arguments) - {"input"}
            text = arguments.get("input")
            if unknown or not isinstance(text, str | None):
                # As the runtime refuses its own tools' malformed arguments.
                raise InvalidToolArguments(f"{RECALL_TOOL} takes only 'input', a string.")
            recall = self.recall_now(text)
            return {"recallId": recall["recallId"], "memory": recall["memory"]}
        latest = self.recall
        if latest is None:
            try:
                latest = self.recall_now()
            except SessionClosed:
                # Ended before this connection read its memory: answered as its calls
                # after a recall are, not as the refused recall.
                session, bindings = self._session()
                return runtime.tool_call_ended(
                    session=session, name=name, arguments=arguments, bindings=bindings
                )
        session, bindings = self._session()
        return runtime.tool_call(
            session=session,
            bindings=bindings,
            recall_id=latest["recallId"],
            call_id="call_" + secrets.token_hex(12),
            name=name,
            arguments=arguments,
        )

    def resources(self) -> list[types.Resource]:
        session, bindings = self._session()
        described = {d["id"]: d.get("description", "") for d in session.deployment.memory}
        return [
            types.Resource(
                uri=RESOURCE_SCHEME + resource,
                name=resource,
                description=described.get(resource) or None,
                mime_type="text/plain",
            )
            for resource in self._bound(bindings)
        ]

    def read(self, uri: str) -> str:
        resource = uri.removeprefix(RESOURCE_SCHEME)
        _, bindings = self._session()
        if not uri.startswith(RESOURCE_SCHEME) or resource not in self._bound(bindings):
            raise InvalidRequest(f"No resource {uri!r}; this session reads memory://<resource>.")
        text: str = self.recall_now()["memory"][resource]["text"]
        return text


def _with_own(offered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runtime's tools and the door's. Admission refuses a declared tool named as one
    of the door's (`kinds.DOOR_TOOLS`); a session admitted while a name was free is
    refused here rather than served with one of the two out of reach."""
    for tool in offered:
        if tool["name"] == RECALL_TOOL:
            raise ToolCollision(
                f"This session offers a tool {RECALL_TOOL}, which collides with the MCP "
                "server's own; end the session and declare the tool under another name."
            )
    return [*offered, RECALL_DEFINITION]


def _error_result(exc: DomainError) -> types.CallToolResult:
    body = envelope_of(exc)
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(body))], structured_content=body, is_error=True
    )


def _result(result: Any) -> types.CallToolResult:
    """A tool's result as the model receives it. An http provider's `result` is any JSON
    value, passed on unchanged as text; MCP's structured content is an object, so a result
    that is not one has none."""
    content: list[types.ContentBlock] = [
        types.TextContent(text=json.dumps(result, ensure_ascii=False))
    ]
    if not isinstance(result, dict):
        return types.CallToolResult(content=content)
    if result.get("status") == "conflict":
        content.append(types.TextContent(text=CONFLICT_HINT))
    return types.CallToolResult(content=content, structured_content=result)


def _mcp_error(exc: DomainError) -> MCPError:
    """A refusal as the MCP error of a request, with the API's envelope as its data."""
    return MCPError(
        code=types.INVALID_PARAMS, message=f"{exc.code}: {exc.message}", data=envelope_of(exc)
    )


DoorFor = Callable[[ServerRequestContext[Any, Any]], Awaitable[MemoryDoor]]


def build_server(door_for: DoorFor, threads: Threads, *, sessions: bool = False) -> Server[Any]:
    """The MCP server of memory doors; `door_for` finds a request's door, whose work runs
    on `threads` within its project's share.

    With `sessions`, clients are sent to the handshake era, whose MCP sessions
    (Mcp-Session-Id) the HTTP endpoint maps to memoryadmin sessions.
    """

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        door = await door_for(ctx)
        try:
            tools = await threads.run(door.project_id, door.tools)
        except DomainError as exc:
            raise _mcp_error(exc) from exc
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"], description=t["description"], input_schema=t["inputSchema"]
                )
                for t in tools
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        door = await door_for(ctx)
        try:
            arguments = dict(params.arguments or {})
            result = await threads.run(door.project_id, door.call, params.name, arguments)
        except DomainError as exc:
            return _error_result(exc)
        return _result(result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        door = await door_for(ctx)
        try:
            resources = await threads.run(door.project_id, door.resources)
        except DomainError as exc:
            raise _mcp_error(exc) from exc
        return types.ListResourcesResult(resources=resources)

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        door = await door_for(ctx)
        try:
            text = await threads.run(door.project_id, door.read, params.uri)
        except DomainError as exc:
            raise _mcp_error(exc) from exc
        contents = types.TextResourceContents(uri=params.uri, mime_type="text/plain", text=text)
        return types.ReadResourceResult(contents=[contents])

    async def no_discover(
        ctx: ServerRequestContext[Any, Any], params: types.RequestParams | None
    ) -> types.DiscoverResult:
        raise MCPError(code=types.METHOD_NOT_FOUND, message="Use initialize.")

    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
    if sessions:
        server.add_request_handler("server/discover", types.RequestParams, no_discover)
    return server


# Stdio: one session, created (or rejoined) before serving.


def door_open(
    *,
    project: Project,
    agent_id: str,
    memory: Mapping[str, Any],
    idempotency_key: str,
    actor: str,
) -> MemoryDoor:
    """The door of the session this key created (or creates now) with these inputs.

    An ended session is refused: its memory is read-only for good, so a client
    needs a new key for a new session.
    """
    session, _ = session_create(
        project=project,
        agent_id=agent_id,
        memory=dict(memory),
        idempotency_key=idempotency_key,
        actor=actor,
    )
    if not session.is_active:
        raise SessionClosed(
            f"Session {session.id} (key {idempotency_key!r}) has ended; use a new key."
        )
    return MemoryDoor(session_id=session.id, project_id=project.id)


async def serve_stdio(door: MemoryDoor) -> None:
    """Serves one door over standard input and output until the client goes."""

    async def door_for(ctx: ServerRequestContext[Any, Any]) -> MemoryDoor:
        return door

    server = build_server(door_for, Threads())
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# Streamable HTTP: an API key per request, a memoryadmin session per MCP session.


@dataclass(frozen=True)
class HttpConfig:
    """What an MCP URL asks for, e.g. `?agent=support-bot@development&memory=notes=workshop`
    (`memory` and `namespace` as `manage.py session create` takes them, repeatable;
    `project` for keys that reach every project; `session` to rejoin a session)."""

    key: ApiKey
    project: Project
    agent_id: str
    memory: dict[str, dict[str, str]]
    session_key: str | None

    def opener(self) -> AuthenticatedUser:
        """Who asks, as the SDK's session manager compares it: the key and all the URL
        says (another `session=` is another memoryadmin session). The manager records
        it when it creates an MCP session and answers any other asker of that session
        as it answers an unknown one (404), so a session belongs to its opener from
        `initialize` on, not from its first call, and its existence does not leak."""
        asks = [self.key.pk, self.project.id, self.agent_id, self.memory, self.session_key]
        identity = json.dumps(asks, sort_keys=True, separators=(",", ":"))
        return AuthenticatedUser(AccessToken(token=self.key.prefix, client_id=identity, scopes=[]))


# An HTTP session's Idempotency-Key: this before the URL's `session` (or the MCP session's id).
HTTP_SESSION_KEY_PREFIX = "mcp/"


def _session_name(value: str | None) -> str | None:
    """The URL's `session`, refused with the URL where the session's key cannot hold it."""
    if value is None:
        return None
    longest = IDEMPOTENCY_KEY_MAX - len(HTTP_SESSION_KEY_PREFIX)
    refused = InvalidRequest(
        f"session is 1-{longest} printable ASCII characters.", details={"field": "query.session"}
    )
    if not value:
        raise refused
    try:
        check_idempotency_key(HTTP_SESSION_KEY_PREFIX + value)
    except InvalidRequest as exc:
        raise refused from exc
    return value


def http_config(raw_key: str | None, query: str) -> HttpConfig:
    """The request's key and what it asks for, checked before the SDK sees the request."""
    if not raw_key:
        raise Unauthorized("An API key is required in the x-api-key header.")
    key = api_key_authenticate(raw=raw_key.strip())
    if key is None:
        raise Unauthorized("The API key is not valid.")
    try:
        request_count(key)  # the key's and its project's rates, and its usage, as on the API
        return _config_of(key, query)
    except DomainError as exc:
        # Its usage counts the refusal by kind (a 429 or an error), as the API's does.
        key_usage_count(key_id=key.pk, status=exc.status, requests_counted=True)
        raise


def _config_of(key: ApiKey, query: str) -> HttpConfig:
    values = parse_qs(query, keep_blank_values=True)
    strings_check(values, field="query")
    unknown = set(values) - {"project", "agent", "memory", "namespace", "session"}
    if unknown:
        raise InvalidRequest(f"Unknown query parameters: {', '.join(sorted(unknown))}.")
    given_once_check(values, repeatable=frozenset({"memory", "namespace"}))
    one = {name: values.get(name, [None]) for name in ("project", "agent", "session")}
    if not one["agent"][0]:
        raise InvalidRequest("agent=<agent>@<environment> is required in the URL.")
    project_id = one["project"][0] or key.project_id
    if project_id is None:
        raise InvalidRequest("project=<id> is required for keys that reach every project.")
    try:
        memory = memory_options(
            {"memory": values.get("memory", []), "namespace": values.get("namespace", [])}
        )
    except CommandError as exc:
        raise InvalidRequest(str(exc)) from exc
    return HttpConfig(
        key=key,
        project=project_for_key(key=key, project_id=project_id, write=True),
        agent_id=one["agent"][0],
        memory=memory,
        session_key=_session_name(one["session"][0]),
    )


class HttpDoors:
    """The doors of the HTTP endpoint's MCP sessions (at most HTTP_SESSIONS_MAX).

    A request reaches its session's door only as the session's opener: the SDK's
    session manager refuses anyone else first (HttpConfig.opener). Requests of the era
    without sessions, which the manager serves without that check, are refused.
    """

    def __init__(self, threads: Threads) -> None:
        self.threads = threads
        # MCP session id -> its door.
        self._doors: OrderedDict[str, MemoryDoor] = OrderedDict()

    async def door_for(self, ctx: ServerRequestContext[Any, Any]) -> MemoryDoor:
        request = ctx.request
        if not isinstance(request, Request):
            raise MCPError(code=types.INTERNAL_ERROR, message="No HTTP request.")
        if ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # A request of the era without sessions: its Mcp-Session-Id header, if any, is
            # nobody's word (the SDK checks it, and its opener, only in the handshake era).
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Use initialize.")
        mcp_session = request.headers.get("mcp-session-id", "")
        config: HttpConfig = request.state.memoryadmin
        door = self._doors.get(mcp_session)
        if door is None:
            try:
                opening = partial(
                    door_open,
                    project=config.project,
                    agent_id=config.agent_id,
                    memory=config.memory,
                    idempotency_key=HTTP_SESSION_KEY_PREFIX + (config.session_key or mcp_session),
                    actor=f"key:{config.key.prefix}",
                )
                door = await self.threads.run(config.project.id, opening)
            except DomainError as exc:
                raise _mcp_error(exc) from exc
            self._doors[mcp_session] = door
            while len(self._doors) > HTTP_SESSIONS_MAX:
                self._doors.popitem(last=False)
        self._doors.move_to_end(mcp_session)
        return door


# Host and Origin as Django's settings allow them, checked by the SDK's DNS rebinding
# protection; its refusals as the API's error envelope.
HOST_REFUSALS = {
    421: (
        "misdirected_request",
        "This server does not answer to this Host (DJANGO_ALLOWED_HOSTS).",
    ),
    403: (
        "forbidden",
        "This server does not accept requests from this Origin (DJANGO_CSRF_TRUSTED_ORIGINS "
        "and the allowed hosts' own origins).",
    ),
}


def transport_security() -> TransportSecuritySettings:
    """The SDK's Host and Origin check, configured from Django's settings.

    A Host is allowed when it is one of ALLOWED_HOSTS, on any port. An Origin is
    allowed when it is one of CSRF_TRUSTED_ORIGINS, or http or https on an allowed
    host (any port); a request without one (not from a browser) is allowed. The
    SDK compares names exactly: a pattern (`*`, `.example.com`, `https://*.example.com`)
    is refused here, before the endpoint serves anything.
    """
    hosts = [host.lower() for host in settings.ALLOWED_HOSTS]
    if settings.DEBUG and not hosts:
        hosts = ["localhost", "127.0.0.1", "[::1]"]  # Django's own, without patterns
    origins = list(settings.CSRF_TRUSTED_ORIGINS)
    patterns = [h for h in hosts if h == "*" or h.startswith(".")] + [
        o for o in origins if "*" in o
    ]
    if patterns:
        raise ImproperlyConfigured(
            f"The MCP endpoint checks Host and Origin against exact names, and "
            f"{', '.join(repr(p) for p in patterns)} is a pattern: give this process "
            "DJANGO_ALLOWED_HOSTS (and DJANGO_CSRF_TRUSTED_ORIGINS) that name its hosts."
        )
    on_any_port = [name for host in hosts for name in (host, f"{host}:*")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=on_any_port,
        allowed_origins=[
            *origins,
            *(f"{scheme}://{name}" for scheme in ("http", "https") for name in on_any_port),
        ],
    )


def http_app() -> Starlette:
    """The streamable-HTTP endpoint at /mcp/: Host and Origin checked, then the API key."""
    threads = Threads()
    doors = HttpDoors(threads)
    # The Host and Origin check runs first, before the key is read; the transport then
    # checks only what it checks without it (Content-Type).
    security = TransportSecurityMiddleware(transport_security())
    manager = StreamableHTTPSessionManager(
        app=build_server(doors.door_for, threads, sessions=True),
        max_request_body_size=BODY_MAX_BYTES,
    )

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        refused = await security.validate_request(request)
        if refused is not None:
            code, message = HOST_REFUSALS.get(
                refused.status_code, ("invalid_request", bytes(refused.body).decode())
            )
            body = error_envelope(code, message)
            await JSONResponse(body, status_code=refused.status_code)(scope, receive, send)
            return
        try:
            content_coding_check(request.headers.get("content-encoding"))
            checked = await threads.run(
                None, http_config, request.headers.get("x-api-key"), request.url.query
            )
        except DomainError as exc:
            # A refusal, or the database unable to serve (503 with Retry-After, as the
            # API answers: mcp_threads.py), in the API's envelope.
            answer = JSONResponse(envelope_of(exc), exc.status, exc.headers())
            await answer(scope, receive, send)
            return
        scope.setdefault("state", {})["memoryadmin"] = checked
        scope["user"] = checked.opener()
        status = 0

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        await manager.handle_request(scope, receive, sent)
        if status >= 400:
            # The SDK's refusals (an unknown MCP session, a body that is not JSON-RPC, ...)
            # count in the key's usage as errors, as the API's do.
            count = partial(
                key_usage_count, key_id=checked.key.pk, status=status, requests_counted=True
            )
            await threads.run(None, count)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=endpoint)], lifespan=lifespan)
