"""The string rule at every door: NUL and unpaired surrogates are 400 naming the field, before
anything is stored; JSON nests at most 64 levels; bodies without a length are read, within 64 KiB.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.agents.models import Session, SessionEvent
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.jsonbody import json_parse
from memoryadmin.core.strings import NESTING_MAX, string_repair, strings_check
from memoryadmin.memory.export import FORMAT, FORMAT_VERSION, MANIFEST_NAME
from memoryadmin.memory.models import AuditEntry, Deployment, Document, DocumentVersion, Resource
from memoryadmin.web.forms import DocumentCreateForm, DocumentEditForm
from tests.helpers import DEV, DOCS, wait_until_up

pytestmark = pytest.mark.django_db

API = "/api/managed-agents"
SESSIONS = f"{API}/sessions"
DEPLOYMENTS = f"{API}/projects/acme/deployments"
PAGE = "/projects/acme/development"
REPO = Path(__file__).resolve().parent.parent
RW = {"notes": {"scope": "document", "id": "workshop", "access": "read-write"}}


def post(api: APIClient, url: str, body: Any, **headers: Any) -> Any:
    # json.dumps escapes what cannot be encoded: "\ud800" travels as the six characters \ud800.
    return api.post(url, data=json.dumps(body), content_type="application/json", **headers)


def put(api: APIClient, url: str, body: Any, **headers: Any) -> Any:
    return api.put(url, data=json.dumps(body), content_type="application/json", **headers)


def refused(response: Any, field: str, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith(f"{field}: "), error["message"]
    return dict(error)


def start_session(api: APIClient, **body: Any) -> Any:
    body = {"agentId": "support-bot@development", **body}
    return post(api, SESSIONS, body, HTTP_IDEMPOTENCY_KEY="k1")


# The rule itself.


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("a\x00b", "body"),
        ({"labels": {"u": "\ud800"}}, "labels.u"),
        ({"labels": {"\udfff": "x"}}, "labels.\\udfff"),
        ({"memory": [{"description": "x\x00"}]}, "memory[0].description"),
        ([["ok", {"deep": ["\udc80"]}]], "[0][1].deep[0]"),
    ],
)
def test_the_rule_names_the_first_offending_string_or_key(value: Any, field: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        strings_check(value)
    assert raised.value.details == {"field": field}
    assert raised.value.message.startswith(f"{field}: ")
    # The message itself can always be encoded.
    raised.value.message.encode("utf-8")


@pytest.mark.parametrize(
    "value", ["", "plain", "😀 non-BMP", "e\u0301 and \u00e9", "\ufffd", "\u2028", "\x01\x1f"]
)
def test_other_strings_pass(value: str) -> None:
    strings_check({value: [value]})


def test_repair_replaces_each_offending_code_point() -> None:
    assert string_repair("a\x00b\ud800c😀") == "a\ufffdb\ufffdc😀"


def test_nesting_limit_is_64_levels() -> None:
    assert json_parse(("[" * NESTING_MAX + "]" * NESTING_MAX).encode())
    with pytest.raises(InvalidRequest) as raised:
        json_parse(("[" * (NESTING_MAX + 1) + "]" * (NESTING_MAX + 1)).encode())
    assert "at most 64 levels" in raised.value.message


# The API: JSON bodies.


def test_session_label_with_a_lone_surrogate_is_400_and_stores_nothing(
    api: APIClient, make_document: Any
) -> None:
    make_document("workshop")
    response = start_session(api, memory=RW, labels={"u": "\ud800"})
    error = refused(response, "labels.u")
    assert error["details"] == {"field": "labels.u"}
    assert Session.objects.count() == 0
    listed = api.get(f"{SESSIONS}{DEV}")
    assert listed.status_code == 200
    assert listed.json()["sessions"] == []


def test_session_label_key_with_nul_is_400(api: APIClient) -> None:
    refused(start_session(api, labels={"a\x00": "x"}), "labels.a\\u0000")
    assert Session.objects.count() == 0


def test_tool_input_schema_with_a_lone_surrogate_is_400(api: APIClient) -> None:
    declaration = {
        "id": "knowledge",
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "svc",
                "origin": "https://memory.example.com",
                "methods": ["POST"],
                "pathPrefix": "/oc-memory",
            },
            "path": "/oc-memory",
            "tools": [
                {
                    "name": "remember",
                    "description": "Save a fact.",
                    "access": "write",
                    "input": {"type": "object", "properties": {"f\ud83d": {"type": "string"}}},
                }
            ],
        },
    }
    before = Deployment.objects.count()
    response = post(api, DEPLOYMENTS, {"agent": "researcher", "memory": [declaration]})
    refused(response, "memory[0].provider.tools[0].input.properties.f\\ud83d")
    assert Deployment.objects.count() == before
    assert api.get(DEPLOYMENTS).status_code == 200


def test_deployment_description_with_nul_is_400(api: APIClient) -> None:
    memory = [{"id": "facts", "description": "Facts\x00.", "provider": {"kind": "document"}}]
    before = Deployment.objects.count()
    response = post(api, DEPLOYMENTS, {"agent": "researcher", "memory": memory})
    refused(response, "memory[0].description")
    assert Deployment.objects.count() == before
    assert not Resource.objects.filter(resource_id="facts").exists()


@pytest.mark.parametrize("field", ["title", "text", "summary"])
@pytest.mark.parametrize("bad", ["\x00", chr(0xD800), chr(0xDFFF)])
def test_document_fields_are_400(api: APIClient, field: str, bad: str) -> None:
    body = {"title": "T", field: f"a{bad}b"}
    refused(put(api, f"{DOCS}/d1{DEV}", body, HTTP_IF_NONE_MATCH="*"), field)
    assert not Document.objects.filter(doc_id="d1").exists()


@pytest.mark.parametrize(
    "arguments",
    [{"text": "saved\x00"}, {"text": "ok", "summary": "s\ud800"}],
    ids=["text-nul", "summary-surrogate"],
)
def test_memory_save_with_hostile_text_or_summary_is_400(
    api: APIClient, make_document: Any, arguments: dict[str, str]
) -> None:
    document = make_document("workshop", text="before")
    session_id = start_session(api, memory=RW).json()["session"]["id"]
    recall = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["notes"]})
    assert recall.status_code == 200, recall.json()
    body = {
        "recallId": recall.json()["recallId"],
        "callId": "c1",
        "name": "memory_save",
        "arguments": arguments,
    }
    response = post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)
    (name,) = set(arguments) - {"text"} or {"text"}
    refused(response, f"arguments.{name}")
    document.refresh_from_db()
    assert document.text == "before"
    assert DocumentVersion.objects.filter(document=document).count() == 1
    assert not SessionEvent.objects.filter(type="memory.saved").exists()


def test_twenty_thousand_levels_of_nesting_is_400(api: APIClient) -> None:
    body = '{"title": "T", "text": ' + "[" * 20_000 + "]" * 20_000 + "}"
    response = api.put(
        f"{DOCS}/d1{DEV}", data=body, content_type="application/json", HTTP_IF_NONE_MATCH="*"
    )
    error = refused(response, "body")
    assert "at most 64 levels" in error["message"]
    assert not Document.objects.filter(doc_id="d1").exists()


# The API: path, query and headers.


@pytest.mark.parametrize(
    "url",
    [
        f"{SESSIONS}/ses%00x",
        f"{DEPLOYMENTS}/dep%00x",
        f"{API}/projects/de%00mo",
        f"{DOCS}/a%00b{DEV}",
        f"{API}/projects/acme/secrets/A%00",
    ],
)
def test_path_ids_with_nul_are_400(api: APIClient, url: str) -> None:
    error = refused(api.get(url), "path")
    assert error["details"] == {"field": "path"}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?environment=development&agent=a%00b", "query.agent"),
        ("?environment=development&projectId=a%00", "query.projectId"),
        ("?environment=development&cursor=%00", "query.cursor"),
        ("?environment=development&a%00=1", "query.a\\u0000"),
    ],
)
def test_query_values_and_names_with_nul_are_400(api: APIClient, query: str, field: str) -> None:
    refused(api.get(f"{SESSIONS}{query}"), field)


def test_header_with_nul_is_400_and_changes_nothing(api: APIClient, make_document: Any) -> None:
    document = make_document("d1", text="before")
    response = api.put(
        f"{DOCS}/d1{DEV}",
        data=json.dumps({"title": "T", "text": "after"}),
        content_type="application/json",
        HTTP_IF_MATCH=f'"{document.revision}\x00"',
    )
    refused(response, "header.If-Match")
    document.refresh_from_db()
    assert document.text == "before"


# Bodies without a length.


def chunked(client: Client, url: str, body: bytes, *, terminated: bool = True, **extra: Any) -> Any:
    """A request as a WSGI server hands over a chunked body: no CONTENT_LENGTH, the input
    de-chunked, and `wsgi.input_terminated` when the server promises its end (gunicorn)."""
    environ = {
        "REQUEST_METHOD": "PUT",
        "PATH_INFO": url.split("?")[0],
        "QUERY_STRING": url.partition("?")[2],
        "CONTENT_TYPE": "application/json",
        "HTTP_TRANSFER_ENCODING": "chunked",
        "wsgi.input": io.BytesIO(body),
        "wsgi.input_terminated": terminated,
        **extra,
    }
    return client.request(**environ)


def test_chunked_body_is_read(keys: Any) -> None:
    response = chunked(
        Client(),
        f"{DOCS}/d1{DEV}",
        json.dumps({"title": "Chunked", "text": "read"}).encode(),
        HTTP_X_API_KEY=keys.owner,
        HTTP_IF_NONE_MATCH="*",
    )
    assert response.status_code == 201, response.json()
    assert Document.objects.get(doc_id="d1").text == "read"


def test_chunked_body_over_64_kib_is_413(keys: Any) -> None:
    body = json.dumps({"title": "Big", "text": "x" * (64 * 1024)}).encode()
    response = chunked(
        Client(), f"{DOCS}/d1{DEV}", body, HTTP_X_API_KEY=keys.owner, HTTP_IF_NONE_MATCH="*"
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "memory_limit_exceeded"
    assert not Document.objects.filter(doc_id="d1").exists()


def test_chunked_body_on_a_server_without_terminated_input_is_411(keys: Any) -> None:
    body = json.dumps({"title": "T"}).encode()
    response = chunked(
        Client(),
        f"{DOCS}/d1{DEV}",
        body,
        terminated=False,
        HTTP_X_API_KEY=keys.owner,
        HTTP_IF_NONE_MATCH="*",
    )
    assert response.status_code == 411
    assert response.json()["error"]["code"] == "length_required"
    assert not Document.objects.filter(doc_id="d1").exists()


# Bodies in a content coding: no door decodes one.


@pytest.mark.parametrize("coding", ["gzip", "br", "identity, gzip", "x-anything"])
def test_a_body_in_a_content_coding_is_415_and_changes_nothing(
    api: APIClient, make_document: Any, coding: str
) -> None:
    document = make_document("d1", text="before")
    body = json.dumps({"title": "T", "text": "after"})
    for method, url, headers in [
        ("put", f"{DOCS}/d1{DEV}", {"HTTP_IF_MATCH": f'"{document.revision}"'}),
        ("put", f"{DOCS}/d2{DEV}", {"HTTP_IF_NONE_MATCH": "*"}),
        ("post", "/api/managed-agents/sessions", {"HTTP_IDEMPOTENCY_KEY": "k"}),
    ]:
        response = getattr(api, method)(
            url, data=body, content_type="application/json", HTTP_CONTENT_ENCODING=coding,
            **headers,
        )  # fmt: skip
        assert response.status_code == 415, response.content
        assert response.json() == {
            "error": {
                "code": "unsupported_media_type",
                "message": f"Content-Encoding {coding!r} is not accepted: send the body"
                " uncompressed.",
            }
        }
        assert response["Accept-Encoding"] == "identity"
    document.refresh_from_db()
    assert document.text == "before"
    assert list(Document.objects.values_list("doc_id", flat=True)) == ["d1"]
    assert not Session.objects.exists()


def test_a_page_form_in_a_content_coding_is_415(owner: Any, make_document: Any) -> None:
    page = "/projects/acme/development/resources/notes/new/"
    response = owner.post(
        page, {"id": "d9", "title": "T", "text": "x"}, HTTP_CONTENT_ENCODING="gzip"
    )
    assert response.status_code == 415
    assert "send the body uncompressed" in response.content.decode()
    assert response["Accept-Encoding"] == "identity"
    assert not Document.objects.filter(doc_id="d9").exists()


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_the_identity_coding_is_a_body_as_it_is(keys: Any, coding: str) -> None:
    response = Client().put(
        f"{DOCS}/d1{DEV}", data=json.dumps({"title": "Plain", "text": "read"}),
        content_type="application/json", HTTP_X_API_KEY=keys.owner, HTTP_IF_NONE_MATCH="*",
        HTTP_CONTENT_ENCODING=coding,
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    assert Document.objects.get(doc_id="d1").text == "read"


class _Reset(io.RawIOBase):
    """A request body whose connection is reset after its first bytes."""

    def __init__(self) -> None:
        self.sent = False

    def read(self, size: int = -1) -> bytes:
        if not self.sent:
            self.sent = True
            return b'{"title": '
        raise ConnectionResetError(104, "Connection reset by peer")


@pytest.mark.parametrize(
    ("url", "content_type", "headers"),
    [
        (f"{DOCS}/d1{DEV}", "application/json", {"HTTP_IF_NONE_MATCH": "*"}),
        (f"{API}/projects/acme/memory/import{DEV}", "application/zip", {}),
        ("/reference-provider/oc-memory", "application/json", {}),
    ],
    ids=["document", "import", "reference-provider"],
)
def test_a_body_the_connection_cut_is_400_and_stores_nothing(
    keys: Any, settings: Any, url: str, content_type: str, headers: dict[str, str]
) -> None:
    settings.REFERENCE_PROVIDER_TOKEN = "rpt_test"
    environ: dict[str, Any] = {"wsgi.input": _Reset(), **headers}
    response = Client().generic(
        "PUT" if url.startswith(DOCS) else "POST",
        url,
        CONTENT_TYPE=content_type,
        CONTENT_LENGTH="100",
        HTTP_X_API_KEY=keys.owner,
        HTTP_AUTHORIZATION="Bearer rpt_test",
        **environ,
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith("body: the body could not be read")
    assert not Document.objects.filter(doc_id="d1").exists()


def test_reference_provider_refuses_nul_in_its_body(settings: Any) -> None:
    settings.REFERENCE_PROVIDER_TOKEN = "rpt_test"
    response = Client().post(
        "/reference-provider/oc-memory",
        data=b'{"version": 1, "operation": "recall", "partition": "p\\u0000"}',
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer rpt_test",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert "partition" in response.json()["error"]["message"]


# The Memory page.


@pytest.mark.parametrize(
    "url",
    [
        f"{PAGE}/resources/notes/?q=a%00",
        f"{PAGE}/audit/?resource=a%00",
        f"{PAGE}/resources/notes/documents/d1/versions/a%00/",
        f"{PAGE}/sessions/ses%00/",
        f"{PAGE}/sessions/?agent=%00",
        "/switch/?project=a%00",
    ],
)
def test_memory_page_parameters_with_nul_are_a_400_page(
    owner: Client, make_document: Any, url: str
) -> None:
    make_document("d1")
    response = owner.get(url)
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert b"must not contain NUL" in response.content


def test_page_form_with_nul_is_refused_and_stores_nothing(owner: Client) -> None:
    response = owner.post(
        f"{PAGE}/resources/notes/new/", {"doc_id": "d1", "title": "T", "text": "a\x00b"}
    )
    assert response.status_code == 422
    assert not Document.objects.filter(doc_id="d1").exists()


@pytest.mark.parametrize("field", ["title", "summary", "text"])
def test_page_forms_refuse_lone_surrogates_naming_the_field(field: str, notes: Resource) -> None:
    data = {"doc_id": "d1", "title": "T", "summary": "", "text": "", field: "x\ud800"}
    form = DocumentCreateForm(data, resource=notes)
    assert not form.is_valid()
    assert list(form.errors) == [field]
    edit = DocumentEditForm({**data, "revision": "r\udc00"}, max_bytes=100)
    assert not edit.is_valid()
    assert "revision" in edit.errors


# The CLI.


def test_cli_text_file_with_nul_is_invalid_and_stores_nothing(project: Any, tmp_path: Path) -> None:
    path = tmp_path / "text.txt"
    path.write_bytes(b"a\x00b")
    with pytest.raises(CommandError) as raised:
        call_command(
            "memory",
            "--project",
            "acme",
            "create",
            "notes",
            "d1",
            "--title",
            "T",
            "--text-file",
            str(path),
            stdout=io.StringIO(),
        )
    assert raised.value.returncode == 6
    assert "NUL" in str(raised.value)
    assert not Document.objects.filter(doc_id="d1").exists()


def test_cli_import_file_with_a_lone_surrogate_fails_that_file(
    project: Any, tmp_path: Path
) -> None:
    (tmp_path / "notes").mkdir()
    manifest = {
        "format": FORMAT,
        "formatVersion": FORMAT_VERSION,
        "resources": ["notes"],
        "documents": 1,
    }
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    (tmp_path / "notes" / "d1.json").write_text(
        json.dumps({"id": "d1", "title": "T", "text": "x\ud800"})
    )
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("memory", "--project", "acme", "import", "--from", str(tmp_path), stdout=out)
    assert "text: the value contains an unpaired surrogate" in out.getvalue()
    assert not Document.objects.filter(doc_id="d1").exists()


def test_cli_arguments_that_are_not_utf8_are_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "MEMORYADMIN_VAR_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    argv = [sys.executable, "manage.py", "memory", "--project", "acme", "create", "notes", "d1"]
    # Bytes that are not UTF-8 reach Python as unpaired surrogates.
    done = subprocess.run(
        [*argv, b"--title", b"bad\xff"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 6, done.stderr
    assert b"arguments[7]: the value contains an unpaired surrogate (U+DCFF)" in done.stderr
    assert not (tmp_path / "memoryadmin.sqlite3").exists()


def test_audit_log_reads_after_every_refusal(api: APIClient, owner: Client) -> None:
    start_session(api, labels={"u": "\ud800"})
    post(api, DEPLOYMENTS, {"agent": "x", "memory": [{"id": "a\x00"}]})
    assert owner.get(f"{PAGE}/audit/").status_code == 200
    assert not AuditEntry.objects.filter(action__startswith="session").exists()


# A real server: gunicorn de-chunks request bodies and says so (wsgi.input_terminated).


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp_path = tmp_path_factory.mktemp("gunicorn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "MEMORYADMIN_VAR_DIR": str(tmp_path),
        "DJANGO_SECRET_KEY": "test-secret",
        "REFERENCE_PROVIDER_TOKEN": "rpt_gunicorn",
    }
    env.pop("DATABASE_URL", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "memoryadmin.wsgi"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/reference-provider/oc-memory", server, seconds=15)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize(
    ("chunks", "status", "fragment"),
    [
        ([b'{"version": ', b"2}"], 400, "version must be 1."),
        ([b'{"version": 1, ', b'"x": "' + b"y" * 70_000 + b'"}'], 413, "over 65536 bytes"),
    ],
    ids=["read", "over-the-limit"],
)
def test_chunked_bodies_through_gunicorn(
    gunicorn: str, chunks: list[bytes], status: int, fragment: str
) -> None:
    response = httpx.post(
        f"{gunicorn}/reference-provider/oc-memory",
        content=iter(chunks),
        headers={"Authorization": "Bearer rpt_gunicorn", "Content-Type": "application/json"},
        timeout=10,
    )
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]["message"]


def _raw_exchange(url: str, request: bytes, *, half_close: bool = False) -> tuple[int, Any]:
    """Sends `request` as it is (what an HTTP client would not) and reads the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        return answer.status, json.loads(answer.read())


@pytest.mark.parametrize(
    ("body", "half_close"),
    [
        (b"ZZ\r\n{}\r\n0\r\n\r\n", False),  # a chunk size that is not hexadecimal
        (b"2\r\n{}XX0\r\n\r\n", False),  # a chunk without its line end
        (b"10\r\n{}", True),  # the connection closed inside the first chunk
    ],
    ids=["size-not-hex", "no-terminator", "cut-short"],
)
def test_a_malformed_chunked_body_is_400_not_500(
    gunicorn: str, body: bytes, half_close: bool
) -> None:
    for path in ("/api/managed-agents/sessions", "/reference-provider/oc-memory"):
        status, answer = _raw_exchange(
            gunicorn,
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + body,
            half_close=half_close,
        )
        assert status == 400, (path, answer)
        assert answer["error"]["code"] == "invalid_request"
        assert answer["error"]["message"].startswith("body: the body could not be read")


@pytest.mark.parametrize("url", ["https://[::1", "https://[zz]/x", "https://a]b/"])
def test_a_url_whose_bracketed_host_cannot_be_read_is_a_400_and_stores_nothing(
    client_for: Any, keys: Any, web_client_for: Any, people: Any, url: str
) -> None:
    """Every URL the product stores passes one check (providers/declarations.py
    url_split): the standard library's split raised on these, a 500 on every door."""
    from memoryadmin.providers.models import Secret
    from memoryadmin.webhooks.models import Endpoint

    api = client_for(keys.owner)
    hook = api.post(
        f"{API}/projects/acme/webhooks",
        {"url": url, "events": ["document.updated"]},
        format="json",
    )
    secret = api.put(
        f"{API}/projects/acme/secrets/MEM_TOKEN{DEV}",
        {"value": "abc", "origins": [url]},
        format="json",
    )
    provider = {"kind": "mem0-platform", "baseUrl": url}
    deployment = api.post(
        DEPLOYMENTS,
        {"agent": "x-bot", "memory": [{"id": "m", "description": "a", "provider": provider}]},
        format="json",
    )
    for answer in (hook, secret, deployment):
        assert answer.status_code == 400, answer.content
        assert answer.json()["error"]["code"] == "invalid_request"
        assert "a host in [brackets] must be an IPv6 address" in answer.json()["error"]["message"]
    page = web_client_for(people.owner).post(
        f"{PAGE}/webhooks/new/", {"url": url, "events": ["document.updated"]}
    )
    assert page.status_code == 422
    assert not Endpoint.objects.exists()
    assert not Secret.objects.exists()
    assert not Deployment.objects.filter(agent="x-bot").exists()


@pytest.mark.parametrize(
    "request_kwargs",
    [{"HTTP_HOST": "evil.example"}, {"HTTP_HOST": ""}, {"QUERY_STRING": "&".join(["a=1"] * 1001)}],
    ids=["host-not-allowed", "no-host", "too-many-fields"],
)
def test_a_request_django_refuses_before_any_view_is_a_400_in_the_api_envelope(
    client_for: Any, keys: Any, request_kwargs: dict[str, str]
) -> None:
    answer = client_for(keys.owner).get(f"{API}/projects/acme", **request_kwargs)
    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/json"
    assert answer.json() == {
        "error": {"code": "invalid_request", "message": "The request could not be read."}
    }
