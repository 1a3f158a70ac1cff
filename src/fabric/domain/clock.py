"""The time, as something a caller can replace (tests, a replayed run)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
"""Now, as an aware datetime."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso_z(moment: datetime, timespec: str = "milliseconds") -> str:
    """``moment`` in ISO 8601 with a ``Z`` for UTC, as runlogs and task records write it."""
    return moment.isoformat(timespec=timespec).replace("+00:00", "Z")
