"""Session memory bindings: parsing the request shape, admission, live writability."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Collate

from memoryadmin.agents.errors import InvalidMemoryBinding
from memoryadmin.agents.kinds import (
    MemoryProvider,
    provider_for,
    provider_kinds,
    reserved_tool_names,
)
from memoryadmin.agents.models import Access, Binding, Scope, Session, SessionStatus
from memoryadmin.agents.search_tool import SEARCH_TOOL
from memoryadmin.core.errors import InvalidRequest, ToolCollision
from memoryadmin.core.partitions import partition_key
from memoryadmin.core.rows import (
    Compiled,
    concrete_names,
    database_vendor,
    db_connection,
    fetch_rows,
    instance,
    joined_instance,
    joined_names,
)
from memoryadmin.core.tools import http_tools_merge
from memoryadmin.memory.limits import (
    BINDINGS_MAX,
    DOCUMENT_ID_RE,
    check_resource_id,
)
from memoryadmin.memory.models import Deployment, Document, Project, Resource

NAMESPACE_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
BINDING_FIELDS = {"scope", "id", "access", "search"}


@dataclass(frozen=True)
class BindingSpec:
    """One requested binding, normalised: access defaulted, id "" for collections."""

    resource: str
    scope: str
    target_id: str
    access: str
    # A collection binding may offer memory_search as well (off unless asked for).
    search: bool = False

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"resource": self.resource, "scope": self.scope}
        if self.scope != Scope.COLLECTION:
            data["id"] = self.target_id
        data["access"] = self.access
        if self.search:
            data["search"] = True
        return data


def _spec_parse(resource: str, raw: object) -> BindingSpec:
    try:
        check_resource_id(resource)
    except InvalidRequest as exc:
        raise InvalidMemoryBinding(resource, exc.message) from exc
    if not isinstance(raw, dict):
        raise InvalidMemoryBinding(resource, "a binding must be an object.")
    unknown = set(raw) - BINDING_FIELDS
    if unknown:
        raise InvalidMemoryBinding(resource, f"unknown fields: {', '.join(sorted(unknown))}.")
    scope = raw.get("scope")
    if scope not in Scope.values:
        raise InvalidMemoryBinding(resource, "scope must be document, collection or namespace.")
    access = raw.get("access", Access.READ)
    if access not in Access.values:
        raise InvalidMemoryBinding(resource, "access must be 'read' or 'read-write'.")
    target = raw.get("id")
    search = raw.get("search", False)
    if not isinstance(search, bool):
        raise InvalidMemoryBinding(resource, "search must be true or false.")
    if search and scope != Scope.COLLECTION:
        raise InvalidMemoryBinding(resource, "only a collection binding offers search.")
    if scope == Scope.COLLECTION:
        if "id" in raw:
            raise InvalidMemoryBinding(resource, "a collection binding takes no id.")
        if access != Access.READ:
            raise InvalidMemoryBinding(resource, "collection bindings are read-only.")
        return BindingSpec(resource, scope, "", access, search)
    pattern = DOCUMENT_ID_RE if scope == Scope.DOCUMENT else NAMESPACE_ID_RE
    if not isinstance(target, str) or not pattern.fullmatch(target):
        what = "Document" if scope == Scope.DOCUMENT else "Namespace"
        raise InvalidMemoryBinding(
            resource, f"{what} ids are 1-128 ASCII letters, digits, '-' or '_'."
        )
    return BindingSpec(resource, scope, target, access)


def bindings_parse(raw: object) -> list[BindingSpec]:
    """The `memory` map of a session request, checked for shape only."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise InvalidMemoryBinding("*", "memory must be an object keyed by resource id.")
    if len(raw) > BINDINGS_MAX:
        raise InvalidMemoryBinding(
            "*", f"a session takes at most {BINDINGS_MAX} bindings, not {len(raw)}."
        )
    specs = [_spec_parse(resource, value) for resource, value in raw.items()]
    return sorted(specs, key=lambda spec: spec.resource)


def _named_resources(project_id: str, environment: str, resource_ids: list[str]) -> QuerySet[Any]:
    """The named resources of a project's environment; on PostgreSQL in the order of
    their ids as promotion takes their rows (code points, whatever the collation)."""
    resources = Resource.objects.filter(
        project_id=project_id, environment=environment, resource_id__in=resource_ids
    )
    if database_vendor() == "postgresql":
        resources = resources.order_by(Collate("resource_id", "C"))
    return resources.values_list(*concrete_names(Resource))


_RESOURCES = Compiled(_named_resources, (str, str, list[str]))


def _resources_shared(project_id: str, environment: str, resource_ids: list[str]) -> list[Any]:
    """The rows of `_RESOURCES`, on PostgreSQL held FOR SHARE until the transaction ends.

    A promotion updates the rows of the resources it declares before it checks the active
    sessions bound to those whose tools it changes (memory's `deployment_promote`): a
    promotion that updated one first is waited for, and its rows are read as it committed
    them; one that comes second waits for this session's commit, and its check finds the
    session. Sessions being admitted share the rows. SQLite's writers take turns whole."""
    statement = _RESOURCES.params(project_id, environment, resource_ids)
    if statement is None:
        return []
    sql, params = statement
    return fetch_rows(sql + " FOR SHARE" if database_vendor() == "postgresql" else sql, params)


def bindings_admit(
    *, deployment: Deployment, environment: str, specs: list[BindingSpec]
) -> dict[str, Resource]:
    """Checks every binding against the pinned deployment and current data, in the
    caller's transaction, holding the bound resources' rows (`_resources_shared`)."""
    # Each declared id with the provider kind its declaration names.
    declared = {d["id"]: d["provider"]["kind"] for d in deployment.memory}
    wrapper = db_connection()
    resources = {
        resource.resource_id: resource
        for resource in (
            instance(Resource, row, wrapper=wrapper)
            for row in _resources_shared(
                deployment.project_id, environment, [spec.resource for spec in specs]
            )
        )
    }
    # The bindings of each kind, admitted by the kind in one call.
    by_kind: dict[str, list[tuple[BindingSpec, Resource]]] = {}
    for spec in specs:
        if spec.resource not in declared:
            raise InvalidMemoryBinding(
                spec.resource, f"deployment {deployment.id} does not declare this resource."
            )
        resource = resources.get(spec.resource)
        if resource is None:
            raise InvalidMemoryBinding(
                spec.resource, f"the resource does not exist in {environment}; promote first."
            )
        if resource.kind != declared[spec.resource]:
            # Another deployment made the id a resource of another kind since this one
            # was made (promotion refuses this one now): not the resource it declares.
            raise InvalidMemoryBinding(
                spec.resource,
                f"deployment {deployment.id} declares it with provider kind "
                f"{declared[spec.resource]}, but in {environment} it is a {resource.kind} "
                "resource; changing provider kind requires a new resource.",
            )
        by_kind.setdefault(resource.kind, []).append((spec, resource))
    for bindings in by_kind.values():
        _provider(bindings[0][1]).admit(bindings=bindings)
    bindings_tools_check([(spec, resources[spec.resource]) for spec in specs])
    return resources


def bindings_tools_check(bound: list[tuple[BindingSpec, Resource]]) -> None:
    """The tools of one session's bindings go together (ToolCollision, 400, otherwise):
    identical declared names merge only with identical schemas, and none shadows a tool
    a provider kind reserves. Checked when a session is created, and again for the
    active sessions bound to a resource whose tools a promotion changes."""
    http_tools_merge(
        targets=[
            (spec.resource, _provider(resource).declared_tools(resource))
            for spec, resource in bound
        ],
        # memory_search is taken only where a collection is bound with search: the
        # reference provider's own memory_search works in every other session.
        reserved=reserved_tool_names()
        | ({SEARCH_TOOL} if any(spec.search for spec, _ in bound) else set()),
    )


def sessions_tools_check(project: Project, environment: str, resource_ids: list[str]) -> None:
    """The active sessions bound to these resources (whose tools changed in this
    transaction) with the tools of all their bindings as the resources now declare
    them: the first that collides refuses the change (ToolCollision)."""
    sessions = (
        Binding.objects.filter(
            session__status=SessionStatus.ACTIVE,
            resource__project=project,
            resource__environment=environment,
            resource__resource_id__in=resource_ids,
        )
        .values("session_id")
        .distinct()
    )
    bound: dict[str, list[tuple[BindingSpec, Resource]]] = {}
    for binding in (
        Binding.objects.filter(session_id__in=sessions)
        .select_related("resource")
        .order_by("session_id", "resource__resource_id")
    ):
        bound.setdefault(binding.session_id, []).append((binding_spec(binding), binding.resource))
    for session_id, bindings in bound.items():
        try:
            bindings_tools_check(bindings)
        except ToolCollision as exc:
            raise ToolCollision(
                f"With the tools this promotion declares, the tools of active session "
                f"{session_id} would collide: {exc.message} End that session first, or "
                "declare tools that go together.",
                details={"session": session_id},
            ) from exc


def _provider(resource: Resource) -> MemoryProvider:
    if resource.kind not in provider_kinds():
        raise InvalidMemoryBinding(
            resource.resource_id, f"no provider of kind {resource.kind} is installed."
        )
    return provider_for(resource.kind)


def admit_namespace_only(bindings: list[tuple[BindingSpec, Resource]]) -> None:
    """The admission rule of providers whose records live elsewhere: namespace bindings only."""
    for spec, resource in bindings:
        if spec.scope != Scope.NAMESPACE:
            raise InvalidMemoryBinding(
                spec.resource, f"a {resource.kind} provider takes namespace bindings only."
            )


def binding_partition(*, session: Session, binding: Binding) -> str:
    """The partition a namespace binding reads and writes at its provider."""
    return partition_key(
        project_id=session.project_id,
        environment=session.environment,
        resource_id=binding.resource.resource_id,
        namespace=binding.target_id,
    )


def binding_spec(binding: Binding) -> BindingSpec:
    return BindingSpec(
        binding.resource.resource_id,
        binding.scope,
        binding.target_id,
        binding.access,
        binding.search,
    )


_BINDINGS_OF = Compiled(
    lambda session_ids: Binding.objects.filter(session_id__in=session_ids).values_list(
        *joined_names(Binding, "resource")
    ),
    (list[str],),
)


def _bindings_of(session_ids: list[str]) -> list[Binding]:
    """These sessions' bindings, each with its resource (as `select_related` gives it)."""
    rows, wrapper = _BINDINGS_OF.rows(session_ids), db_connection()
    return [joined_instance(Binding, "resource", row, wrapper=wrapper) for row in rows]


def sessions_memory(sessions: list[Session]) -> dict[str, list[dict[str, Any]]]:
    """Each session's `memory` array with live `writable`, by resource id (compared as
    text, whatever the database's collation): a session's bindings as written with it
    or else in one query, and the live documents of active sessions' read-write
    document bindings in one more."""
    unread = [session for session in sessions if session.written_bindings is None]
    bindings = [b for session in sessions for b in session.written_bindings or ()]
    if unread:
        bindings += _bindings_of([session.pk for session in unread])
    bindings.sort(key=lambda b: (b.session_id, b.resource.resource_id))
    active = {session.id for session in sessions if session.is_active}
    writable_docs = _writable_documents(
        [
            b
            for b in bindings
            if b.session_id in active
            and b.scope == Scope.DOCUMENT
            and b.access == Access.READ_WRITE
        ]
    )
    by_id = {session.id: session for session in sessions}
    memory: dict[str, list[dict[str, Any]]] = {session.id: [] for session in sessions}
    for binding in bindings:
        entry: dict[str, Any] = binding_spec(binding).as_dict()
        if binding.scope == Scope.NAMESPACE:
            # Lets owners locate the remote data of this namespace.
            entry["partition"] = binding_partition(
                session=by_id[binding.session_id], binding=binding
            )
        # Collections are never writable; a namespace reflects its access only.
        entry["writable"] = (
            binding.session_id in active
            and binding.access == Access.READ_WRITE
            and (
                binding.scope == Scope.NAMESPACE
                or (binding.resource_id, binding.target_id) in writable_docs
            )
        )
        memory[binding.session_id].append(entry)
    return memory


_WRITABLE = Compiled(
    lambda resource_pks, doc_ids: (
        Document.objects.live()
        .filter(resource_id__in=resource_pks, doc_id__in=doc_ids, agent_writes=True)
        .values_list("resource_id", "doc_id")
    ),
    (list[int], list[str]),
)


def _writable_documents(bindings: list[Binding]) -> set[tuple[int, str]]:
    """The (resource, document) pairs of these document bindings that agents may write
    now (a superset: each resource's ids)."""
    if not bindings:
        return set()
    found = _WRITABLE.rows({b.resource_id for b in bindings}, {b.target_id for b in bindings})
    return {(resource_pk, doc_id) for resource_pk, doc_id in found}
