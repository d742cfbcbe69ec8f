from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, QuerySet

from memoryadmin.core.errors import Conflict, Forbidden, InvalidRequest, ProjectNotFound
from memoryadmin.core.rows import Compiled, concrete_names, instance
from memoryadmin.memory.limits import check_project_id
from memoryadmin.memory.models import ApiKey, Project
from memoryadmin.memory.services.audit import audit_record


def project_create(*, project_id: str, name: str = "", actor: str) -> Project:
    """A new project, audited `project.create` in its own log."""
    check_project_id(project_id)
    try:
        with transaction.atomic():
            project = Project.objects.create(id=project_id, name=name or project_id)
            audit_record(
                project_id=project.id,
                environment="",
                actor=actor,
                action="project.create",
                detail={"name": project.name},
            )
            return project
    except IntegrityError as exc:
        raise Conflict(f"Project '{project_id}' already exists.") from exc


# A project by id: read by every project route (composed once per process).
_PROJECT = Compiled(
    lambda project_id: Project.objects.filter(id=project_id).values_list(*concrete_names(Project)),
    (str,),
)


def project_get(*, project_id: str) -> Project:
    row = _PROJECT.row(project_id)
    if row is None:
        raise ProjectNotFound(f"No project '{project_id}'.")
    return instance(Project, row)


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


def project_lock(*, project_id: str) -> None:
    """Holds the project's row until the transaction ends: whoever takes it next waits."""
    Project.objects.select_for_update().filter(pk=project_id).exists()


def erasure_epoch_advance(*, project_id: str) -> None:
    """Begins an erasure's changes, in the caller's transaction, before it looks for any
    copy: the project's row locked (FOR UPDATE, until the transaction ends) and its
    `erasure_epoch` moved on, committed with the changes (an erasure's, services/erasure.py;
    a redaction's, services/redaction.py).

    A recall reads the epoch with its memory and stores what it read only while the
    epoch stands (agents' `recall_store`, under a FOR KEY SHARE lock of the row, which
    this lock excludes): a recall that read a text before the erasure committed stores
    nothing and recalls again, and one that stored first holds this lock back until its
    row is committed, where the erasure finds it."""
    project_lock(project_id=project_id)
    Project.objects.filter(pk=project_id).update(erasure_epoch=F("erasure_epoch") + 1)


def project_cap(*, project_id: str, held: QuerySet[Any], cap: int, message: str) -> None:
    """Refuses (InvalidRequest, `message`) one more of a project's rows where it `held`
    `cap` of them already; counted under the project's row lock, so racing creates cannot
    pass the cap."""
    project_lock(project_id=project_id)
    if held.count() >= cap:
        raise InvalidRequest(message)
