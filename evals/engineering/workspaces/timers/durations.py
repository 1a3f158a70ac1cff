"""Durations as people write them in the timer app: "90s", "15m", "1h30m", "2h 15m", "1d"."""

from __future__ import annotations

UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """The number of seconds ``text`` stands for; ValueError when it is not a duration."""
    text = text.strip().lower()
    if not text:
        raise ValueError("empty duration")
    unit = text[-1]
    if unit not in UNITS:
        raise ValueError(f"unknown unit in {text!r}; use d, h, m or s")
    number = text[:-1]
    if not number.isdigit():
        raise ValueError(f"not a duration: {text!r}")
    return int(number) * UNITS[unit]


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
