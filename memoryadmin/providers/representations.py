"""The public JSON shapes of managed secrets: a name and when it changed, never a value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memoryadmin.memory.representations import iso_ms


def secret_dict(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": row["name"], "origins": row["origins"], "updatedAt": iso_ms(row["updated_at"])}
