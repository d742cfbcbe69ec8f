"""Base URLs of external providers, checked before any credential is resolved (spec 004).

Mem0 OSS may use plain http only on loopback (local development); Mem0
Platform and Vertex AI Memory Bank require https; Hindsight follows the http
providers' rule (https, http on loopback). User-info, query strings,
fragments and other schemes are refused, naming the field. The egress rule
(core/egress.py) applies on top, at deploy time and on every connection.
"""

from __future__ import annotations

from memoryadmin.core.errors import InvalidRequest
from memoryadmin.providers.declarations import origin_check, path_check, url_split

# The two rules a kind may follow.
LOOPBACK_CLEARTEXT = "loopback-cleartext"
HTTPS_ONLY = "https-only"


def base_url_check(
    value: object, *, where: str, rule: str, resolve_names_for: str | None = None
) -> tuple[str, str]:
    """(origin, path prefix without a trailing slash) of a provider base URL; with
    `resolve_names_for` (a project), its name's addresses are checked as they resolve now
    (`origin_check`)."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{where} is required: an https:// URL.")
    parts = url_split(value, where=where)
    scheme = parts.scheme.lower()
    if scheme not in {"http", "https"}:
        raise InvalidRequest(f"{where} must be an http(s) URL; other schemes are not allowed.")
    if scheme == "http" and rule == HTTPS_ONLY:
        raise InvalidRequest(f"{where} must use https://; this provider is never reached in clear.")
    origin = origin_check(
        f"{parts.scheme}://{parts.netloc}", where=where, resolve_names_for=resolve_names_for
    )
    path = parts.path.rstrip("/")
    if path:
        path = path_check(path, where=where)
    return origin, path
