"""Numbers and times from outside: ASCII digits only, in range, ISO 8601 times that exist.

Superscript, Arabic-Indic and fullwidth digits pass `str.isdigit()`, and `int()`
reads the last two as numbers; every door answers them 4xx and changes nothing.
Providers and webhook receivers that send such a Retry-After are treated as if
they sent none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from memoryadmin.agents.models import Recall, Session
from memoryadmin.agents.services.sessions import event_append
from memoryadmin.core.inputs import (
    InvalidInput,
    parse_date,
    parse_instant,
    parse_int,
    whole_number,
)
from memoryadmin.memory.models import ApiKey, AuditEntry, Document, Project
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.runner.jobs import jobs_run_due
from memoryadmin.runner.models import Job
from memoryadmin.webhooks.delivery import webhook_deliver
from memoryadmin.webhooks.models import Delivery, Endpoint
from memoryadmin.webhooks.services import endpoint_create
from memoryadmin_client.webhooks import InvalidSignature, verify
from tests.helpers import (
    DEV,
    DOCS,
    Receiver,
    ScriptedProvider,
    html_of,
    scripted_session,
    serve,
    support_session,
)

pytestmark = pytest.mark.django_db

API = "/api/managed-agents"
KEYS = f"{API}/projects/acme/api-keys"
HOOKS = f"{API}/projects/acme/webhooks"
PAGE = "/projects/acme/development"
DELIVER = f"{webhook_deliver.__module__}.{webhook_deliver.__qualname__}"
ATTACKER_KEY_ID = 10**9

# Superscript one (not a decimal: int() raises), Arabic-Indic three and fullwidth one
# (decimals: int() reads them as 3 and 1), and percent-encoded as a path or query carries them.
SUPERSCRIPT_ONE, ARABIC_THREE, FULLWIDTH_ONE = "\u00b9", "\u0663", "\uff11"
ARABIC_2026, FULLWIDTH_2026 = "\u0662\u0660\u0662\u0666", "\uff12\uff10\uff12\uff16"
UNICODE_DIGITS = {"superscript": "%C2%B9", "arabic-indic": "%D9%A3", "fullwidth": "%EF%BC%91"}
# Other values that are no id or seq.
NOT_NUMBERS = [*UNICODE_DIGITS.values(), "9" * 5000, "-1", "1.0", "%201", "0x1"]
BAD_TIMES = [
    "2026-01-01T24:00:00Z",
    "2026-01-01T25:00:00Z",
    "2026-01-01T00:00:00+99:00",
    "2026-01-01T00:00:00+24:00",
    "2026-13-01T00:00:00Z",
    "%D9%A2%D9%A0%D9%A2%D9%A6-01-01T00:00:00Z",  # Arabic-Indic 2026
    "0001-01-01T00:00:00+01:00",  # before the year 1 in UTC
    "9999-12-31T23:59:59-01:00",  # after the year 9999 in UTC
    "yesterday",
]


def error_of(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


# The kernel's reader.


@pytest.mark.parametrize(
    "text",
    [SUPERSCRIPT_ONE, ARABIC_THREE, FULLWIDTH_ONE, "", " 1", "+1", "-1", "1.0", "9" * 5000, None],
)
def test_only_ascii_digits_in_range_are_numbers(text: Any) -> None:
    assert whole_number(text) is None
    with pytest.raises(InvalidInput) as caught:
        parse_int(text, field="after")
    assert caught.value.status == 400
    assert caught.value.details == {"field": "after"}


def test_numbers_are_range_checked_and_clamped_only_when_asked() -> None:
    assert whole_number("0007") == 7
    assert whole_number("0" * 5000 + "7") == 7
    assert whole_number(str(2**63 - 1)) == 2**63 - 1
    assert whole_number(str(2**63)) is None
    assert whole_number("11", maximum=10) is None
    assert whole_number("0", minimum=1) is None
    assert whole_number("9" * 5000, maximum=100, clamp=True) == 100
    assert whole_number("0", minimum=1, clamp=True) == 1
    assert whole_number(ARABIC_THREE, maximum=100, clamp=True) is None


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-01T24:00:00Z",
        "2026-01-01T25:00:00Z",
        "2026-01-01T00:00:00+99:00",
        f"{ARABIC_2026}-01-01T00:00:00Z",
        f"{FULLWIDTH_2026}-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "2026-01-01T00:00:00Z" + " " * 60,
        "",
        None,
        1767225600,
    ],
)
def test_times_that_do_not_exist_are_refused(text: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_instant(text, field="asOf")
    assert caught.value.details == {"field": "asOf"}


def test_times_are_read_as_instants_in_utc() -> None:
    assert parse_instant("2026-01-01T01:30:00+01:30", field="t").isoformat() == (
        "2026-01-01T00:00:00+00:00"
    )
    assert parse_instant("2026-01-01", field="t").isoformat() == "2026-01-01T00:00:00+00:00"
    assert parse_instant("0001-01-01T00:00:00Z", field="t").year == 1
    with pytest.raises(InvalidInput, match="time zone"):
        parse_instant("2026-01-01T00:00:00", field="deadlineAt", zone_required=True)
    assert parse_date("2026-02-28", field="since").isoformat() == "2026-02-28"
    for text in [f"{ARABIC_2026}-01-01", "2026-02-30", "2026-01-01T00:00:00+99:00"]:
        with pytest.raises(InvalidInput):
            parse_date(text, field="since")


# Point 6: API keys named by Unicode digits.


@pytest.fixture
def attacker(client_for: Any, project: Project) -> APIClient:
    """A client with a read-write key of the project, whose id is none of the small ones."""
    key, secret = api_key_create(project_id=project.id)
    ApiKey.objects.filter(pk=key.pk).update(id=ATTACKER_KEY_ID)
    client: APIClient = client_for(secret)
    return client


@pytest.fixture
def numbered_keys(project: Project, attacker: APIClient) -> dict[int, ApiKey]:
    """Keys of the project with the ids 1 and 3, which Unicode digits would be read as."""
    ApiKey.objects.filter(pk__in=[1, 3]).delete()
    made = {}
    for pk in (1, 3):
        key = api_key_create(project_id=project.id, name=f"key {pk}")[0]
        ApiKey.objects.filter(pk=key.pk).update(id=pk)
        made[pk] = ApiKey.objects.get(pk=pk)
    return made


@pytest.mark.parametrize("action", ["revoke", "rotate"])
@pytest.mark.parametrize("ref", NOT_NUMBERS)
def test_a_key_named_by_anything_but_ascii_digits_is_not_found(
    attacker: APIClient, numbered_keys: dict[int, ApiKey], action: str, ref: str
) -> None:
    keys_before = ApiKey.objects.count()
    audit_before = AuditEntry.objects.count()
    response = attacker.post(f"{KEYS}/{ref}/{action}", {}, format="json")
    error_of(response, 404, "api_key_not_found")
    for pk in numbered_keys:
        assert ApiKey.objects.get(pk=pk).revoked_at is None
    assert ApiKey.objects.count() == keys_before
    assert AuditEntry.objects.count() == audit_before


def test_a_key_named_by_its_ascii_id_is_still_found(
    attacker: APIClient, numbered_keys: dict[int, ApiKey]
) -> None:
    response = attacker.post(f"{KEYS}/3/revoke")
    assert response.status_code == 200, response.json()
    assert response.json()["id"] == 3
    assert ApiKey.objects.get(pk=3).revoked_at is not None
    assert ApiKey.objects.get(pk=1).revoked_at is None


@pytest.mark.parametrize("ref", [ARABIC_THREE, FULLWIDTH_ONE, "99999999999999999999"])
def test_the_key_commands_refuse_unicode_digits(numbered_keys: dict[int, ApiKey], ref: str) -> None:
    with pytest.raises(CommandError, match="No API key"):
        call_command("apikey", "revoke", ref, stdout=StringIO())
    with pytest.raises(CommandError, match="graceSeconds must be between 0"):
        call_command("apikey", "rotate", "3", "--grace", ARABIC_THREE, stdout=StringIO())
    assert ApiKey.objects.filter(project_id="acme").count() == len(numbered_keys) + 1
    assert not ApiKey.objects.filter(pk__in=[1, 3], revoked_at__isnull=False).exists()


# Point 6: webhook endpoints and deliveries named by Unicode digits.


@pytest.fixture
def numbered_endpoints(project: Project) -> dict[int, Endpoint]:
    """Endpoints of the project with the ids 1 and 3, each with a failed delivery."""
    Endpoint.objects.filter(pk__in=[1, 3]).delete()
    made = {}
    for pk in (1, 3):
        endpoint = endpoint_create(
            project=project,
            url=f"http://127.0.0.1:9/hook-{pk}",
            events=["document.created"],
            description="",
            actor="t",
        )[0]
        Endpoint.objects.filter(pk=endpoint.pk).update(id=pk)
        made[pk] = Endpoint.objects.get(pk=pk)
        Delivery.objects.filter(pk__in=[pk]).delete()
        job = Job.objects.create(
            name=DELIVER,
            project=project.id,
            kwargs={"endpoint": pk, "event": f"evt_{pk}"},
            line=f"webhook:{pk}",
            state="dead",
            attempts=8,
            max_attempts=8,
            run_after=timezone.now(),
        )
        delivery = Delivery.objects.create(
            endpoint=made[pk],
            event_id=f"evt_{pk}",
            event="document.created",
            body="{}",
            state="failed",
            job=job,
            created_at=timezone.now(),
        )
        Delivery.objects.filter(pk=delivery.pk).update(id=pk)
    return made


@pytest.mark.parametrize("ref", NOT_NUMBERS)
def test_an_endpoint_named_by_anything_but_ascii_digits_is_not_found(
    attacker: APIClient, numbered_endpoints: dict[int, Endpoint], ref: str
) -> None:
    error_of(attacker.get(f"{HOOKS}/{ref}"), 404, "webhook_not_found")
    patched = attacker.patch(f"{HOOKS}/{ref}", {"active": False}, format="json")
    error_of(patched, 404, "webhook_not_found")
    error_of(attacker.delete(f"{HOOKS}/{ref}"), 404, "webhook_not_found")
    error_of(attacker.post(f"{HOOKS}/{ref}/rotate-secret"), 404, "webhook_not_found")
    error_of(attacker.get(f"{HOOKS}/{ref}/deliveries"), 404, "webhook_not_found")
    redelivered = attacker.post(f"{HOOKS}/1/deliveries/{ref}/redeliver")
    error_of(redelivered, 404, "delivery_not_found")
    for pk, endpoint in numbered_endpoints.items():
        now = Endpoint.objects.get(pk=pk)
        assert (now.active, now.secret) == (True, endpoint.secret)
        assert Delivery.objects.get(pk=pk).state == "failed"
    assert not AuditEntry.objects.filter(action__startswith="webhook.", actor__startswith="key:")


# Point 6: `after` of a session's events, on the API and the page.


@pytest.fixture
def session_with_events(project: Project, workshop: Document) -> Session:
    session = support_session(project)
    for _ in range(4):
        event_append(session=session, type="memory.saved", data={})
    return session


@pytest.mark.parametrize("after", [*NOT_NUMBERS, "", "1000000000000"])
def test_events_after_anything_but_a_small_ascii_number_is_400(
    attacker: APIClient, session_with_events: Session, after: str
) -> None:
    response = attacker.get(f"{API}/sessions/{session_with_events.id}/events?after={after}")
    error = error_of(response, 400, "invalid_request")
    assert error["details"] == {"field": "after"}


def test_events_after_an_ascii_number_still_page(
    attacker: APIClient, session_with_events: Session
) -> None:
    response = attacker.get(f"{API}/sessions/{session_with_events.id}/events?after=003")
    assert [event["seq"] for event in response.json()["events"]] == [4, 5]


@pytest.mark.parametrize("after", [*UNICODE_DIGITS.values(), "9" * 5000, "-1", ""])
def test_the_session_page_answers_400_to_a_bad_after(
    owner: Any, session_with_events: Session, after: str
) -> None:
    url = f"{PAGE}/sessions/{session_with_events.id}/?after={after}"
    page = html_of(owner.get(url), 400)
    assert "after must be a whole number" in page
    fragment = owner.get(url, HTTP_HX_REQUEST="true")
    assert fragment.status_code == 400


def test_the_session_page_still_pages_with_an_ascii_after(
    owner: Any, session_with_events: Session
) -> None:
    page = owner.get(f"{PAGE}/sessions/{session_with_events.id}/?after=3")
    assert page.status_code == 200


def test_the_events_command_refuses_unicode_digits(session_with_events: Session) -> None:
    with pytest.raises(CommandError, match="after must be a whole number"):
        call_command(
            "session", "events", session_with_events.id, "--after", ARABIC_THREE, stdout=StringIO()
        )


# Point 7: asOf, since and until that name no instant.


@pytest.fixture
def plan(make_document: Any) -> Document:
    document: Document = make_document("plan", text="Then.")
    return document


@pytest.mark.parametrize("as_of", BAD_TIMES)
def test_bad_as_of_is_400_on_the_list_and_restore_and_changes_nothing(
    attacker: APIClient, plan: Document, as_of: str
) -> None:
    listed = attacker.get(f"{DOCS}{DEV}&asOf={as_of.replace('+', '%2B')}")
    assert error_of(listed, 400, "invalid_request")["details"] == {"field": "asOf"}
    versions = plan.versions.count()
    from urllib.parse import unquote

    for dry_run in (True, False):
        body = {"asOf": unquote(as_of), "dryRun": dry_run}
        restored = attacker.post(
            f"{API}/projects/acme/memory/notes/restore{DEV}",
            data=json.dumps(body),
            content_type="application/json",
        )
        assert error_of(restored, 400, "invalid_request")["details"] == {"field": "asOf"}
    assert Document.objects.get(pk=plan.pk).revision == plan.revision
    assert plan.versions.count() == versions
    assert not AuditEntry.objects.filter(action__startswith="document.restore").exists()


@pytest.mark.parametrize("name", ["since", "until"])
@pytest.mark.parametrize("value", BAD_TIMES)
def test_bad_audit_times_are_400(
    attacker: APIClient, project: Project, name: str, value: str
) -> None:
    query = f"{name}={value.replace('+', '%2B')}"
    response = attacker.get(f"{API}/projects/acme/audit{DEV}&{query}")
    assert error_of(response, 400, "invalid_request")["details"] == {"field": name}


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"])
def test_the_ends_of_time_are_times(attacker: APIClient, plan: Document, value: str) -> None:
    for name in ("since", "until"):
        response = attacker.get(f"{API}/projects/acme/audit{DEV}&{name}={value}")
        assert response.status_code == 200, response.json()
    listed = attacker.get(f"{DOCS}{DEV}&asOf={value}")
    assert listed.status_code == 200, listed.json()


@pytest.mark.parametrize("as_of", BAD_TIMES)
def test_the_as_of_page_answers_400_and_restores_nothing(
    owner: Any, plan: Document, as_of: str
) -> None:
    query = f"asOf={as_of.replace('+', '%2B')}"
    assert "asOf must be an ISO 8601 time" in html_of(
        owner.get(f"{PAGE}/resources/notes/as-of/?{query}"), 400
    )
    html_of(owner.get(f"{PAGE}/resources/notes/as-of/restore/?{query}&scope=all"), 400)
    from urllib.parse import unquote

    posted = owner.post(f"{PAGE}/resources/notes/as-of/restore/", {"asOf": unquote(as_of)})
    html_of(posted, 400)
    assert Document.objects.get(pk=plan.pk).revision == plan.revision


@pytest.mark.parametrize(
    "value", ["%D9%A2%D9%A0%D9%A2%D9%A6-01-01", "%EF%BC%92026-01-01", "2026-02-30"]
)
def test_the_audit_page_reads_only_ascii_dates(owner: Any, plan: Document, value: str) -> None:
    # A date that is not one is a form error, and the filter is left out.
    for name, label in [("since", "From"), ("until", "To")]:
        page = html_of(owner.get(f"{PAGE}/audit/?{name}={value}"))
        assert f"{label}: Enter a valid date." in page
        assert "document.create" in page


def test_the_audit_page_reads_up_to_the_last_day(owner: Any, plan: Document) -> None:
    page = html_of(owner.get(f"{PAGE}/audit/?since=0001-01-01&until=9999-12-31"))
    assert "document.create" in page


# Point 6: a malformed Retry-After from a provider or a webhook receiver is absent.


@pytest.fixture
def scripted_503(scripted: ScriptedProvider) -> ScriptedProvider:
    scripted.recall = [(503, {"error": "busy"})]
    scripted.headers = {"Retry-After": SUPERSCRIPT_ONE}
    return scripted


def test_a_providers_malformed_retry_after_fails_the_recall_cleanly(
    api: APIClient, project: Project, scripted_503: ScriptedProvider
) -> None:
    session_id = scripted_session(api, project, scripted_503, [])
    response = api.post(
        f"{API}/sessions/{session_id}/memory/recall",
        data=json.dumps({"use": ["ledger"]}),
        content_type="application/json",
    )
    error = error_of(response, 409, "recall_failed")
    assert error["details"]["resource"] == "ledger"
    # Retried as without a Retry-After: three attempts in all.
    assert len(scripted_503.requests("recall")) == 3
    assert not Recall.objects.filter(session_id=session_id).exists()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from serve(Receiver())


@pytest.mark.parametrize("header", [SUPERSCRIPT_ONE, "9" * 5000, "soon"])
def test_a_receivers_malformed_retry_after_leaves_the_delivery_pending_with_a_retry(
    api: APIClient, receiver: Receiver, make_document: Any, settings: Any, header: str
) -> None:
    settings.MEMORYADMIN_WEBHOOK_BACKOFF_SECONDS = 30.0
    settings.MEMORYADMIN_WEBHOOK_TIMEOUT_SECONDS = 5.0
    made = api.post(HOOKS, {"url": receiver.url, "events": ["document.created"]}, format="json")
    assert made.status_code == 201, made.json()
    receiver.statuses = [503, 200]
    receiver.retry_after = header
    make_document("first")
    jobs_run_due()
    delivery = Delivery.objects.get()
    assert len(receiver.received) == 1
    assert (delivery.state, delivery.attempts, delivery.response_code) == ("pending", 1, 503)
    assert delivery.job is not None
    assert delivery.job.lease_until is None
    assert delivery.last_attempt_at is not None
    assert delivery.next_attempt_at is not None
    # The endpoint's own backoff: 30 s for the superscript and "soon", the cap for 5000 nines.
    wait = delivery.next_attempt_at - delivery.last_attempt_at
    assert wait >= timedelta(seconds=29), wait
    retry = Job.objects.filter(name=DELIVER, state="pending").get()
    assert retry.kwargs == {"endpoint": delivery.endpoint_id, "event": delivery.event_id}
    assert retry.pk == delivery.job_id


# Point 8: the Python client's verify.


def signed_headers(timestamp: str, signature: str = "v1=" + "0" * 64) -> dict[str, str]:
    return {"Memoryadmin-Timestamp": timestamp, "Memoryadmin-Signature": signature}


@pytest.mark.parametrize(
    "timestamp",
    [SUPERSCRIPT_ONE, ARABIC_THREE, FULLWIDTH_ONE, "", "9" * 5000, "9" * 400, "-5", " 5", "1e9"],
)
def test_verify_refuses_every_malformed_timestamp(timestamp: str) -> None:
    with pytest.raises(InvalidSignature):
        verify("whsec_x", signed_headers(timestamp), b"{}", now=3, tolerance=10**400)


@pytest.mark.parametrize("signature", ["v1=\u00e9", f"v1={ARABIC_THREE}", "\udc80", "", "v1="])
def test_verify_refuses_every_malformed_signature(signature: str) -> None:
    with pytest.raises(InvalidSignature):
        verify("whsec_x", signed_headers("100", signature), b"{}", now=100)


@pytest.mark.parametrize("ref", ["0", "99999999999999999999", "9" * 5000])
def test_the_pages_ids_beyond_any_row_are_not_found(
    owner: Any, numbered_keys: dict[int, ApiKey], numbered_endpoints: dict[int, Endpoint], ref: str
) -> None:
    assert owner.get(f"{PAGE}/webhooks/{ref}/").status_code == 404
    for url in [f"{PAGE}/keys/{ref}/revoke/", f"{PAGE}/webhooks/1/deliveries/{ref}/redeliver/"]:
        assert owner.post(url).status_code == 404, url
    assert not ApiKey.objects.filter(revoked_at__isnull=False).exists()
    assert Delivery.objects.get(pk=1).state == "failed"
