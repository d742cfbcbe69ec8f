"""Vertex AI Agent Engine Memory Bank: a reasoning engine's memories and their operations.

Followed: the aiplatform REST reference for `projects.locations.reasoningEngines.memories`
(v1beta1) and googleapis/python-aiplatform `vertexai/_genai/memories.py` and
`memory_revisions.py` (the generated SDK, 2026). Under
`/v1beta1/projects/{project}/locations/{location}/reasoningEngines/{engine}`:

- create: `POST .../memories` `{"fact", "scope"}`, a long-running operation whose
  `response` is the Memory;
- generate: `POST .../memories:generate` `{"directContentsSource": {"events": [...]}, "scope"}`,
  an operation whose `response.generatedMemories` lists `{"memory": {"name"}, "action"}`;
- retrieve: `POST .../memories:retrieve` `{"scope", "similaritySearchParams": {"searchQuery",
  "topK"}}` or `{"scope", "simpleRetrievalParams": {"pageSize", "pageToken"}}`, answering
  `{"retrievedMemories": [{"memory", "distance"}], "nextPageToken"}`;
- get: `GET .../memories/{id}`; patch: `PATCH .../memories/{id}?updateMask=fact` and
  delete: `DELETE .../memories/{id}`, both operations;
- revisions: `GET .../memories/{id}/revisions`: `{"memoryRevisions": [{"fact",
  "createTime"}], "nextPageToken"}`;
- operations: `GET /v1beta1/{operation name}`: `{"name", "done", "response" | "error"}`.

Errors are Google's `{"error": {"code", "message", "status"}}` (google.rpc.Status): a
memory the engine does not have is 404 `NOT_FOUND` so; any other 404 (Google's front
end answers a path it does not serve with an HTML page) names no memory. Credentials come
from one managed secret: a service-account key (JSON on one line), exchanged at
its `token_uri` for an access token (OAuth 2.0 JWT bearer grant, RS256), or a
bearer token as it is. Tokens are cached in this process until a minute before
they expire (at most TOKEN_CACHE_MAX of them).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from typing import Any
from urllib.parse import quote

from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.exchange import Reply
from memoryadmin.core.inputs import whole_number
from memoryadmin.external.base import (
    ExternalProvider,
    OperationState,
    Pending,
    Remote,
    RemoteStore,
    _scope_normalize,
    text_at,
)
from memoryadmin.external.transport import Connection, reply_usable, secret_value
from memoryadmin.external.urls import HTTPS_ONLY, base_url_check
from memoryadmin.memory.providers import Result
from memoryadmin.providers.declarations import SECRET_NAME_RE

KIND = "vertex-memory-bank"
API_VERSION = "v1beta1"
PAGE_SIZE = 50
PROJECT_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
LOCATION_RE = re.compile(r"[a-z0-9-]{1,63}")
ENGINE_RE = re.compile(r"[0-9]{1,32}")
MEMORY_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
CREDENTIAL_TYPES = {"service-account", "bearer-token"}
ADD_MODES = {"create", "generate"}
JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
SCOPE_CLOUD = "https://www.googleapis.com/auth/cloud-platform"
TOKEN_CACHE_MAX = 256
# What an access token may be (RFC 6750's b64token): sent as a header value, so nothing
# else a token endpoint answers is used, or kept.
ACCESS_TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/-]{1,4096}=*")
_tokens: dict[str, tuple[str, float]] = {}
_tokens_lock = threading.Lock()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def signed_assertion(account: dict[str, Any], now: float) -> str:
    """The RS256 JWT a service account presents at its token_uri."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the service account key is not an RSA key")
    header = {"alg": "RS256", "typ": "JWT", "kid": account.get("private_key_id", "")}
    claims = {
        "iss": account["client_email"],
        "scope": SCOPE_CLOUD,
        "aud": account["token_uri"],
        "iat": int(now),
        "exp": int(now) + 3600,
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def under_engine(name: object, parent: str) -> str | None:
    """What follows the reasoning engine `parent` in a resource name the provider
    answered (`None` when the name is not under it). Google answers a project by its
    number where it was asked by its id (or the reverse), so the project's segment may be
    either; the location and the engine must be the declared ones."""
    if not isinstance(name, str):
        return None
    engine = parent.removeprefix("projects/").partition("/")[2]
    head, slash, rest = name.removeprefix("projects/").partition("/")
    if not name.startswith("projects/") or not head or not slash:
        return None
    if not rest.startswith(engine + "/"):
        return None
    return rest.removeprefix(engine + "/")


def memory_id_of(name: object, parent: str) -> str:
    """The memory id of a Memory's resource name, `{parent}/memories/{id}`, as answered
    ("" when the name is not one of `parent`'s memories, `under_engine`): checked with the
    answer's other ids (`record_id_valid`)."""
    rest = under_engine(name, parent)
    if rest is None or not rest.startswith("memories/"):
        return ""
    return rest.removeprefix("memories/")


def remote_of(memory: dict[str, Any], parent: str) -> Remote:
    """A Memory of an answer, one of `parent`'s or invalid (`memory_id_of`)."""
    metadata = {"scope": memory["scope"]} if isinstance(memory.get("scope"), dict) else {}
    return Remote(
        external_id=memory_id_of(memory.get("name"), parent),
        text=str(memory.get("fact") or ""),
        created_at=memory.get("createTime"),
        updated_at=memory.get("updateTime"),
        metadata=metadata,
    )


class VertexMemoryBankStore(RemoteStore):
    record_ids = (
        "the id of a memory of this reasoning engine (`{engine}/memories/{id}`), 1 to 128 "
        "ASCII letters, digits, '-' or '_'"
    )

    def record_id_valid(self, external_id: object) -> bool:
        return isinstance(external_id, str) and MEMORY_ID_RE.fullmatch(external_id) is not None

    def says_missing(self, body: Any) -> bool:
        return text_at(body, "error", "status") == "NOT_FOUND"

    @property
    def parent(self) -> str:
        c = self.config
        return (
            f"projects/{c['project']}/locations/{c['location']}"
            f"/reasoningEngines/{c['reasoningEngine']}"
        )

    def path(self, name: str) -> str:
        return f"/{API_VERSION}/{name}"

    def memory_name(self, external_id: str, operation: str) -> str:
        if not MEMORY_ID_RE.fullmatch(external_id):
            raise NotFound("The record no longer exists at the provider.")
        return f"{self.parent}/memories/{self.segment(external_id, operation=operation)}"

    @property
    def target_scope(self) -> dict[str, str]:
        return self.scope(self.config["scope"])

    def _operation(self, data: Any, operation: str, kind: str) -> Pending:
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or under_engine(name, self.parent) is None:
            raise self.invalid(operation, "no operation name of this reasoning engine")
        return Pending(operation=name, kind=kind)

    def add(self, text: str) -> Pending:
        if self.config["add"] == "generate":
            body: dict[str, Any] = {
                "directContentsSource": {
                    "events": [{"content": {"role": "user", "parts": [{"text": text}]}}]
                },
                "scope": self.target_scope,
            }
            data = self.send(
                "POST",
                self.path(f"{self.parent}/memories:generate"),
                operation="generate",
                retryable=False,
                body=body,
            )
            return self._operation(data, "generate", "generate")
        data = self.send(
            "POST",
            self.path(f"{self.parent}/memories"),
            operation="create",
            retryable=False,
            body={"fact": text, "scope": self.target_scope},
        )
        return self._operation(data, "create", "create")

    def _retrieve(self, body: dict[str, Any], operation: str) -> tuple[list[Remote], str | None]:
        data = self.send(
            "POST",
            self.path(f"{self.parent}/memories:retrieve"),
            operation=operation,
            retryable=True,
            body={"scope": self.target_scope, **body},
        )
        if not isinstance(data, dict):
            raise self.invalid(operation, "not an object")
        # Google's JSON leaves an empty list out.
        items = self.objects(
            data.get("retrievedMemories", []), operation=operation, what="retrievedMemories"
        )
        memories = self.objects(
            [item.get("memory") for item in items], operation=operation, what="memories"
        )
        remotes = [remote_of(memory, self.parent) for memory in memories]
        token = data.get("nextPageToken")
        return remotes, (token if isinstance(token, str) and token else None)

    def search(self, query: str, limit: int) -> list[Remote]:
        params = {"searchQuery": query, "topK": limit}
        return self._retrieve({"similaritySearchParams": params}, "retrieve")[0]

    def page(self, token: str | None) -> tuple[list[Remote], str | None]:
        params: dict[str, Any] = {"pageSize": PAGE_SIZE}
        if token:
            params["pageToken"] = token
        return self._retrieve({"simpleRetrievalParams": params}, "list")

    def get(self, external_id: str) -> Remote | None:
        data = self.found(self.path(self.memory_name(external_id, "get")), operation="get")
        if data is None or data.get("scope") != self.target_scope:
            # A memory of another scope is not this namespace's, whatever its id.
            return None
        return remote_of(data, self.parent)

    def update(self, external_id: str, text: str) -> Pending:
        if self.get(external_id) is None:
            raise NotFound("The record no longer exists at the provider.")
        data = self.send(
            "PATCH",
            self.path(self.memory_name(external_id, "patch")),
            operation="patch",
            retryable=True,
            params={"updateMask": "fact"},
            body={"fact": text},
        )
        return self._operation(data, "patch", "update")

    def delete(self, external_id: str) -> Pending | None:
        if self.get(external_id) is None:
            return None
        data = self.send(
            "DELETE",
            self.path(self.memory_name(external_id, "delete")),
            operation="delete",
            retryable=True,
            missing_ok=True,
        )
        return None if data is None else self._operation(data, "delete", "delete")

    def history(self, external_id: str) -> list[Result]:
        if self.get(external_id) is None:
            raise NotFound("The record no longer exists at the provider.")
        data = self.send(
            "GET",
            self.path(self.memory_name(external_id, "revisions") + "/revisions"),
            operation="revisions",
            retryable=True,
        )
        if not isinstance(data, dict):
            raise self.invalid("revisions", "not an object")
        # Google's JSON leaves an empty list out.
        revisions = self.objects(
            data.get("memoryRevisions", []), operation="revisions", what="memoryRevisions"
        )
        ordered = sorted(revisions, key=lambda r: str(r.get("createTime")))
        changes: list[Result] = []
        previous = None
        for revision in ordered:
            changes.append(
                {
                    "action": "create" if previous is None else "update",
                    "text": revision.get("fact"),
                    "previousText": previous,
                    "at": revision.get("createTime"),
                }
            )
            previous = revision.get("fact")
        return changes

    def poll(self, operation: str) -> OperationState:
        if under_engine(operation, self.parent) is None or "/operations/" not in operation:
            raise self.invalid("operation", "not an operation of this reasoning engine")
        # The provider's name, each of its segments one segment of the path.
        name = "/".join(self.segment(part, operation="operation") for part in operation.split("/"))
        data = self.send("GET", self.path(name), operation="operation", retryable=True)
        if not isinstance(data, dict):
            raise self.invalid("operation", "not an object")
        if not data.get("done"):
            return OperationState(done=False)
        error = data.get("error")
        if isinstance(error, dict):
            return OperationState(done=True, failed=True, error=str(error.get("message", "")))
        raw = data.get("response")
        response: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if "generatedMemories" not in response:
            # A create's or a patch's Memory; a delete's is empty.
            made = [remote_of(response, self.parent)] if "name" in response else []
            return OperationState(done=True, records=made)
        generated = self.objects(
            response["generatedMemories"], operation="operation", what="generatedMemories"
        )
        memories = self.objects(
            [g.get("memory") for g in generated if g.get("action") != "DELETED"],
            operation="operation",
            what="generated memories",
        )
        records = [remote_of({"fact": "", **memory}, self.parent) for memory in memories]
        return OperationState(done=True, records=records)


class VertexMemoryBankProvider(ExternalProvider):
    kind = KIND
    url_rule = HTTPS_ONLY
    store_class = VertexMemoryBankStore
    fields = {"project", "location", "reasoningEngine", "credentials", "scope", "add"}
    add_visibility = (
        "Memory Bank writes are long-running operations (status accepted); the fact appears "
        "in recall once the operation is done."
    )

    def normalize(self, provider: dict[str, Any], where: str, *, project: str) -> dict[str, Any]:
        if "baseUrl" not in provider and isinstance(provider.get("location"), str):
            provider = {
                **provider,
                "baseUrl": f"https://{provider['location']}-aiplatform.googleapis.com",
            }
        return super().normalize(provider, where, project=project)

    def settings_normalize(self, provider: dict[str, Any], at: str) -> dict[str, Any]:
        checks = (
            ("project", PROJECT_RE),
            ("location", LOCATION_RE),
            ("reasoningEngine", ENGINE_RE),
        )
        settings: dict[str, Any] = {}
        for name, pattern in checks:
            value = provider.get(name)
            if not isinstance(value, str) or not pattern.fullmatch(value):
                raise InvalidRequest(f"{at}.{name} is required and must be a {name} id.")
            settings[name] = value
        credentials = provider.get("credentials")
        if (
            not isinstance(credentials, dict)
            or set(credentials) != {"secret", "type"}
            or not isinstance(credentials["secret"], str)
            or not SECRET_NAME_RE.fullmatch(credentials["secret"])
            or credentials["type"] not in CREDENTIAL_TYPES
        ):
            raise InvalidRequest(
                f'{at}.credentials is required: {{"secret": "NAME", "type": '
                '"service-account" | "bearer-token"}, naming a managed secret.'
            )
        settings["credentials"] = dict(credentials)
        settings["scope"] = _scope_normalize(
            provider.get("scope", {"user_id": "{namespace}"}), f"{at}.scope", allowed=None
        )
        add = provider.get("add", "create")
        if add not in ADD_MODES:
            raise InvalidRequest(f"{at}.add must be 'create' (a fact as given) or 'generate'.")
        settings["add"] = add
        return settings

    def secret_headers(self, provider: dict[str, Any]) -> dict[str, Any]:
        return {
            **provider.get("headers", {}),
            "Authorization": {"secret": provider["credentials"]["secret"]},
        }

    def authorize(self, connection: Connection) -> None:
        credentials = connection.resource.config["credentials"]
        secret = secret_value(
            connection,
            credentials["secret"],
            origin=connection.origin,
            path=connection.base_path or "/",
        )
        if credentials["type"] == "bearer-token":
            token = secret
        else:
            token = self._access_token(connection, secret)
        connection.headers["Authorization"] = f"Bearer {token}"

    def _access_token(self, connection: Connection, secret: str) -> str:
        cache_key = hashlib.sha256(secret.encode()).hexdigest()
        now = time.time()
        with _tokens_lock:
            cached = _tokens.get(cache_key)
            if cached and cached[1] > now:
                return cached[0]
        try:
            account = json.loads(secret)
            token_uri = account["token_uri"]
            assertion = signed_assertion(account, now)
        except (ValueError, KeyError, TypeError) as exc:
            raise connection.failure(
                "invalid_configuration",
                f"the service account key cannot be used ({type(exc).__name__})",
                operation="token",
            ) from None
        try:
            origin, path = base_url_check(token_uri, where="token_uri", rule=HTTPS_ONLY)
        except InvalidRequest as exc:
            raise connection.failure(
                "invalid_configuration", exc.message, operation="token"
            ) from None
        form = f"grant_type={quote(JWT_BEARER_GRANT)}&assertion={assertion}"
        reply = connection.call_form(origin + path, form, operation="token")
        token = self._token_of(connection, reply)
        with _tokens_lock:
            if len(_tokens) >= TOKEN_CACHE_MAX:
                _tokens.clear()
            _tokens[cache_key] = token
        return token[0]

    def _token_of(self, connection: Connection, reply: Reply) -> tuple[str, float]:
        reply_usable(connection, reply, operation="token", what="token endpoint")
        if reply.status != 200:
            raise connection.failure(
                "http_error",
                f"token endpoint answered HTTP {reply.status}",
                operation="token",
                reply=reply,
            )
        try:
            data = reply.json(suffixed=True)
            token = data["access_token"]
            # Seconds as a JSON integer (or ASCII digits); anything else: not cached.
            lifetime = float(whole_number(data.get("expires_in", 3600)) or 0)
        except (ValueError, KeyError, TypeError):
            raise connection.failure(
                "invalid_response", "the token endpoint sent no access token", operation="token"
            ) from None
        if not isinstance(token, str) or not ACCESS_TOKEN_RE.fullmatch(token):
            # Not a header value (a character beyond ASCII, a line break, a number):
            # neither sent nor cached.
            raise connection.failure(
                "invalid_response",
                "the token endpoint sent an access token that is not a bearer token",
                operation="token",
            )
        return token, time.time() + max(0.0, lifetime - 60)
