"""Provider egress: origins reach public addresses only, unless the operator allows more.

Attacks: origins that name internal addresses in any spelling, names that
resolve to them now or only later, a name that rebinds between check and
connect, and error messages that tell open ports from closed ones. The
servers are real (127.0.0.1); so are the connections. Name resolution is
steered through the C library's entry point, `socket.getaddrinfo`, for names
under `.test` only; everything else resolves as usual.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from memoryadmin.core import egress
from memoryadmin.core.egress import EgressTransport, address_refusal, literal_address
from memoryadmin.memory.models import AuditEntry, Deployment, Project, Resource
from memoryadmin.memory.services.deployments import deployment_create, resource_get
from memoryadmin.memory.services.projects import project_create
from memoryadmin.providers import client
from memoryadmin.providers.client import ProviderFailure, provider_recall
from memoryadmin.providers.declarations import origin_check
from memoryadmin.settings import env_networks
from tests.helpers import RECORDED_RECALL as GOOD_RECALL
from tests.helpers import RecordingProvider as Provider
from tests.helpers import SlowNames, serve

BASE = "/api/managed-agents/projects/acme"
LOOPBACK = ["127.0.0.0/8", "::1/128"]


@pytest.fixture
def provider() -> Iterator[Provider]:
    yield from serve(Provider())


Resolver = Callable[[str], list[str] | None]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[list[str]]]:
    """Answers for `.test` names: each lookup takes the next list of addresses (the last repeats).

    Counts lookups per name in `calls`, so a test can tell how often a name was resolved.
    """
    answers: dict[str, list[list[str]]] = {}
    calls: dict[str, int] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if not isinstance(name, str) or not name.endswith(".test"):
            return real(host, port, *args, **kwargs)
        calls[name] = calls.get(name, 0) + 1
        queue = answers.get(name)
        if not queue:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, int(port or 0)),
            )
            for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    answers["calls"] = calls  # type: ignore[assignment]
    return answers


def http_declaration(origin: str, *, resource_id: str = "knowledge") -> dict[str, Any]:
    return {
        "id": resource_id,
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "internal",
                "origin": origin,
                "methods": ["POST"],
                "pathPrefix": "/",
            },
            "path": "/memory",
        },
    }


def deploy(api: APIClient, origin: str) -> Any:
    return api.post(
        f"{BASE}/deployments",
        {"agent": "researcher", "memory": [http_declaration(origin)]},
        format="json",
    )


def deployed(project: Project, origin: str) -> Resource:
    deployment_create(
        project=project,
        agent="researcher",
        memory=[http_declaration(origin)],
        promote="development",
        actor="t",
    )
    return resource_get(project=project, environment="development", resource_id="knowledge")


def recall_failure(resource: Resource) -> ProviderFailure:
    with pytest.raises(ProviderFailure) as raised:
        provider_recall(
            resource=resource,
            partition="ocmem_v1_p",
            access="read",
            operation_id="mrq_1:knowledge",
            input_text="x",
            retry_delays=(0.01, 0.01),
        )
    return raised.value


def newest_failure(project: Project) -> AuditEntry:
    entry = AuditEntry.objects.filter(project=project, action="provider.failed").first()
    assert entry is not None
    return entry


# The rule itself.


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("192.168.0.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fec0::1", "site-local"),
        ("100.64.0.1", "shared address space (CGNAT)"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.1", "private"),
        ("::ffff:127.0.0.1", "loopback, embedded in ::ffff:127.0.0.1"),
        ("64:ff9b::a9fe:a9fe", "link-local, embedded in 64:ff9b::a9fe:a9fe"),
        ("2002:a00:1::", "private, embedded in 2002:a00:1::"),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_only_public_addresses_pass_by_default(address: str, category: str | None) -> None:
    assert address_refusal(literal_address(address) or pytest.fail(address), []) == category


def test_the_allow_list_admits_its_ranges_and_their_mapped_forms() -> None:
    allowed = egress.networks_parse(["127.0.0.0/8", "10.1.0.0/16"])
    for address in ("127.0.0.1", "127.9.9.9", "10.1.2.3", "::ffff:10.1.2.3"):
        assert address_refusal(literal_address(address), allowed) is None  # type: ignore[arg-type]
    for address in ("10.2.0.1", "::1", "192.168.0.1"):
        assert address_refusal(literal_address(address), allowed) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "spelling", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "017700000001"]
)
def test_numeric_host_spellings_are_read_as_the_address_they_reach(spelling: str) -> None:
    assert literal_address(spelling) == literal_address("127.0.0.1")


def test_names_are_not_addresses() -> None:
    for name in ("memory.example.com", "localhost", "deadbeef", "1e100.net", ""):
        assert literal_address(name) is None


def test_the_setting_takes_cidr_ranges_and_refuses_anything_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORYADMIN_PROVIDER_ALLOW", " 127.0.0.0/8, ::1/128 ,10.1.2.3")
    assert env_networks("MEMORYADMIN_PROVIDER_ALLOW") == ["127.0.0.0/8", "::1/128", "10.1.2.3/32"]
    monkeypatch.delenv("MEMORYADMIN_PROVIDER_ALLOW")
    assert env_networks("MEMORYADMIN_PROVIDER_ALLOW") == []
    for bad in ("127.0.0.1/8", "localhost", "10.0.0.0/33", "127.0.0.0/8;rm"):
        monkeypatch.setenv("MEMORYADMIN_PROVIDER_ALLOW", bad)
        with pytest.raises(ImproperlyConfigured, match="MEMORYADMIN_PROVIDER_ALLOW"):
            env_networks("MEMORYADMIN_PROVIDER_ALLOW")


# Deploy time.

REFUSED_ORIGINS = [
    "https://169.254.169.254",
    "https://10.0.0.1",
    "https://192.168.0.1",
    "https://172.16.5.4",
    "https://[fd00::1]",
    "https://[fe80::1]",
    "https://2130706433",
    "https://0x7f000001",
    "https://0177.0.0.1",
    "https://127.1",
    "https://127.0.0.1",
    "https://[::1]",
    "http://127.0.0.1:8000",
    "http://[::1]:9000",
    "http://2130706433:6379",
    "https://100.64.0.1",
    "https://224.0.0.1",
    "https://0.0.0.0",
    "https://[::]",
    "https://240.0.0.1",
    "https://[::ffff:169.254.169.254]",
    "https://[::ffff:7f00:1]",
    "https://[64:ff9b::a00:1]",
    "https://[2002:a9fe:a9fe::]",
    "https://localhost",
    "http://localhost:8000",
]


@pytest.mark.parametrize("origin", REFUSED_ORIGINS)
def test_internal_origins_are_refused_at_deploy(api: APIClient, settings: Any, origin: str) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    before = Deployment.objects.count()
    response = deploy(api, origin)
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("memory[0].provider.connection.origin ")
    assert "public addresses" in error["message"]
    assert Deployment.objects.count() == before


def test_loopback_is_refused_unless_allowed(api: APIClient, settings: Any) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    assert deploy(api, "http://127.0.0.1:8000").status_code == 400
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    assert deploy(api, "http://127.0.0.1:8000").status_code == 201
    assert deploy(api, "https://localhost").status_code == 201


def test_allowing_private_ranges_keeps_plain_http_on_loopback(
    api: APIClient, settings: Any
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = ["10.0.0.0/8", *LOOPBACK]
    assert deploy(api, "https://10.0.0.1").status_code == 201
    response = deploy(api, "http://10.0.0.1")
    assert response.status_code == 400
    assert "plain http:// is allowed only on loopback" in response.json()["error"]["message"]


def test_numeric_spellings_of_public_addresses_are_normalised() -> None:
    assert origin_check("https://134744072") == "https://8.8.8.8"
    assert origin_check("https://[::ffff:8.8.8.8]:8443") == "https://[::ffff:8.8.8.8]:8443"


def test_names_are_resolved_at_deploy(
    api: APIClient, settings: Any, resolver: dict[str, list[list[str]]]
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    resolver["metadata.test"] = [["203.0.113.9", "169.254.169.254"]]
    resolver["public.test"] = [["8.8.8.8", "2606:4700::1111"]]
    response = deploy(api, "https://metadata.test")
    assert response.status_code == 400
    assert "resolves to a" in response.json()["error"]["message"]
    assert deploy(api, "https://public.test").status_code == 201
    # A name that does not resolve now is accepted: it is checked when used.
    assert deploy(api, "https://later.test").status_code == 201


# Connect time.


def test_loopback_is_refused_at_connect_time_by_default(
    project: Project, provider: Provider, settings: Any
) -> None:
    resource = deployed(project, f"http://localhost:{provider.port}")
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    failed = recall_failure(resource)
    assert provider.seen == []
    assert (failed.reason, failed.retryable, failed.attempts) == ("egress_refused", False, 1)
    assert failed.details == {"resource": "knowledge", "retryable": False}
    assert "127.0.0.1" not in failed.message
    assert "loopback" not in failed.message
    detail = newest_failure(project).detail
    assert detail["reason"] == "egress_refused"
    assert "127.0.0.1 (loopback)" in detail["description"]
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    assert provider_recall(
        resource=resource,
        partition="ocmem_v1_p",
        access="read",
        operation_id="mrq_2:knowledge",
        input_text="x",
    ).text == ("Internal.")


def test_a_name_that_resolves_later_to_an_internal_address_is_refused_when_used(
    project: Project, settings: Any, resolver: dict[str, list[list[str]]]
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    resource = deployed(project, "https://later.test")
    resolver["later.test"] = [["10.0.0.1"]]
    failed = recall_failure(resource)
    assert failed.reason == "egress_refused"
    assert "10.0.0.1 (private)" in newest_failure(project).detail["description"]


def test_every_address_of_a_name_is_checked(
    provider: Provider, settings: Any, resolver: dict[str, list[list[str]]]
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.1/32"]
    # The first address is allowed and listening; the second is not allowed.
    resolver["mixed.test"] = [["127.0.0.1", "10.0.0.1"]]
    with (
        httpx.Client(transport=EgressTransport()) as http,
        pytest.raises(httpx.ConnectError) as raised,
    ):
        http.post(f"http://mixed.test:{provider.port}/memory", json={})
    assert egress.egress_refusal(raised.value) is not None
    assert provider.seen == []


def test_the_connection_goes_to_the_address_that_was_checked(
    provider: Provider, settings: Any, resolver: dict[str, list[list[str]]]
) -> None:
    """A name that rebinds after its first lookup: the checked answer is the one used."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.1/32"]
    # First lookup: the allowed listener. Every later one: an address that is
    # not allowed (and where nothing listens).
    resolver["rebind.test"] = [["127.0.0.1"], ["127.0.0.2"]]
    with httpx.Client(transport=EgressTransport()) as http:
        response = http.post(f"http://rebind.test:{provider.port}/memory", json={}, timeout=5)
    assert response.json() == GOOD_RECALL
    assert resolver["calls"]["rebind.test"] == 1  # type: ignore[call-overload]
    # The request still names the origin's host.
    assert provider.seen[0]["Host"] == f"rebind.test:{provider.port}"


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def test_tls_verifies_the_origins_name_on_the_checked_address(
    tmp_path: Path, settings: Any, resolver: dict[str, list[list[str]]]
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = ["127.0.0.1/32"]
    key, cert = _certificate(tmp_path, "provider.test")
    server = Provider()
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    names: list[str | None] = []
    server_context.sni_callback = lambda _sock, name, _ctx: names.append(name)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    trusted = ssl.create_default_context(cafile=str(cert))
    resolver["provider.test"] = [["127.0.0.1"]]
    resolver["impostor.test"] = [["127.0.0.1"]]
    for running in serve(server):
        with httpx.Client(transport=EgressTransport(verify=trusted)) as http:
            response = http.post(f"https://provider.test:{running.port}/memory", json={})
            assert response.json() == GOOD_RECALL
            # The same address under another name: the certificate does not match.
            with pytest.raises(httpx.ConnectError, match="certificate"):
                http.post(f"https://impostor.test:{running.port}/memory", json={})
    assert names[0] == "provider.test"
    assert len(server.seen) == 1


# What callers see.


def test_a_closed_port_fails_like_any_other_failure_for_the_caller(project: Project) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    resource = deployed(project, f"http://127.0.0.1:{closed_port}")
    failed = recall_failure(resource)
    assert failed.message == client.failure_message("knowledge", retryable=True)
    assert failed.details == {"resource": "knowledge", "retryable": True}
    assert "ConnectError" in newest_failure(project).detail["description"]


def test_a_recall_through_the_api_reports_a_generic_failure(
    project: Project, api: APIClient, settings: Any, provider: Provider
) -> None:
    deployed(project, f"http://localhost:{provider.port}")
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    session = api.post(
        "/api/managed-agents/sessions",
        {
            "agentId": "researcher@development",
            "memory": {"knowledge": {"scope": "namespace", "id": "owner", "access": "read"}},
        },
        format="json",
        headers={"Idempotency-Key": "s1"},
    )
    assert session.status_code == 201, session.json()
    response = api.post(
        f"/api/managed-agents/sessions/{session.json()['session']['id']}/memory/recall",
        {"use": [], "input": {"text": "x"}},
        format="json",
    )
    assert response.status_code == 409, response.json()
    error = response.json()["error"]
    assert error == {
        "code": "recall_failed",
        "message": client.failure_message("knowledge", retryable=False),
        "details": {"resource": "knowledge", "reason": "provider_failed", "retryable": False},
    }
    assert provider.seen == []
    entry = newest_failure(project)
    assert entry.environment == "development"
    assert "(loopback)" in entry.detail["description"]


# Name lookups: within the call's deadline, within the project's share.


def test_a_slow_name_lookup_ends_at_the_calls_deadline(
    project: Project, provider: Provider, settings: Any, slow_names: SlowNames
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 0.5
    resource = deployed(project, f"https://knowledge.slow.test:{provider.port}")
    slow_names.hang = True
    started = time.monotonic()
    failed = recall_failure(resource)
    # Cut at its deadline, not at the lookup's end (30 s): a loaded machine's margin.
    assert time.monotonic() - started < 10
    assert (failed.reason, failed.retryable) == ("timeout", True)
    assert newest_failure(project).detail["reason"] == "timeout"
    assert provider.seen == []


def test_a_projects_slow_lookups_hold_its_own_share_only(
    project: Project,
    other_project: Project,
    provider: Provider,
    settings: Any,
    slow_names: SlowNames,
) -> None:
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 0.4
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = 2
    slow = deployed(project, f"https://knowledge.slow.test:{provider.port}")
    fine = deployed(other_project, f"http://localhost:{provider.port}")
    slow_names.hang = True
    slow_names.started.clear()  # the lookup at deploy
    for _ in range(3):
        started = time.monotonic()
        assert recall_failure(slow).reason == "timeout"
        assert time.monotonic() - started < 10  # the lookups hang 30 s
    # The lookups its calls gave up on still run, two at most: the third call waited
    # for one of them to end, until its deadline, and started none.
    assert slow_names.started == {"knowledge.slow.test": 2}
    assert egress.lookups.running("acme") == 2
    # Another project's call, with time to spare on a loaded machine, is answered while
    # the project's two lookups still hang: it never waited for its share.
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 30
    outcome = provider_recall(
        resource=fine,
        partition="ocmem_v1_p",
        access="read",
        operation_id="mrq_9:knowledge",
        input_text="x",
    )
    assert outcome.text == "Internal."
    assert slow_names.in_flight == 2
    assert egress.lookups.running("acme") == 2
    slow_names.release.set()
    waited = time.monotonic() + 5
    while egress.lookups.running("acme") and time.monotonic() < waited:
        time.sleep(0.01)
    assert egress.lookups.running("acme") == 0
    assert slow_names.in_flight == 0


def test_a_slow_lookup_at_deploy_holds_the_request_two_seconds_at_most(
    api: APIClient, settings: Any, slow_names: SlowNames
) -> None:
    """A name whose lookup hangs is accepted as a name that does not resolve (it is
    checked again on every connection), and the check waited for it that long only."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    slow_names.hang = True
    started = time.monotonic()
    response = deploy(api, "https://hangs.slow.test")
    assert time.monotonic() - started < egress.DEPLOY_LOOKUP_SECONDS + 8  # not the hang's 30
    assert response.status_code == 201, response.json()
    assert slow_names.started == {"hangs.slow.test": 1}
    # Once it answers (127.0.0.1, not allowed), a deploy refuses it as before.
    slow_names.hang = False
    slow_names.release.set()
    refused = deploy(api, "https://hangs.slow.test")
    assert refused.status_code == 400
    assert "resolves to a loopback address" in refused.json()["error"]["message"]


def test_the_lookups_of_one_deployment_share_its_two_seconds(
    api: APIClient, settings: Any, slow_names: SlowNames
) -> None:
    """A deployment naming many origins whose lookups hang holds the request two seconds
    in all, not two seconds a name (a 64 KiB manifest names hundreds): the names not
    checked in time are accepted as names that do not resolve, as a hung one is, and are
    checked again on every connection."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = 2
    slow_names.hang = True
    memory = [
        http_declaration(f"https://n{index}.slow.test", resource_id=f"knowledge-{index}")
        for index in range(6)
    ]
    started = time.monotonic()
    response = api.post(
        f"{BASE}/deployments", {"agent": "researcher", "memory": memory}, format="json"
    )
    took = time.monotonic() - started
    assert response.status_code == 201, response.json()
    assert took < egress.DEPLOY_LOOKUP_SECONDS + 1.5, took
    # Only those the project's share had room for were looked up at all.
    assert sum(slow_names.started.values()) <= 2


def _lookups_ended(project: str | None = None) -> bool:
    """Whether the lookups of `project` (of every project) ended, waiting 5 s at most."""
    waited = time.monotonic() + 5
    while egress.lookups.running(project) and time.monotonic() < waited:
        time.sleep(0.01)
    return egress.lookups.running(project) == 0


def test_the_process_bounds_every_projects_lookups_together(
    project: Project,
    other_project: Project,
    provider: Provider,
    settings: Any,
    slow_names: SlowNames,
) -> None:
    """However many projects' names hang, the process runs at most its bound of lookups: a
    project holds half of it at most (its own setting higher or not), and once it is full a
    lookup waits for one to end within its call's deadline, then fails as a timeout,
    starting no thread. Once lookups end, calls are answered again."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    settings.MEMORYADMIN_PROVIDER_DEADLINE_SECONDS = 0.4
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = 8
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS = 4
    third = project_create(project_id="initech", name="Initech", actor="test")
    acme = deployed(project, f"https://acme.slow.test:{provider.port}")
    globex = deployed(other_project, f"https://globex.slow.test:{provider.port}")
    initech = deployed(third, f"https://initech.slow.test:{provider.port}")
    slow_names.hang = True
    slow_names.spared = {"initech.slow.test"}
    slow_names.started.clear()  # the lookups at deploy
    for _ in range(3):
        assert recall_failure(acme).reason == "timeout"
    # Half the process's four, not its own eight.
    assert slow_names.started == {"acme.slow.test": 2}
    for _ in range(3):
        assert recall_failure(globex).reason == "timeout"
    assert slow_names.started == {"acme.slow.test": 2, "globex.slow.test": 2}
    assert egress.lookups.running() == 4
    # The process is full: a third project's name, which would answer at once, is not
    # looked up; its call waited until its deadline.
    started = time.monotonic()
    failed = recall_failure(initech)
    assert time.monotonic() - started < 10
    assert (failed.reason, failed.retryable) == ("timeout", True)
    assert newest_failure(third).detail["reason"] == "timeout"
    assert "initech.slow.test" not in slow_names.started
    assert slow_names.in_flight == 4
    assert egress.lookups.running() == 4
    assert provider.seen == []
    # Once the hung lookups end, the third project's name is looked up again.
    slow_names.release.set()
    assert _lookups_ended()
    lookup = egress.lookups.start(
        "initech", "initech.slow.test", 443, until=time.monotonic() + 5, stopped=lambda: False
    )
    assert lookup is not None
    assert lookup.done.wait(5)
    assert [address.compressed for _, address in lookup.addresses] == ["127.0.0.1"]
    assert slow_names.started["initech.slow.test"] == 1


def test_the_process_bound_defaults_to_four_projects_shares() -> None:
    from memoryadmin import settings as configured

    assert configured.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT == 8
    assert configured.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROCESS == 32
    assert egress.lookups_limit() == 8


def test_a_projects_hung_deploy_checks_leave_other_projects_checks_whole(
    api: APIClient,
    client_for: Callable[[str | None], APIClient],
    keys: Any,
    settings: Any,
    slow_names: SlowNames,
) -> None:
    """Deploy-time checks count against their project's share: one project's names that
    hang leave another's checks theirs, which still resolve and refuse what they must."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = []
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = 1
    slow_names.hang = True
    slow_names.spared = {"globex.slow.test"}
    # Acme's check waits its two seconds and accepts the name; its lookup still hangs.
    assert deploy(api, "https://acme.slow.test").status_code == 201
    assert egress.lookups.running("acme") == 1
    # Its share is full: its next check starts no lookup, and accepts the name too.
    assert (
        api.post(
            f"{BASE}/webhooks",
            {"url": "https://acme.slow.test/hooks", "events": ["document.created"]},
            format="json",
        ).status_code
        == 201
    )
    assert slow_names.started == {"acme.slow.test": 1}
    # Globex's checks resolve their name (127.0.0.1, not allowed) and refuse it.
    globex = client_for(keys.other)
    refused = globex.post(
        "/api/managed-agents/projects/globex/deployments",
        {"agent": "researcher", "memory": [http_declaration("https://globex.slow.test")]},
        format="json",
    )
    assert refused.status_code == 400, refused.json()
    assert "resolves to a loopback address" in refused.json()["error"]["message"]
    hook = globex.post(
        "/api/managed-agents/projects/globex/webhooks",
        {"url": "https://globex.slow.test/hooks", "events": ["document.created"]},
        format="json",
    )
    assert hook.status_code == 400, hook.json()
    assert "resolves to a loopback address" in hook.json()["error"]["message"]
    assert slow_names.started == {"acme.slow.test": 1, "globex.slow.test": 2}
    assert not Deployment.objects.filter(project_id="globex").exists()
    assert egress.lookups.running("globex") == 0
    slow_names.release.set()
    assert _lookups_ended("acme")


def test_a_lookup_no_thread_can_run_fails_its_call_and_gives_its_share_back(
    project: Project,
    provider: Provider,
    settings: Any,
    slow_names: SlowNames,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process can start no more threads (its limit; the interpreter shutting down):
    the call fails as one whose name did not resolve, an answer and not an exception, and
    the project's share is whole again for the calls after it."""
    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    settings.MEMORYADMIN_OUTBOUND_LOOKUPS_PER_PROJECT = 1
    resource = deployed(project, f"https://knowledge.slow.test:{provider.port}")
    start = threading.Thread.start

    def no_thread(thread: threading.Thread) -> None:
        if thread.name == "egress-lookup":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    for _ in range(2):
        failed = recall_failure(resource)
        assert (failed.reason, failed.retryable) == ("transport_error", True)
        assert egress.lookups.running("acme") == 0
    assert newest_failure(project).detail["reason"] == "transport_error"
    assert provider.seen == []
    # A deploy's check accepts the name, as one that does not resolve now.
    assert egress.origin_address_check("hangs.slow.test", project="acme") is None
    assert egress.lookups.running() == 0
    monkeypatch.setattr(threading.Thread, "start", start)
    # The share is whole: the next lookup starts at once.
    lookup = egress.lookups.start(
        "acme", "knowledge.slow.test", 443, until=time.monotonic(), stopped=lambda: False
    )
    assert lookup is not None
    assert lookup.done.wait(5)
    assert lookup.error is None


# Stopping an https call: the connection TLS wraps is the one a cancellation and the
# deadline's watchdog shut down (TLS detaches the socket it wraps; a shutdown of that one
# reached nothing, so an https call ran on to its socket timeouts).


class _TlsPeer:
    """A TLS listener on 127.0.0.1 that misbehaves as told: `handshake` never completes the
    handshake, `silent` reads the request and never answers, `trickle` sends its status
    line a byte every 0.2 s."""

    def __init__(self, key: Path, cert: Path, behaviour: str) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.behaviour = behaviour
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            if self.behaviour == "handshake":
                self.stop.wait(15)
                return
            tls = self.context.wrap_socket(conn, server_side=True)
            tls.recv(65536)
            if self.behaviour == "silent":
                self.stop.wait(15)
                return
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}":
                if self.stop.wait(0.2):
                    return
                with contextlib.suppress(OSError):
                    tls.send(bytes([byte]))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.listener.close()


@pytest.mark.parametrize("behaviour", ["handshake", "silent", "trickle"])
def test_an_https_call_stops_at_once_when_cancelled_and_ends_by_its_deadline(
    tmp_path: Path, settings: Any, behaviour: str
) -> None:
    from memoryadmin.core.exchange import outbound

    settings.MEMORYADMIN_PROVIDER_ALLOW = LOOPBACK
    key, cert = _certificate(tmp_path, "localhost")
    settings.MEMORYADMIN_PROVIDER_CA_FILE = str(cert)
    peer = _TlsPeer(key, cert, behaviour)
    url = f"https://localhost:{peer.port}/memory"
    try:
        with outbound(project="acme") as out:
            timer = threading.Timer(0.5, out.abort)
            timer.start()
            started = time.monotonic()
            reply = out.send("GET", url, headers={}, deadline=time.monotonic() + 10, limit=1024)
            elapsed = time.monotonic() - started
            timer.join()
        assert reply.status is None
        assert reply.failure is not None
        assert elapsed < 3, f"cancelled at 0.5 s, ended after {elapsed:.1f} s"
    finally:
        peer.close()

    peer = _TlsPeer(key, cert, behaviour)
    url = f"https://localhost:{peer.port}/memory"
    try:
        with outbound(project="acme") as out:
            started = time.monotonic()
            reply = out.send("GET", url, headers={}, deadline=time.monotonic() + 1, limit=1024)
            elapsed = time.monotonic() - started
        assert reply.failure == "timeout"
        assert elapsed < 3, f"a deadline of 1 s, ended after {elapsed:.1f} s"
    finally:
        peer.close()
