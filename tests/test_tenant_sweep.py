"""Every route, asked about another project's or another environment's objects: nothing
is read, changed or even confirmed to exist.

A world of objects of every kind lives in acme's development environment (a document
and its version, a session, a proposal, an incident, an erasure, a webhook endpoint and
its delivery, a provider operation, an API key, a deployment, a person). Globex has
resources of the same names, and acme a production environment with them too. Each URL
pattern that names an object is filled in with acme's development ids, and again with ids
nothing has, and asked:

- on the Memory page by globex's owner under globex, and by acme's owner under acme's
  production environment (objects of a whole project aside): 404 (or 405) for both;
- on the API with globex's key and with a key of every project under globex, and with
  acme's key under production: the same error and body for both.

Whatever is asked, the database is as it was. And on acme's own objects: no GET or HEAD
of any route changes anything, for any role; every POST of a page needs the CSRF token;
a viewer's POSTs are all refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from django.apps import apps
from django.test import Client
from rest_framework.test import APIClient

from memoryadmin.agents.models import ProviderOperation
from memoryadmin.erasures.services import erasure_run
from memoryadmin.incidents.services.incidents import incident_create
from memoryadmin.memory.models import ApiKey, Deployment, Document, Project
from memoryadmin.memory.services.deployments import deployment_create
from memoryadmin.memory.services.keys import api_key_create
from memoryadmin.webhooks.services import endpoint_create, endpoint_send_test
from tests.helpers import MANIFEST_MEMORY, Keys, People, proposed_save, rows_reader, url_routes

pytestmark = pytest.mark.django_db

API = "api/managed-agents/"
# The route parameters that only say where (project, environment, resource) or that
# name nothing a project owns (a set-password link).
PLACES = {"p", "e", "r", "uidb64", "token", "name"}
SKIPPED = {"logout/"}


def _parameters(route: str) -> list[str]:
    return re.findall(r"<(?:\w+:)?(\w+)>", route)


def _fill(route: str, names: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        # In a webhook's route `d` is a delivery; elsewhere a document.
        if name == "d" and "deliveries/" in route:
            return names["delivery"]
        return names[name]

    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", one, route)


@cache
def _kept_tables() -> Callable[[], dict[str, list[tuple[Any, ...]]]]:
    querysets = {}
    for model in apps.get_models():
        if not model.__module__.startswith(("memoryadmin.", "django.contrib.auth")):
            continue
        fields = [f.attname for f in model._meta.concrete_fields]
        if model is ApiKey:
            fields.remove("last_used_at")  # every use of a key marks it
        querysets[model._meta.label] = model._default_manager.order_by("pk").values_list(*fields)
    return rows_reader(querysets)


def _state() -> dict[str, list[Any]]:
    """Every row of every table the product keeps (the Django session's aside)."""
    return dict(_kept_tables()())


@pytest.fixture
def world(project: Project, other_project: Project, people: People, keys: Keys) -> dict[str, str]:
    for environment in ("development", "production"):
        deployment_create(
            project=other_project,
            agent="support-bot",
            memory=MANIFEST_MEMORY,
            promote=environment,
            actor="test",
        )
    deployment_create(
        project=project,
        agent="support-bot",
        memory=MANIFEST_MEMORY,
        promote="production",
        actor="test",
    )
    from memoryadmin.memory.services.deployments import resource_get
    from memoryadmin.memory.services.documents import document_create

    notes = resource_get(project=project, environment="development", resource_id="notes")
    document_create(
        resource=notes, doc_id="workshop", title="Workshop", text="Node 22.", actor="test"
    )
    session, proposal = proposed_save(project)
    document = Document.objects.get(resource=notes, doc_id="workshop")
    incident = incident_create(
        project=project,
        environment="development",
        title="Poison",
        source={"session": session.id},
        hops=1,
        actor="test",
    )
    erasure = erasure_run(
        project=project,
        environment="development",
        match={"text": "a secret nobody wrote"},
        reason="test",
        dry_run=False,
        actor="test",
    )
    endpoint, _ = endpoint_create(
        project=project,
        url="https://hooks.example.com/in",
        events=["document.updated"],
        actor="test",
    )
    delivery = endpoint_send_test(endpoint=endpoint, actor="test")
    operation = ProviderOperation.objects.create(
        id="op_acme_dev_1",
        project=project,
        environment="development",
        resource=notes,
        session=session,
        principal="test",
        kind="accepted_write",
        provider_operation="x",
        state="dead",
        created_at=document.updated_at,
        updated_at=document.updated_at,
        finished_at=document.updated_at,
    )
    key, _ = api_key_create(project_id=project.id, name="acme's")
    assert erasure.erasure is not None
    return {
        "r": "notes",
        "d": "workshop",
        "doc_id": "workshop",
        "revision": document.revision,
        "s": session.id,
        "session_id": session.id,
        "proposal": proposal,
        "proposal_id": proposal,
        "i": incident.id,
        "erasure_id": erasure.erasure.id,
        "e_id": erasure.erasure.id,
        "w": str(endpoint.pk),
        "delivery": str(delivery.pk),
        "o": operation.id,
        "k": str(key.pk),
        "deployment_id": Deployment.objects.filter(project=project).first().id,  # type: ignore[union-attr]
        "username": "vera",
        "rec": "rec_none",
        "uidb64": "x",
        "token": "x",
        "name": "TOKEN",
    }


# Ids of the same shapes that name nothing anywhere.
MISSING = {
    "d": "nowhere",
    "doc_id": "nowhere",
    "revision": "rev_missing",
    "s": "ses_missing",
    "session_id": "ses_missing",
    "proposal": "999999",
    "proposal_id": "999999",
    "i": "inc_missing",
    "erasure_id": "era_missing",
    "e_id": "era_missing",
    "w": "999999",
    "delivery": "999998",
    "o": "op_missing",
    "k": "999997",
    "deployment_id": "dep_missing",
    "rec": "rec_missing",
    "username": "nobody-here",
}


def _same(world: dict[str, str], found: Any, missing: Any) -> bool:
    """The answers about an object elsewhere and about none at all tell nothing apart:
    the same status, and the same body once each id is the other's."""
    if found.status_code != missing.status_code:
        return False
    text = found.content.decode(errors="replace")
    for name, value in MISSING.items():
        # Short ids (a webhook's 1) are replaced where a message quotes them only.
        mine = world[name]
        for quote in ("'", '\\"') if len(mine) < 6 else ("",):
            text = text.replace(f"{quote}{mine}{quote}", f"{quote}{value}{quote}")
    return text == missing.content.decode(errors="replace")


def _page_routes() -> list[str]:
    return [
        r
        for r, _, _ in url_routes()
        if not r.startswith(API)
        and r.startswith("projects/<slug:p>/<env:e>/")
        and set(_parameters(r)) - PLACES
    ]


def _asked(client: Client, url: str, method: str) -> Any:
    if method == "GET":
        return client.get(url)
    body = {"confirm": "yes", "revision": "x", "reason": "r", "text": "t", "action": "delete"}
    return client.post(url, body)


# Objects of a project rather than of one of its environments: the same under either.
PROJECT_WIDE = {"w", "k", "deployment_id", "username"}


@pytest.mark.parametrize(
    ("persona", "project_id", "environment"),
    [("outsider", "globex", "development"), ("owner", "acme", "production")],
)
def test_no_page_reaches_another_places_objects(
    world: dict[str, str], web: Any, settings: Any, persona: str, project_id: str, environment: str
) -> None:
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    routes = _page_routes()
    assert len(routes) > 30, routes
    if project_id == "acme":
        routes = [r for r in routes if not set(_parameters(r)) & PROJECT_WIDE]
    client = web(persona)
    before = _state()
    wrong = []
    for route in routes:
        place = {"p": project_id, "e": environment}
        url = _fill(route, {**world, **place})
        nowhere = _fill(route, {**world, **MISSING, **place})
        for method in ("GET", "POST"):
            found, missing = _asked(client, url, method), _asked(client, nowhere, method)
            if found.status_code not in (404, 405) or found.status_code != missing.status_code:
                wrong.append((method, url, found.status_code, missing.status_code))
    assert not wrong, wrong
    assert _state() == before


def _api_routes() -> list[str]:
    return [
        r
        for r, _, _ in url_routes()
        # On the API `e` is an erasure (the environment is in the query).
        if r.startswith(API) and set(_parameters(r)) - (PLACES - {"e"})
    ]


def _api_asked(client: APIClient, url: str, method: str, revision: str) -> Any:
    return client.generic(
        method,
        url,
        json.dumps({"dryRun": True}) if method != "GET" else "",
        content_type="application/json",
        HTTP_IF_MATCH=f'"{revision}"',
    )


@pytest.mark.parametrize(
    ("key", "project_id", "environment"),
    [
        ("other", "globex", "development"),
        ("owner", "acme", "production"),
        ("all_projects", "globex", "development"),
    ],
)
def test_no_api_route_reaches_another_places_objects(
    world: dict[str, str],
    keys: Keys,
    client_for: Any,
    key: str,
    project_id: str,
    environment: str,
) -> None:
    routes = _api_routes()
    assert len(routes) > 20, routes
    if project_id == "acme":
        routes = [r for r in routes if not set(_parameters(r)) & PROJECT_WIDE]
    client: APIClient = client_for(getattr(keys, key))
    before = _state()
    wrong = []
    for route in routes:
        if "<str:session_id>" in route and key != "other":
            continue  # a session route names no place: only another project's key
        query = f"?environment={environment}"
        url = _fill(route, {**world, "p": project_id, "e": world["erasure_id"]}) + query
        nowhere = _fill(route, {**world, **MISSING, "p": project_id, "e": MISSING["e_id"]})
        nowhere += query
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            found = _api_asked(client, url, method, world["revision"])
            missing = _api_asked(client, nowhere, method, MISSING["revision"])
            if found.status_code < 400 or not _same(world, found, missing):
                wrong.append((method, url, found.status_code, found.content[:100]))
    assert not wrong, wrong
    assert _state() == before


def test_no_get_changes_anything(
    world: dict[str, str], web: Any, keys: Keys, client_for: Any, settings: Any
) -> None:
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    clients = {persona: web(persona) for persona in ("owner", "support", "viewer")}
    before = _state()
    for persona, client in clients.items():
        for route, _, _ in url_routes():
            if route.startswith(API) or route in SKIPPED or "set-password" in route:
                continue
            url = _fill(route, {**world, "p": "acme", "e": "development"})
            for method in ("GET", "HEAD"):
                response = client.generic(method, url)
                assert response.status_code < 500, (persona, method, url)
                assert _state() == before, (persona, method, url)
    client = client_for(keys.owner)
    for route, _, _ in url_routes():
        if not route.startswith(API):
            continue
        url = (
            _fill(route, {**world, "p": "acme", "e": world["erasure_id"]})
            + "?environment=development&projectId=acme"
        )
        assert client.get(url).status_code < 500, url
        assert _state() == before, url


def test_every_post_needs_the_csrf_token(
    world: dict[str, str], people: People, settings: Any
) -> None:
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.owner)
    client.get("/projects/acme/development/")  # the CSRF cookie, as a browser holds it
    before = _state()
    wrong = []
    for route, _, _ in url_routes():
        if route.startswith(API) or route.startswith("reference-provider"):
            continue
        url = _fill(route, {**world, "p": "acme", "e": "development"})
        response = client.post(url, {"confirm": "yes", "reason": "r", "text": "t"})
        if response.status_code not in (403, 405):
            wrong.append((url, response.status_code))
    assert not wrong, wrong
    assert _state() == before


def test_a_viewer_changes_nothing(world: dict[str, str], web: Any, settings: Any) -> None:
    settings.MEMORYADMIN_PAGE_RATE = settings.MEMORYADMIN_PROJECT_PAGE_RATE = "100000/minute"
    client = web("viewer")
    before = _state()
    wrong = []
    for route, _, _ in url_routes():
        if route.startswith(API) or not route.startswith("projects/<slug:p>/<env:e>/"):
            continue
        url = _fill(route, {**world, "p": "acme", "e": "development"})
        for body in (
            {"confirm": "yes", "reason": "r", "text": "t", "action": "freeze", "doc": "workshop"},
            {"erase": "1", "dryRun": "true", "kind": "text", "value": "Node 22."},
        ):
            response = client.post(url, body)
            if response.status_code not in (403, 405):
                wrong.append((url, response.status_code))
    assert not wrong, wrong
    assert _state() == before
