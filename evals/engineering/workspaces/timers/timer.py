"""Command line: `python timer.py 25m "tea"` prints when the timer goes off."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

from durations import format_duration, parse_duration


def schedule(spec: str, label: str, now: datetime) -> str:
    seconds = parse_duration(spec)
    at = now + timedelta(seconds=seconds)
    return f"{label}: in {format_duration(seconds)}, at {at:%H:%M:%S}"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: timer.py DURATION LABEL", file=sys.stderr)
        return 2
    try:
        print(schedule(argv[0], argv[1], datetime.now()))
    except ValueError as exc:
        print(f"timer: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
