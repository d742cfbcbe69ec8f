"""Files only this user may read: `var/`, its secrets and SQLite databases, exports.

Imported by the settings, so it must not import Django.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Creates `path` (mode 0700) if it is missing."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def private_file(path: Path, content: str | None = None) -> bool:
    """Creates `path` with mode 0600 (never readable by others, not even for a moment) and
    writes `content` into it; leaves an existing file alone. True if it created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as file:
        if content is not None:
            file.write(content)
    return True


def private_create(path: Path) -> int:
    """A new file at `path`, mode 0600, opened for writing (its descriptor): refused with
    FileExistsError where anything is there already."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    return os.open(path, flags, 0o600)


def private_write(path: Path, content: str) -> None:
    """Replaces `path` with `content`, mode 0600: written to a private temporary file in
    the same folder, then renamed over it, so readers see the old or the new content."""
    private_dir(path.parent)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as file:
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
