"""Deployments, their memory declarations, promotion and the resource inventory."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import Count, Q

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest, NotFound, ResourceConflict
from memoryadmin.core.rows import Compiled, concrete_names, instance
from memoryadmin.core.strings import strings_check
from memoryadmin.memory.limits import (
    DESCRIPTION_MAX_BYTES,
    check_agent_id,
    check_resource_id,
    utf8_len,
)
from memoryadmin.memory.models import ActiveDeployment, ApiKey, Deployment, Project, Resource
from memoryadmin.memory.providers import (
    keeps_documents,
    kinds_keeping_documents,
    provider_for,
    provider_kinds,
)
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.keys import ResourceLookup
from memoryadmin.memory.services.projects import key_may_act, project_get

Declaration = dict[str, Any]
# The kind of a declaration that names none.
DEFAULT_KIND = "document"

# Deployments in a page of the list, newest first.
DEPLOYMENT_PAGE_SIZE = 50

# What must still hold for the sessions of an environment once a promotion changed the
# tools of some of its resources (project, environment, those resources' ids): raises a
# DomainError to refuse the promotion. Registered by the agents app from `ready()`.
ToolsChangedCheck = Callable[[Project, str, list[str]], None]
_TOOLS_CHANGED_CHECKS: list[ToolsChangedCheck] = []


def tools_changed_check_register(check: ToolsChangedCheck) -> None:
    _TOOLS_CHANGED_CHECKS[:] = [check]


def declarations_public(memory: list[Declaration]) -> list[Declaration]:
    """Declarations as responses show them (each kind decides: no secret values)."""
    shown = []
    for declaration in memory:
        provider = declaration["provider"]
        kind = provider["kind"]
        if kind in provider_kinds():
            provider = provider_for(kind).public(provider)
        shown.append({**declaration, "provider": provider})
    return shown


def declaration_normalize(raw: object, where: str, *, project: str) -> Declaration:
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{where} must be an object.")
    unknown = set(raw) - {"id", "description", "provider"}
    if unknown:
        raise InvalidRequest(f"{where} has unknown fields: {', '.join(sorted(unknown))}.")
    try:
        resource_id = check_resource_id(raw.get("id"))
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}.id: {exc.message}") from exc
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InvalidRequest(f"{where}.description is required and must be a nonempty string.")
    if utf8_len(description) > DESCRIPTION_MAX_BYTES:
        raise InvalidRequest(f"{where}.description is over {DESCRIPTION_MAX_BYTES} UTF-8 bytes.")
    provider = raw.get("provider", {"kind": DEFAULT_KIND})
    if not isinstance(provider, dict):
        raise InvalidRequest(f"{where}.provider must be an object.")
    kind = provider.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or kind not in provider_kinds():
        raise InvalidRequest(
            f"{where}.provider.kind must be one of: {', '.join(provider_kinds())}."
        )
    normalized = provider_for(kind).normalize(provider, where, project=project)
    return {"id": resource_id, "description": description, "provider": normalized}


def declarations_normalize(raw: object, *, project: str) -> list[Declaration]:
    """`raw` checked as the declarations of a deployment of `project` (whose share of name
    lookups an origin's check counts against), one per id."""
    # Imported here: the HTTP client it loads is needed only where a declaration names
    # an origin.
    from memoryadmin.core.egress import deploy_checks

    if not isinstance(raw, list):
        raise InvalidRequest("memory must be a list of declarations.")
    by_id: dict[str, Declaration] = {}
    # The origins' lookups of all the declarations share one wait.
    with deploy_checks():
        for index, item in enumerate(raw):
            declaration = declaration_normalize(item, f"memory[{index}]", project=project)
            seen = by_id.get(declaration["id"])
            if seen is not None and seen != declaration:
                raise InvalidRequest(
                    f"Declarations of '{declaration['id']}' disagree; "
                    "declarations sharing an id must agree on provider and configuration."
                )
            by_id[declaration["id"]] = declaration
    return list(by_id.values())


def _check_kinds(
    project: Project, declarations: list[Declaration], environment: str | None
) -> None:
    kinds = {d["id"]: d["provider"]["kind"] for d in declarations}
    existing = Resource.objects.filter(project=project, resource_id__in=kinds)
    if environment is not None:
        existing = existing.filter(environment=environment)
    for resource in existing:
        if resource.kind != kinds[resource.resource_id]:
            raise ResourceConflict(
                f"Resource '{resource.resource_id}' is a {resource.kind} provider in "
                f"{resource.environment}; changing provider kind requires a new resource."
            )


def deployment_create(
    *,
    project: Project,
    agent: str,
    memory: object,
    promote: str | None = None,
    actor: str,
) -> Deployment:
    check_agent_id(agent)
    strings_check(memory, field="memory")
    declarations = declarations_normalize(memory, project=project.pk)
    if promote is not None:
        check_environment(promote)
    with transaction.atomic():
        _check_kinds(project, declarations, None)
        deployment = Deployment.objects.create(
            id="dep_" + secrets.token_hex(8), project=project, agent=agent, memory=declarations
        )
        audit_record(
            project_id=project.id,
            environment="",
            actor=actor,
            action="deployment.create",
            detail={"deployment": deployment.id, "agent": agent},
        )
        if promote is not None:
            deployment_promote(deployment=deployment, environment=promote, actor=actor)
    return deployment


@transaction.atomic
def deployment_promote(*, deployment: Deployment, environment: str, actor: str) -> Deployment:
    """Applies the deployment's limits to its resources, then activates it. A promotion
    that changes nothing (the deployment active already, its resources as it declares
    them) writes nothing and is not audited."""
    check_environment(environment)
    project = deployment.project
    _check_kinds(project, deployment.memory, environment)
    for index, declaration in enumerate(deployment.memory):
        provider_for(declaration["provider"]["kind"]).promote_check(
            project=project,
            environment=environment,
            provider=declaration["provider"],
            where=f"memory[{index}].provider",
        )
    # The resources' rows in the order of their ids, whatever the declarations' order:
    # promotions naming the same resources take their locks in one order, so one waits
    # for the other rather than each holding a row the other needs (a deadlock).
    tools_changed: list[str] = []
    changed = False
    for declaration in sorted(deployment.memory, key=lambda d: d["id"]):
        provider = dict(declaration["provider"])
        kind = provider.pop("kind")
        max_bytes = provider.pop("maxBytes")
        # Locked as read: whether the promotion changes the row is decided under the lock.
        # FOR NO KEY UPDATE, as its update takes: it excludes a session create's FOR SHARE,
        # not the rows pointing at the resource being written meanwhile.
        resource, created = Resource.objects.select_for_update(no_key=True).get_or_create(
            project=project,
            environment=environment,
            resource_id=declaration["id"],
            defaults={
                "kind": kind,
                "max_bytes": max_bytes,
                "description": declaration["description"],
                "config": provider,
            },
        )
        changed = changed or created
        if not created:
            if resource.kind != kind:
                raise ResourceConflict(
                    f"Resource '{resource.resource_id}' is a {resource.kind} provider; "
                    "changing provider kind requires a new resource."
                )
            declared = (max_bytes, declaration["description"], provider)
            if (resource.max_bytes, resource.description, resource.config) == declared:
                continue
            changed = True
            # Lowering maxBytes never touches stored text: an oversized
            # document stays readable and its next replacement must fit.
            Resource.objects.filter(pk=resource.pk).update(
                max_bytes=max_bytes, description=declaration["description"], config=provider
            )
            kind_of = provider_for(kind)
            before = kind_of.declared_tools(resource)
            resource.config = provider
            if kind_of.declared_tools(resource) != before:
                tools_changed.append(resource.resource_id)
    if tools_changed:
        # Sessions bound to these resources offer their new tools from now on: the
        # promotion is refused (and rolled back) where they would collide.
        for check in _TOOLS_CHANGED_CHECKS:
            check(project, environment, tools_changed)
    active = (
        ActiveDeployment.objects.select_for_update()
        .filter(project=project, environment=environment, agent=deployment.agent)
        .values_list("deployment_id", flat=True)
        .first()
    )
    if active == deployment.id and not changed:
        return deployment
    ActiveDeployment.objects.update_or_create(
        project=project,
        environment=environment,
        agent=deployment.agent,
        defaults={"deployment": deployment},
    )
    audit_record(
        project_id=project.id,
        environment=environment,
        actor=actor,
        action="deployment.promote",
        detail={"deployment": deployment.id, "agent": deployment.agent},
    )
    return deployment


def deployment_get(*, project: Project, deployment_id: str) -> Deployment:
    try:
        return Deployment.objects.get(project=project, id=deployment_id)
    except Deployment.DoesNotExist as exc:
        raise NotFound(f"No deployment '{deployment_id}' in project '{project.id}'.") from exc


def deployment_list(
    *,
    project: Project,
    agent: str | None = None,
    cursor: str | None = None,
    limit: int = DEPLOYMENT_PAGE_SIZE,
) -> tuple[list[Deployment], str | None]:
    """A page of the project's deployments (of `agent`), newest first, and the cursor of
    the next: a project that deploys on every change has thousands, each with its
    declarations."""
    deployments = Deployment.objects.filter(project=project)
    if agent:
        deployments = deployments.filter(agent=agent)
    return keyset_page(
        deployments,
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"deployments:{project.id}:{agent or ''}",
        limit=limit,
    )


_ACTIVE_IN = Compiled(
    lambda deployment_ids: (
        ActiveDeployment.objects.filter(deployment_id__in=deployment_ids)
        .order_by("environment")
        .values_list("deployment_id", "environment")
    ),
    (list[str],),
)


def deployment_active_in(*, deployments: list[Deployment]) -> dict[str, list[str]]:
    """For each deployment id, the environments where it is active."""
    active: dict[str, list[str]] = {d.id: [] for d in deployments}
    for deployment_id, environment in _ACTIVE_IN.rows(active):
        active[deployment_id].append(environment)
    return active


_ACTIVE_DEPLOYMENT = Compiled(
    lambda project_id, environment, agent: ActiveDeployment.objects.filter(
        project_id=project_id, environment=environment, agent=agent
    ).values_list(*(f"deployment__{name}" for name in concrete_names(Deployment))),
    (str, str, str),
)


def active_deployment(*, project: Project, environment: str, agent: str) -> Deployment | None:
    """The agent's deployment active in `environment` (one per agent and environment)."""
    row = _ACTIVE_DEPLOYMENT.row(project.pk, environment, agent)
    return None if row is None else instance(Deployment, row)


def declared_resource_ids(*, project: Project, environment: str) -> set[str]:
    declared: set[str] = set()
    memories = Deployment.objects.filter(
        activations__project=project, activations__environment=environment
    ).values_list("memory", flat=True)
    for memory in memories:
        declared.update(d["id"] for d in memory)
    return declared


def resource_get(*, project: Project, environment: str, resource_id: str) -> Resource:
    check_resource_id(resource_id)
    try:
        return Resource.objects.get(
            project=project, environment=environment, resource_id=resource_id
        )
    except Resource.DoesNotExist as exc:
        raise NotFound(f"No memory resource '{resource_id}' in {environment}.") from exc


def resource_documents_check(
    resource: Resource, *, hint: str = "it keeps no documents here."
) -> Resource:
    """The resource, when its provider keeps documents here; else InvalidRequest."""
    if not keeps_documents(resource):
        raise InvalidRequest(
            f"Resource '{resource.resource_id}' is a {resource.kind} provider; {hint}"
        )
    return resource


def resource_for_key(*, key: ApiKey, lookup: ResourceLookup, write: bool) -> Resource:
    """The resource a key looked up with `api_key_authenticate_at`, if the key may act on it.

    The same answers in the same order as `project_for_key` then `resource_get`.
    """
    key_may_act(key=key, project_id=lookup.project_id, write=write)
    if lookup.resource is not None:
        return lookup.resource
    project = project_get(project_id=lookup.project_id)
    return resource_get(
        project=project, environment=lookup.environment, resource_id=lookup.resource_id
    )


def resource_ids(*, project: Project, environment: str, documents_only: bool = False) -> list[str]:
    """The resource ids of an environment, retired ones included; with `documents_only`,
    those whose provider keeps documents here."""
    check_environment(environment)
    rows = Resource.objects.filter(project=project, environment=environment)
    if documents_only:
        rows = rows.filter(kind__in=kinds_keeping_documents())
    return list(rows.order_by("resource_id").values_list("resource_id", flat=True))


def resource_inventory(*, project: Project, environment: str) -> list[dict[str, Any]]:
    check_environment(environment)
    declared = declared_resource_ids(project=project, environment=environment)
    resources = Resource.objects.filter(project=project, environment=environment).annotate(
        live_documents=Count("documents", filter=Q(documents__deleted=False))
    )
    return [
        {
            "id": resource.resource_id,
            "provider": {"kind": resource.kind, "maxBytes": resource.max_bytes},
            "declared": resource.resource_id in declared,
            "documents": resource.live_documents,
        }
        for resource in resources.order_by("resource_id")
    ]


def inventory_count(row: dict[str, Any]) -> int | None:
    """An inventory row's document count as the page and the CLI's table show it: None
    where the provider keeps the resource's records (an http resource), which no count here
    covers; not a 0 that reads as an empty resource. (The API's `documents` stays the count
    of documents kept here, as its contract says.)"""
    return row["documents"] if row["provider"]["kind"] in kinds_keeping_documents() else None
