"""Per-project roles: who sees a project on the Memory page and what they may do there.

Every page and every action names the permission it needs, and the check
happens here, on the server, whatever buttons a page showed.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from memoryadmin.memory.errors import Forbidden, InvalidRequest, NotFound, ProjectNotFound
from memoryadmin.memory.models import Project
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.projects import project_get
from memoryadmin.web.models import ProjectRole, Role

READ = "read"
FREEZE = "freeze"
EXPORT = "export"
EDIT = "edit"
DELETE = "delete"
SESSION_END = "session_end"
KEYS = "keys"

# Support staff find, read, freeze and export, and never change text.
PERMISSIONS: dict[str, frozenset[str]] = {
    READ: frozenset({Role.OWNER, Role.SUPPORT, Role.VIEWER}),
    FREEZE: frozenset({Role.OWNER, Role.SUPPORT}),
    EXPORT: frozenset({Role.OWNER, Role.SUPPORT}),
    SESSION_END: frozenset({Role.OWNER, Role.SUPPORT}),
    EDIT: frozenset({Role.OWNER}),
    DELETE: frozenset({Role.OWNER}),
    KEYS: frozenset({Role.OWNER}),
}

DESCRIPTIONS = {
    READ: "read documents",
    FREEZE: "freeze or unfreeze documents",
    EXPORT: "export memory",
    SESSION_END: "end sessions",
    EDIT: "create or edit documents",
    DELETE: "delete documents",
    KEYS: "manage API keys",
}

User = AbstractBaseUser | AnonymousUser


class UserNotFound(NotFound):
    code = "user_not_found"


@dataclass(frozen=True)
class Membership:
    project: Project
    role: str

    def can(self, permission: str) -> bool:
        return self.role in PERMISSIONS[permission]


def membership_get(*, user: User, project_id: str) -> Membership:
    """The user's role on a project; a project without one is reported missing."""
    row = None
    if user.is_authenticated and user.is_active:
        row = (
            ProjectRole.objects.select_related("project")
            .filter(user_id=user.pk, project_id=project_id)
            .first()
        )
    if row is None:
        # The same answer as for a project that does not exist, so that
        # nobody learns which projects exist outside their own.
        raise ProjectNotFound(f"No project '{project_id}'.")
    return Membership(project=row.project, role=row.role)


def membership_require(*, membership: Membership, permission: str) -> None:
    if not membership.can(permission):
        raise Forbidden(
            f"The {membership.role} role may not {DESCRIPTIONS[permission]} "
            f"in project '{membership.project.id}'."
        )


def memberships_for_user(*, user: User) -> list[Membership]:
    if not user.is_authenticated or not user.is_active:
        return []
    rows = ProjectRole.objects.filter(user_id=user.pk).select_related("project")
    return [Membership(project=row.project, role=row.role) for row in rows.order_by("project_id")]


def _user_by_name(username: str) -> AbstractBaseUser:
    model = get_user_model()
    try:
        return model._default_manager.get(**{model.USERNAME_FIELD: username})
    except model.DoesNotExist as exc:
        raise UserNotFound(f"No user '{username}'.") from exc


@transaction.atomic
def role_grant(*, username: str, project_id: str, role: str, actor: str) -> ProjectRole:
    """Gives a user a role on a project, replacing the role they had there."""
    if role not in Role.values:
        raise InvalidRequest(f"role must be one of: {', '.join(Role.values)}.")
    project = project_get(project_id=project_id)
    user = _user_by_name(username)
    grant, _ = ProjectRole.objects.update_or_create(
        user_id=user.pk, project=project, defaults={"role": role}
    )
    audit_record(
        project_id=project.id,
        environment="",
        actor=actor,
        action="role.grant",
        detail={"user": username, "role": role},
    )
    return grant


@transaction.atomic
def role_revoke(*, username: str, project_id: str, actor: str) -> bool:
    """Removes a user's role on a project; says whether there was one."""
    project = project_get(project_id=project_id)
    user = _user_by_name(username)
    deleted, _ = ProjectRole.objects.filter(user_id=user.pk, project=project).delete()
    if deleted:
        audit_record(
            project_id=project.id,
            environment="",
            actor=actor,
            action="role.revoke",
            detail={"user": username},
        )
    return bool(deleted)


def user_create(*, username: str) -> str | None:
    """Creates a login with a generated password and returns it; None if the user exists."""
    model = get_user_model()
    if model._default_manager.filter(**{model.USERNAME_FIELD: username}).exists():
        return None
    password = secrets.token_urlsafe(12)
    model._default_manager.create_user(**{model.USERNAME_FIELD: username}, password=password)
    return password
