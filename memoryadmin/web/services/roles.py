"""Per-project roles: who sees a project on the Memory page and what they may do there.

Every page and every action names the permission it needs, and the check
happens here, on the server, whatever buttons a page showed.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Model

from memoryadmin.core.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    ProjectNotFound,
)
from memoryadmin.core.rows import (
    column,
    columns,
    database_vendor,
    db_connection,
    fetch_rows,
    instance,
    table,
)
from memoryadmin.memory.models import Project, Resource
from memoryadmin.memory.services.audit import audit_record
from memoryadmin.memory.services.projects import project_get
from memoryadmin.web.auth import SessionLookup
from memoryadmin.web.models import ProjectRole, Role
from memoryadmin.web.services.sessions import agents_sql, agents_value

READ = "read"
FREEZE = "freeze"
EXPORT = "export"
EDIT = "edit"
DELETE = "delete"
SESSION_END = "session_end"
OPERATIONS = "operations"
KEYS = "keys"
PEOPLE = "people"
DEPLOY = "deploy"
SECRETS = "secrets"
REVIEW = "review"
WEBHOOKS = "webhooks"
INCIDENTS = "incidents"
CONTAIN = "contain"
ERASE_PREVIEW = "erase_preview"
ERASE = "erase"

# Support staff find, read, freeze and export, and never change text.
PERMISSIONS: dict[str, frozenset[str]] = {
    READ: frozenset({Role.OWNER, Role.SUPPORT, Role.VIEWER}),
    FREEZE: frozenset({Role.OWNER, Role.SUPPORT}),
    EXPORT: frozenset({Role.OWNER, Role.SUPPORT}),
    SESSION_END: frozenset({Role.OWNER, Role.SUPPORT}),
    OPERATIONS: frozenset({Role.OWNER, Role.SUPPORT}),
    EDIT: frozenset({Role.OWNER}),
    DELETE: frozenset({Role.OWNER}),
    KEYS: frozenset({Role.OWNER}),
    PEOPLE: frozenset({Role.OWNER}),
    DEPLOY: frozenset({Role.OWNER}),
    SECRETS: frozenset({Role.OWNER}),
    WEBHOOKS: frozenset({Role.OWNER}),
    # Support see the review inbox and may reject; approving writes text: owners only.
    REVIEW: frozenset({Role.OWNER, Role.SUPPORT}),
    # Support open incidents, dry-run their containment and freeze; containing them
    # (ending sessions, reverting, revoking keys) is the owners'.
    INCIDENTS: frozenset({Role.OWNER, Role.SUPPORT}),
    CONTAIN: frozenset({Role.OWNER}),
    # Support count what an erasure would remove (a dry run changes nothing); erasing
    # for good is the owners'. Everyone reads past erasures: receipts hold no text.
    ERASE_PREVIEW: frozenset({Role.OWNER, Role.SUPPORT}),
    ERASE: frozenset({Role.OWNER}),
}

DESCRIPTIONS = {
    READ: "read documents",
    FREEZE: "freeze or unfreeze documents",
    EXPORT: "export memory",
    SESSION_END: "end sessions",
    OPERATIONS: "retry or discard dead letters",
    EDIT: "create or edit documents",
    DELETE: "delete documents",
    KEYS: "manage API keys",
    PEOPLE: "manage people and roles",
    DEPLOY: "promote deployments",
    SECRETS: "manage provider secrets",
    REVIEW: "review agent proposals",
    WEBHOOKS: "manage webhooks",
    INCIDENTS: "open incidents or dry-run their containment",
    CONTAIN: "contain incidents beyond a freeze",
    ERASE_PREVIEW: "preview erasures",
    ERASE: "erase memory for good",
}

User = AbstractBaseUser | AnonymousUser


class UserNotFound(NotFound):
    code = "user_not_found"


class MemberNotFound(NotFound):
    code = "member_not_found"


@dataclass(frozen=True)
class Membership:
    project: Project
    role: str

    def can(self, permission: str) -> bool:
        return self.role in PERMISSIONS[permission]


def _no_role(project_id: str) -> ProjectNotFound:
    # The same answer as for a project that does not exist, so that
    # nobody learns which projects exist outside their own.
    return ProjectNotFound(f"No project '{project_id}'.")


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
        raise _no_role(project_id)
    return Membership(project=row.project, role=row.role)


def membership_in(*, memberships: list[Membership], project_id: str) -> Membership:
    """The role on a project among `memberships_for_user`'s, as `membership_get` answers."""
    for membership in memberships:
        if membership.project.id == project_id:
            return membership
    raise _no_role(project_id)


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


@functools.cache
def _memberships_and_resource_sql(vendor: str) -> str:
    return (
        f"SELECT pr.{column(ProjectRole, 'role')}, {columns(Project, 'p')},"
        f" {columns(Resource, 'r')}"
        f" FROM {table(ProjectRole)} pr JOIN {table(Project)} p"
        f" ON p.{column(Project, 'id')} = pr.{column(ProjectRole, 'project')}"
        f" LEFT JOIN {table(Resource)} r"
        f" ON r.{column(Resource, 'project')} = p.{column(Project, 'id')}"
        f" AND p.{column(Project, 'id')} = %s AND r.{column(Resource, 'environment')} = %s"
        f" AND r.{column(Resource, 'resource_id')} = %s"
        f" WHERE pr.{column(ProjectRole, 'user')} = %s ORDER BY p.{column(Project, 'id')}"
    )


def memberships_and_resource(
    *, user: User, project_id: str, environment: str, resource_id: str
) -> tuple[list[Membership], Resource | None]:
    """`memberships_for_user`, and the resource a page names when the user's project
    has it, in one query (whether the role may see it is for the caller to decide)."""
    if not user.is_authenticated or not user.is_active:
        return [], None
    rows = fetch_rows(
        _memberships_and_resource_sql(database_vendor()),
        [project_id, environment, resource_id, user.pk],
    )
    project_end_at = 1 + len(Project._meta.concrete_fields)
    memberships, resource, wrapper = [], None, db_connection()
    for row in rows:
        project = instance(Project, row[1:project_end_at], wrapper=wrapper)
        memberships.append(Membership(project=project, role=row[0]))
        if row[project_end_at] is not None:
            resource = instance(Resource, row[project_end_at:], wrapper=wrapper)
    return memberships, resource


@dataclass
class PageRead:
    """What a project page reads with its signed-in user, in the user's own query.

    Given to `users_read_with` (memoryadmin.web.auth) around the user's first read, it
    is called with the session's user id and reads the user with `memberships_for_user`'s
    memberships, the resource a page names (as `memberships_and_resource`) and, if asked,
    the project's agents (`session_agents`): one round trip instead of two or three.
    When the session is known to name a user, the session's read reads all that too
    (`read_with_session`), and the call for that user is answered from it.
    """

    project_id: str
    environment: str
    resource_id: str | None = None
    with_agents: bool = False
    # Set once called: the user it read (None: no such user), and what came with it.
    user: AbstractBaseUser | None = None
    memberships: list[Membership] = field(default_factory=list)
    named: Resource | None = None
    agents: list[str] | None = None
    # Read with the session: the user id asked for, and the rows (the session's text
    # left out) that the call for that id takes instead of querying.
    _read: tuple[Any, list[tuple[Any, ...]]] | None = field(default=None, repr=False)

    def _params(self, user_id: Any, session: SessionLookup | None) -> list[Any]:
        params: list[Any] = [self.project_id] if self.with_agents else []
        if session is not None:  # the user is joined to the session's row
            params.append(user_id)
        if self.resource_id is not None:
            params += [self.project_id, self.environment, self.resource_id]
        return [*params, *session.params] if session is not None else [*params, user_id]

    def _sql(self, session: SessionLookup | None) -> str:
        parts = None if session is None else (session.data, session.source, session.where)
        return _page_read_sql(
            database_vendor(),
            get_user_model(),
            self.resource_id is not None,
            self.with_agents,
            parts,
        )

    def read_with_session(self, session: SessionLookup, user_id: Any) -> Any:
        rows = fetch_rows(self._sql(session), self._params(user_id, session))
        if not rows:
            return None
        self._read = (user_id, [row[1:] for row in rows])
        return rows[0][0]

    def __call__(self, user_id: Any) -> AbstractBaseUser | None:
        model = get_user_model()
        read, self._read = self._read, None
        if read is not None and read[0] == user_id:
            rows = read[1]
        else:
            rows = fetch_rows(self._sql(None), self._params(user_id, None))
        # No row, or (read with the session) the session's row without its user.
        if not rows or rows[0][_pk_index(model)] is None:
            return None
        user_end = len(model._meta.concrete_fields)
        project_end = user_end + 1 + len(Project._meta.concrete_fields)
        resource_end = project_end + (
            len(Resource._meta.concrete_fields) if self.resource_id is not None else 0
        )
        wrapper = db_connection()
        self.user = instance(model, rows[0][:user_end], wrapper=wrapper)
        for row in rows:
            if row[user_end] is None:  # no role anywhere
                continue
            project = instance(Project, row[user_end + 1 : project_end], wrapper=wrapper)
            self.memberships.append(Membership(project=project, role=row[user_end]))
            if self.resource_id is not None and row[project_end] is not None:
                self.named = instance(Resource, row[project_end:resource_end], wrapper=wrapper)
            if self.with_agents and project.id == self.project_id:
                self.agents = agents_value(row[-1])
        if self.with_agents and self.agents is None:
            self.agents = []
        return self.user


@functools.cache
def _pk_index(model: type[Model]) -> int:
    return model._meta.concrete_fields.index(model._meta.pk)


@functools.cache
def _page_read_sql(
    vendor: str,
    user: type[Model],
    with_resource: bool,
    with_agents: bool,
    session: tuple[str, str, str] | None = None,
) -> str:
    """PageRead's query; with `session` (SessionLookup's data, source and where), from the
    session's row, the user joined to it by the id given, the session's text first."""
    project_id = f"p.{column(Project, 'id')}"
    user_pk = f"u.{column(user, user._meta.pk.name)}"
    sql = "SELECT " if session is None else f"SELECT {session[0]}, "
    sql += f"{columns(user, 'u')}, pr.{column(ProjectRole, 'role')}, {columns(Project, 'p')}"
    if with_resource:
        sql += f", {columns(Resource, 'r')}"
    if with_agents:
        sql += f", CASE WHEN {project_id} = %s THEN {agents_sql(project_id)} END"
    if session is None:
        sql += f" FROM {table(user)} u"
    else:
        sql += f" FROM {session[1]} LEFT JOIN {table(user)} u ON {user_pk} = %s"
    sql += (
        f" LEFT JOIN {table(ProjectRole)} pr ON pr.{column(ProjectRole, 'user')} = {user_pk}"
        f" LEFT JOIN {table(Project)} p ON {project_id} = pr.{column(ProjectRole, 'project')}"
    )
    if with_resource:
        sql += (
            f" LEFT JOIN {table(Resource)} r ON r.{column(Resource, 'project')} = {project_id}"
            f" AND {project_id} = %s AND r.{column(Resource, 'environment')} = %s"
            f" AND r.{column(Resource, 'resource_id')} = %s"
        )
    where = f"{user_pk} = %s" if session is None else session[2]
    return sql + f" WHERE {where} ORDER BY {project_id}"


def _user_by_name(username: str) -> AbstractBaseUser:
    model = get_user_model()
    try:
        return model._default_manager.get(**{model.USERNAME_FIELD: username})
    except model.DoesNotExist as exc:
        raise UserNotFound(f"No user '{username}'.") from exc


def _keep_an_owner(project: Project, user: AbstractBaseUser) -> None:
    """Refuses to leave a project without an owner: nobody could manage it any more."""
    # Locks the project's owner rows, so two owners demoting each other at once
    # cannot both succeed; in one order, so two such locks never wait on each other.
    owners = list(
        ProjectRole.objects.select_for_update()
        .filter(project=project, role=Role.OWNER)
        .order_by("pk")
        .values_list("user_id", flat=True)
    )
    if owners == [user.pk]:
        raise Conflict(
            f"{user.get_username()} is the only owner of {project.id}; make someone else "
            "owner first, so that the project keeps one."
        )


@transaction.atomic
def role_grant(*, username: str, project_id: str, role: str, actor: str) -> ProjectRole:
    """Gives a user a role on a project, replacing the role they had there. The role they
    already have writes nothing (no audit entry)."""
    if role not in Role.values:
        raise InvalidRequest(f"role must be one of: {', '.join(Role.values)}.")
    project = project_get(project_id=project_id)
    user = _user_by_name(username)
    if role != Role.OWNER:
        _keep_an_owner(project, user)
    # Locked: a change of the role meanwhile is waited for, then compared.
    held = ProjectRole.objects.select_for_update().filter(user_id=user.pk, project=project).first()
    if held is not None and held.role == role:
        return held
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
    _keep_an_owner(project, user)
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


def _login_create(username: str, password: str | None) -> AbstractBaseUser | None:
    """A new login (None for `password`: no usable one), or None when a login of that name
    exists, made before or meanwhile: the name's unique constraint decides between two
    made at once."""
    manager = get_user_model()._default_manager
    field = get_user_model().USERNAME_FIELD
    if manager.filter(**{field: username}).exists():
        return None
    try:
        with transaction.atomic():
            return manager.create_user(**{field: username}, password=password)
    except IntegrityError:
        if manager.filter(**{field: username}).exists():
            return None
        raise


def _invited(*, username: str, project_id: str, role: str, method: str, actor: str) -> None:
    """The audit entry of a login made for a person given `role` on the project."""
    audit_record(
        project_id=project_id,
        environment="",
        actor=actor,
        action="user.invite",
        detail={"user": username, "role": role, "method": method},
    )


def user_create(*, username: str, project_id: str, role: str, actor: str) -> str | None:
    """Creates a login with a generated password for a person who is to get `role` on the
    project, and returns the password; None if the user exists. The login is audited as
    an invitation by password is (`user.invite`); the role is the caller's `role_grant`."""
    project_get(project_id=project_id)  # no login is made for a project there is not
    password = secrets.token_urlsafe(12)
    if _login_create(username, password) is None:
        return None
    _invited(username=username, project_id=project_id, role=role, method="password", actor=actor)
    return password


def member_get(*, project: Project, username: str) -> ProjectRole:
    """A person with a role on the project, by name. Anyone else, whether a login of that
    name exists or not, is missing alike: a project's page learns nothing of the people
    of other projects."""
    model = get_user_model()
    found = (
        ProjectRole.objects.select_related("user")
        .filter(project=project, **{f"user__{model.USERNAME_FIELD}": username})
        .first()
    )
    if found is None:
        raise MemberNotFound(f"No one named '{username}' has a role on {project.id}.")
    return found


def members_list(*, project: Project) -> list[ProjectRole]:
    """The people with a role on a project, owners first, then by name."""
    order: dict[str, int] = {Role.OWNER: 0, Role.SUPPORT: 1, Role.VIEWER: 2}
    rows = ProjectRole.objects.filter(project=project).select_related("user")
    return sorted(rows, key=lambda row: (order.get(row.role, 9), row.user.get_username()))


@dataclass(frozen=True)
class Invitation:
    username: str
    role: str
    password: str | None  # a one-time password, shown once; None for a link
    uid: str | None  # with token: the set-password link's parts
    token: str | None


INVITE_METHODS = ("password", "link")


@transaction.atomic
def user_invite(
    *, username: str, project_id: str, role: str, method: str, actor: str
) -> Invitation:
    """Creates a login for a new person with a role on the project.

    `password`: a generated password, shown once, which works until they change it;
    `link`: no usable password, and the parts of a set-password link (valid for
    PASSWORD_RESET_TIMEOUT, and only until a password is set)."""
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    if method not in INVITE_METHODS:
        raise InvalidRequest("method must be 'password' or 'link'.")
    model = get_user_model()
    field = model.USERNAME_FIELD
    # As the login will be stored (create_user keeps the compatibility form, NFKC): a name
    # checked as typed could be another's login once stored, or not the one granted.
    username = model.normalize_username(username.strip())
    try:
        model._meta.get_field(field).run_validators(username)  # type: ignore[union-attr]
    except ValidationError as exc:
        raise InvalidRequest(
            "Usernames are letters, digits and @/./+/-/_ only, up to 150 characters."
        ) from exc
    if not username:
        raise Conflict("A username is needed.")
    password = secrets.token_urlsafe(12) if method == "password" else None
    user: Any = _login_create(username, password)
    if user is None:
        raise Conflict(
            f"A user '{username}' exists already: give them a role instead of an invitation."
        )
    role_grant(username=username, project_id=project_id, role=role, actor=actor)
    _invited(username=username, project_id=project_id, role=role, method=method, actor=actor)
    if password is not None:
        return Invitation(username=username, role=role, password=password, uid=None, token=None)
    return Invitation(
        username=username,
        role=role,
        password=None,
        uid=urlsafe_base64_encode(force_bytes(user.pk)),
        token=default_token_generator.make_token(user),
    )


@transaction.atomic
def password_set_by_link(*, user_pk: Any, token: str | None, password: str) -> bool:
    """Sets the password an invitation's set-password link asks for, if the link still
    works; False (nothing set) once it does not. The login's row is locked and the link
    checked again under the lock: a link used twice at once sets one password, and the
    other use finds it used, as it would a moment later.

    Audited `user.password_set` by the person, in the log of each project they have a
    role on (a login belongs to none; without a role, once without a project), as the
    invitation was (`user.invite`); the entry names the login, nothing of the password."""
    from django.contrib.auth.tokens import default_token_generator

    model = get_user_model()
    user = model._default_manager.select_for_update().filter(pk=user_pk).first()
    if user is None or not default_token_generator.check_token(user, token):
        return False
    user.set_password(password)
    user.save(update_fields=["password"])
    username = user.get_username()
    roles = ProjectRole.objects.filter(user_id=user.pk).order_by("project_id")
    projects: list[str | None] = list(roles.values_list("project_id", flat=True))
    for project_id in projects or [None]:
        audit_record(
            project_id=project_id,
            environment="",
            actor=f"user:{username}",
            action="user.password_set",
            detail={"user": username},
        )
    return True
