"""Promotion: shared limits applied with the activation, for sessions on older deployments
too; concurrent promotions; declarations that name a resource's id with another kind."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connections, transaction
from rest_framework.test import APIClient

from memoryadmin.agents.models import Binding, Session
from memoryadmin.agents.services.runtime import recall_create, tool_call
from memoryadmin.memory.models import (
    ActiveDeployment,
    AuditEntry,
    Deployment,
    Document,
    Project,
    Resource,
)
from memoryadmin.memory.services.deployments import deployment_create, deployment_promote
from memoryadmin.memory.services.documents import document_create
from tests.helpers import MANIFEST_MEMORY, lock_waiter_seen, support_session

BASE = "/api/managed-agents/projects/acme"
SESSIONS = "/api/managed-agents/sessions"


def _declarations(notes: int, kb: int, *, order: tuple[str, ...]) -> list[dict[str, Any]]:
    limits = {"notes": notes, "kb": kb}
    by_id = {d["id"]: d for d in MANIFEST_MEMORY}
    return [
        {**by_id[resource_id], "provider": {"kind": "document", "maxBytes": limits[resource_id]}}
        for resource_id in order
    ]


def _limits(project: Project) -> dict[str, int]:
    return dict(
        Resource.objects.filter(project=project, environment="development").values_list(
            "resource_id", "max_bytes"
        )
    )


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_promotions_declaring_shared_resources_in_other_orders_both_succeed(
    project: Project,
) -> None:
    """Two promotions at once whose declarations name the same resources in opposite
    orders: each applies its limits and activates, one after the other, and neither
    fails for the other (each took the rows' locks in its own order: a deadlock, and
    one of them refused as if the database were away)."""
    first = deployment_create(
        project=project,
        agent="support-bot",
        memory=_declarations(1000, 100, order=("notes", "kb")),
        actor="t",
    )
    second = deployment_create(
        project=project,
        agent="support-bot",
        memory=_declarations(2000, 200, order=("kb", "notes")),
        actor="t",
    )
    errors: list[BaseException] = []

    def promote(deployment: Deployment) -> None:
        try:
            deployment_promote(deployment=deployment, environment="development", actor="t")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    first_thread = threading.Thread(target=promote, args=(first,))
    second_thread = threading.Thread(target=promote, args=(second,))
    with transaction.atomic():
        # Holding notes makes the first promotion wait for it first, then the second.
        Resource.objects.select_for_update().get(
            project=project, environment="development", resource_id="notes"
        )
        first_thread.start()
        assert lock_waiter_seen(first_thread), "the first promotion never waited"
        second_thread.start()
        assert lock_waiter_seen(second_thread, waiters=2), "the second promotion never waited"
    first_thread.join(timeout=60)
    second_thread.join(timeout=60)
    assert errors == []
    # The first to have its locks committed first; the second's limits and activation won.
    active = ActiveDeployment.objects.get(
        project=project, environment="development", agent="support-bot"
    )
    assert active.deployment_id == second.id
    assert _limits(project) == {"notes": 2000, "kb": 200}
    promoted = AuditEntry.objects.filter(action="deployment.promote", environment="development")
    assert {e.detail["deployment"] for e in promoted} >= {first.id, second.id}


def test_a_session_on_an_older_deployment_saves_under_the_limit_promoted_since(
    project: Project, notes: Resource
) -> None:
    """Promotion applies shared limits, including for sessions on older deployments: a
    lower limit refuses the older session's next save over it, and the note written
    under the old limit is kept whole and still recalled."""
    document_create(resource=notes, doc_id="workshop", title="W", text="x" * 100, actor="t")
    session = support_session(project)
    older = session.deployment_id
    deployment_create(
        project=project,
        agent="support-bot",
        memory=_declarations(10, 64, order=("notes", "kb")),
        promote="development",
        actor="t",
    )
    recall = recall_create(session=session, use=["notes"])
    assert recall["memory"]["notes"]["text"] == "x" * 100
    refused = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c1",
        name="memory_save",
        arguments={"text": "y" * 11},
    )
    assert refused == {
        "status": "rejected",
        "reason": "too_large",
        "field": "text",
        "bytes": 11,
        "maxBytes": 10,
    }
    saved = tool_call(
        session=session,
        recall_id=recall["recallId"],
        call_id="c2",
        name="memory_save",
        arguments={"text": "y" * 10},
    )
    assert saved["status"] == "saved"
    assert Session.objects.get(pk=session.pk).deployment_id == older


def test_a_session_pinned_to_a_deployment_declaring_another_kind_is_refused(
    api: APIClient, project: Project
) -> None:
    """A deployment made before another agent's promotion gave its resource id another
    kind still names that id; a session pinned to it must not be admitted to a resource
    of a kind its deployment never declared (it would get the other kind's tools and
    storage)."""
    facts_as_http = {
        "id": "facts",
        "description": "Facts.",
        "provider": {
            "kind": "http",
            "connection": {
                "id": "facts",
                "origin": "https://memory.example.com",
                "methods": ["POST"],
            },
        },
    }
    writer = deployment_create(project=project, agent="writer", memory=[facts_as_http], actor="t")
    deployment_create(
        project=project,
        agent="support-bot",
        memory=[*MANIFEST_MEMORY, {"id": "facts", "description": "Facts."}],
        promote="development",
        actor="t",
    )
    document_create(
        resource=Resource.objects.get(resource_id="facts", environment="development"),
        doc_id="workshop",
        title="W",
        actor="t",
    )
    for key, binding in [
        ("doc", {"scope": "document", "id": "workshop", "access": "read-write"}),
        ("ns", {"scope": "namespace", "id": "owner"}),
        ("col", {"scope": "collection"}),
    ]:
        response = api.post(
            SESSIONS,
            data=json.dumps(
                {
                    "agentId": "writer@development",
                    "deploymentId": writer.id,
                    "memory": {"facts": binding},
                }
            ),
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=key,
        )
        assert response.status_code == 400, response.content
        error = response.json()["error"]
        assert error["code"] == "invalid_memory_binding"
        assert error["details"] == {"binding": "facts"}
        assert "declares it with provider kind http" in error["message"]
    assert not Session.objects.filter(agent="writer").exists()
    assert not Binding.objects.exists()


def test_promoting_another_projects_deployment_is_404_and_changes_nothing(
    api: APIClient, project: Project, other_project: Project
) -> None:
    theirs = deployment_create(
        project=other_project,
        agent="support-bot",
        memory=_declarations(10, 10, order=("notes", "kb")),
        actor="t",
    )
    before = _limits(project)
    response = api.post(
        f"{BASE}/deployments/{theirs.id}/promote", {"environment": "development"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert _limits(project) == before
    assert not ActiveDeployment.objects.filter(deployment=theirs).exists()
    assert not Resource.objects.filter(project=other_project).exists()


def test_a_promotion_failing_at_activation_changes_nothing_and_its_retry_applies_all(
    project: Project, notes: Resource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limits are applied before the activation and commit with it: a promotion that fails
    as it activates leaves limits and active deployment as they were, and trying it again
    applies both."""
    from memoryadmin.memory.services import deployments

    active_before = ActiveDeployment.objects.get(agent="support-bot").deployment_id
    lowered = deployment_create(
        project=project,
        agent="support-bot",
        memory=_declarations(10, 20, order=("notes", "kb")),
        actor="t",
    )
    real = deployments.ActiveDeployment.objects.update_or_create

    def fails(**kwargs: Any) -> Any:
        raise RuntimeError("activation failed")

    monkeypatch.setattr(deployments.ActiveDeployment.objects, "update_or_create", fails)
    with pytest.raises(RuntimeError):
        deployment_promote(deployment=lowered, environment="development", actor="t")
    assert _limits(project) == {"notes": 8192, "kb": 64}
    assert ActiveDeployment.objects.get(agent="support-bot").deployment_id == active_before
    monkeypatch.setattr(deployments.ActiveDeployment.objects, "update_or_create", real)
    deployment_promote(deployment=lowered, environment="development", actor="t")
    assert _limits(project) == {"notes": 10, "kb": 20}
    assert ActiveDeployment.objects.get(agent="support-bot").deployment_id == lowered.id


def test_promoting_the_active_deployment_again_writes_nothing(
    api: APIClient, project: Project
) -> None:
    """The deployment active already, its resources as it declares them: the promotion
    answers as before and writes nothing (no audit entry, the activation's time kept)."""
    active = ActiveDeployment.objects.get(
        project=project, environment="development", agent="support-bot"
    )
    url = f"{BASE}/deployments/{active.deployment_id}/promote"
    first = api.post(url, {"environment": "development"}, format="json")
    entries = AuditEntry.objects.count()
    limits = _limits(project)
    again = api.post(url, {"environment": "development"}, format="json")
    assert again.status_code == first.status_code == 200
    assert again.json() == first.json()
    assert again.json()["id"] == active.deployment_id
    assert AuditEntry.objects.count() == entries
    kept = ActiveDeployment.objects.get(pk=active.pk)
    assert (kept.deployment_id, kept.promoted_at) == (active.deployment_id, active.promoted_at)
    assert _limits(project) == limits


def test_promoting_the_active_deployment_again_applies_what_another_changed(
    api: APIClient, project: Project
) -> None:
    """Another agent's promotion changed a resource the active deployment declares: its
    promotion again is a change (the limit it declares back), audited."""
    active = ActiveDeployment.objects.get(
        project=project, environment="development", agent="support-bot"
    )
    deployment_create(
        project=project,
        agent="helper",
        memory=_declarations(500, 64, order=("notes", "kb")),
        promote="development",
        actor="t",
    )
    assert _limits(project)["notes"] == 500
    last = AuditEntry.objects.latest("id").id
    url = f"{BASE}/deployments/{active.deployment_id}/promote"
    response = api.post(url, {"environment": "development"}, format="json")
    assert response.status_code == 200
    assert response.json()["id"] == active.deployment_id
    assert _limits(project)["notes"] == 8192
    written = AuditEntry.objects.filter(id__gt=last)
    assert [(e.action, e.detail) for e in written] == [
        ("deployment.promote", {"deployment": active.deployment_id, "agent": "support-bot"})
    ]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_promotion_in_progress_does_not_hold_back_writes_to_its_resources(
    project: Project,
) -> None:
    """While a promotion's transaction holds the rows of the resources it declares, a
    document written to one of them goes through: the promotion's lock excludes sessions
    being admitted (they read the rows FOR SHARE), not the rows that only point at the
    resource (a document, a binding, an operation), as its update alone never did."""
    deployment = deployment_create(
        project=project,
        agent="support-bot",
        memory=_declarations(1000, 100, order=("notes", "kb")),
        actor="t",
    )
    promoted, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def promote() -> None:
        try:
            with transaction.atomic():
                deployment_promote(deployment=deployment, environment="development", actor="t")
                promoted.set()
                assert release.wait(60)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    def write() -> None:
        try:
            notes = Resource.objects.get(
                project=project, environment="development", resource_id="notes"
            )
            document_create(resource=notes, doc_id="during", title="t", text="x", actor="k")
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    promoting = threading.Thread(target=promote)
    writing = threading.Thread(target=write)
    promoting.start()
    try:
        assert promoted.wait(30)
        writing.start()
        assert not lock_waiter_seen(writing), "the write waited for the promotion"
        writing.join(60)
        assert promoting.is_alive()  # the promotion's transaction still open
    finally:
        release.set()
        promoting.join(60)
        writing.join(60)
    assert errors == []
    assert Document.objects.filter(resource__resource_id="notes", doc_id="during").exists()
    assert _limits(project) == {"notes": 1000, "kb": 100}
