"""The http provider declaration: every rule of the settings table, checked at deploy time.

Each message names the offending field by its path in the manifest
(`memory[0].provider.connection.origin ...`) and never repeats a header value.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import SplitResult, unquote, urlsplit

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.limits import (
    DESCRIPTION_MAX_BYTES,
    MAX_BYTES_DEFAULT,
    check_max_bytes,
    utf8_len,
)
from memoryadmin.refprovider.declaration import ENDPOINT as REFERENCE_ENDPOINT
from memoryadmin.refprovider.declaration import TOKEN_SECRET_NAME

if TYPE_CHECKING:
    from jsonschema.exceptions import SchemaError

PATH_DEFAULT = "/memory"
PATH_MAX = 1024
TOOLS_MAX = 8
HEADERS_MAX = 16
HEADER_VALUE_MAX = 4096
SCHEMA_DEPTH_MAX = 32
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

TOOL_NAME_RE = re.compile(r"[a-z0-9_]{1,32}")
CONNECTION_ID_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
SECRET_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
HEADER_NAME_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9._~+/-]{0,31}")
# Characters a URL path may hold unencoded (RFC 3986 pchar and "/").
PATH_RE = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*")
HOSTNAME_RE = re.compile(
    r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
)
PRINTABLE_RE = re.compile(r"[\x20-\x7e\t]*")

METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}
# Credentials: a header whose name contains one of these takes its value from
# a managed secret, never from a literal (Authorization, Cookie, X-Token,
# Private-Token, X-API-Key, X-Auth-User, X-Client-Secret, ...).
CREDENTIAL_WORDS = ("auth", "cookie", "token", "key", "secret", "password", "passwd", "credential")
# Secrets of the server itself: usable only by the built-in reference provider.
SERVER_SECRETS = frozenset({TOKEN_SECRET_NAME})
# How a deployment response shows a literal header value: never the value.
REDACTED: dict[str, bool] = {"redacted": True}
# Framing and content headers belong to the host; a declaration cannot override them.
HOST_HEADERS = {
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
}
REF_KEYWORDS = {"$ref", "$dynamicRef", "$recursiveRef"}
LOOPBACK_NAMES = {"localhost"}


def _fail(message: str) -> NoReturn:
    raise InvalidRequest(message)


def _check_fields(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(raw) - allowed
    if unknown:
        _fail(f"{where} has unknown fields: {', '.join(sorted(unknown))}.")


# Origins. The address rules live beside the HTTP transport that applies them on every
# connection (core/egress.py, which imports httpx) and are imported when an origin is
# checked: a process that checks none does not load the HTTP client.


def is_loopback_host(host: str) -> bool:
    from memoryadmin.core.egress import literal_address

    if host.lower() in LOOPBACK_NAMES:
        return True
    address = literal_address(host)
    return address is not None and address.is_loopback


def _origin_host(host: str | None, where: str) -> str:
    """The host as the origin shows it; a literal address in its canonical spelling."""
    from memoryadmin.core.egress import literal_address

    if not host:
        _fail(f"{where} must name a host.")
    address = literal_address(host)
    if address is None:
        if not HOSTNAME_RE.fullmatch(host):
            _fail(f"{where} has an invalid host name.")
        return host
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def _refuse_unreachable(host: str, where: str, *, resolve_names_for: str | None, kind: str) -> None:
    from memoryadmin.core.egress import SETTING, origin_address_check

    refusal = origin_address_check(host, project=resolve_names_for)
    if refusal is not None:
        _fail(
            f"{where} {refusal}; {kind} must reach public addresses "
            f"unless the server allows more ({SETTING})."
        )


def url_split(value: str, *, where: str, query: bool = False) -> SplitResult:
    """`value` split into its parts, once it keeps what every URL the product calls keeps
    (an http provider's origin, an external provider's base URL, a webhook's URL): printable
    ASCII without whitespace, no user-info, no fragment, and no query unless `query`."""
    if not PRINTABLE_RE.fullmatch(value) or any(c.isspace() for c in value):
        if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
            _fail(f"{where} must not contain whitespace or control characters.")
        _fail(
            f"{where} must be ASCII: write an international host name in its xn-- form"
            " and percent-encode other characters."
        )
    try:
        parts = urlsplit(value)
    except ValueError:  # "https://[::1", "https://[zz]/": a bracketed host it cannot read
        _fail(f"{where} is not a valid URL: a host in [brackets] must be an IPv6 address.")
    if "@" in parts.netloc:
        _fail(f"{where} must not contain user-info; credentials belong in managed secrets.")
    if not query and (parts.query or "?" in value):
        _fail(f"{where} must not contain a query string.")
    if parts.fragment or "#" in value:
        _fail(f"{where} must not contain a fragment.")
    return parts


def origin_check(
    value: object,
    *,
    where: str = "origin",
    resolve_names_for: str | None = None,
    kind: str = "provider origins",
) -> str:
    """An origin `scheme://host[:port]`, normalised; checked before any secret is resolved.

    https only, except http on loopback (127.0.0.0/8, ::1, localhost) for
    local development. No user-info, path, query, fragment or other scheme.
    A literal address (in any spelling) must be one the server may reach;
    with `resolve_names_for` (a project), so must every address a name resolves to now,
    looked up within that project's share of lookups (core/egress.py).
    """
    if not isinstance(value, str) or not value:
        _fail(f"{where} is required: an https:// origin such as https://memory.example.com.")
    parts = url_split(value, where=where)
    scheme = parts.scheme.lower()
    if scheme not in {"https", "http"}:
        _fail(f"{where} must use https:// (http:// only on loopback).")
    if parts.path not in {"", "/"}:
        _fail(f"{where} must be an origin without a path; put the path in pathPrefix and path.")
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        _fail(f"{where} has an invalid port.")
    shown_host = _origin_host(host, where)
    if scheme == "http" and not is_loopback_host(host):
        _fail(
            f"{where} must use https://; plain http:// is allowed only on loopback "
            "(127.0.0.0/8, ::1, localhost)."
        )
    _refuse_unreachable(host, where, resolve_names_for=resolve_names_for, kind=kind)
    return f"{scheme}://{shown_host}" + (f":{port}" if port is not None else "")


# Paths.


def path_check(value: object, *, where: str) -> str:
    if not isinstance(value, str) or not value:
        _fail(f"{where} must be a string starting with a single '/'.")
    if any(c.isspace() for c in value):
        _fail(f"{where} must not contain whitespace.")
    if "?" in value:
        _fail(f"{where} must not contain a query.")
    if "#" in value:
        _fail(f"{where} must not contain a fragment.")
    if not value.startswith("/") or value.startswith("//"):
        _fail(f"{where} must start with a single '/'.")
    if len(value) > PATH_MAX or not PATH_RE.fullmatch(value):
        _fail(f"{where} must be at most {PATH_MAX} URL path characters (percent-encode others).")
    if any(unquote(segment) in {".", ".."} for segment in value.split("/")):
        _fail(f"{where} must not contain '.' or '..' segments.")
    return value


def path_within(path: str, prefix: str) -> bool:
    base = prefix.rstrip("/")
    return base == "" or path == base or path.startswith(base + "/")


# Connections.


def credential_header(name: str) -> bool:
    """Whether a header name looks like it carries a credential."""
    lower = name.lower()
    return any(word in lower for word in CREDENTIAL_WORDS)


def server_secret_refusal(name: str, path: str) -> str | None:
    """Why a server-level secret may not be sent to `path`, or None (not one, or allowed)."""
    if name in SERVER_SECRETS and path != REFERENCE_ENDPOINT:
        return (
            f"names the server-level secret {name}, which only the built-in reference "
            f"provider ({REFERENCE_ENDPOINT}) may use"
        )
    return None


def _header_value(name: str, value: object, where: str) -> str | dict[str, str]:
    if isinstance(value, str):
        if credential_header(name):
            _fail(
                f"{where} must reference a managed secret, as "
                '{"secret": "NAME", "scheme": "Bearer"}: its name looks like a credential, '
                "and credentials cannot be written into a declaration."
            )
        if len(value) > HEADER_VALUE_MAX or not PRINTABLE_RE.fullmatch(value):
            _fail(f"{where} must be printable ASCII of at most {HEADER_VALUE_MAX} characters.")
        return value
    if not isinstance(value, dict):
        _fail(
            f"{where} must be a string or a secret reference "
            '{"secret": "NAME", "scheme": "Bearer"}.'
        )
    _check_fields(value, {"secret", "scheme"}, where)
    secret = value.get("secret")
    if not isinstance(secret, str) or not SECRET_NAME_RE.fullmatch(secret):
        _fail(
            f"{where}.secret must name a managed secret: 1-64 letters, digits or "
            "underscores, not starting with a digit."
        )
    reference = {"secret": secret}
    if "scheme" in value:
        scheme = value["scheme"]
        if not isinstance(scheme, str) or not SCHEME_RE.fullmatch(scheme):
            _fail(f"{where}.scheme must be a word such as Bearer (1-32 characters).")
        reference["scheme"] = scheme
    return reference


def _headers_normalize(raw: object, where: str) -> dict[str, str | dict[str, str]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        _fail(f"{where} must be an object of header names to values.")
    if len(raw) > HEADERS_MAX:
        _fail(f"{where} may hold at most {HEADERS_MAX} headers, not {len(raw)}.")
    headers: dict[str, str | dict[str, str]] = {}
    seen: set[str] = set()
    for name, value in raw.items():
        if not HEADER_NAME_RE.fullmatch(name):
            _fail(f"{where} has an invalid header name; use 1-64 token characters.")
        lower = name.lower()
        if lower in seen:
            _fail(f"{where}.{name} is declared twice (header names ignore case).")
        seen.add(lower)
        if lower in HOST_HEADERS:
            _fail(f"{where}.{name} is set by the host and cannot be declared.")
        headers[name] = _header_value(name, value, f"{where}.{name}")
    return headers


def _methods_normalize(raw: object, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(m, str) for m in raw):
        _fail(f"{where} is required: a list of HTTP methods that includes POST.")
    methods = [m.upper() for m in raw]
    unknown = sorted(set(methods) - METHODS)
    if unknown:
        _fail(f"{where} has unknown methods: {', '.join(unknown)}.")
    if "POST" not in methods:
        _fail(f"{where} must permit POST; every provider operation is a POST.")
    return sorted(set(methods))


def connection_normalize(raw: object, *, where: str, project: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        _fail(f"{where} is required and must be an object: a connection permitting POST.")
    _check_fields(raw, {"id", "origin", "methods", "pathPrefix", "headers"}, where)
    connection_id = raw.get("id")
    if not isinstance(connection_id, str) or not CONNECTION_ID_RE.fullmatch(connection_id):
        _fail(f"{where}.id must be 1-64 lowercase letters, digits or inner hyphens.")
    # The origin comes first: nothing else about a connection matters if it
    # may not be reached.
    origin = origin_check(raw.get("origin"), where=f"{where}.origin", resolve_names_for=project)
    methods = _methods_normalize(raw.get("methods"), f"{where}.methods")
    prefix = path_check(raw.get("pathPrefix", "/"), where=f"{where}.pathPrefix")
    headers = _headers_normalize(raw.get("headers"), f"{where}.headers")
    return {
        "id": connection_id,
        "origin": origin,
        "methods": methods,
        "pathPrefix": prefix,
        "headers": headers,
    }


# Tools.


def _find_ref(node: object, where: str, depth: int = 0) -> str | None:
    if depth > SCHEMA_DEPTH_MAX:
        _fail(f"{where} nests deeper than {SCHEMA_DEPTH_MAX} levels.")
    if isinstance(node, dict):
        for key, value in node.items():
            if key in REF_KEYWORDS:
                return f"{where}.{key}"
            found = _find_ref(value, f"{where}.{key}", depth + 1)
            if found:
                return found
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found = _find_ref(value, f"{where}[{index}]", depth + 1)
            if found:
                return found
    return None


def _schema_location(error: SchemaError) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.path)


def input_schema_check(schema: object, *, where: str) -> dict[str, Any]:
    """An object JSON Schema 2020-12 without $ref, leaving the top-level `memory` to the host."""
    if not isinstance(schema, dict):
        _fail(f"{where} is required: an object JSON Schema 2020-12.")
    ref = _find_ref(schema, where)
    if ref is not None:
        _fail(f"{ref} is not allowed: tool input schemas must be self-contained (no $ref).")
    if "$schema" in schema and schema["$schema"] != SCHEMA_DIALECT:
        _fail(f"{where}.$schema must be {SCHEMA_DIALECT} (JSON Schema 2020-12).")
    if schema.get("type") != "object":
        _fail(f'{where}.type must be "object".')
    # Imported here: jsonschema is only needed when a declaration is checked.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        _fail(f"{where}{_schema_location(exc)} is not valid JSON Schema 2020-12: {exc.message}")
    if "memory" in schema.get("properties", {}):
        _fail(f"{where}.properties.memory is reserved: the host uses it to select the resource.")
    if "memory" in schema.get("required", []):
        _fail(f"{where}.required must not list memory: the host reserves it.")
    return schema


def _tool_normalize(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        _fail(f"{where} must be an object.")
    _check_fields(raw, {"name", "description", "access", "idempotent", "input"}, where)
    name = raw.get("name")
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        _fail(f"{where}.name must be 1-32 lowercase letters, digits or underscores.")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        _fail(f"{where}.description is required and must be a nonempty string.")
    if utf8_len(description) > DESCRIPTION_MAX_BYTES:
        _fail(f"{where}.description is over {DESCRIPTION_MAX_BYTES} UTF-8 bytes.")
    access = raw.get("access")
    if access not in {"read", "write"}:
        _fail(f"{where}.access is required: 'read' or 'write'.")
    idempotent = raw.get("idempotent", False)
    if not isinstance(idempotent, bool):
        _fail(f"{where}.idempotent must be true or false.")
    schema = input_schema_check(raw.get("input"), where=f"{where}.input")
    return {
        "name": name,
        "description": description,
        "access": access,
        "idempotent": idempotent,
        "input": schema,
    }


def _tools_normalize(raw: object, where: str) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        _fail(f"{where} must be a list of tools.")
    if len(raw) > TOOLS_MAX:
        _fail(f"{where} may declare at most {TOOLS_MAX} tools, not {len(raw)}.")
    tools: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        tool = _tool_normalize(item, f"{where}[{index}]")
        if any(seen["name"] == tool["name"] for seen in tools):
            _fail(f"{where}[{index}].name '{tool['name']}' is declared twice; names are unique.")
        tools.append(tool)
    return tools


HTTP_KIND = "http"


def http_provider_normalize(
    provider: dict[str, Any], where: str, *, project: str
) -> dict[str, Any]:
    """The normaliser of `{"kind": "http", ...}` declarations of `project` (see
    providers/http.py)."""
    at = f"{where}.provider"
    _check_fields(provider, {"kind", "connection", "path", "maxBytes", "tools"}, at)
    connection = connection_normalize(
        provider.get("connection"), where=f"{at}.connection", project=project
    )
    path = path_check(provider.get("path", PATH_DEFAULT), where=f"{at}.path")
    if not path_within(path, connection["pathPrefix"]):
        _fail(
            f"{at}.path must lie inside the connection's pathPrefix ({connection['pathPrefix']})."
        )
    for name, value in connection["headers"].items():
        refusal = isinstance(value, dict) and server_secret_refusal(value["secret"], path)
        if refusal:
            _fail(f"{at}.connection.headers.{name} {refusal}.")
    max_bytes = provider.get("maxBytes", MAX_BYTES_DEFAULT)
    try:
        check_max_bytes(max_bytes)
    except InvalidRequest as exc:
        raise InvalidRequest(f"{at}.{exc.message}") from exc
    return {
        "kind": HTTP_KIND,
        "maxBytes": max_bytes,
        "connection": connection,
        "path": path,
        "tools": _tools_normalize(provider.get("tools"), f"{at}.tools"),
    }


def http_provider_public(provider: dict[str, Any]) -> dict[str, Any]:
    """A stored http declaration as responses show it: header names and secret names only."""
    connection = provider.get("connection")
    if not isinstance(connection, dict):
        return provider
    headers = {
        name: value if isinstance(value, dict) else dict(REDACTED)
        for name, value in connection.get("headers", {}).items()
    }
    return {**provider, "connection": {**connection, "headers": headers}}
