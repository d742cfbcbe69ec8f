"""The durable operation store: accepted and uncertain writes reconciled against a scripted
provider (a real server on loopback) to success, to partial, and to dead letters."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.agents.services import operations
from memoryadmin.core.partitions import partition_key
from memoryadmin.memory.models import AuditEntry, Project
from memoryadmin.runner.jobs import job_run, jobs_run_due
from memoryadmin.runner.models import Job
from tests.helpers import Keys, html_of, scripted_session

SESSIONS = "/api/managed-agents/sessions"
OPERATIONS = "/api/managed-agents/projects/acme/memory/operations"
INPUT = {
    "type": "object",
    "properties": {"fact": {"type": "string"}},
    "required": ["fact"],
    "additionalProperties": False,
}
REMEMBER = {"name": "remember", "description": "Keep.", "access": "write", "input": INPUT}
ACCEPTED = (200, {"result": {"status": "accepted"}})


def status(word: str) -> tuple[int, Any]:
    return (200, {"result": {"status": word}})


@pytest.fixture(autouse=True)
def _quick(settings: Any) -> None:
    settings.MEMORYADMIN_OPERATION_BACKOFF_SECONDS = 0
    settings.MEMORYADMIN_OPERATION_MAX_ATTEMPTS = 3
    settings.MEMORYADMIN_JOB_BACKOFF_SECONDS = 0


def post(api: APIClient, url: str, body: Any = None, **headers: Any) -> Any:
    return api.post(url, data=json.dumps(body or {}), content_type="application/json", **headers)


@pytest.fixture
def session_id(api: APIClient, project: Project, scripted: Any) -> str:
    return scripted_session(api, project, scripted, [REMEMBER])


def remember(api: APIClient, session_id: str, call_id: str = "call-1") -> Any:
    recall = post(api, f"{SESSIONS}/{session_id}/memory/recall", {"use": ["ledger"]})
    assert recall.status_code == 200, recall.json()
    body = {
        "recallId": recall.json()["recallId"],
        "callId": call_id,
        "name": "memory_remember",
        "arguments": {"fact": "Tabs."},
    }
    return post(api, f"{SESSIONS}/{session_id}/memory/tool-calls", body)


def reconcile(times: int = 1) -> None:
    for _ in range(times):
        jobs_run_due()


def listed(api: APIClient, query: str = "") -> list[dict[str, Any]]:
    response = api.get(f"{OPERATIONS}?environment=development{query}")
    assert response.status_code == 200, response.json()
    return list(response.json()["operations"])


def dead_letter(api: APIClient, session_id: str, scripted: Any) -> dict[str, Any]:
    """An accepted write whose checks all answer accepted, until it is a dead letter."""
    scripted.tool = [ACCEPTED]
    scripted.status = [status("accepted")]
    remember(api, session_id)
    reconcile(4)
    [dead] = listed(api)
    assert dead["state"] == "dead"
    return dead


def test_an_accepted_write_is_queued_then_partial_then_succeeds(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    scripted.status = [status("accepted"), status("partial"), status("stored")]
    response = remember(api, session_id)
    # The model receives the provider's result unchanged.
    assert response.json() == {"result": {"status": "accepted"}}
    [operation] = listed(api)
    assert operation["kind"] == "accepted_write"
    assert (operation["state"], operation["attempts"]) == ("queued", 0)
    assert operation["sessionId"] == session_id
    assert operation["providerOperation"] == "call-1:ledger"
    assert operation["principal"].startswith(f"session:{session_id} agent:scribe")
    reconcile()
    assert [(o["state"], o["attempts"]) for o in listed(api)] == [("queued", 1)]
    reconcile()
    assert [(o["state"], o["attempts"]) for o in listed(api)] == [("partial", 2)]
    assert listed(api, "&state=open")[0]["id"] == operation["id"]
    reconcile()
    [done] = listed(api)
    assert (done["state"], done["attempts"], done["nextCheckAt"]) == ("succeeded", 3, None)
    assert done["finishedAt"] is not None
    assert listed(api, "&state=open") == []
    partition = partition_key(
        project_id="acme", environment="development", resource_id="ledger", namespace="team"
    )
    checks = scripted.requests("status")
    assert len(checks) == 3
    assert {(c["operationId"], c["partition"], c["version"]) for c in checks} == {
        ("call-1:ledger", partition, 1)
    }
    reconcile()
    assert len(scripted.requests("status")) == 3


def saved_events(api: APIClient, session_id: str) -> list[dict[str, Any]]:
    response = api.get(f"{SESSIONS}/{session_id}/events")
    assert response.status_code == 200, response.json()
    return [e for e in response.json()["events"] if e["type"] == "record.saved"]


@pytest.mark.parametrize(
    ("answer", "record_ids"),
    [
        ((200, {"result": {"status": "accepted", "id": "fact-9"}}), ["fact-9"]),
        # Its answer lost: the write is uncertain until the provider says it stored it.
        (None, []),
    ],
)
def test_a_write_the_provider_finishes_later_is_the_sessions_record_saved_when_it_succeeds(
    api: APIClient, session_id: str, scripted: Any, answer: Any, record_ids: list[str]
) -> None:
    """A session's write that leaves an open operation is its `record.saved` (the
    evidence an incident traces) once the provider says it stored it, not before; a check
    run again records nothing more."""
    scripted.tool = [answer]
    scripted.status = [status("accepted"), status("stored")]
    remember(api, session_id)
    [operation] = listed(api)
    assert saved_events(api, session_id) == []
    reconcile()
    assert saved_events(api, session_id) == []
    reconcile()
    [operation] = listed(api)
    assert operation["state"] == "succeeded"
    [saved] = saved_events(api, session_id)
    recall_id = saved["data"]["recallId"]
    assert saved["data"] == {
        "resource": "ledger",
        "namespace": "team",
        "tool": "memory_remember",
        "callId": "call-1",
        "recallId": recall_id,
        "recordIds": record_ids,
        "operation": operation["id"],
        "acceptedAt": operation["createdAt"],
    }
    assert recall_id.startswith("mrq_")
    # The operation names the recall its write answered, as the event does.
    assert (operation["callId"], operation["recallId"]) == ("call-1", recall_id)
    reconcile()
    assert len(saved_events(api, session_id)) == 1


def test_a_write_the_provider_failed_is_no_record_saved(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    scripted.status = [status("failed")]
    remember(api, session_id)
    reconcile(2)
    assert [o["state"] for o in listed(api)] == ["failed"]
    assert saved_events(api, session_id) == []


def test_attempts_running_out_make_a_dead_letter_never_a_success(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    scripted.status = [status("accepted")]
    remember(api, session_id)
    reconcile(5)
    [dead] = listed(api, "&state=dead")
    assert (dead["state"], dead["attempts"]) == ("dead", 3)
    assert len(scripted.requests("status")) == 3
    assert AuditEntry.objects.filter(action="operation.dead_letter").count() == 1


def test_a_provider_without_status_answers_dead_letters_with_the_error_kept(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    scripted.status = [(404, {"error": {"code": "not_found", "message": "No status here."}})]
    remember(api, session_id)
    reconcile(4)
    [dead] = listed(api)
    assert dead["state"] == "dead"
    assert "memory provider of 'ledger' failed" in dead["lastError"]


def test_an_uncertain_write_is_an_open_operation_and_an_unknown_one_failed(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [None]
    scripted.status = [status("unknown")]
    response = remember(api, session_id)
    assert response.json() == {"result": {"status": "uncertain"}}
    [operation] = listed(api, "&state=queued")
    assert operation["kind"] == "uncertain_write"
    reconcile()
    [failed] = listed(api)
    assert (failed["state"], failed["lastError"]) == ("failed", "the provider answered unknown")


def test_a_stored_write_and_a_read_leave_no_operation(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [(200, {"result": {"status": "stored"}})]
    assert remember(api, session_id).json() == {"result": {"status": "stored"}}
    assert listed(api) == []
    assert not ProviderOperation.objects.exists()


def test_owners_retry_and_discard_dead_letters_audited(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    dead = dead_letter(api, session_id, scripted)
    url = f"{OPERATIONS}/{dead['id']}"
    retried = post(api, f"{url}/retry?environment=development")
    assert retried.status_code == 200, retried.json()
    assert (retried.json()["state"], retried.json()["attempts"]) == ("queued", 0)
    scripted.status = [status("stored")]
    reconcile()
    assert listed(api)[0]["state"] == "succeeded"
    again = post(api, f"{url}/discard?environment=development")
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert listed(api)[0]["state"] == "succeeded"
    retry_audit = AuditEntry.objects.get(action="operation.retry")
    assert (retry_audit.actor.startswith("key:"), retry_audit.detail["operation"]) == (
        True,
        dead["id"],
    )


def test_a_dead_letter_discarded_stays_listed_and_is_never_checked_again(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    dead = dead_letter(api, session_id, scripted)
    discarded = post(api, f"{OPERATIONS}/{dead['id']}/discard?environment=development")
    assert discarded.status_code == 200
    assert discarded.json()["state"] == "discarded"
    checks = len(scripted.requests("status"))
    reconcile(2)
    assert len(scripted.requests("status")) == checks
    assert listed(api, "&state=discarded")[0]["id"] == dead["id"]
    assert AuditEntry.objects.filter(action="operation.discard").count() == 1


def test_operations_are_listed_per_resource_and_per_session(
    api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    remember(api, session_id, "call-1")
    remember(api, session_id, "call-2")
    assert len(listed(api, f"&session={session_id}")) == 2
    assert len(listed(api, "&resource=ledger")) == 2
    assert listed(api, "&resource=notes") == []
    assert listed(api, "&session=ses_other") == []
    page = api.get(f"{OPERATIONS}?environment=development&state=open")
    assert [o["callId"] for o in page.json()["operations"]] == ["call-2", "call-1"]


def test_bad_listing_queries_are_400_and_change_nothing(api: APIClient, session_id: str) -> None:
    assert api.get(OPERATIONS).status_code == 400
    bad_state = api.get(f"{OPERATIONS}?environment=development&state=done")
    assert bad_state.status_code == 400
    assert "state must be one of" in bad_state.json()["error"]["message"]
    assert api.get(f"{OPERATIONS}?environment=development&cursor=forged").status_code == 400
    assert api.get(f"{OPERATIONS}?environment=development&state=a%00b").status_code == 400


def test_operations_belong_to_their_project_and_writes_need_a_write_key(
    client_for: Any, keys: Keys, session_id: str, scripted: Any, api: APIClient
) -> None:
    dead = dead_letter(api, session_id, scripted)
    other = client_for(keys.other).get(f"{OPERATIONS}?environment=development")
    assert other.status_code in {403, 404}
    read_only = client_for(keys.read_only)
    assert len(read_only.get(f"{OPERATIONS}?environment=development").json()["operations"]) == 1
    refused = post(read_only, f"{OPERATIONS}/{dead['id']}/retry?environment=development")
    assert refused.status_code == 403
    missing = post(api, f"{OPERATIONS}/mop_nothing/retry?environment=development")
    assert missing.status_code == 404
    assert listed(api)[0]["state"] == "dead"


def test_one_operation_is_read_by_its_id_as_listed_in_its_project_only(
    client_for: Any, keys: Keys, api: APIClient, session_id: str, scripted: Any
) -> None:
    scripted.tool = [ACCEPTED]
    scripted.status = [status("stored")]
    remember(api, session_id)
    [queued] = listed(api)
    url = f"{OPERATIONS}/{queued['id']}?environment=development"
    read_only = client_for(keys.read_only).get(url)
    assert read_only.status_code == 200, read_only.json()
    assert read_only.json() == queued
    reconcile()
    now = api.get(url).json()
    assert (now["state"], now["id"]) == ("succeeded", queued["id"])
    assert now == listed(api)[0]
    assert client_for(keys.other).get(url).status_code in {403, 404}
    for bad, code in [
        (f"{OPERATIONS}/mop_nothing?environment=development", 404),
        (f"{OPERATIONS}/{queued['id']}?environment=production", 404),
        (f"{OPERATIONS}/{queued['id']}", 400),
        (f"{OPERATIONS}/mop_a%00b?environment=development", 400),
        (f"{OPERATIONS}/{queued['id']}?environment=development&environment=production", 400),
    ]:
        answer = api.get(bad)
        assert answer.status_code == code, (bad, answer.content)
        assert answer.json()["error"]["code"] in {"not_found", "invalid_request"}
    assert ProviderOperation.objects.get(pk=queued["id"]).state == "succeeded"


# The Memory page.

PAGE = "/projects/acme/development"


def test_the_resource_and_session_pages_list_dead_letters_with_kind_attempts_and_error(
    api: APIClient, session_id: str, scripted: Any, web: Any
) -> None:
    dead = dead_letter(api, session_id, scripted)
    support = web("support")
    for url in (f"{PAGE}/resources/ledger/", f"{PAGE}/sessions/{session_id}/"):
        page = html_of(support.get(url))
        assert dead["id"] in page
        assert "Accepted Write" in page
        assert "3 / 3" in page
        assert f"{PAGE}/operations/{dead['id']}/retry/" in page
    viewer = html_of(web("viewer").get(f"{PAGE}/resources/ledger/"))
    assert dead["id"] in viewer
    assert "/retry/" not in viewer


def test_support_retries_and_discards_dead_letters_from_the_page_audited(
    api: APIClient, session_id: str, scripted: Any, web: Any
) -> None:
    dead = dead_letter(api, session_id, scripted)
    support = web("support")
    back = f"{PAGE}/sessions/{session_id}/"
    retried = support.post(f"{PAGE}/operations/{dead['id']}/retry/", {"next": back})
    assert (retried.status_code, retried["Location"]) == (302, back)
    assert ProviderOperation.objects.get(pk=dead["id"]).state == "queued"
    assert AuditEntry.objects.get(action="operation.retry").actor == "user:sam"
    reconcile(4)
    discarded = support.post(f"{PAGE}/operations/{dead['id']}/discard/", {"next": "//evil.example"})
    assert (discarded.status_code, discarded["Location"]) == (302, f"{PAGE}/")
    assert ProviderOperation.objects.get(pk=dead["id"]).state == "discarded"
    assert AuditEntry.objects.get(action="operation.discard").actor == "user:sam"


def test_viewers_may_not_retry_or_discard(
    api: APIClient, session_id: str, scripted: Any, web: Any
) -> None:
    dead = dead_letter(api, session_id, scripted)
    viewer = web("viewer")
    for action in ("retry", "discard"):
        refused = viewer.post(f"{PAGE}/operations/{dead['id']}/{action}/")
        assert refused.status_code == 403
    assert ProviderOperation.objects.get(pk=dead["id"]).state == "dead"
    assert not AuditEntry.objects.filter(action__in=["operation.retry", "operation.discard"])


@pytest.mark.django_db
def test_the_schema_declares_the_operation_and_cancel_routes(api: APIClient) -> None:
    schema = api.get("/api/schema/?format=json").json()
    paths = schema["paths"]
    assert "get" in paths["/api/managed-agents/projects/{p}/memory/operations"]
    assert "get" in paths["/api/managed-agents/projects/{p}/memory/operations/{o}"]
    assert "post" in paths["/api/managed-agents/projects/{p}/memory/operations/{o}/retry"]
    assert "post" in paths["/api/managed-agents/sessions/{session_id}/memory/cancel"]


def test_settled_operations_past_their_days_go_with_their_jobs_and_dead_letters_stay(
    api: APIClient, session_id: str, scripted: Any, settings: Any, web: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from memoryadmin.runner.housekeeping import housekeeping
    from memoryadmin.runner.models import Job

    discarded = dead_letter(api, session_id, scripted)
    post(api, f"{OPERATIONS}/{discarded['id']}/discard?environment=development")
    remember(api, session_id, "call-2")
    reconcile(4)
    [waiting] = listed(api, "&state=dead")  # a dead letter nobody has settled
    scripted.status = [status("stored")]
    remember(api, session_id, "call-3")
    reconcile()
    [succeeded] = listed(api, "&state=succeeded")
    scripted.tool = [None]
    scripted.status = [status("unknown")]
    remember(api, session_id, "call-4")
    reconcile()
    [failed] = listed(api, "&state=failed")
    scripted.tool = [ACCEPTED]
    remember(api, session_id, "call-5")
    [still_open] = listed(api, "&state=open")
    ages = {discarded["id"]: 31, waiting["id"]: 90, succeeded["id"]: 31}
    ages |= {failed["id"]: 29, still_open["id"]: 90}
    for operation_id, days in ages.items():
        at = timezone.now() - timedelta(days=days)
        ProviderOperation.objects.filter(pk=operation_id).update(created_at=at, updated_at=at)
    jobs = dict(ProviderOperation.objects.values_list("id", "job_id"))

    settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS = 0  # for ever
    assert housekeeping().removed == {}
    settings.MEMORYADMIN_OPERATIONS_KEEP_DAYS = 30
    assert housekeeping().removed == {"provider operations": 2}
    kept = {waiting["id"], failed["id"], still_open["id"]}
    assert set(ProviderOperation.objects.values_list("id", flat=True)) == kept
    assert set(Job.objects.values_list("pk", flat=True)) == {jobs[o] for o in kept}
    assert housekeeping().removed == {}

    assert {o["id"] for o in listed(api)} == kept
    gone = post(api, f"{OPERATIONS}/{discarded['id']}/retry?environment=development")
    assert gone.status_code == 404
    page = html_of(web("support").get(f"{PAGE}/resources/ledger/"))
    assert waiting["id"] in page
    # The dead letter kept is still the owners' to settle, by its own job.
    retried = post(api, f"{OPERATIONS}/{waiting['id']}/retry?environment=development")
    assert (retried.status_code, retried.json()["state"]) == (200, "queued")
    assert ProviderOperation.objects.get(pk=waiting["id"]).job_id == jobs[waiting["id"]]


@pytest.mark.parametrize("late", ["failed", "stored"])
def test_a_check_back_after_its_job_was_taken_over_writes_nothing_over_the_later_one(
    api: APIClient, session_id: str, scripted: Any, monkeypatch: pytest.MonkeyPatch, late: str
) -> None:
    """A worker's check stalled past its lease; another worker took the job over and
    recorded the provider's newer answer (partial: still working on it). The first, back
    with its older answer, wrote it over: the operation settled (failed, or succeeded
    with a record.saved) while the provider went on and its job waited for a next check."""
    scripted.tool = [ACCEPTED]
    scripted.status = [status(late), status("partial")]
    remember(api, session_id)
    operation = ProviderOperation.objects.get()
    job_id = operation.job_id
    assert job_id is not None
    real_check = operations._check
    taken_over: list[str] = []

    def stalled(operation: ProviderOperation) -> Any:
        answer = real_check(operation)
        if not taken_over:
            taken_over.append("taking over")
            # Its lease passes; another worker takes the job over and checks again.
            Job.objects.filter(pk=job_id).update(lease_until=Now() - timedelta(seconds=1))
            taken_over[0] = job_run(job_id)
        return answer

    monkeypatch.setattr(operations, "_check", stalled)
    assert job_run(job_id) == "skipped"
    assert taken_over == ["retry"]
    assert len(scripted.requests("status")) == 2
    operation.refresh_from_db()
    assert (operation.state, operation.last_error, operation.finished_at) == ("partial", "", None)
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.attempts) == ("pending", 2)
    assert [(o["state"], o["attempts"]) for o in listed(api)] == [("partial", 2)]
    assert saved_events(api, session_id) == []
