"""Durations as people write them in the timer app: "90s", "15m", "1h30m", "2h 15m", "1d"."""

from __future__ import annotations

import re

UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_PART = re.compile(r"\s*(\d+)\s*([dhms])")


def parse_duration(text: str) -> int:
    """The number of seconds ``text`` stands for; ValueError when it is not a duration."""
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    total, position = 0, 0
    while position < len(text):
        part = _PART.match(text, position)
        if part is None:
            raise ValueError(f"not a duration: {text!r}; write it like 1h30m (units d, h, m, s)")
        total += int(part.group(1)) * UNITS[part.group(2)]
        position = part.end()
    return total


def format_duration(seconds: int) -> str:
    """The shortest spelling of ``seconds`` that parse_duration reads back: "1h30m"."""
    if seconds < 0:
        raise ValueError("durations are not negative")
    if seconds == 0:
        return "0s"
    parts = []
    for unit, size in UNITS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
