"""API keys: create, list, revoke, rotate, and the look-up behind every API request.

Look-ups are cached for `MEMORYADMIN_API_KEY_CACHE_SECONDS` (at most 5), so a
key revoked on one instance stops working on every other instance within that
bound; the instance that revokes it drops its cache entry at once (and with
Redis as the shared cache, every instance does). `last_used_at` is written at
most once a minute per key, not on every request; the process whose request made
that minute's mark does not ask the cache for another within it.

A request to a memory resource resolves its key and the resource in one
query (`api_key_authenticate_at`): that look-up is never cached, so the key
is checked against its row on every such request.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from memoryadmin.core.cursors import keyset_page
from memoryadmin.core.errors import Conflict, Forbidden, InvalidRequest, NotFound
from memoryadmin.core.inputs import whole_number
from memoryadmin.core.rows import (
    column,
    columns,
    columns_of,
    database_vendor,
    db_connection,
    fetch_row,
    instance,
    instance_of,
    table,
)
from memoryadmin.core.sharedcache import tolerant
from memoryadmin.memory.models import ApiKey, Document, Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.documents import live_document_on
from memoryadmin.memory.services.projects import project_cap, project_get

API_KEY_PREFIX = "mak_"
LAST_USED_EVERY = 60  # seconds between two writes of last_used_at for one key
MAX_GRACE_SECONDS = 30 * 24 * 3600


class ApiKeyNotFound(NotFound):
    code = "api_key_not_found"


@dataclass(frozen=True)
class NewKey:
    """A key just made, with its secret: shown once, never stored."""

    key: ApiKey
    secret: str


def _hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _cache_key(hashed: str) -> str:
    # An entry is the key's row of REQUEST_FIELDS ("v2": entries of another shape are
    # never read, and expire within MEMORYADMIN_API_KEY_CACHE_SECONDS).
    return f"apikey:v2:{hashed}"


def _audit(*, key: ApiKey, actor: str, action: str, **detail: Any) -> None:
    audit_record(
        project_id=key.project_id,
        environment="",
        actor=actor,
        action=action,
        detail={"key": key.prefix, "id": key.pk, "name": key.name, **detail},
    )


# Keys in a page of the list, newest first.
KEY_PAGE_SIZE = 50
# The keys of one project in use at once (not revoked, or in a rotation's grace): rotating
# a key at the cap still works (its old key ends), one more key does not.
KEYS_MAX = 100


def _live(keys: QuerySet[ApiKey], now: datetime | None = None) -> QuerySet[ApiKey]:
    """Those of `keys` that still work (at `now`)."""
    now = now or timezone.now()
    return keys.filter(Q(revoked_at__isnull=True) | Q(revoked_at__gt=now))


def _insert(*, project_id: str | None, read_only: bool, name: str) -> NewKey:
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        project_id=project_id, name=name, prefix=raw[:12], hashed=_hash(raw), read_only=read_only
    )
    return NewKey(key=key, secret=raw)


def check_key_name(name: str) -> str:
    if len(name) > 200:
        raise InvalidRequest("name: at most 200 characters.")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidRequest("name: control characters are not allowed.")
    return name


def check_grace_seconds(value: object) -> int:
    """An int, or its ASCII digits (the CLI's --grace), from 0 to MAX_GRACE_SECONDS."""
    seconds = whole_number(value, maximum=MAX_GRACE_SECONDS)
    if seconds is None:
        raise InvalidRequest(
            f"graceSeconds must be between 0 and {MAX_GRACE_SECONDS} (30 days), not {value}."
        )
    return seconds


@transaction.atomic
def api_key_create(
    *, project_id: str | None, read_only: bool = False, name: str = "", actor: str = "system"
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with its secret, which is never stored."""
    if project_id is not None:
        project_get(project_id=project_id)
        project_cap(
            project_id=project_id,
            held=_live(ApiKey.objects.filter(project_id=project_id)),
            cap=KEYS_MAX,
            message=f"A project has at most {KEYS_MAX} API keys in use; revoke one first.",
        )
    new = _insert(project_id=project_id, read_only=read_only, name=check_key_name(name))
    _audit(key=new.key, actor=actor, action="apikey.create", readOnly=read_only)
    return new.key, new.secret


def api_key_list(
    *, project_id: str | None, all_projects: bool = False, revoked_since: datetime | None = None
) -> QuerySet[ApiKey]:
    """The keys of one project, or (all_projects) every key; None alone: all-projects keys.
    `revoked_since`: only the keys in use and those revoked since then."""
    keys = ApiKey.objects.order_by("-created_at", "-id")
    if revoked_since is not None:
        keys = _live(keys, revoked_since)
    if all_projects:
        return keys
    if project_id is not None:
        project_get(project_id=project_id)
    return keys.filter(project_id=project_id)


def api_key_page(
    *, project_id: str, cursor: str | None, limit: int = KEY_PAGE_SIZE
) -> tuple[list[ApiKey], str | None]:
    """A page of the project's keys, newest first, revoked ones included: those grow with
    every rotation."""
    return keyset_page(
        api_key_list(project_id=project_id),
        order=("-created_at", "id"),
        cursor=cursor,
        scope=f"api-keys:{project_id}",
        limit=limit,
    )


def api_key_get(*, ref: str, project_id: str | None = None, scoped: bool = False) -> ApiKey:
    """A key by its id or its prefix; `scoped` keeps the search to `project_id`'s keys."""
    keys = ApiKey.objects.all()
    if scoped:
        keys = keys.filter(project_id=project_id)
    # An id is ASCII digits; anything else (Unicode digits, spaces) can only be a prefix.
    pk = whole_number(ref)
    matches = list(keys.filter(pk=pk) if pk is not None else keys.filter(prefix=ref))
    if not matches:
        raise ApiKeyNotFound(f"No API key '{ref}'.")
    if len(matches) > 1:
        raise Conflict(f"More than one API key has the prefix '{ref}'; name it by its id.")
    return matches[0]


def _forget(key: ApiKey) -> None:
    # Now, and again after the commit: a request between the two may have
    # cached the row as it was before the change became visible.
    def delete() -> None:
        tolerant(lambda: cache.delete(_cache_key(key.hashed)), False)

    delete()
    transaction.on_commit(delete)


@transaction.atomic
def api_key_revoke(*, key: ApiKey, actor: str) -> ApiKey:
    """Revokes a key now. Revoking a revoked key changes nothing; one in its
    rotation grace period ends now (never later than it would have)."""
    key = ApiKey.objects.select_for_update().get(pk=key.pk)
    # Read after the lock: a rotation or revocation it waited for is seen as ended.
    now = timezone.now()
    if key.works_at(now):
        key.revoked_at = now
        key.save(update_fields=["revoked_at"])
        _audit(key=key, actor=actor, action="apikey.revoke")
    _forget(key)
    return key


def check_key_manager(key: ApiKey) -> None:
    """A key that manages keys (lists, creates, revokes, rotates them) is not one a
    rotation is ending: a key rotated away because it leaked would otherwise make, in its
    grace period, keys that outlive it."""
    if key.revoked_at is not None:
        raise Forbidden(
            f"API key {key.prefix}… is in its rotation's grace period: it keeps working "
            "until then, but manages no keys. Use the key that replaced it."
        )


@transaction.atomic
def api_key_rotate(*, key: ApiKey, actor: str, grace_seconds: int = 0) -> tuple[ApiKey, str]:
    """A new key with the same name, scope and access; the old one ends after the grace period.

    A key is rotated once: one rotated already (in its grace period) or revoked is a
    conflict, so that two rotations at once make one successor. With a grace period both
    keys work until it ends: one more key in use, refused at the cap as a create is."""
    grace_seconds = check_grace_seconds(grace_seconds)
    old = ApiKey.objects.select_for_update().get(pk=key.pk)
    # Read after the lock: a rotation or revocation it waited for is seen as ended.
    now = timezone.now()
    if not old.works_at(now):
        raise Conflict(f"API key {old.prefix}… is revoked; create a new one instead.")
    if old.revoked_at is not None:
        # The time as every door shows times (representations imports these services).
        from memoryadmin.memory.representations import iso_ms

        raise Conflict(
            f"API key {old.prefix}… was rotated already and ends at "
            f"{iso_ms(old.revoked_at)}; rotate the key that replaced it, or revoke this "
            "one to end it now."
        )
    if grace_seconds and old.project_id is not None:
        project_cap(
            project_id=old.project_id,
            held=_live(ApiKey.objects.filter(project_id=old.project_id), now),
            cap=KEYS_MAX,
            message=f"A project has at most {KEYS_MAX} API keys in use; revoke one first, or "
            "rotate with no grace period.",
        )
    old.revoked_at = now + timedelta(seconds=grace_seconds)
    old.save(update_fields=["revoked_at"])
    new = _insert(project_id=old.project_id, read_only=old.read_only, name=old.name)
    _audit(
        key=old,
        actor=actor,
        action="apikey.rotate",
        newKey=new.key.prefix,
        newId=new.key.pk,
        graceSeconds=grace_seconds,
    )
    _forget(old)
    return new.key, new.secret


# Look-up on every request.

# The fields a request's key is read with (by every look-up, and in the look-up cache):
# what the request path uses, in the model's order. The others stay deferred, read from
# the database if ever used.
REQUEST_FIELDS = ("id", "project", "prefix", "read_only", "revoked_at")
# How many values of a row of `api_key_columns` are the key's.
API_KEY_ROW_WIDTH = len(REQUEST_FIELDS)


def api_key_columns(alias: str = "") -> str:
    """The columns a request's key is read with (`REQUEST_FIELDS`), for a query that
    reads it with more; its row's first values become the key by `api_key_of_row`."""
    return columns_of(ApiKey, REQUEST_FIELDS, alias)


def api_key_of_row(row: Sequence[Any], *, wrapper: Any = None) -> ApiKey:
    """The key of a row starting with `api_key_columns` (the rest is ignored)."""
    return instance_of(ApiKey, REQUEST_FIELDS, row[:API_KEY_ROW_WIDTH], wrapper=wrapper)


@functools.cache
def _key_sql(vendor: str) -> str:
    return f"SELECT {api_key_columns()} FROM {table(ApiKey)} WHERE {column(ApiKey, 'hashed')} = %s"


def _load(hashed: str) -> ApiKey | None:
    ttl = settings.MEMORYADMIN_API_KEY_CACHE_SECONDS
    cached = tolerant(lambda: cache.get(_cache_key(hashed)), None) if ttl else None
    if cached is not None:
        return api_key_of_row(cached)
    row = fetch_row(_key_sql(database_vendor()), [hashed])
    if row is None:
        return None
    if ttl:
        value = tuple(row)
        tolerant(lambda: cache.set(_cache_key(hashed), value, timeout=ttl), None)
    return api_key_of_row(row)


# Per process: until when (this clock) the last-use mark a request of this process
# made for a key (by id and prefix) holds. The mark lives LAST_USED_EVERY seconds from
# its `add`, which began after the time kept here, so no `add` before then could succeed
# (unless the cache lost the mark: then the use is recorded when this time is over).
_clock = time.monotonic
_marked_until: dict[tuple[int, str], float] = {}
MARKS_KEPT = 4096


def _touch(key: ApiKey, now: datetime) -> None:
    # cache.add succeeds for one caller per key and minute (across instances
    # when the cache is shared), so last_used_at costs one write a minute.
    # Without the cache nothing is written: a later request records the use.
    mark = (key.pk, key.prefix)
    started = _clock()
    if _marked_until.get(mark, 0.0) > started:
        return
    if tolerant(lambda: cache.add(f"apikey-used:{key.pk}", 1, timeout=LAST_USED_EVERY), False):
        if len(_marked_until) >= MARKS_KEPT:
            _marked_until.clear()
        _marked_until[mark] = started + LAST_USED_EVERY
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)


def _usable(key: ApiKey | None) -> ApiKey | None:
    now = timezone.now()
    if key is None or not key.works_at(now):
        return None
    _touch(key, now)
    return key


def _well_formed(raw: str) -> bool:
    return raw.startswith(API_KEY_PREFIX) and len(raw) <= 200


def api_key_hashed(raw: str) -> str | None:
    """What a key is looked up by, for a query that reads it with more (None: it
    cannot be a key). Never cached: a revoked key stops at once."""
    return _hash(raw) if _well_formed(raw) else None


def api_key_usable(key: ApiKey | None) -> ApiKey | None:
    """A key read by such a query, if it may be used now (and its use recorded)."""
    return _usable(key)


def api_key_authenticate(*, raw: str) -> ApiKey | None:
    if not _well_formed(raw):
        return None
    return _usable(_load(_hash(raw)))


@dataclass(frozen=True)
class ResourceLookup:
    """A resource named by a request, resolved with the request's key."""

    project_id: str
    environment: str
    resource_id: str
    # The resource, or None when there is no such resource (or project).
    resource: Resource | None
    # The document id read with it (None: no document read), and the live document
    # of that id (None: none), for `document_get(read=...)`.
    doc_id: str | None = None
    document: Document | None = None


@functools.cache
def _key_and_resource_sql(vendor: str, with_document: bool) -> str:
    resource_pk = f"r.{column(Resource, 'id')}"
    return (
        f"SELECT {api_key_columns('k')}, {columns(Resource, 'r')}"
        + (f", {columns(Document, 'd')}" if with_document else "")
        + f" FROM {table(ApiKey)} k LEFT JOIN {table(Resource)} r"
        f" ON r.{column(Resource, 'project')} = %s"
        f" AND r.{column(Resource, 'environment')} = %s"
        f" AND r.{column(Resource, 'resource_id')} = %s"
        + (
            f" LEFT JOIN {table(Document)} d ON {live_document_on('d', resource_pk)}"
            if with_document
            else ""
        )
        + f" WHERE k.{column(ApiKey, 'hashed')} = %s"
    )


def api_key_authenticate_at(
    *, raw: str, project_id: str, environment: str, resource_id: str, doc_id: str | None = None
) -> tuple[ApiKey | None, ResourceLookup]:
    """The key, and the resource a request names (with `doc_id`, also that live
    document), in one round trip.

    The resource is only looked up here; whether the key may reach it is
    decided by `resource_for_key`.
    """
    lookup = ResourceLookup(project_id, environment, resource_id, None)
    if not _well_formed(raw):
        return None, lookup
    params = [project_id, environment, resource_id]
    row = fetch_row(
        _key_and_resource_sql(database_vendor(), doc_id is not None),
        [*params, *([] if doc_id is None else [doc_id]), _hash(raw)],
    )
    if row is None:
        return None, lookup
    width, wrapper = API_KEY_ROW_WIDTH, db_connection()
    key = api_key_of_row(row, wrapper=wrapper)
    if row[width] is not None:
        end = width + len(Resource._meta.concrete_fields)
        document = None
        if doc_id is not None and row[end] is not None:
            document = instance(Document, row[end:], wrapper=wrapper)
        lookup = ResourceLookup(
            project_id,
            environment,
            resource_id,
            instance(Resource, row[width:end], wrapper=wrapper),
            doc_id=doc_id,
            document=document,
        )
    return _usable(key), lookup


def api_key_names(*, project_id: str, prefixes: list[str]) -> dict[str, str]:
    """The names of the project's keys (and of keys that reach every project) by prefix,
    for the given prefixes (one query; none without prefixes)."""
    if not prefixes:
        return {}
    rows = ApiKey.objects.filter(
        Q(project_id=project_id) | Q(project__isnull=True), prefix__in=set(prefixes)
    ).values_list("prefix", "name")
    return {prefix: name for prefix, name in rows}
