"""A search hit's snippet: the highlighter's fast path for ASCII marks what the query's
one pattern (case ignored, a word where no letter or digit touches it) marks."""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryadmin.memory.services.search import (
    SNIPPET_CHARS,
    highlighter,
    search_parse,
    search_snippet,
)


def pattern_snippet(text: str, q: str) -> str:
    """The snippet as the pattern alone makes it (the definition the fast path keeps)."""
    pattern = highlighter(search_parse(q)).pattern
    first = pattern.search(text)
    start = 0
    if first is not None and first.start() > SNIPPET_CHARS // 3:
        start = text.find(" ", first.start() - SNIPPET_CHARS // 3) + 1
    end = min(len(text), start + SNIPPET_CHARS)
    if end < len(text):
        end = max(text.rfind(" ", start, end), first.end() if first else start + 1, start + 1)
    piece = text[start:end]
    parts = ["…" if start > 0 else ""]
    done = 0
    for match in pattern.finditer(piece):
        parts += [html.escape(piece[done : match.start()]), "<mark>"]
        parts += [html.escape(match.group()), "</mark>"]
        done = match.end()
    parts += [html.escape(piece[done:]), "…" if end < len(text) else ""]
    return "".join(parts).strip()


# Letters of both cases, digits, "_" and punctuation (which separate words), and a few
# characters beyond ASCII that case-insensitive matching treats specially.
LETTERS = "abAB01_ .,<&\"'-"
SPECIAL = ["é", "É", "\u017f", "\u212a", "\u0130", "ß"]  # long s, Kelvin sign, dotted I
TEXT = st.lists(st.sampled_from([*LETTERS, *SPECIAL, "ab", "Ab", "ba", "a1"]), max_size=400)
WORD = st.text(alphabet="abAB01é\u017f", min_size=1, max_size=3)


@settings(max_examples=400, deadline=None)
@given(
    TEXT.map("".join),
    st.lists(st.tuples(WORD, st.booleans(), st.booleans()), min_size=1, max_size=3),
)
def test_the_fast_path_marks_what_the_pattern_marks(
    text: str, terms: list[tuple[str, bool, bool]]
) -> None:
    q = " ".join(
        (f'"{word} {word}"' if phrase else word) + ("*" if prefix and not phrase else "")
        for word, prefix, phrase in terms
    )
    words = highlighter(search_parse(q))
    assert search_snippet({"text": text, "summary": "", "title": ""}, words) == (
        pattern_snippet(text, q)
    )
    spans = list(words.spans(text))
    assert spans == [m.span() for m in words.pattern.finditer(text)]


def test_a_long_ascii_text_is_searched_for_its_words_first() -> None:
    words = highlighter(search_parse("lantern zeph*"))
    assert words.ascii_words is not None
    text = "x" * 3000 + " Lantern, zephyrine_ xlantern lanterns 9lantern zephyr."
    assert [text[a:b] for a, b in words.spans(text)] == ["Lantern", "zephyrine", "zephyr"]
    assert highlighter(search_parse("café")).ascii_words is None
    assert re.fullmatch(r"…?.*<mark>Lantern</mark>.*", search_snippet({"text": text}, words))
