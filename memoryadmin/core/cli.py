"""Helpers of the command line: the one way commands fail, exit codes, input, editor, progress."""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import re
import select
import shlex
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, OutputWrapper
from django.db import DatabaseError

from memoryadmin.core.dbstate import (
    database_unavailable,
    error_line,
    first_line,
    schema_missing,
)
from memoryadmin.core.errors import DomainError
from memoryadmin.core.strings import string_check

# Exit codes of every command, documented in docs/cli.md: scripts branch on them.
EXIT_OK = 0
EXIT_ERROR = 1  # anything else, e.g. a cancelled prompt or a partial import
EXIT_USAGE = 2  # unknown subcommand or option (argparse)
EXIT_NOT_FOUND = 3  # project, resource, document, session, secret or user
EXIT_PRECONDITION = 4  # the document changed meanwhile, or the id is taken or reserved
EXIT_TOO_LARGE = 5  # text, title or summary over its limit
EXIT_INVALID = 6  # malformed input: ids, bindings, empty title, unreadable file, bad export
EXIT_CONFLICT = 7  # the state refuses it (project exists, session ended) or a call was cancelled
EXIT_INVALID_SIGNATURE = 8  # a signed receipt that does not verify

# A domain error's kind is its HTTP status; the command line gives each kind its code.
EXIT_CODES: dict[int, int] = {
    400: EXIT_INVALID,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    412: EXIT_PRECONDITION,
    413: EXIT_TOO_LARGE,
    428: EXIT_PRECONDITION,
}


class Error(CommandError):
    """A user error: Django prints it as one line, "Error: <message>", without a traceback."""


def exit_code_for(exc: DomainError) -> int:
    return EXIT_CODES.get(exc.status, EXIT_ERROR)


# What a line about stored data never passes to the terminal: control characters (escape
# sequences an agent could write into a title would reach the operator's terminal), line
# and paragraph separators (a row is one line) and bidirectional overrides (they reorder
# what is shown around them).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def one_line(text: str) -> str:
    """`text` (a title, a snippet: written by people or agents) for a table's cell or a line
    of a listing: as written, but each character a terminal would act on a space."""
    return _UNPRINTABLE.sub(" ", text)


def error_from(exc: DomainError, *, prefix: str = "", suffix: str = "") -> Error:
    message = " ".join(part for part in (prefix, exc.message, suffix) if part)
    return Error(message, returncode=exit_code_for(exc))


def invalid(message: str) -> Error:
    return Error(message, returncode=EXIT_INVALID)


def database_error(exc: DatabaseError, failure: str = "") -> Error:
    """The one line of a command the database could not serve: one that lacks the
    project's tables, or one the command could not use at all (down, refusing, the wrong
    address). Where the connection pool gave up, the last connection error it met says
    why (`failure`, kept by `_PoolFailures`)."""
    if schema_missing(exc):
        return Error(
            f"The database is not set up ({error_line(exc)}): run"
            " `python manage.py migrate` first.",
            returncode=EXIT_ERROR,
        )
    detail = first_line(failure) or error_line(exc)
    return Error(
        f"The database cannot be used: {detail}. Check DATABASE_URL and that the database is up.",
        returncode=EXIT_ERROR,
    )


# psycopg_pool's warning for each connection it failed to make: "error connecting in
# 'pool-1': <the driver's error>".
_POOL_CONNECT_FAILED = re.compile(r"error connecting in '[^']*': ")


class _PoolFailures(logging.Filter):
    """While a command acts, on the pool's logger: keeps the last of its warnings of a
    connection it failed to make (it retries until its timeout, warning at each attempt)
    instead of printing them, so that a command prints one line when it fails, naming it."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        failed = _POOL_CONNECT_FAILED.match(message)
        if failed is None:
            return True
        self.last = message[failed.end() :]
        return False

    @contextmanager
    def kept(self) -> Iterator[_PoolFailures]:
        pool_log = logging.getLogger("psycopg.pool")
        pool_log.addFilter(self)
        try:
            yield self
        finally:
            pool_log.removeFilter(self)


class Command(BaseCommand):
    """A management command that fails the one way every command does.

    Subclasses implement `act`. A domain error ends the command with one
    `Error: <message>` line on stderr and the exit code of its kind, as does
    an `Error` the command raises itself.

    None runs Django's system checks first (`manage.py check`, `migrate`, `runserver`
    and the worker do): they import every URLconf and view, which a command does not
    use, about a third of a second of CPU at each start.
    """

    requires_system_checks: list[str] = []
    # A command that serves until it is stopped (`mcp`) logs the connection pool's
    # warnings as the web server does; the others print one line when they fail.
    serves = False

    def handle(self, *args: Any, **options: Any) -> None:
        pool = _PoolFailures()
        with contextlib.nullcontext(pool) if self.serves else pool.kept():
            try:
                self.act(options)
                # Here, not at exit: a reader that left is this command's one error line.
                self.stdout.flush()
            except DomainError as exc:
                raise error_from(exc) from exc
            except DatabaseError as exc:
                if not database_unavailable(exc):
                    raise  # a statement's fault, not the database's state: its traceback
                raise database_error(exc, pool.last) from exc
            except BrokenPipeError as exc:
                if not reader_gone(self.stdout._out):
                    raise
                raise Error(
                    "Cannot write to standard output: Broken pipe (its reader has left).",
                    returncode=EXIT_ERROR,
                ) from exc

    def act(self, options: dict[str, Any]) -> None:
        raise NotImplementedError


def reader_gone(stream: Any) -> bool:
    """Whether `stream` is a pipe its reader has left (`manage.py ... | head`): then its
    write end polls as an error. If so, what is left in its buffer goes nowhere, so that
    nothing more fails at exit: the command ends with its one `Error:` line."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return True


# What ends a command from outside: an interrupt, a kill, the terminal closing.
CALLER_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def caller_signals() -> Iterator[Callable[[], bool] | None]:
    """A probe of the command's caller for `caller_connection` (core/cancellation.py):
    true once SIGINT, SIGTERM or SIGHUP arrived.

    Inside the block the first of them no longer ends the process at once: the
    provider call in flight is cut, its outcome recorded, and the command ends with
    the call's error (409 cancelled, exit code 7). A second signal acts as it always
    does. Signals reach the main thread only; elsewhere the probe is None.
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    received = threading.Event()
    previous: dict[int, Any] = {}

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)

    def cancel(number: int, frame: FrameType | None) -> None:
        received.set()
        restore()

    for number in CALLER_SIGNALS:
        previous[number] = signal.signal(number, cancel)
    try:
        yield received.is_set
    finally:
        restore()


def cli_actor() -> str:
    """The audit actor of CLI actions: the operating system user."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = f"uid-{os.getuid()}"
    return f"cli:{user}"


def decode_text(data: bytes, *, source: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"{source} is not valid UTF-8 text.") from exc
    return checked_text(text, source=source)


def checked_text(text: str, *, source: str) -> str:
    """`text` when it keeps the string rule; an invalid-input error naming `source` otherwise."""
    try:
        return string_check(text, field=source)
    except DomainError as exc:
        raise error_from(exc) from exc


# The most a command reads of one file or of standard input: more than any text, manifest,
# key or receipt a command takes (an erasure's text is at most 400,000 bytes), so that the
# services' own limits decide with their own messages, while an endless or huge input
# (`--text-file /dev/zero`, `yes |`) is refused once this much is read instead of filling
# memory.
INPUT_MAX_BYTES = 16 * 1024 * 1024
_READ_BYTES = 64 * 1024


def _bounded(read: Callable[[int], Any], *, source: str) -> Any:
    """What `read(size)` gives until its end, refused (exit code 5) past INPUT_MAX_BYTES."""
    parts: list[Any] = []
    size = 0
    while True:
        part = read(_READ_BYTES)
        if not part:
            return parts[0][:0].join(parts) if parts else part
        size += len(part)
        if size > INPUT_MAX_BYTES:
            raise Error(
                f"{source} is over {INPUT_MAX_BYTES} bytes; no input of a command may be"
                " that long.",
                returncode=EXIT_TOO_LARGE,
            )
        parts.append(part)


def read_file(path: str | Path) -> bytes:
    """A file's bytes, at most INPUT_MAX_BYTES of them; a file that cannot be read (missing,
    a directory, no permission) is invalid input (exit code 6). Whatever can be read is
    read, a pipe too (`--text-file <(command)`)."""
    try:
        with open(path, "rb") as file:
            return bytes(_bounded(file.read, source=str(path)))
    except OSError as exc:
        raise invalid(f"Cannot read {path}: {exc.strerror or exc}.") from exc


def read_input(source: str, *, stdin: Any) -> str:
    """The UTF-8 text of the file `source`, or of `stdin` where `source` is "-"."""
    if source == "-":
        return read_stream(stdin)
    return decode_text(read_file(source), source=source)


def read_text_file(path: str) -> str:
    return decode_text(read_file(path), source=path)


def read_stream(stream: Any) -> str:
    """All of a stream (stdin), exactly as given: a trailing newline is kept."""
    source = "Standard input"
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        return decode_text(bytes(_bounded(buffer.read, source=source)), source=source)
    return checked_text(str(_bounded(stream.read, source=source)), source=source)


def editor_command() -> list[str]:
    for name in ("VISUAL", "EDITOR"):
        value = os.environ.get(name, "").strip()
        if value:
            return shlex.split(value)
    raise invalid("Set $VISUAL or $EDITOR, or pass --text-file or --text-stdin.")


def open_in_editor(text: str, *, label: str) -> tuple[Path, str]:
    """Lets the user edit `text`; returns the file it is in and the edited text.

    The file (private to the user) is left for the caller, which deletes it
    only once the text is saved or unchanged, so that no work is ever lost.
    """
    command = editor_command()
    handle, name = tempfile.mkstemp(prefix=f"memory-{label}-", suffix=".txt")
    path = Path(name)
    with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
        file.write(text)
    try:
        status = subprocess.call([*command, str(path)])
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise invalid(f"Cannot run the editor {command[0]}: {exc.strerror or exc}.") from exc
    if status != 0:
        path.unlink(missing_ok=True)
        raise Error(f"The editor exited with status {status}; nothing saved.")
    edited = decode_text(read_file(path), source=str(path))
    # Most editors end the file with a newline; one the text did not have is
    # the editor's, not the user's, so unchanged text stays unchanged.
    if edited.endswith("\n") and not text.endswith("\n"):
        edited = edited[:-2] if edited.endswith("\r\n") else edited[:-1]
    return path, edited


def plain(text: str) -> str:
    return text


def confirm(question: str, *, stdin: TextIO, stderr: OutputWrapper) -> bool:
    stderr.write(f"{question} [y/N] ", style_func=plain, ending="")
    stderr.flush()
    answer = stdin.readline()
    return answer.strip().lower() in {"y", "yes"}


class Progress:
    """A one-line progress bar on a terminal; silent anywhere else."""

    WIDTH = 30

    def __init__(self, stream: OutputWrapper, *, total: int, label: str, enabled: bool) -> None:
        self.stream = stream
        self.total = total
        self.label = label
        self.enabled = enabled
        self.done = 0
        self.shown = -1

    def advance(self, step: int = 1) -> None:
        self.done += step
        self.draw()

    def draw(self) -> None:
        if not self.enabled:
            return
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * self.WIDTH)
        # Redraw only when the bar visibly moves (or the count ends).
        permille = int(fraction * 1000)
        if permille == self.shown and self.done != self.total:
            return
        self.shown = permille
        bar = "#" * filled + "." * (self.WIDTH - filled)
        line = f"\r{self.label} [{bar}] {self.done}/{self.total}"
        self.stream.write(line, style_func=plain, ending="")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.draw()
            self.stream.write("")
