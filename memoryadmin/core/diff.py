"""Line diffs for the history and conflict views, and the merge behind "reapply my edit"."""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

SAME = "same"
ADDED = "added"
REMOVED = "removed"
SKIPPED = "skipped"


@dataclass(frozen=True)
class DiffLine:
    kind: str
    old_number: int | None
    new_number: int | None
    text: str


@dataclass(frozen=True)
class Diff:
    lines: list[DiffLine]
    added: int
    removed: int

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def text_diff(old: str, new: str, *, context: int = 3) -> Diff:
    """Old to new, line by line; unchanged runs longer than 2 x context are folded."""
    a, b = _lines(old), _lines(new)
    lines: list[DiffLine] = []
    added = removed = 0
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            lines.extend(_fold(a, i1, i2, j1, context, first=i1 == 0, last=i2 == len(a)))
            continue
        for i in range(i1, i2):
            lines.append(DiffLine(REMOVED, i + 1, None, a[i]))
        for j in range(j1, j2):
            lines.append(DiffLine(ADDED, None, j + 1, b[j]))
        removed += i2 - i1
        added += j2 - j1
    return Diff(lines=lines, added=added, removed=removed)


def _fold(
    a: list[str], i1: int, i2: int, j1: int, context: int, *, first: bool, last: bool
) -> list[DiffLine]:
    same = [DiffLine(SAME, i + 1, j1 + (i - i1) + 1, a[i]) for i in range(i1, i2)]
    keep_head = 0 if first else context
    keep_tail = 0 if last else context
    if len(same) <= keep_head + keep_tail + 1:
        return same
    hidden = len(same) - keep_head - keep_tail
    marker = DiffLine(SKIPPED, None, None, f"{hidden} unchanged line{'s' if hidden != 1 else ''}")
    return [*same[:keep_head], marker, *same[len(same) - keep_tail :]]


Change = tuple[int, int, list[str]]


def _changes(base: list[str], other: list[str]) -> list[Change]:
    matcher = SequenceMatcher(None, base, other, autojunk=False)
    return [
        (i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    ]


def _touch(a: Change, b: Change) -> bool:
    # Closed intervals: edits to adjacent lines count as overlapping, as in
    # most merge tools, because their combination is rarely what either meant.
    return max(a[0], b[0]) <= min(a[1], b[1])


def text_merge(*, base: str, mine: str, theirs: str) -> str | None:
    """Applies the edit base -> mine on top of theirs; None when the two edits overlap."""
    if mine in (base, theirs):
        return theirs
    if theirs == base:
        return mine
    base_lines = base.splitlines(keepends=True)
    ours = _changes(base_lines, mine.splitlines(keepends=True))
    others = _changes(base_lines, theirs.splitlines(keepends=True))
    ours = [change for change in ours if change not in others]
    if any(_touch(a, b) for a in ours for b in others):
        return None
    merged = list(base_lines)
    for start, end, replacement in sorted(ours + others, key=lambda c: (c[0], c[1]), reverse=True):
        merged[start:end] = replacement
    return "".join(merged)
