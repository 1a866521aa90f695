"""When a run became what it is, as a moment every store orders its claim queue by."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["moment"]


def moment(occurred_at: str | None) -> datetime | None:
    """An event's `occurred_at` (RFC 3339) as a moment, so times written with different
    offsets compare as moments (one without an offset is UTC, as SQLite reads it); None
    for one that cannot be read."""
    if occurred_at is None:
        return None
    try:
        at = datetime.fromisoformat(occurred_at)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
