"""Replacing an exact snippet of a file's text, and saying precisely why it could not be.

Pure text, used by ``edit_file``. Lines are split where read_file splits them (``\\n``,
``\\r\\n``, ``\\r``) so the line numbers in every message match what read_file showed. The
snippet is tried as given, in the file's newline style, and without read_file's line-number
prefixes; when it still matches nowhere, the message shows where the file holds the same lines
with other indentation, or the most similar lines (``difflib``), with their numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from difflib import SequenceMatcher

from msgspec import Struct

from fabric.domain.errors import ToolError

_NEWLINE = re.compile(r"\r\n|\r|\n")
NUMBERED = re.compile(r"^ *\d+\| ?")
"""The prefix read_file puts before each line: ``  12| ``."""
_CONTEXT = 3
"""Lines shown around a change."""
_REGIONS_SHOWN = 3
_NEAREST_MAX_LINES = 20_000
_NEAREST_MAX_SNIPPET = 300
_SIMILAR_ENOUGH = 0.5


class SnippetNotFound(ToolError):
    """``old`` is nowhere in the file, not even at another indentation (a plain tool error
    to the model; edit_file then looks for it in other files)."""

    CODE = "tool_error"


_COPY_EXACTLY = (
    "copy old exactly from read_file's output, without the line-number prefixes ('  12| '), "
    "or read the file again first"
)


def number_lines(lines: Sequence[str], first: int) -> str:
    """``lines`` (without line ends) as read_file shows them: ``  12| text``, one a line."""
    last = first + len(lines)
    width = max(len(str(last - 1)), 3)
    # str.rjust in one list, not a nested format spec per line: a third of the time
    return "".join(
        [
            f"{str(n).rjust(width)}| {line}\n"
            for n, line in zip(range(first, last), lines, strict=True)
        ]
    )


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` without their ends; a final line end starts no new line."""
    lines = _NEWLINE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class Edited(Struct, frozen=True):
    """A snippet replaced: the whole new text, the lines the replacements now span (first and
    last, 1-based, one pair per replacement) and how ``old`` was matched when not as given."""

    text: str
    regions: list[tuple[int, int]]
    note: str = ""

    def view(self) -> str:
        """The changed lines with a few around them, numbered as read_file numbers them."""
        lines = split_lines(self.text)
        windows: list[list[int]] = []
        for first, last in self.regions:
            start, end = max(first - _CONTEXT, 1), min(last + _CONTEXT, len(lines))
            if windows and start <= windows[-1][1] + 1:
                windows[-1][1] = max(windows[-1][1], end)
            else:
                windows.append([start, end])
        parts = [
            number_lines(lines[start - 1 : end], start) for start, end in windows[:_REGIONS_SHOWN]
        ]
        if len(windows) > _REGIONS_SHOWN:
            parts.append(f"[... {len(windows) - _REGIONS_SHOWN} more changed part(s) ...]\n")
        return "...\n".join(parts) if parts else "(the file is now empty)\n"


def replace_snippet(text: str, old: str, new: str, *, replace_all: bool, path: str) -> Edited:
    """``text`` with ``old`` replaced by ``new`` (once, or everywhere with ``replace_all``).
    Raises ToolError when ``old`` matches nowhere or, without ``replace_all``, more than once;
    the message says where the file holds what comes closest."""
    if old == "":
        raise ToolError(
            "old is empty, so there is nothing to find",
            hint="to add lines, put the line before them in old and that line plus the new "
            "lines in new; to create a file, use write_file",
        )
    style = _newline_style(text)
    for candidate, replacement, note in _candidates(old, new, style):
        found = _occurrences(text, candidate)
        if len(found) > 1 and not replace_all:
            where = ", ".join(str(_line_at(text, at)) for at in found[:20])
            raise ToolError(
                f"old appears {len(found)} times in {path} (at lines {where})",
                hint="add neighbouring lines to old so that it matches one place only, or pass "
                "replace_all=true to change every one",
            )
        if found:
            if candidate == replacement:
                raise _same()
            spans = [(at, at + len(candidate)) for at in found]
            return _replaced(text, spans, replacement, note)
    return _fuzzy(text, old, new, style, replace_all=replace_all, path=path)


def _candidates(old: str, new: str, style: str) -> Iterator[tuple[str, str, str]]:
    """Spellings of ``old`` to look for, each with its ``new`` and a note: in the file's
    newline style, as given, and without read_file's line-number prefixes."""
    seen: set[str] = set()
    numbered = without_numbers(old)
    for candidate, replacement, note in (
        (_restyled(old, style), _restyled(new, style), ""),
        (old, _restyled(new, style), ""),
        (
            _restyled(numbered or "", style),
            _restyled(without_numbers(new) or new, style),
            "the line-number prefixes ('  12| ') read_file shows were taken out of old and new; "
            "leave them out next time",
        ),
    ):
        if candidate and candidate not in seen:
            seen.add(candidate)
            yield candidate, replacement, note


def _fuzzy(text: str, old: str, new: str, style: str, *, replace_all: bool, path: str) -> Edited:
    """No exact match: the same lines with other trailing spaces are replaced; for anything
    else the error shows the closest lines of the file."""
    old_text = without_numbers(old)
    if old_text is None:
        old_text = old
    else:
        new = without_numbers(new) or new
    wanted = split_lines(_restyled(old_text, "\n"))
    lines = split_lines(text)
    same = _line_matches(lines, wanted, str.rstrip)
    if len(same) == 1 or (same and replace_all):
        note = "old matched once trailing spaces were ignored"
        return _replace_lines(text, same, len(wanted), old_text, new, style, note)
    new_text = _restyled(new, style)
    if new_text.strip() and new_text in text:
        at = _line_at(text, text.index(new_text))
        raise ToolError(
            f"old was not found in {path}, but the text of new is already there (line {at}): "
            "the change looks made already",
            hint="read the file to check, then go on with the next step",
        )
    loose = _line_matches(lines, wanted, str.strip)
    if len(loose) == 1:
        shifted = _shifted(lines[loose[0] : loose[0] + len(wanted)], wanted, new)
        if shifted is not None:
            note = "old matched at another indentation; new was indented to match"
            return _replace_lines(text, loose, len(wanted), old_text, shifted, style, note)
    if loose:
        first = loose[0]
        shown = number_lines(lines[first : first + len(wanted)], first + 1).rstrip("\n")
        others = f" (and {len(loose) - 1} more place(s))" if len(loose) > 1 else ""
        raise ToolError(
            f"old was not found exactly in {path}; the snippet matches if indentation/trailing "
            f"spaces are ignored, at lines {first + 1}-{first + len(wanted)}{others}:\n{shown}",
            hint="copy old with exactly the indentation shown above (without the "
            "line-number prefixes), and indent new the same way",
        )
    nearest = _nearest(lines, wanted)
    if nearest is None:
        raise SnippetNotFound(f"old was not found in {path}", hint=_COPY_EXACTLY)
    first, size, ratio = nearest
    shown = number_lines(lines[first : first + size], first + 1).rstrip("\n")
    raise SnippetNotFound(
        f"old was not found in {path}. The most similar part of the file is lines "
        f"{first + 1}-{first + size} ({ratio:.0%} alike):\n{shown}",
        hint=_COPY_EXACTLY,
    )


def _same() -> ToolError:
    return ToolError(
        "old and new are the same text, so nothing would change", hint="put the changed text in new"
    )


def _replace_lines(
    text: str, found: list[int], size: int, old: str, new: str, style: str, note: str
) -> Edited:
    """``text`` with the ``size`` whole lines starting at each index in ``found`` replaced by
    ``new`` (windows that overlap an earlier one are left alone). Raises ToolError when that
    changes nothing (old and new differ only in what the match forgave)."""
    replacement = _restyled(new, style)
    if old.endswith(("\n", "\r")) and replacement.endswith(style):
        replacement = replacement[: -len(style)]  # the span ends before the line end
    spans = _line_spans(text)
    starts: list[int] = []
    for i in found:
        if not starts or i >= starts[-1] + size:
            starts.append(i)
    chosen = [(spans[i][0], spans[i + size - 1][1]) for i in starts]
    edited = _replaced(text, chosen, replacement, note)
    if edited.text == text:
        raise _same()
    return edited


def _shifted(have: list[str], wanted: list[str], new: str) -> str | None:
    """``new`` moved by the one indentation change that turns ``wanted`` into the file's
    lines ``have`` (the same text at another depth), or None when the lines do not differ by
    one consistent change or ``new`` cannot take it."""
    shift: tuple[str, str] | None = None  # (indentation to add, indentation to take off)
    for line, want in zip(have, wanted, strict=True):
        if not want.strip():
            continue
        ours, theirs = _indent(line), _indent(want)
        if ours.endswith(theirs):
            change = (ours[: len(ours) - len(theirs)], "")
        elif theirs.endswith(ours):
            change = ("", theirs[: len(theirs) - len(ours)])
        else:
            return None
        if shift is not None and change != shift:
            return None
        shift = change
    if shift is None:
        return None
    add, drop = shift
    moved = []
    for line in new.splitlines(keepends=True):
        if not line.strip():
            moved.append(line)
        elif line.startswith(drop):
            moved.append(add + line[len(drop) :])
        else:
            return None  # new is less indented than the shift takes off: unclear, say so
    return "".join(moved)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _replaced(text: str, spans: list[tuple[int, int]], replacement: str, note: str) -> Edited:
    """``text`` with each (start, end) span replaced, and where the replacements now are."""
    pieces: list[str] = []
    starts: list[int] = []
    done = 0
    size = 0
    for start, end in spans:
        pieces.append(text[done:start])
        size += start - done
        starts.append(size)
        pieces.append(replacement)
        size += len(replacement)
        done = end
    pieces.append(text[done:])
    result = "".join(pieces)
    regions = []
    for at in starts:
        first = _line_at(result, at)
        last = _line_at(result, at + len(replacement.rstrip("\r\n")) - 1) if replacement else first
        regions.append((first, max(first, last)))
    return Edited(result, regions, note)


def _occurrences(text: str, snippet: str) -> list[int]:
    """Where ``snippet`` starts in ``text``, not overlapping."""
    found: list[int] = []
    at = text.find(snippet)
    while at >= 0:
        found.append(at)
        at = text.find(snippet, at + len(snippet))
    return found


def _line_matches(lines: list[str], wanted: list[str], same: Callable[[str], str]) -> list[int]:
    """Indices where ``wanted`` starts in ``lines`` when each line is compared after ``same``
    (``str.rstrip``: trailing spaces ignored; ``str.strip``: indentation too)."""
    if not wanted or len(wanted) > len(lines):
        return []
    key = [same(line) for line in wanted]
    if not any(key):
        return []
    return [
        i
        for i in range(len(lines) - len(wanted) + 1)
        if all(same(lines[i + j]) == key[j] for j in range(len(wanted)))
    ]


def _nearest(lines: list[str], wanted: list[str]) -> tuple[int, int, float] | None:
    """The window of lines most like ``wanted`` (its start, size and similarity), if any is
    similar enough; windows one line shorter and longer count too."""
    if not wanted or len(lines) > _NEAREST_MAX_LINES or len(wanted) > _NEAREST_MAX_SNIPPET:
        return None
    matcher = SequenceMatcher(None, autojunk=False)
    matcher.set_seq2("\n".join(line.strip() for line in wanted))
    stripped = [line.strip() for line in lines]
    best: tuple[int, int, float] | None = None
    for size in sorted({len(wanted), max(len(wanted) - 1, 1), len(wanted) + 1}):
        for start in range(len(lines) - size + 1):
            matcher.set_seq1("\n".join(stripped[start : start + size]))
            floor = best[2] if best else _SIMILAR_ENOUGH
            if matcher.real_quick_ratio() <= floor or matcher.quick_ratio() <= floor:
                continue
            ratio = matcher.ratio()
            if ratio > floor:
                best = (start, size, ratio)
    return best


def without_numbers(snippet: str) -> str | None:
    """``snippet`` without read_file's ``  12| `` prefixes, if every non-blank line has one."""
    lines = snippet.splitlines(keepends=True)
    if not any(NUMBERED.match(line) for line in lines):
        return None
    if not all(NUMBERED.match(line) or not line.strip() for line in lines):
        return None
    return "".join(NUMBERED.sub("", line, count=1) for line in lines)


def _newline_style(text: str) -> str:
    """The line end most lines of ``text`` have (``\\n`` when it has none)."""
    crlf = text.count("\r\n")
    lf, cr = text.count("\n") - crlf, text.count("\r") - crlf
    return max((lf, "\n"), (crlf, "\r\n"), (cr, "\r"), key=lambda pair: pair[0])[1]


def _restyled(text: str, style: str) -> str:
    return _NEWLINE.sub(style, text) if style != "\n" or "\r" in text else text


def _line_at(text: str, offset: int) -> int:
    """The 1-based number of the line that holds ``text[offset]``."""
    return len(_NEWLINE.findall(text, 0, max(offset, 0))) + 1


def _line_spans(text: str) -> list[tuple[int, int]]:
    """(start, end before the line end) of each line, as ``split_lines`` splits them."""
    spans: list[tuple[int, int]] = []
    start = 0
    for end in _NEWLINE.finditer(text):
        spans.append((start, end.start()))
        start = end.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans
