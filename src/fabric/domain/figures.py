"""The figures a text states, compared loosely: what a research answer claims that a quote can
back word for word.

A *figure* is a number written in digits (``3``, ``2.4``, ``1.10.3``, ``26,212,352``,
``3.90``), a date (``2021-02-09``, ``9 February 2021``, ``Feb 9, 2021``, ``February 2021``)
or a time of day (``01:40``, ``1:40 am``). Each gets a canonical key, so one spelling backs
another: thousand separators are dropped (``26 212 352`` is ``26,212,352``), a decimal comma is
a point (``3,90`` is ``3.90``), leading zeros go (``01:40`` is ``1:40``), a date is its day.
Digits are otherwise compared as written: ``1.1`` is not ``1.10`` (versions) and ``3.9`` is
not ``3.90``. A source backs more than it states outright: the year, the day and the month of
each of its dates, and both readings of ``26 212 352`` (one number, or three).

Not figures: numbers written as words (``two``, ``first``), digits inside a name (``utf-8``,
``md5``, ``x86_64``), URLs, list markers at the start of a line (``1.``), citation marks and
enumerations (``[1]``, ``(2)``). Pure text in, keys out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from msgspec import Struct

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\b\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})\b"
_DATES = [
    re.compile(
        r"(?<![\d.,])\b(?P<year>\d{4})(?P<s>[-/])(?P<month>\d{1,2})(?P=s)(?P<day>\d{1,2})\b"
    ),
    re.compile(rf"(?<![\d.,])\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}", re.IGNORECASE),
]
"""ISO dates, day-month-year, month-day-year, month-year: tried in this order."""
_TIME = re.compile(
    r"(?<![\d:.])(?P<hour>\d{1,2}):(?P<minute>\d{2})(?![\d:])(?:\s*(?P<half>[ap])\.?m\b\.?)?",
    re.IGNORECASE,
)
_NOT_FIGURES = re.compile(
    r"\b(?:https?://|www\.)\S+"  # URLs
    r"|\]\([^)\s]*\)"  # the target of a Markdown link
    r"|^[ \t]*\d{1,2}[.)](?=\s)"  # a list marker at the start of a line
    r"|\[\d{1,3}\]|\(\d{1,2}\)",  # a citation mark, an enumeration: [1], (2)
    re.MULTILINE,
)
_SEPARATORS = ",'\u00a0\u2009\u202f "
_NUMBER = re.compile(
    # not glued to a word before it (md5, x86_64, utf-8, Python3.11), except a version's v
    rf"(?<![\w.])(?<![^\W\d_]-)[vV]?(?P<number>\d+(?:[.{_SEPARATORS}]\d+)*)"
)
_GROUPED = re.compile(r"\d{1,3}(?P<s>[,'\u00a0\u2009\u202f ])\d{3}(?:(?P=s)\d{3})*(?:\.\d+)?")
"""A number written with thousand separators: 26,212,352, 26 212 352, 1'000.50."""
_DECIMAL_COMMA = re.compile(r"\d+,\d{1,2}")
_GAPS = re.compile(r"[\u00a0\u2009\u202f ']")
"""What stands between numbers written side by side, or between groups of thousands."""


class Figure(Struct, frozen=True):
    """One figure of a text: as written there, and its canonical ``key``."""

    text: str
    key: str


def figures(text: str) -> list[Figure]:
    """The figures ``text`` states, each key once, in the order they first appear."""
    seen: dict[str, Figure] = {}
    for figure, _also in _scan(text):
        seen.setdefault(figure.key, figure)
    return list(seen.values())


def backed(texts: Iterable[str]) -> set[str]:
    """The keys of every figure ``texts`` state, and of the parts of their dates and grouped
    numbers (``9 February 2021`` backs ``February 2021`` and ``2021`` too)."""
    keys: set[str] = set()
    for text in texts:
        for figure, also in _scan(text):
            keys.add(figure.key)
            keys.update(also)
    return keys


def unbacked(text: str, sources: Iterable[str]) -> list[Figure]:
    """The figures of ``text`` that none of ``sources`` backs."""
    known = backed(sources)
    return [f for f in figures(text) if f.key not in known]


_Found = tuple[Figure, tuple[str, ...]]
"""A figure and the keys a source stating it also backs."""


def _scan(text: str) -> list[_Found]:
    """Every figure of ``text`` with the keys it backs besides its own, in text order."""
    found: list[tuple[int, Figure, tuple[str, ...]]] = []
    rest = _blank(text, _NOT_FIGURES.finditer(text))
    for pattern in (*_DATES, _TIME):
        taken = []
        for m in pattern.finditer(rest):
            if (one := _date_or_time(m)) is not None:
                found.append((m.start(), *one))
                taken.append(m)
        rest = _blank(rest, taken)
    for m in _NUMBER.finditer(rest):
        found += [(m.start(), *one) for one in _numbers(m.group("number"))]
    found.sort(key=lambda f: f[0])
    return [(figure, also) for _, figure, also in found]


def _blank(text: str, matches: Iterable[re.Match[str]]) -> str:
    """``text`` with the matched spans blanked out (line breaks: they end any figure)."""
    chars = list(text)
    for m in matches:
        chars[m.start() : m.end()] = "\n" * (m.end() - m.start())
    return "".join(chars)


def _date_or_time(m: re.Match[str]) -> _Found | None:
    """The figure a date or time match names, if it is a real one (no 31 Foo, no 25:70)."""
    said, parts = _tidy(m.group()), m.groupdict()
    if "hour" in parts:
        hour, minute, half = int(parts["hour"]), int(parts["minute"]), parts["half"]
        if half is not None:
            if not 1 <= hour <= 12:
                return None
            hour = hour % 12 + (12 if half.casefold() == "p" else 0)
        if hour > 24 or minute > 59:
            return None
        return Figure(said, f"time:{hour}:{minute:02d}"), ()
    year, month_text = int(parts["year"]), parts["month"]
    month = int(month_text) if month_text.isdigit() else _MONTHS[month_text.casefold()]
    if not 1 <= month <= 12:
        return None
    within = f"{year:04d}-{month:02d}"
    if parts.get("day") is None:
        return Figure(said, f"month:{within}"), (f"number:{year}",)
    day = int(parts["day"])
    if not 1 <= day <= 31:
        return None
    also = (f"month:{within}", f"number:{year}", f"number:{day}")
    return Figure(said, f"date:{within}-{day:02d}"), also


def _numbers(written: str) -> list[_Found]:
    """The numbers one run of digits and separators stands for: one, when grouped in
    thousands (26,212,352), else each part (3,90 is a decimal comma; 1,2,3 a list)."""
    grouped = _GROUPED.fullmatch(written)
    if grouped is None:
        return [(Figure(p, f"number:{n}"), ()) for p, n in _parts(written)]
    number = _canonical(re.sub(r"[^\d.]", "", written))
    # 26 212 352 may be three numbers side by side: a source backs both readings
    spaced = grouped.group("s") != ","
    also = tuple(f"number:{n}" for _, n in _parts(written)) if spaced else ()
    return [(Figure(written, f"number:{number}"), also)]


def _parts(written: str) -> list[tuple[str, str]]:
    """Each number of a run not grouped in thousands as a whole, as written and canonical."""
    parts: list[tuple[str, str]] = []
    for piece in _GAPS.split(written):
        if _GROUPED.fullmatch(piece):
            parts.append((piece, _canonical(piece.replace(",", ""))))
        elif _DECIMAL_COMMA.fullmatch(piece):
            parts.append((piece, _canonical(piece.replace(",", "."))))
        else:
            parts += [(p, _canonical(p)) for p in piece.split(",") if p]
    return parts


def _canonical(number: str) -> str:
    return re.sub(r"^0+(?=\d)", "", number)


def _tidy(text: str) -> str:
    return " ".join(text.split())
