"""Hostile input to every page route: an owner (the role that reaches every form) asks each
URL pattern of the Memory page (read from the URL resolver), filled in with the ids of a
seeded project, with hostile queries (GET) and hostile forms (POST). A form's own fields
hold NUL, bytes that are not UTF-8 (an unpaired surrogate travels as its percent-encoded
bytes), very long strings, control characters, text that normalises differently (NFD,
fullwidth letters), numbers out of range, and are repeated, missing or unknown; alone, as
a full page and as an htmx request.

Every answer is a page with a documented status (2xx, 3xx, or 400, 403, 404, 405, 409, 413
or 422), never a 5xx or a traceback, and a refused request changes nothing: the product's
tables read as seeded after it. Each request runs in a savepoint rolled back after it, so
every one starts from the same seeded project.

A property search mixes the hostile values (bounded examples per route); a sweep sends each
form as the page does with one field twisted at a time, every twist of every value the
field takes, so that each is asked. A form whose CSRF token is not the session's is 403
and changes nothing. Unmarked: the tests run on SQLite and, with DATABASE_URL, on
PostgreSQL, which refuses what SQLite keeps (a NUL, a value past its column).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from django.apps import apps
from django.contrib.auth.tokens import default_token_generator
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.signals import request_finished
from django.db import close_old_connections, transaction
from django.test import Client
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryadmin.agents.models import OperationKind, OperationState, ProviderOperation
from memoryadmin.agents.services.records import record_seen
from memoryadmin.incidents.services.incidents import incident_create
from memoryadmin.memory.models import Deployment, Document, Project, Resource
from memoryadmin.memory.services.asof import resource_restore_as_of
from memoryadmin.memory.services.documents import document_create, document_replace
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.webhooks import services as webhooks
from tests.fake_providers import FakeMem0Oss
from tests.helpers import deploy_external, erase_now, proposed_save, rows_reader, url_routes

pytestmark = pytest.mark.django_db

PROJECT = "/projects/acme/development/"

# The tables whose rows a refused request must leave as they were: everything the product
# keeps, not the login sessions (messages) or django-axes's log of logins.
KEPT_APPS = {
    "memory",
    "agents",
    "web",
    "providers",
    "external",
    "runner",
    "webhooks",
    "incidents",
    "erasures",
    "django_tasks_database",
}
OK = {200, 204, 302, 303}
REFUSED = {400, 403, 404, 405, 409, 413, 422}

# Each route's own form fields, read from the forms (web/forms.py) and the views that read
# request.POST themselves; GET-only routes send the query parameters below as a form too.
FACETS = [
    "q",
    "sort",
    "agentWrites",
    "writer",
    "key",
    "agent",
    "session",
    "updatedFrom",
    "updatedTo",
    "sizeMin",
    "sizeMax",
]
FORM_FIELDS: dict[str, list[str]] = {
    "login": ["username", "password", "next"],
    "password-set": ["new_password1", "new_password2"],
    "export": ["resources"],
    "erasures": ["text", "documents", "reason", "confirm", "erase"],
    "import": ["upload", "confirm", "export"],
    "webhook-create": ["url", "description", "events", "active"],
    "webhook-update": ["url", "description", "events", "active"],
    "key-create": ["name", "read_only"],
    "secret-set": ["name", "value", "origins"],
    "person-grant": ["grant-username", "grant-role", "row"],
    "person-invite": ["invite-username", "invite-role", "invite-method"],
    "operation-retry": ["next"],
    "operation-discard": ["next"],
    "incident-create": ["kind", "value", "title", "hops"],
    "incident-contain": ["dryRun", "action", "confirm"],
    "proposal-approve": ["revision", "summary", "text"],
    "proposal-reject": ["reason"],
    "document-create": ["doc_id", "title", "summary", "text", "frozen"],
    "documents-bulk": ["action", "all", "doc", "confirm", "count", "seen", "back", *FACETS],
    "documents-restore": ["asOf", "documents", "scope", "seen"],
    "record-create": ["namespace", "text"],
    "record-edit": ["namespace", "seen", "text"],
    "record-delete": ["namespace", "seen"],
    "document-edit": ["revision", "title", "summary", "text"],
    "document-agent-writes": ["agentWrites"],
    "document-delete": ["revision", "confirm_id"],
    "version-restore": ["revision"],
    "version-redact": ["reason", "confirm"],
}
# What the pages read from the query (the views' request.GET and the list's facets).
QUERY_PARAMS = [
    *FACETS,
    "cursor",
    "after",
    "asOf",
    "versions",
    "select",
    "state",
    "status",
    "memory",
    "namespace",
    "value",
    "format",
    "resource",
    "document",
    "action",
    "actor",
    "by",
    "since",
    "until",
    "project",
    "environment",
    "scope",
    "documents",
    "next",
]

NUMBERS = [
    "-1",
    "0",
    "-0",
    "1.5",
    "1e309",
    "NaN",
    "inf",
    "-inf",
    "2147483648",
    "9223372036854775808",
    "99999999999999999999999999999999",
    "\u0661\u0662",  # Arabic-Indic digits
    "\uff11\uff12",  # fullwidth digits
]
SHAPES = [
    "",
    " ",
    "a\x00b",
    "\x00",
    "\ud800",
    "x\udfffy",
    "\x01\x07\x1b[31m\x7f\x85",
    "\u202eevil",
    "\u2028\u2029",
    "e\u0301",
    "\u00e9",
    "\ufb01",
    "\u212b",
    "\uff21",
    "\U0001f600",
    "\ufeff",
    "\r\n\r\n",
    "..",
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "{{ secret }}",
    "'; drop table memory_document; --",
    "%00",
    "x" * 300,
    "y" * 70_000,
]


@dataclass(frozen=True)
class World:
    """The seeded project's ids, as the URL patterns name them."""

    names: dict[str, str]
    values: dict[str, list[str]]
    # Each form as the page sends it (the values it accepts).
    forms: dict[str, list[tuple[str, str]]]
    # The kept tables as seeded: every example starts from them (its writes rolled back).
    seeded: dict[str, list[tuple[Any, ...]]]


def _text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(SHAPES),
        st.sampled_from(NUMBERS),
        st.text(max_size=30),
        st.text(
            alphabet=st.characters(codec=None, categories=["Cc", "Cs", "Cf", "Zl"]), max_size=8
        ),
    )


def _fullwidth(value: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)


def _good(world: World, name: str) -> st.SearchStrategy[str]:
    """A value the form accepts, so that a request reaches the service."""
    plausible = world.values.get(name)
    return st.sampled_from(plausible) if plausible else st.just("x")


# What a hostile client does to a value the form accepts.
TWISTS: list[Callable[[str], str]] = [
    lambda value: value[:1] + "\x00" + value[1:],
    lambda value: value + "\x00",
    lambda value: value + "\ud800",
    _fullwidth,
    lambda value: (value or "x") * (70_000 // max(len(value), 1) + 1),
    lambda value: "\x01\x1b[2J" + value + "\x7f\u202e",
    lambda value: unicodedata.normalize("NFD", value + "\u00e9"),
    lambda value: value + "\r\nX-Injected: 1",
]


def _bad(world: World, name: str) -> st.SearchStrategy[str]:
    """A hostile value: a valid one twisted, one around a valid one, or any text."""
    good, bad = _good(world, name), st.sampled_from(SHAPES + NUMBERS)
    return st.one_of(
        st.tuples(good, st.sampled_from(TWISTS)).map(lambda pair: pair[1](pair[0])),
        st.tuples(good, bad).map("".join),
        _text(),
    )


def _encoded(value: str) -> str:
    # An unpaired surrogate travels as the three bytes UTF-8 would give it: not UTF-8.
    return quote_from_bytes(value.encode("utf-8", "surrogatepass"))


def _body(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{_encoded(name)}={_encoded(value)}" for name, value in pairs)


@st.composite
def _pairs(draw: Any, world: World, fields: list[str]) -> list[tuple[str, str]]:
    """One field hostile at a time (or all at once), the others as the page sends them,
    each now and then missing or repeated; unknown fields now and then."""
    hostile = draw(st.sampled_from([*fields, "*"]) if fields else st.just("*"), label="hostile")
    pairs: list[tuple[str, str]] = []
    for name in fields:
        times = draw(st.sampled_from([1, 1, 1, 1, 0, 2]))
        value = _bad(world, name) if hostile in (name, "*") else _good(world, name)
        pairs += [(name, draw(value)) for _ in range(times)]
    for name in draw(
        st.lists(st.sampled_from(["zzz", "csrfmiddlewaretoken", "_method"]), max_size=2)
    ):
        pairs.append((name, draw(_text())))
    return draw(st.permutations(pairs))


# (name, route) of every page pattern: the web app's, under the site's root. Signing out
# would sign the owner out for the rest of the run.
ROUTES = [
    (str(pattern.name), route)
    for route, pattern, namespaces in url_routes()
    if all(namespace in (None, "web") for namespace in namespaces)
    and pattern.callback.__module__.startswith(("memoryadmin.web", "django.contrib.auth"))
    and pattern.name != "logout"
]
# Pages a signed-in owner is redirected away from: asked by an anonymous client.
ANONYMOUS = {"login", "password-set", "password-set-done"}
HOSTILE_IDS = ["99999999999999999999", "0", "x" * 300, "\u00e9", "e\u0301", "..", "-1"]


def _url(world: World, name: str, route: str, hostile: dict[str, str]) -> str:
    names = dict(world.names)
    if name == "webhook-redeliver":
        names["d"] = names["delivery"]
    if name.startswith("record"):
        names["r"] = "mem"
    names.update(hostile)

    def fill(match: re.Match[str]) -> str:
        return quote_from_bytes(names[match.group(1)].encode("utf-8", "surrogatepass"), safe="")

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", fill, route)


@cache
def _kept_tables() -> Callable[[], dict[str, list[tuple[Any, ...]]]]:
    querysets = {}
    for model in apps.get_models():
        if model._meta.app_label in KEPT_APPS or model._meta.label == "auth.User":
            fields = [f.attname for f in model._meta.concrete_fields]
            querysets[model._meta.label] = model._default_manager.order_by("pk").values_list(
                *fields
            )
    return rows_reader(querysets)


def _snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every kept table's rows, as the database returns them."""
    return _kept_tables()()


def _changed(before: dict[str, list[Any]]) -> list[str]:
    after = _snapshot()
    return [label for label in before if before[label] != after[label]]


@pytest.fixture
def world(
    project: Project,
    people: Any,
    owner: Client,
    mem0_oss: FakeMem0Oss,
    settings: Any,
    tmp_path: Any,
) -> World:
    """A project with one of everything a page names: documents with history, a proposal,
    a session, an incident, an erasure, a webhook and its delivery, a key, a dead letter,
    an external resource with a record, a deployment and a person to revoke."""
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    settings.VAR_DIR = tmp_path
    notes = Resource.objects.get(project=project, environment="development", resource_id="notes")
    document_create(resource=notes, doc_id="workshop", title="Workshop", text="Node 22.", actor="t")
    document_create(resource=notes, doc_id="runbook", title="Runbook", text="v1", actor="t")
    first = Document.objects.get(doc_id="workshop").revision
    between = timezone.now()
    while timezone.now() <= between:
        pass
    workshop = document_replace(
        resource=notes, doc_id="workshop", expected_revision=first, text="Node 24.", actor="t"
    )
    session, proposal = proposed_save(project)
    proposal_revision = Document.objects.get(doc_id="workshop").revision
    incident = incident_create(
        project=project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=2,
        actor="t",
    )
    document_create(resource=notes, doc_id="secret", title="S", text="the secret", actor="t")
    erasure = erase_now(project, "the secret")
    endpoint, _ = webhooks.endpoint_create(
        project=project, url="https://93.184.216.34/hooks", events=["document.created"], actor="t"
    )
    delivery = webhooks.endpoint_send_test(endpoint=endpoint, actor="t")
    key, _ = api_key_create(project_id=project.id, name="ci")
    mem = deploy_external(
        project,
        {
            "kind": "mem0-oss",
            "baseUrl": mem0_oss.origin,
            "headers": {"X-API-Key": {"secret": "MEM0_KEY"}},
        },
        secrets_by_origin={mem0_oss.origin: {"MEM0_KEY": "mem0-test-key"}},
    )
    mem0_oss.seed("Alice plays the cello.", user_id="alice")
    cello = record_seen("Alice plays the cello.")
    listing = owner.get(f"{PROJECT}resources/mem/records/?namespace=alice").content.decode()
    record = "xm_" + listing.split("<code>xm_")[1].split("<")[0]
    now = timezone.now()
    operation = ProviderOperation.objects.create(
        id="op_dead1",
        project=project,
        environment="development",
        resource=mem,
        namespace="alice",
        principal="user:olivia",
        kind=OperationKind.ACCEPTED_WRITE,
        provider_operation="p1",
        state=OperationState.DEAD,
        created_at=now,
        updated_at=now,
    )
    deployment = Deployment.objects.filter(project=project, agent="support-bot").earliest("pk")
    vera = people.viewer
    uid = urlsafe_base64_encode(force_bytes(vera.pk))
    names = {
        "p": "acme",
        "e": "development",
        "r": "notes",
        "d": "workshop",
        "revision": first,
        "rec": record,
        "erasure_id": erasure.id,
        "w": str(endpoint.pk),
        "delivery": str(delivery.pk),
        "k": str(key.pk),
        "deployment_id": deployment.id,
        "username": vera.get_username(),
        "s": session.id,
        "o": operation.id,
        "i": incident.id,
        "proposal": proposal,
        "uidb64": uid,
        "token": default_token_generator.make_token(vera),
    }
    values = {
        "revision": [workshop.revision, proposal_revision, first],
        "confirm_id": ["workshop"],
        "confirm": ["yes", "REDACT", "ERASE"],
        "doc_id": ["new-doc", "workshop"],
        "title": ["A title"],
        "reason": ["Because."],
        "doc": [f"workshop:{workshop.revision}", f"runbook:{first}", "workshop:"],
        "action": ["freeze", "unfreeze", "delete", "export", "endSessions", "revert"],
        "all": ["matching"],
        "count": ["2", "1"],
        "asOf": ["2020-01-01T00:00:00Z", "9999-12-31", "0001-01-01"],
        "documents": ["workshop", "notes/workshop", "runbook"],
        "scope": ["all"],
        "namespace": ["alice", "bob"],
        "text": ["Some text.", "the secret"],
        "url": ["https://93.184.216.34/hooks", "http://127.0.0.1/x"],
        "events": ["document.created", "document.deleted"],
        "active": ["on"],
        "name": ["ci", "TOKEN"],
        "value": [session.id, "some text", f"notes/workshop@{first}"],
        "origins": ["https://93.184.216.34"],
        "grant-username": ["vera", "olivia", "nobody"],
        "grant-role": ["viewer", "owner", "support"],
        "invite-username": ["newbie", "vera"],
        "invite-role": ["viewer", "owner"],
        "invite-method": ["link", "password"],
        "kind": ["session", "version", "apiKey", "text"],
        "hops": ["1", "3"],
        "dryRun": ["true"],
        "resources": ["notes", "kb"],
        "agentWrites": ["enabled", "review", "disabled"],
        "next": ["/projects/acme/development/", "//evil.example/", "https://evil.example/"],
        "cursor": ["bm90LWEtY3Vyc29y"],
        "sort": ["updated", "-updated", "id", "size"],
        "select": ["none", "all"],
        "username": ["olivia"],
        "password": ["wrong"],
        "new_password1": ["a-long-new-password-9"],
        "new_password2": ["a-long-new-password-9"],
    }
    current = Document.objects.get(doc_id="workshop").revision
    home = "/projects/acme/development/"
    password = "a-long-new-password-9"
    text = [("summary", "Runtime."), ("text", "Node 26.")]
    hook = [
        ("url", "https://93.184.216.34/h"),
        ("description", "d"),
        ("events", "document.created"),
    ]
    # The plan the as-of page shows, which its form sends back with the restore.
    restore_seen = resource_restore_as_of(
        resource=notes, as_of=between, doc_ids=["workshop"], dry_run=True, actor=""
    ).seen
    forms = {
        "login": [("username", "olivia"), ("password", "wrong"), ("next", home)],
        "password-set": [("new_password1", password), ("new_password2", password)],
        "export": [("resources", "notes")],
        "erasures": [
            ("text", "Node 24."),
            ("reason", "Why."),
            ("confirm", "ERASE"),
            ("erase", "1"),
        ],
        "import": [("upload", "0" * 32), ("confirm", "yes")],
        "webhook-create": hook,
        "webhook-update": [*hook, ("active", "on")],
        "key-create": [("name", "ci"), ("read_only", "on")],
        "secret-set": [("name", "TOKEN"), ("value", "v"), ("origins", "https://93.184.216.34")],
        "person-grant": [("grant-username", "vera"), ("grant-role", "support")],
        "person-invite": [
            ("invite-username", "newbie"),
            ("invite-role", "viewer"),
            ("invite-method", "link"),
        ],
        "operation-retry": [("next", home)],
        "operation-discard": [("next", home)],
        "incident-create": [("kind", "session"), ("value", session.id), ("hops", "1")],
        "incident-contain": [("dryRun", "true"), ("action", "freeze")],
        "proposal-approve": [("revision", proposal_revision), *text],
        "proposal-reject": [("reason", "Why.")],
        "document-create": [("doc_id", "new-doc"), ("title", "T"), *text, ("frozen", "on")],
        "documents-bulk": [
            ("action", "delete"),
            ("doc", f"workshop:{current}"),
            ("confirm", "yes"),
        ],
        "documents-restore": [
            ("asOf", between.isoformat()),
            ("documents", "workshop"),
            ("seen", restore_seen),
        ],
        "record-create": [("namespace", "alice"), ("text", "Likes figs.")],
        "record-edit": [("namespace", "alice"), ("seen", cello), ("text", "Likes dates.")],
        "record-delete": [("namespace", "alice"), ("seen", cello)],
        "document-edit": [("revision", current), ("title", "T"), *text],
        "document-agent-writes": [("agentWrites", "review")],
        "document-delete": [("revision", current), ("confirm_id", "workshop")],
        "version-restore": [("revision", current)],
        "version-redact": [("reason", "Why."), ("confirm", "REDACT")],
    }
    return World(names=names, values=values, forms=forms, seeded=_snapshot())


def _client_for(name: str, owner: Client, world: World) -> Client:
    if name not in ANONYMOUS:
        return owner
    client = Client()
    if name == "password-set":
        # The link's token is kept in the session; the form is asked under "set-password".
        real = f"/set-password/{world.names['uidb64']}/{world.names['token']}/"
        assert client.get(real).status_code == 302
    return client


def _ask(
    client: Client,
    method: str,
    url: str,
    *,
    query: list[tuple[str, str]],
    form: list[tuple[str, str]] | None = None,
    files: dict[str, bytes] | None = None,
    htmx: str | None,
) -> Any:
    headers: dict[str, Any] = {"QUERY_STRING": _body(query)}
    if htmx is not None:
        headers.update(HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=htmx)
    if method == "GET":
        return client.generic("GET", url, **headers)
    if files is not None:
        data: dict[str, Any] = {}
        for name, value in form or []:
            # Multipart carries text as UTF-8: what cannot be encoded is replaced.
            data.setdefault(name, []).append(value.encode("utf-8", "replace").decode())
        for name, content in files.items():
            data[name] = SimpleUploadedFile("memory.zip", content, "application/zip")
        return client.post(url, data, **headers)
    body = _body(form or [])
    return client.generic(
        "POST", url, body, content_type="application/x-www-form-urlencoded", **headers
    )


def _check(response: Any, where: tuple[Any, ...], *, refused_only: bool = False) -> None:
    """A page with a documented status, never a traceback."""
    status = response.status_code
    assert status in (REFUSED if refused_only else OK | REFUSED), (*where, status)
    # A download holds its slot until its stream is closed.
    content = b"".join(response.streaming_content) if response.streaming else response.content
    # Closed as the server would, keeping the test's connection (as the test client does).
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)
    assert b"Traceback" not in content, where
    assert b"Server Error" not in content, where


@contextmanager
def _rolled_back() -> Iterator[None]:
    """The example's writes undone after it: every example starts from the seeded project."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def _hostile_path(data: Any, route: str) -> dict[str, str]:
    """Now and then, one id of the path that names nothing (out of range, too long, ...)."""
    params = [p for p in re.findall(r"<(?:\w+:)?(\w+)>", route) if p not in {"p", "e"}]
    if not params or data.draw(st.integers(0, 3), label="hostile path?") != 0:
        return {}
    param = data.draw(st.sampled_from(params), label="param")
    return {param: data.draw(st.sampled_from(HOSTILE_IDS), label="id")}


def _htmx(data: Any, url: str) -> str | None:
    """No htmx, or an htmx request from the page itself or from a hostile current URL."""
    current = st.one_of(st.just(f"http://testserver{url}"), _text())
    return data.draw(st.none() | current, label="htmx")


def _query(data: Any, world: World, most: int) -> list[tuple[str, str]]:
    names = data.draw(st.lists(st.sampled_from(QUERY_PARAMS), max_size=most, unique=True))
    return data.draw(_pairs(world, names), label="query")


# Examples per route: the runs stay under a minute on SQLite. Forms get the most; a
# route whose view reads no form field answers any form alike.
GET_EXAMPLES = 4
FORM_EXAMPLES = 20
POST_EXAMPLES = 4


def _search(examples: int, case: Callable[[Any], None]) -> None:
    @settings(max_examples=examples)
    @given(data=st.data())
    def search(data: Any) -> None:
        case(data)

    search()


def _get(owner: Client, world: World, name: str, route: str, data: Any) -> None:
    url = _url(world, name, route, _hostile_path(data, route))
    query = _query(data, world, 5)
    htmx = _htmx(data, url)
    with _rolled_back():
        response = _ask(_client_for(name, owner, world), "GET", url, query=query, htmx=htmx)
        _check(response, (name, url, query, htmx))
        if response.status_code >= 400:
            changed = _changed(world.seeded)
            assert not changed, (name, url, query, response.status_code, changed)


def _post(owner: Client, world: World, name: str, route: str, data: Any) -> None:
    fields = FORM_FIELDS.get(name, QUERY_PARAMS[:6])
    url = _url(world, name, route, _hostile_path(data, route))
    form = data.draw(_pairs(world, fields), label="form")
    query = _query(data, world, 2)
    files = None
    if "export" in fields and data.draw(st.booleans(), label="multipart"):
        contents = [b"", b"PK\x05\x06" + bytes(18), b"\x00" * 64, b"not a zip"]
        files = {"export": data.draw(st.sampled_from(contents), label="file")}
    htmx = _htmx(data, url)
    with _rolled_back():
        client = _client_for(name, owner, world)
        if name == "password-set":
            url = url.replace(world.names["token"], "set-password")
        response = _ask(client, "POST", url, query=query, form=form, files=files, htmx=htmx)
        _check(response, (name, url, form, query, htmx))
        if response.status_code >= 400:
            changed = _changed(world.seeded)
            assert not changed, (name, url, form, response.status_code, changed)


def test_no_hostile_query_on_any_page_is_a_server_error(owner: Client, world: World) -> None:
    assert len(ROUTES) > 60, ROUTES
    for name, route in ROUTES:
        _search(GET_EXAMPLES, lambda data: _get(owner, world, name, route, data))  # noqa: B023


def test_no_hostile_form_on_any_page_is_a_server_error_or_half_applied(
    owner: Client, world: World
) -> None:
    for name, route in ROUTES:
        examples = FORM_EXAMPLES if name in FORM_FIELDS else POST_EXAMPLES
        _search(examples, lambda data: _post(owner, world, name, route, data))  # noqa: B023


def _sweep(world: World, name: str) -> Iterator[list[tuple[str, str]]]:
    """The form as the page sends it, with one field twisted each time (every twist of
    every value the field takes), then without it, then repeated."""
    sent = world.forms[name]
    for index, (field, value) in enumerate(sent):
        others = sent[:index] + sent[index + 1 :]
        for each in dict.fromkeys([value, *world.values.get(field, [])]):
            for twist in TWISTS:
                yield [*others, (field, twist(each))]
        yield others
        yield [*sent, (field, value)]


def test_each_field_of_each_form_twisted_is_never_a_server_error_or_half_applied(
    owner: Client, world: World
) -> None:
    """Every form, one field at a time, with every twist of every value it takes: the
    search above mixes them, this makes sure each is asked."""
    asked = 0
    assert set(world.forms) == set(FORM_FIELDS)
    for name, route in ROUTES:
        if name not in world.forms:
            continue
        url = _url(world, name, route, {})
        if name == "password-set":
            url = url.replace(world.names["token"], "set-password")
        for form in _sweep(world, name):
            with _rolled_back():
                client = _client_for(name, owner, world)
                response = _ask(client, "POST", url, query=[], form=form, htmx=None)
                _check(response, (name, url, form))
                if response.status_code >= 400:
                    changed = _changed(world.seeded)
                    assert not changed, (name, url, form, response.status_code, changed)
            asked += 1
    assert asked > 500, asked


def _csrf_cases(token: str) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """Forms whose token is not the session's: none, another of the right shape, junk, and
    an htmx request whose header carries one that is not."""
    other = ("b" if token[0] == "a" else "a") + token[1:]
    return [
        ("none", {}, {}),
        ("another", {"csrfmiddlewaretoken": other}, {}),
        ("junk", {"csrfmiddlewaretoken": "\x00\ud800" + "x" * 200}, {}),
        ("htmx", {}, {"HTTP_HX_REQUEST": "true", "HTTP_X_CSRFTOKEN": other}),
    ]


def test_a_form_without_the_sessions_csrf_token_is_403_and_changes_nothing(
    people: Any, world: World
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.owner)
    assert client.get(PROJECT).status_code == 200
    token = client.cookies["csrftoken"].value
    seeded = _snapshot()  # the login wrote the owner's last login
    for name, route in ROUTES:
        url = _url(world, name, route, {})
        # The form as the page would send it, but for its token.
        form = [(field, world.values.get(field, ["x"])[0]) for field in FORM_FIELDS.get(name, [])]
        for case, extra, headers in _csrf_cases(token):
            body = _body(form + list(extra.items()))
            response = client.generic(
                "POST", url, body, content_type="application/x-www-form-urlencoded", **headers
            )
            where = (name, url, case)
            _check(response, where, refused_only=True)
            assert response.status_code == 403, where
            assert not _changed(seeded), where
