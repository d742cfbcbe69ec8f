from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from memoryadmin.core.errors import Conflict, Forbidden, ProjectNotFound
from memoryadmin.memory.limits import check_project_id
from memoryadmin.memory.models import ApiKey, Project


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


def projects_for_key(*, key: ApiKey) -> QuerySet[Project]:
    if key.project_id is None:
        return Project.objects.all()
    return Project.objects.filter(id=key.project_id)


def key_may_act(*, key: ApiKey, project_id: str, write: bool) -> None:
    """Raises Forbidden unless the key may act (read or `write`) on the project."""
    if not key.can_reach(project_id):
        # Answered before looking the project up, so a key learns nothing
        # about projects outside its scope.
        raise Forbidden("This API key does not reach that project.")
    if write and key.read_only:
        raise Forbidden("This API key is read-only.")


def project_for_key(*, key: ApiKey, project_id: str, write: bool) -> Project:
    """The project a key may act on, or the reason it may not."""
    key_may_act(key=key, project_id=project_id, write=write)
    return project_get(project_id=project_id)
