"""The weekly digest e-mail body."""

from __future__ import annotations

from messages import farewell, greet, unread


def digest(name: str, lang: str, counts: list[int]) -> str:
    lines = [greet(name, lang)]
    lines += [unread(count, lang) for count in counts if count]
    lines.append(farewell(name, lang))
    return "\n".join(lines)
