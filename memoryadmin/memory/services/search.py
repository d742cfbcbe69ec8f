"""Search: live documents of some resources by what they say, ranked, with snippets.

The query syntax (docs/api.md#search):

- words: every word must occur (in the id, title, summary or text), in any order;
- "a phrase": these words next to each other, in this order;
- pre*: a word starting with `pre`.

Besides, the whole query (3 characters or more, quotes and stars left out)
matches as a substring of the id or the title, ignoring case.

Ranking reads the newest SEARCH_WINDOW matches (by creation) and orders them
by relevance (title and id above summary above text; an id or title
substring counts more), then by id. That bounds the work of a query that
matches everything; a query matching more than SEARCH_WINDOW documents is
narrowed by adding words. Pages are keyset pages over that order, with
signed cursors like every list.

Indexes (migrations memory 0007 and 0011): a generated tsvector column with GIN and
pg_trgm indexes on PostgreSQL; FTS5 tables kept by triggers on SQLite.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memoryadmin.core.cursors import cursor_dump, cursor_load
from memoryadmin.core.environments import check_environment
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.core.rows import (
    Compiled,
    concrete_names,
    database_vendor,
    db_connection,
    fetch_rows,
    instance,
)
from memoryadmin.core.strings import string_check
from memoryadmin.memory.limits import LIST_PAGE_SIZE
from memoryadmin.memory.models import Document, Project, Resource
from memoryadmin.memory.providers import kinds_keeping_documents
from memoryadmin.memory.services.documents import LIST_FIELDS

SEARCH_WINDOW = 500
# SQLite's words index numbers a resource's rows from its key times this (memory 0011).
RESOURCE_SPAN = 1 << 40
QUERY_MAX_CHARS = 256
SUBSTRING_MIN_CHARS = 3
SNIPPET_CHARS = 200
_MARK = re.compile(r"</?mark>")
_TERM = re.compile(r'"([^"]*)"?|(\S+)')
# Words as both indexes see them: letters and digits; "_" and punctuation separate.
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # lowercased; a phrase has more than one
    prefix: bool = False


@dataclass(frozen=True)
class Query:
    terms: tuple[Term, ...]
    substring: str  # "" when too short to match ids and titles by substring


def search_parse(text: str) -> Query:
    """The query's terms; 400 for an empty or overlong query, or one that breaks the
    string rule (a door that passes it on unchecked, as the CLI's arguments, which may
    hold lone surrogates, would otherwise reach the database with it)."""
    if len(text) > QUERY_MAX_CHARS:
        raise InvalidRequest(f"q is at most {QUERY_MAX_CHARS} characters.")
    string_check(text, field="q")
    terms: list[Term] = []
    for match in _TERM.finditer(text):
        phrase, bare = match.group(1), match.group(2)
        if phrase is not None:
            words = tuple(w.lower() for w in _WORD.findall(phrase))
            if words:
                terms.append(Term(words))
            continue
        words = tuple(w.lower() for w in _WORD.findall(bare))
        if words:
            # node.js is one phrase of two words; a star makes the last one a prefix.
            terms.append(Term(words, prefix=bare.endswith("*")))
    if not terms:
        raise InvalidRequest("q needs at least one word (letters or digits).")
    substring = " ".join(text.replace('"', " ").replace("*", " ").split()).lower()
    return Query(tuple(terms), substring if len(substring) >= SUBSTRING_MIN_CHARS else "")


def _like(value: str) -> str:
    return "%" + value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


# PostgreSQL


def _pg_tsquery(query: Query) -> tuple[str, list[str]]:
    parts: list[str] = []
    params: list[str] = []
    for term in query.terms:
        if term.prefix:
            # Words are \w+ only: nothing here is tsquery syntax but the operators we add.
            lexemes = [f"'{w}'" for w in term.words]
            lexemes[-1] += ":*"
            parts.append("to_tsquery('simple', %s)")
            params.append(" <-> ".join(lexemes))
        else:
            parts.append("phraseto_tsquery('simple', %s)")
            params.append(" ".join(term.words))
    return "(" + " && ".join(parts) + ")", params


def _pg_ranked(
    query: Query, resources: list[int], after: tuple[float, int] | None, limit: int
) -> list[tuple[int, float]]:
    tsquery, params = _pg_tsquery(query)
    live = "d.resource_id = ANY(%s) AND NOT d.deleted"
    # Words and substrings are two queries, so each gets its own plan: an index
    # scan that stops at the window for a common word, GIN for a rare one.
    substring = "SELECT NULL::bigint AS id, 0.0::float8 AS score, 1 AS sub WHERE FALSE"
    sub_params: list[Any] = []
    if query.substring:
        substring = f"""
            SELECT d.id, 0.0::float8 AS score, 1 AS sub FROM memory_document d
            WHERE {live} AND (UPPER(d.doc_id) LIKE UPPER(%s) OR UPPER(d.title) LIKE UPPER(%s))
            ORDER BY d.id DESC LIMIT {SEARCH_WINDOW}
        """
        sub_params = [resources, _like(query.substring), _like(query.substring)]
    keyset, keyset_params = "", []
    if after is not None:
        keyset = "WHERE score < %s OR (score = %s AND id > %s)"
        keyset_params = [after[0], after[0], after[1]]
    sql = f"""
        WITH words AS (
            SELECT d.id, ts_rank(d.search_vector, {tsquery}, 1)::float8 AS score, 0 AS sub
            FROM memory_document d
            WHERE {live} AND d.search_vector @@ {tsquery}
            ORDER BY d.id DESC LIMIT {SEARCH_WINDOW}
        ),
        candidates AS (
            SELECT id, max(score) + max(sub) AS score
            FROM (SELECT * FROM words UNION ALL ({substring})) AS hits
            GROUP BY id ORDER BY id DESC LIMIT {SEARCH_WINDOW}
        )
        SELECT id, score FROM candidates {keyset} ORDER BY score DESC, id ASC LIMIT %s
    """
    rows = fetch_rows(sql, [*params, resources, *params, *sub_params, *keyset_params, limit])
    return [(row[0], row[1]) for row in rows]


# SQLite (FTS5)


def _fts_string(words: tuple[str, ...]) -> str:
    return '"' + " ".join(words).replace('"', '""') + '"'


def _sqlite_match(query: Query) -> str:
    return " AND ".join(_fts_string(t.words) + (" *" if t.prefix else "") for t in query.terms)


def _sqlite_trigram_match(query: Query, resources: list[int]) -> str:
    scope = " OR ".join(f'"<{pk}>"' for pk in resources)
    return f"scope : ({scope}) AND {{doc_id title}} : {_fts_string((query.substring,))}"


def _sqlite_words(query: Query, resources: list[int]) -> tuple[str, list[Any]]:
    """The newest SEARCH_WINDOW word matches of each resource, scored.

    The words table's rowid is the resource's key times RESOURCE_SPAN plus the
    document's (migration memory 0011): each resource is one rowid range, so the
    MATCH holds only the query's words and bm25 counts only their rows.
    bm25 is lower for better matches, with weights per column: id 10, title 10,
    summary 4, text 1.
    """
    match = _sqlite_match(query)
    parts, params = [], []
    for pk in resources:
        first = pk * RESOURCE_SPAN
        parts.append(f"""
            SELECT * FROM (
                SELECT rowid - %s AS id, -bm25(memory_document_fts, 10, 10, 4, 1) AS score,
                    0 AS sub
                FROM memory_document_fts
                WHERE memory_document_fts MATCH %s AND rowid >= %s AND rowid < %s
                ORDER BY rowid DESC LIMIT {SEARCH_WINDOW}
            )
        """)
        params += [first, match, first, first + RESOURCE_SPAN]
    return " UNION ALL ".join(parts), params


def _sqlite_ranked(
    query: Query, resources: list[int], after: tuple[float, int] | None, limit: int
) -> list[tuple[int, float]]:
    words, params = _sqlite_words(query, resources)
    substring = "SELECT NULL AS id, 0.0 AS score, 0 AS sub WHERE 0"
    if query.substring:
        substring = f"""
            SELECT rowid AS id, 0.0 AS score, 1 AS sub FROM memory_document_trigram
            WHERE memory_document_trigram MATCH %s ORDER BY rowid DESC LIMIT {SEARCH_WINDOW}
        """
        params.append(_sqlite_trigram_match(query, resources))
    keyset = ""
    if after is not None:
        keyset = "WHERE score < %s OR (score = %s AND id > %s)"
        params += [after[0], after[0], after[1]]
    sql = f"""
        WITH candidates AS (
            SELECT id, max(score) + 5 * max(sub) AS score
            FROM ({words} UNION ALL SELECT * FROM ({substring}))
            GROUP BY id ORDER BY id DESC LIMIT {SEARCH_WINDOW}
        )
        SELECT id, score FROM candidates {keyset} ORDER BY score DESC, id ASC LIMIT %s
    """
    return [(row[0], float(row[1])) for row in fetch_rows(sql, [*params, limit])]


# The service.


# The document resources of a project's environment, by id (composed once per process).
_DOCUMENT_RESOURCES = Compiled(
    lambda project_id, environment, kinds: (
        Resource.objects.filter(project_id=project_id, environment=environment, kind__in=kinds)
        .order_by("resource_id")
        .values_list(*concrete_names(Resource))
    ),
    (str, str, list[str]),
)


def document_resources(*, project: Project, environment: str) -> list[Resource]:
    """The resources a search of a whole environment reads: every document resource."""
    check_environment(environment)
    wrapper = db_connection()
    rows = _DOCUMENT_RESOURCES.rows(project.pk, environment, kinds_keeping_documents())
    return [instance(Resource, row, wrapper=wrapper) for row in rows]


@dataclass(frozen=True)
class Highlighter:
    """Where a query's words occur in a text: `pattern` (case ignored, a word only where
    no letter or digit touches it on either side), and `ascii_words`, the same words
    without the leading boundary, for the lowered text of an ASCII one (with a word
    only of ASCII): the leading boundary as a look-behind makes the pattern try every
    position (about 20 ns a character), where a pattern that starts with its words is
    searched for them first; the boundary before a match is then asked of its
    character."""

    pattern: re.Pattern[str]
    ascii_words: re.Pattern[str] | None

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """Each match's start and end, in order, as `pattern.finditer(text)` finds them."""
        if self.ascii_words is not None and text.isascii():
            lowered = text.lower()  # ASCII: as long as the text, as case is ignored
            for match in self.ascii_words.finditer(lowered):
                start = match.start()
                # A match never starts inside a refused one: it holds letters only.
                if start == 0 or not lowered[start - 1].isalnum():
                    yield start, match.end()
        else:
            for match in self.pattern.finditer(text):
                yield match.start(), match.end()


def highlighter(query: Query) -> Highlighter:
    """The query's words as a `Highlighter` (built once per search, not once per hit)."""
    words = []
    for term in query.terms:
        for index, word in enumerate(term.words):
            last = index == len(term.words) - 1
            words.append(re.escape(word) + (r"[^\W_]*" if term.prefix and last else ""))
    either = "(?:" + "|".join(words) + r")(?![^\W_])"
    pattern = re.compile(r"(?<![^\W_])" + either, re.IGNORECASE)
    plain = all(word.isascii() for term in query.terms for word in term.words)
    return Highlighter(pattern, re.compile(either) if plain else None)


def search_snippet(row: dict[str, Any], words: Highlighter) -> str:
    """Up to SNIPPET_CHARS of the text (or summary) around its first match, as safe HTML:
    everything escaped, the query's words in <mark>."""
    text = row["text"] or row["summary"] or row["title"]
    first = next(words.spans(text), None)
    start = 0
    if first is not None and first[0] > SNIPPET_CHARS // 3:
        start = text.find(" ", first[0] - SNIPPET_CHARS // 3) + 1
    end = min(len(text), start + SNIPPET_CHARS)
    if end < len(text):
        end = max(text.rfind(" ", start, end), first[1] if first else start + 1, start + 1)
    piece = text[start:end]
    parts = ["…" if start > 0 else ""]
    done = 0
    for begin, finish in words.spans(piece):
        parts += [html.escape(piece[done:begin]), "<mark>"]
        parts += [html.escape(piece[begin:finish]), "</mark>"]
        done = finish
    parts += [html.escape(piece[done:]), "…" if end < len(text) else ""]
    return "".join(parts).strip()


def plain_snippet(snippet: str) -> str:
    """A snippet as plain text (for a model or a terminal): no marks, no escapes."""
    return html.unescape(_MARK.sub("", snippet))


def document_search(
    *,
    resources: list[Resource],
    q: str,
    cursor: str | None = None,
    limit: int = LIST_PAGE_SIZE,
    scope: str,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of hits: list fields plus `resource` (its id) and `snippet` (safe HTML).

    `scope` names the list for its cursors (a cursor of one search is refused by
    another list, as every cursor is).
    """
    query = search_parse(q)
    pks = [r.pk for r in resources]
    if not pks:
        return [], None
    scope = f"search:{scope}:{q}"
    after = None
    if cursor is not None:
        position = cursor_load(cursor, scope=scope)
        if len(position) != 2 or not isinstance(position[1], int):
            raise InvalidRequest("cursor is not valid for this list.")
        after = (float(position[0]), position[1])
    if database_vendor() == "postgresql":
        ranked = _pg_ranked(query, pks, after, limit + 1)
    else:
        ranked = _sqlite_ranked(query, pks, after, limit + 1)
    page = ranked[:limit]
    # A document deleted after the ranking read it (another statement, on PostgreSQL
    # another snapshot) is left out of the page, never shown as a hit without its text.
    rows = {
        row["id"]: row
        for row in Document.objects.filter(id__in=[pk for pk, _ in page], deleted=False).values(
            "id", "resource_id", "text", *LIST_FIELDS
        )
    }
    ids = [pk for pk, _ in page if pk in rows]
    resource_ids = {r.pk: r.resource_id for r in resources}
    words = highlighter(query)
    hits = [
        {
            **rows[pk],
            "resource": resource_ids[rows[pk]["resource_id"]],
            "snippet": search_snippet(rows[pk], words),
        }
        for pk in ids
    ]
    next_cursor = None
    if len(ranked) > limit:
        next_cursor = cursor_dump([page[-1][1], page[-1][0]], scope=scope)
    return hits, next_cursor
