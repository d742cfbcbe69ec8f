"""Naming shared by every door that starts a session on a document.

The installable client (clients/python) derives the same key; a test holds the two together.
"""

from __future__ import annotations

TOPIC_KEY_MAX = 248


def topic_session_key(idempotency_key: str) -> str:
    """The session Idempotency-Key derived from a topic's key.

    The SDK helper and `manage.py session create` derive it the same way, so
    either door, retried, converges on the same session.
    """
    if not 1 <= len(idempotency_key) <= TOPIC_KEY_MAX:
        raise ValueError(f"idempotency keys are 1-{TOPIC_KEY_MAX} characters.")
    return f"{idempotency_key}:session"
