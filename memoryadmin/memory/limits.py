"""The limits and identifier formats of the specification's documents, in one place (the
limit of a body on the wire is the JSON reader's, memoryadmin.core.jsonbody)."""

from __future__ import annotations

import re

from django.db.models import Q

from memoryadmin.core.errors import InvalidRequest, LimitExceeded
from memoryadmin.core.strings import string_check

RESOURCE_ID_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
RESOURCE_ID_MAX = 128
DOCUMENT_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
PROJECT_ID_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
AGENT_ID_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")

MAX_BYTES_MIN = 1
MAX_BYTES_MAX = 16_384
MAX_BYTES_DEFAULT = 8_192
TITLE_MAX_BYTES = 240
SUMMARY_MAX_BYTES = 240
BINDINGS_MAX = 8
OVERVIEW_MAX_ENTRIES = 50
OVERVIEW_MAX_BYTES = 16 * 1024
LIST_PAGE_SIZE = 50
VERSION_PAGE_SIZE = 50
DESCRIPTION_MAX_BYTES = 1024


def utf8_len(value: str) -> int:
    return len(value.encode("utf-8"))


def check_resource_id(value: object) -> str:
    if (
        not isinstance(value, str)
        or len(value) > RESOURCE_ID_MAX
        or not RESOURCE_ID_RE.fullmatch(value)
    ):
        raise InvalidRequest(
            "Resource ids are 1-128 lowercase letters and digits with single hyphen separators."
        )
    return value


def check_document_id(value: object) -> str:
    if not isinstance(value, str) or not DOCUMENT_ID_RE.fullmatch(value):
        raise InvalidRequest("Document ids are 1-128 ASCII letters, digits, '-' or '_'.")
    return value


def check_project_id(value: object) -> str:
    if not isinstance(value, str) or not PROJECT_ID_RE.fullmatch(value):
        raise InvalidRequest(
            "Project ids are 1-64 lowercase letters, digits or hyphens, "
            "starting and ending with a letter or digit."
        )
    return value


def check_agent_id(value: object) -> str:
    if not isinstance(value, str) or not AGENT_ID_RE.fullmatch(value):
        raise InvalidRequest(
            "Agent names are 1-64 lowercase letters, digits or hyphens, "
            "starting and ending with a letter or digit."
        )
    return value


def check_max_bytes(value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not MAX_BYTES_MIN <= value <= MAX_BYTES_MAX
    ):
        raise InvalidRequest(
            f"maxBytes must be an integer from {MAX_BYTES_MIN} to {MAX_BYTES_MAX}."
        )
    return value


def check_text(value: str, *, max_bytes: int) -> int:
    string_check(value, field="text")
    size = utf8_len(value)
    if size > max_bytes:
        raise LimitExceeded(
            f"text is {size} UTF-8 bytes; this resource allows {max_bytes}.",
            field="text",
            bytes=size,
            max_bytes=max_bytes,
        )
    return size


def check_title(value: str) -> str:
    string_check(value, field="title")
    size = utf8_len(value)
    if size == 0:
        raise InvalidRequest("title must not be empty.")
    if size > TITLE_MAX_BYTES:
        raise LimitExceeded(
            f"title is {size} UTF-8 bytes; the limit is {TITLE_MAX_BYTES}.",
            field="title",
            bytes=size,
            max_bytes=TITLE_MAX_BYTES,
        )
    return value


def check_summary(value: str) -> str:
    string_check(value, field="summary")
    size = utf8_len(value)
    if size > SUMMARY_MAX_BYTES:
        raise LimitExceeded(
            f"summary is {size} UTF-8 bytes; the limit is {SUMMARY_MAX_BYTES}.",
            field="summary",
            bytes=size,
            max_bytes=SUMMARY_MAX_BYTES,
        )
    return value


AGENT_WRITE_MODES = ("enabled", "disabled", "review")


def check_agent_writes(value: object) -> str:
    """One of enabled, disabled or review."""
    if isinstance(value, str) and value in AGENT_WRITE_MODES:
        return value
    raise InvalidRequest("agentWrites must be 'enabled', 'disabled' or 'review'.")


def agent_write_fields(mode: str) -> dict[str, bool]:
    """The document fields that say a write mode set on the document itself.

    Disabled is a freeze: it keeps whether the document is reviewed, so an
    unfreeze returns to it.
    """
    if mode == "disabled":
        return {"agent_writes": False}
    return {"agent_writes": True, "agent_review": mode == "review"}


def agent_writes_shown(*, agent_writes: bool, agent_review: bool | None, default: bool) -> str:
    """The mode a document is in: its own setting, else its resource's default."""
    if not agent_writes:
        return "disabled"
    reviewed = default if agent_review is None else agent_review
    return "review" if reviewed else "enabled"


def agent_writes_condition(mode: str, *, default: bool) -> Q:
    """The documents whose shown mode (agent_writes_shown) is `mode`, on a resource
    whose manifest default is `default`."""
    if check_agent_writes(mode) == "disabled":
        return Q(agent_writes=False)
    reviewed = mode == "review"
    own = Q(agent_review=reviewed)
    return Q(agent_writes=True) & (
        own | Q(agent_review__isnull=True) if default == reviewed else own
    )
