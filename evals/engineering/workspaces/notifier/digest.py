"""The weekly digest e-mail body."""

from __future__ import annotations

from messages import farewell, greet, set_language, unread


def digest(name: str, lang: str, counts: list[int]) -> str:
    set_language(lang)
    lines = [greet(name)]
    lines += [unread(count) for count in counts if count]
    lines.append(farewell(name))
    return "\n".join(lines)
