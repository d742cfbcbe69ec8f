"""Naming shared by every door that starts a session on a document.

The installable client (clients/python) derives the same key; a test holds the two together.
"""

from __future__ import annotations

import re

TOPIC_KEY_MAX = 248
# The session's key is this plus ":session": 1-256 printable ASCII characters.
_TOPIC_KEY = re.compile(rf"[\x20-\x7e]{{1,{TOPIC_KEY_MAX}}}")


def topic_session_key(idempotency_key: str) -> str:
    """The session Idempotency-Key derived from a topic's key.

    The SDK helper and `manage.py session create` derive it the same way, so
    either door, retried, converges on the same session.

    A key the session could not take (too long, or not printable ASCII, as it travels
    in a header) is refused here, so a door checks it before it creates any document.
    """
    if not _TOPIC_KEY.fullmatch(idempotency_key):
        raise ValueError(f"idempotency keys are 1-{TOPIC_KEY_MAX} printable ASCII characters.")
    return f"{idempotency_key}:session"
