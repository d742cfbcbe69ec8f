"""memory_search: the model searches a collection it is bound to, when the binding allows it.

The same search as the API (memoryadmin.memory.services.search): ranked hits,
keyset pages with an opaque cursor. The model gets ids, titles and plain-text
snippets, in the shape of memory_list's pages.
"""

from __future__ import annotations

from typing import Any

from memoryadmin.agents.errors import InvalidToolArguments
from memoryadmin.agents.models import Binding, Recall, Scope, Session
from memoryadmin.agents.services.provenance import tool_sources_store
from memoryadmin.core.errors import InvalidRequest
from memoryadmin.memory.services.search import document_search, plain_snippet, search_parse

SEARCH_TOOL = "memory_search"
SEARCH_LIMIT_DEFAULT = 10
SEARCH_LIMIT_MAX = 50

SUMMARY = (
    "Search a memory collection by what its documents say: words (all must occur), "
    '"a phrase", or pre* for a word start. Returns the best matches first, each with id, '
    "title and a snippet; read one with memory_read. Pass nextCursor back as cursor for "
    "more; null means no more."
)
ARGUMENTS: dict[str, tuple[str, bool, str]] = {
    "query": ("string", True, "What to look for."),
    "limit": (
        "integer",
        False,
        f"Hits per page, 1-{SEARCH_LIMIT_MAX} (default {SEARCH_LIMIT_DEFAULT}).",
    ),
    "cursor": ("string", False, "nextCursor from the previous page."),
}


def offers_search(binding: Binding) -> bool:
    return binding.scope == Scope.COLLECTION and binding.search


def search_run(
    *, session: Session, recall: Recall, binding: Binding, args: dict[str, Any], **_: Any
) -> dict[str, Any]:
    limit = args.get("limit", SEARCH_LIMIT_DEFAULT)
    if not 1 <= limit <= SEARCH_LIMIT_MAX:
        raise InvalidToolArguments(f"memory_search: 'limit' is 1-{SEARCH_LIMIT_MAX}.")
    try:
        search_parse(args["query"])
    except InvalidRequest as exc:
        return {"status": "rejected", "reason": "invalid_query", "message": exc.message}
    try:
        hits, next_cursor = document_search(
            resources=[binding.resource],
            q=args["query"],
            cursor=args.get("cursor"),
            limit=limit,
            scope=f"tool:{binding.resource_id}",
        )
    except InvalidRequest:
        return {"status": "rejected", "reason": "invalid_cursor"}
    documents = [
        {"id": hit["doc_id"], "title": hit["title"], "snippet": plain_snippet(hit["snippet"])}
        for hit in hits
    ]
    shown = [(hit["doc_id"], hit["revision"]) for hit in hits]
    tool_sources_store(recall=recall, binding=binding, shown=shown)
    return {"documents": documents, "nextCursor": next_cursor}
