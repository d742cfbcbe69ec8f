"""The document list's facets: what narrows a resource's live documents besides the
id/title filter. One parser reads them from a query string (the page's URL, the API's
query parameters, under the same names), one method turns them into conditions.

| parameter | keeps the documents |
| --- | --- |
| agentWrites | whose agent writes are `enabled`, `review` or `disabled` (frozen) |
| writer | whose last write came from an `owner` (page, CLI), a `key` or an `agent` |
| key | last written through the API key with this prefix |
| agent | last written by a session of this agent |
| session | last written by this session |
| updatedFrom / updatedTo | updated from / to that day (UTC, inclusive) or instant |
| sizeMin / sizeMax | of at least / at most that many UTF-8 bytes |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime
from functools import cached_property

from django.db.models import Exists, OuterRef, Q, QuerySet

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.inputs import TIME_MAX_CHARS, parse_date, parse_instant, parse_int
from memoryadmin.memory.limits import (
    AGENT_WRITE_MODES,
    MAX_BYTES_MAX,
    agent_writes_condition,
    check_agent_id,
)
from memoryadmin.memory.models import DocumentVersion, Resource, WriterKind
from memoryadmin.memory.services.audit import ACTOR_KINDS, actor_kind_filter, range_instant

ID_MAX = 128

# Which sessions an agent ran in a resource's environment (a query of their ids): the
# sessions live in the agents app, which registers this from its ready().
type AgentSessions = Callable[[Resource, str], QuerySet]
_AGENT_SESSIONS: list[AgentSessions] = []


def agent_sessions_register(find: AgentSessions) -> None:
    _AGENT_SESSIONS[:] = [find]


@dataclass(frozen=True)
class DocumentFacets:
    agent_writes: str = ""
    writer: str = ""
    key: str = ""
    agent: str = ""
    session: str = ""
    updated_from: date | None = None
    updated_to: date | None = None
    size_min: int | None = None
    size_max: int | None = None

    # Worked out once per instance (the facets are frozen): a page asks several times.
    @cached_property
    def _values(self) -> tuple[str | date | int | None, ...]:
        return tuple(getattr(self, item.name) for item in fields(self))

    @cached_property
    def narrowed(self) -> bool:
        return any(value not in ("", None) for value in self._values)

    @property
    def scope(self) -> str:
        """What a keyset cursor of the narrowed list is bound to."""
        return ":".join("" if value is None else str(value) for value in self._values)

    def params(self) -> dict[str, str]:
        """The facets as query parameters (the inverse of `document_facets`)."""
        out: dict[str, str] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value not in ("", None):
                out[PARAMS[item.name]] = (
                    value.isoformat() if isinstance(value, date) else str(value)
                )
        return out

    def condition(self, resource: Resource) -> Q:
        """The facets as one condition on `resource`'s documents."""
        where = Q()
        if self.agent_writes:
            where &= agent_writes_condition(self.agent_writes, default=resource.review_default)
        # The last write's actor is its version's (every write records one).
        actor = None
        if self.writer == "agent" or self.agent or self.session:
            where &= Q(writer_kind=WriterKind.AGENT)
        elif self.writer:
            where &= Q(writer_kind=WriterKind.OWNER)
            actor = actor_kind_filter(self.writer, "origin__actor")
        if self.key:
            actor = Q(origin__actor=f"key:{self.key}")
        if actor is not None:
            last = DocumentVersion.objects.filter(
                actor, document=OuterRef("pk"), revision=OuterRef("revision")
            )
            where &= Q(Exists(last))
        if self.session:
            where &= Q(writer_session_id=self.session)
        if self.agent:
            sessions = _AGENT_SESSIONS[0](resource, self.agent) if _AGENT_SESSIONS else []
            where &= Q(writer_session_id__in=sessions)
        if self.updated_from:
            where &= Q(updated_at__gte=range_instant(self.updated_from))
        if self.updated_to:
            where &= Q(updated_at__lt=range_instant(self.updated_to, end_of_day=True))
        if self.size_min is not None:
            where &= Q(bytes__gte=self.size_min)
        if self.size_max is not None:
            where &= Q(bytes__lte=self.size_max)
        return where


PARAMS = {
    "agent_writes": "agentWrites",
    "writer": "writer",
    "key": "key",
    "agent": "agent",
    "session": "session",
    "updated_from": "updatedFrom",
    "updated_to": "updatedTo",
    "size_min": "sizeMin",
    "size_max": "sizeMax",
}
NO_FACETS = DocumentFacets()


def _choice(value: str, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidRequest(
            f"{name} must be one of: {', '.join(choices)}.", details={"field": name}
        )
    return value


def _token(value: str, name: str) -> str:
    if len(value) > ID_MAX or not value.isascii() or not value.isprintable() or " " in value:
        raise InvalidRequest(
            f"{name} must be an id of at most {ID_MAX} ASCII characters.", details={"field": name}
        )
    return value


def _day_or_instant(value: str, name: str) -> date:
    if len(value) > TIME_MAX_CHARS:
        raise InvalidRequest(f"{name} is not a date or time.", details={"field": name})
    return parse_date(value, field=name) if len(value) == 10 else parse_instant(value, field=name)


def document_facets(params: Mapping[str, str]) -> DocumentFacets:
    """The facets named in `params` (absent or empty: not narrowed); a value that does
    not parse is refused (InvalidRequest naming the parameter), changing nothing."""

    def get(name: str) -> str:
        value = params.get(PARAMS[name])
        return value.strip() if isinstance(value, str) else ""

    agent = get("agent")
    updated_from = (
        _day_or_instant(get("updated_from"), "updatedFrom") if get("updated_from") else None
    )
    updated_to = _day_or_instant(get("updated_to"), "updatedTo") if get("updated_to") else None
    if updated_from and updated_to and range_instant(updated_from) > range_instant(updated_to):
        raise InvalidRequest("updatedFrom is after updatedTo.", details={"field": "updatedFrom"})
    sizes = [
        parse_int(get(name), field=PARAMS[name], maximum=MAX_BYTES_MAX) if get(name) else None
        for name in ("size_min", "size_max")
    ]
    if sizes[0] is not None and sizes[1] is not None and sizes[0] > sizes[1]:
        raise InvalidRequest("sizeMin is larger than sizeMax.", details={"field": "sizeMin"})
    writer = _choice(get("writer"), "writer", tuple(ACTOR_KINDS)) if get("writer") else ""
    key, session = _token(get("key"), "key"), _token(get("session"), "session")
    if writer and ((key and writer != "key") or ((agent or session) and writer != "agent")):
        raise InvalidRequest(
            "writer contradicts key, agent or session: leave one out.", details={"field": "writer"}
        )
    if key and (agent or session):
        raise InvalidRequest(
            "key and agent or session exclude each other.", details={"field": "key"}
        )
    return DocumentFacets(
        agent_writes=_choice(get("agent_writes"), "agentWrites", AGENT_WRITE_MODES)
        if get("agent_writes")
        else "",
        writer=writer,
        key=key,
        agent=check_agent_id(agent) if agent else "",
        session=session,
        updated_from=updated_from,
        updated_to=updated_to,
        size_min=sizes[0],
        size_max=sizes[1],
    )


def updated_bound(value: date | datetime | None) -> str:
    """A bound as the page's date input shows it ("" for none or an instant)."""
    return value.isoformat() if type(value) is date else ""
