from __future__ import annotations

import hashlib
import secrets

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from memoryadmin.memory.errors import Conflict, Forbidden, ProjectNotFound
from memoryadmin.memory.limits import check_project_id
from memoryadmin.memory.models import ApiKey, Project

API_KEY_PREFIX = "mak_"


def project_create(*, project_id: str, name: str = "") -> Project:
    check_project_id(project_id)
    try:
        with transaction.atomic():
            return Project.objects.create(id=project_id, name=name or project_id)
    except IntegrityError as exc:
        raise Conflict(f"Project '{project_id}' already exists.") from exc


def project_get(*, project_id: str) -> Project:
    try:
        return Project.objects.get(id=project_id)
    except Project.DoesNotExist as exc:
        raise ProjectNotFound(f"No project '{project_id}'.") from exc


def _hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def api_key_create(
    *, project_id: str | None, read_only: bool = False, name: str = ""
) -> tuple[ApiKey, str]:
    """Creates a key and returns it with its secret, which is never stored."""
    if project_id is not None:
        project_get(project_id=project_id)
    raw = API_KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        project_id=project_id,
        name=name,
        prefix=raw[:12],
        hashed=_hash_key(raw),
        read_only=read_only,
    )
    return key, raw


def api_key_authenticate(*, raw: str) -> ApiKey | None:
    if not raw.startswith(API_KEY_PREFIX) or len(raw) > 200:
        return None
    return (
        ApiKey.objects.filter(hashed=_hash_key(raw), revoked_at__isnull=True)
        .select_related("project")
        .first()
    )


def projects_for_key(*, key: ApiKey) -> QuerySet[Project]:
    if key.project_id is None:
        return Project.objects.all()
    return Project.objects.filter(id=key.project_id)


def project_for_key(*, key: ApiKey, project_id: str, write: bool) -> Project:
    """The project a key may act on, or the reason it may not."""
    if not key.can_reach(project_id):
        # Answered before looking the project up, so a key learns nothing
        # about projects outside its scope.
        raise Forbidden("This API key does not reach that project.")
    if write and key.read_only:
        raise Forbidden("This API key is read-only.")
    return project_get(project_id=project_id)
