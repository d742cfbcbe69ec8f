"""Webhook endpoints (owners register them per project) and their deliveries.

An endpoint is a URL (https; http only on loopback; its host must reach
addresses the server may reach, as provider origins must), the events it
wants, and a signing secret shown once. Every change to endpoints is audited
(project-level entries, like API keys).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.erasing import containing, stored_forms, text_erase, value_erase
from memoryadmin.core.errors import InvalidRequest, NotFound
from memoryadmin.core.inputs import whole_number
from memoryadmin.core.strings import string_check
from memoryadmin.memory.models import Project
from memoryadmin.memory.representations import iso_ms
from memoryadmin.memory.services.audit import AuditFacts, audit_record
from memoryadmin.memory.services.projects import project_cap
from memoryadmin.providers.declarations import origin_check, url_split
from memoryadmin.runner.jobs import enqueue, job_again, jobs_wake
from memoryadmin.webhooks.delivery import delivery_enqueue, line_of, webhook_endpoint_purge
from memoryadmin.webhooks.models import OPEN_DELIVERY_STATES, Delivery, DeliveryState, Endpoint
from memoryadmin.webhooks.outbox import (
    EVENT_TYPES,
    event_body,
    events_column_value,
    new_event_id,
    outbox_forget,
)

URL_MAX = 2048
DESCRIPTION_MAX = 200
ENDPOINTS_MAX = 20
DELIVERY_PAGE_SIZE = 50
SECRET_PREFIX = "whsec_"
# The event "Send test event" sends: to that endpoint only, whatever events it wants.
TEST_EVENT = "webhook.test"
# Test events an endpoint may have waiting at once (each is a delivery in its queue).
TESTS_OPEN_MAX = 5


class WebhookNotFound(NotFound):
    code = "webhook_not_found"


class DeliveryNotFound(NotFound):
    code = "delivery_not_found"


def check_url(value: object, *, project: str) -> str:
    """An endpoint URL of `project`: an origin as providers have (https, or http on
    loopback; public addresses unless the server allows more, its name looked up within
    the project's share of lookups), then a path and query."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest("url is required: an https:// URL such as https://example.com/hooks.")
    string_check(value, field="url")
    if len(value) > URL_MAX:
        raise InvalidRequest(f"url is over {URL_MAX} characters.")
    parts = url_split(value, where="url", query=True)
    origin = origin_check(
        f"{parts.scheme}://{parts.netloc}",
        where="url",
        resolve_names_for=project,
        kind="webhook URLs",
    )
    path = parts.path or "/"
    checked = origin + path + (f"?{parts.query}" if parts.query else "")
    # The origin is kept as normalised, an address in its usual spelling: a URL within the
    # limit as sent may be past it as kept (https://1572395042 is https://93.184.216.34).
    if len(checked) > URL_MAX:
        raise InvalidRequest(f"url is over {URL_MAX} characters.")
    return checked


def check_events(value: object) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest(f"events is required: one or more of {', '.join(EVENT_TYPES)}.")
    unknown = [item for item in value if item not in EVENT_TYPES]
    if unknown:
        raise InvalidRequest(f"Unknown event {unknown[0]!r}; events are: {', '.join(EVENT_TYPES)}.")
    return sorted(set(value))


def check_description(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRequest("description must be a string.")
    string_check(value, field="description")
    if len(value) > DESCRIPTION_MAX:
        raise InvalidRequest(f"description is over {DESCRIPTION_MAX} characters.")
    return value


def _locked(endpoint: Endpoint) -> None:
    """Locks the endpoint's row for a change of it (in the caller's transaction) and reads
    it again: a change saves what it changed over the endpoint as it is now (over another
    change committed since it was read, it undid that one: a pause lost), and one
    deleted meanwhile is not found, as if never read (a change saved no row, a test event
    queued a delivery whose endpoint is gone)."""
    try:
        endpoint.refresh_from_db(from_queryset=Endpoint.objects.select_for_update())
    except Endpoint.DoesNotExist:
        raise WebhookNotFound(f"No webhook endpoint '{endpoint.pk}'.") from None


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def audited_url(url: str) -> str:
    """A webhook URL as the audit log keeps it: without its query, where receivers take
    their tokens (`?…` marks one), since every role of the project reads the log and only
    owners see the endpoints."""
    base, query, _ = url.partition("?")
    return f"{base}?\u2026" if query else base


def _audit(endpoint: Endpoint, *, actor: str, action: str, **detail: Any) -> None:
    audit_record(
        project_id=endpoint.project_id,
        environment="",
        actor=actor,
        action=action,
        detail={"webhook": endpoint.pk, **detail, "url": audited_url(endpoint.url)},
    )


@transaction.atomic
def endpoint_create(
    *, project: Project, url: object, events: object, description: object = "", actor: str
) -> tuple[Endpoint, str]:
    """A new endpoint and its signing secret (returned this once)."""
    checked_url = check_url(url, project=project.pk)
    wanted = check_events(events)
    text = check_description(description)
    project_cap(
        project_id=project.pk,
        held=Endpoint.objects.filter(project=project),
        cap=ENDPOINTS_MAX,
        message=f"A project has at most {ENDPOINTS_MAX} webhook endpoints.",
    )
    secret = _new_secret()
    endpoint = Endpoint.objects.create(
        project=project,
        url=checked_url,
        events=events_column_value(wanted),
        secret=secret,
        description=text,
        created_at=timezone.now(),
        created_by=actor,
    )
    _audit(endpoint, actor=actor, action="webhook.create", events=wanted)
    transaction.on_commit(lambda: outbox_forget(project.pk))
    return endpoint, secret


def endpoint_list(*, project: Project) -> list[Endpoint]:
    return list(Endpoint.objects.filter(project=project).order_by("id"))


def endpoint_get(*, project: Project, endpoint_id: object) -> Endpoint:
    """The project's endpoint by its id; one that is not ASCII digits is none (404)."""
    pk = whole_number(endpoint_id)
    if pk is None:
        raise WebhookNotFound(f"No webhook endpoint '{endpoint_id}'.")
    endpoint = Endpoint.objects.filter(project=project, pk=pk).first()
    if endpoint is None:
        raise WebhookNotFound(f"No webhook endpoint '{endpoint_id}' in project '{project.id}'.")
    return endpoint


@transaction.atomic
def endpoint_update(
    *,
    endpoint: Endpoint,
    actor: str,
    url: object = None,
    events: object = None,
    description: object = None,
    active: object = None,
) -> Endpoint:
    """Changes what is given; reactivating an endpoint sends what waited meanwhile.
    Given as it already is (a paused endpoint paused again), nothing is written: no
    audit entry, the endpoint answered as it is."""
    _locked(endpoint)
    before = _settings(endpoint)
    changes: dict[str, Any] = {}
    if url is not None:
        endpoint.url = changes["url"] = check_url(url, project=endpoint.project_id)
    if events is not None:
        changes["events"] = check_events(events)
        endpoint.events = events_column_value(changes["events"])
    if description is not None:
        endpoint.description = changes["description"] = check_description(description)
    if active is not None:
        if not isinstance(active, bool):
            raise InvalidRequest("active must be true or false.")
        changes["active"] = active
        resumed = active and not endpoint.active
        endpoint.active = active
        if resumed:
            jobs_wake(line_of(endpoint.pk))
    if not changes:
        raise InvalidRequest("Give at least one of url, events, description, active.")
    if _settings(endpoint) == before:
        return endpoint
    endpoint.save(update_fields=["url", "events", "description", "active"])
    _audit(endpoint, actor=actor, action="webhook.update", **changes)
    transaction.on_commit(lambda: outbox_forget(endpoint.project_id))
    return endpoint


def _settings(endpoint: Endpoint) -> tuple[Any, ...]:
    return (endpoint.url, endpoint.events, endpoint.description, endpoint.active)


@transaction.atomic
def endpoint_rotate_secret(*, endpoint: Endpoint, actor: str) -> tuple[Endpoint, str]:
    """A new signing secret (returned this once); deliveries sent from now on use it."""
    _locked(endpoint)
    endpoint.secret = _new_secret()
    endpoint.save(update_fields=["secret"])
    _audit(endpoint, actor=actor, action="webhook.rotate")
    return endpoint, endpoint.secret


@transaction.atomic
def endpoint_delete(*, endpoint: Endpoint, actor: str) -> None:
    """Deletes the endpoint and its deliveries, sent or not, in as many statements however
    many it has: the endpoint is marked deleted (and inactive) at once, gone from every
    read and change, its deliveries never sent; the job queued with the mark removes them
    a batch at a time, then the row. Its row is locked first: a change queuing a delivery
    to it meanwhile (the outbox locks the endpoints it queues for) commits before, its
    delivery removed with the others, or skips the endpoint after."""
    _locked(endpoint)
    _audit(endpoint, actor=actor, action="webhook.delete")
    endpoint.active = False
    endpoint.deleted_at = timezone.now()
    endpoint.save(update_fields=["active", "deleted_at"])
    enqueue(webhook_endpoint_purge, project=endpoint.project_id, endpoint=endpoint.pk)


def delivery_list(
    *,
    endpoint: Endpoint,
    state: str | None = None,
    cursor: str | None = None,
    limit: int = DELIVERY_PAGE_SIZE,
) -> tuple[list[Delivery], str | None]:
    """The endpoint's deliveries, newest first, in keyset pages."""
    rows = Delivery.objects.filter(endpoint=endpoint).select_related("job")
    if state is not None:
        if state not in DeliveryState.values:
            raise InvalidRequest(f"state must be one of: {', '.join(DeliveryState.values)}.")
        rows = rows.filter(state=state)
    return keyset_page(
        rows, order=("-id",), cursor=cursor, scope=f"deliveries:{endpoint.pk}:{state}", limit=limit
    )


@transaction.atomic
def delivery_redeliver(
    *, endpoint: Endpoint, delivery_id: object, actor: str
) -> tuple[Delivery, bool]:
    """Sends a finished delivery (delivered or failed) again: the same event id and
    body, a fresh count of attempts, in its place in the endpoint's line (its job runs
    again). Says whether it did (a delivery still open is left as it is)."""
    pk = whole_number(delivery_id)
    if pk is None:
        raise DeliveryNotFound(f"No delivery '{delivery_id}'.")
    rows = Delivery.objects.filter(endpoint=endpoint, pk=pk)
    found = rows.values_list("state", "job_id", "event_id").first()
    if found is None:
        raise DeliveryNotFound(f"No delivery '{delivery_id}' for webhook endpoint {endpoint.pk}.")
    _, job_id, event_id = found
    finished = rows.filter(state__in=[DeliveryState.DELIVERED, DeliveryState.FAILED]).update(
        state=DeliveryState.PENDING
    )
    if finished:
        if job_id is None or not job_again(job_id):
            job = delivery_enqueue(
                project_id=endpoint.project_id, endpoint_id=endpoint.pk, event_id=event_id
            )
            rows.update(job=job)
        _audit(endpoint, actor=actor, action="webhook.redeliver", event=event_id)
    delivery = rows.select_related("job").first()
    if delivery is None:
        # Removed since it was read (housekeeping, the endpoint's deletion): as if never read.
        raise DeliveryNotFound(f"No delivery '{delivery_id}' for webhook endpoint {endpoint.pk}.")
    return delivery, bool(finished)


def deliveries_erase(
    *, project_id: str, environment: str, needles: Sequence[str], apply: bool
) -> dict[str, int]:
    """Webhook deliveries of one environment's events that hold any of `needles`, the text
    replaced in them: counts of those not delivered yet (pending, sending, failed: they
    would still go out) and of those delivered. A delivery holds it in its payload, or in
    the excerpt of the receiver's reply it keeps (a receiver may quote the payload back,
    JSON-escaped: every form the text takes in a JSON string is replaced there). A payload
    is signed when it is sent, so the next attempt sends, and signs, the erased body."""
    counts = {"webhookPayloads": 0, "webhookPayloadsDelivered": 0}
    if not needles:
        return counts
    rows = containing(
        Delivery.objects.filter(endpoint__project_id=project_id),
        needles,
        text=("body", "response_excerpt"),
    )
    quoted = [form for needle in needles for form in stored_forms(needle)]
    for delivery in rows:
        try:
            body = json.loads(delivery.body)
        except ValueError:
            body = None
        if isinstance(body, dict):
            if body.get("environment") != environment:
                continue
            erased, count = value_erase(body, needles)
            text = json.dumps(erased, separators=(",", ":"), ensure_ascii=False)
        else:
            text, count = text_erase(delivery.body, needles)
        excerpt, quotes = text_erase(delivery.response_excerpt, quoted)
        changed = ({"body": text} if count else {}) | (
            {"response_excerpt": excerpt} if quotes else {}
        )
        if not changed:
            continue
        delivered = delivery.state == DeliveryState.DELIVERED
        counts["webhookPayloadsDelivered" if delivered else "webhookPayloads"] += 1
        if apply:
            Delivery.objects.filter(pk=delivery.pk).update(**changed)
    return counts


@transaction.atomic
def endpoint_send_test(*, endpoint: Endpoint, actor: str) -> Delivery:
    """Queues a `webhook.test` event to this endpoint: a delivery like any other (signed,
    sent in the endpoint's order, retried, recorded), whatever events it wants."""
    _locked(endpoint)
    waiting = Delivery.objects.filter(
        endpoint=endpoint, event=TEST_EVENT, state__in=OPEN_DELIVERY_STATES
    ).count()
    if waiting >= TESTS_OPEN_MAX:
        raise InvalidRequest(
            f"{waiting} test events already wait to be sent to this endpoint; "
            "send another once they are delivered or failed."
        )
    now = timezone.now()
    event_id = new_event_id()
    facts = AuditFacts(
        project_id=endpoint.project_id,
        environment="",
        actor=actor,
        action="webhook.test",
        detail={"webhook": endpoint.pk},
    )
    job = delivery_enqueue(
        project_id=endpoint.project_id, endpoint_id=endpoint.pk, event_id=event_id
    )
    delivery = Delivery.objects.create(
        endpoint=endpoint,
        event_id=event_id,
        event=TEST_EVENT,
        body=event_body(facts, event=TEST_EVENT, event_id=event_id, at=iso_ms(now)),
        state=DeliveryState.PENDING,
        job=job,
        created_at=now,
    )
    _audit(endpoint, actor=actor, action="webhook.test", event=event_id)
    return delivery


def delivery_queue(*, endpoint: Endpoint) -> dict[str, Any] | None:
    """Why the endpoint's deliveries wait, if they do: deliveries go out one at a time,
    oldest first, so while the oldest open one is failing (tried, to be tried again)
    every later one waits behind it; a paused endpoint sends nothing. None when
    nothing waits on anything."""
    open_rows = Delivery.objects.filter(endpoint=endpoint, state__in=OPEN_DELIVERY_STATES)
    head = open_rows.select_related("job").order_by("id").first()
    if head is None:
        return None
    behind = open_rows.filter(id__gt=head.pk).count()
    if not endpoint.active:
        return {"reason": "paused", "head": head, "behind": behind + 1}
    if head.attempts and head.last_error and head.state == DeliveryState.PENDING:
        return {"reason": "failing", "head": head, "behind": behind}
    return None
