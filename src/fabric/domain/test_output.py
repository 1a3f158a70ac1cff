"""pytest's output cut down to what a model needs to fix a failure.

A long pytest run is mostly noise for whoever has to act on it: the session header, a line per
passing test, warnings, captured output of tests that passed. ``trim_test_output`` keeps the
parts that say what broke and where:

- the ``collected ...`` line;
- each entry of the ERRORS and FAILURES sections, shortened: the first and the last frame of
  its traceback (where the test called in, where it raised), the source lines just above the
  failing ``>`` line, the ``E`` lines (the exception and the assertion diff), the location
  line, and the end of any captured output;
- the short test summary (``FAILED ...``/``ERROR ...``), ``Interrupted`` lines and the final
  ``N failed, M passed in Xs`` line;
- whatever follows that final line (notes fabric itself adds after a command).

Entries are dropped from the end when the limit is still passed (the short summary still names
them). Text that is not pytest's is cut in the middle instead. Pure text in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import PurePosixPath

_RULE = re.compile(r"^=+ (.*?) =+$")
"""A section rule: ``===== FAILURES =====``, ``=== 1 failed, 2 passed in 0.1s ===``."""
_ENTRY = re.compile(r"^_{3,} (.+?) _{3,}$")
"""One failing test in ERRORS or FAILURES: ``____ test_add ____``."""
_FRAME_BREAK = re.compile(r"^(?:_ ){4,}_?\s*$")
"""Between two frames of one traceback: ``_ _ _ _ _``."""
_CAPTURE = re.compile(r"^-{3,} (Captured .*?) -{3,}$")
_FINAL = re.compile(
    r"^(?:=+ )?(?:(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|warnings?|"
    r"deselected|rerun)(?:, )?)+|no tests ran) in [\d.]+s(?: \([\d:]+\))?(?: =+)?$"
)
_INTERRUPTED = re.compile(r"^!+ .* !+$")
_STATUS = re.compile(r"^(?:FAILED|ERROR|XFAIL|XPASS|SKIPPED|RERUN) ")
_KEPT_SECTIONS = ("ERRORS", "FAILURES")
_SUMMARY = "short test summary info"
_CONTEXT_LINES = 8
"""Source lines kept above a frame's ``>`` line."""
_E_LINES = 40
_CAPTURE_LINES = 15
_SUMMARY_LINES = 60
_LINE_CHARS = 300
_FIRST_FRAME_LINES = 12
"""The first frame (the test's own code) is kept whole up to this size, else only its end."""


def runs_pytest(argv: Sequence[str]) -> bool:
    """Whether the command line ``argv`` runs pytest (``pytest ...``, ``py.test ...`` or
    ``python -m pytest ...``)."""
    if not argv:
        return False
    program = PurePosixPath(argv[0]).name
    if program in ("pytest", "py.test"):
        return True
    if not program.startswith("python"):
        return False
    args = iter(argv[1:])
    for arg in args:
        if arg == "-m":
            return next(args, None) == "pytest"
        if arg.startswith("-m"):
            return arg == "-mpytest"
        if arg in ("-X", "-W"):  # options with a value of their own
            next(args, None)
        elif arg == "-c" or not arg.startswith("-"):  # code or a script: not pytest
            return False
    return False


def trim_test_output(text: str, limit: int) -> str:
    """``text`` (pytest's output) cut to its failures and summary when longer than ``limit``
    characters; shorter text comes back unchanged. The result starts with a note saying what
    was left out, and stays within ``limit`` plus that note."""
    if len(text) <= limit:
        return text
    lines = text.splitlines()
    report = _Report.parse(lines)
    if report is None:
        return _cut_middle(text, limit)
    body = report.render(limit)
    kept = body.count("\n") + 1
    note = (
        f"[pytest output trimmed to the failures and the summary: {kept} of {len(lines)} lines "
        "kept; passing tests, the header and warnings left out]\n"
    )
    return note + body


class _Report:
    """pytest's output in the parts ``trim_test_output`` keeps."""

    def __init__(self) -> None:
        self.collected: list[str] = []
        self.progress_failures: list[str] = []
        self.entries: list[list[str]] = []
        self.summary: list[str] = []
        self.passed = 0
        """PASSED lines of the short summary, left out."""
        self.final: list[str] = []
        self.after: list[str] = []

    @classmethod
    def parse(cls, lines: list[str]) -> _Report | None:
        """The parts of ``lines``; None when they do not look like pytest's output."""
        report = cls()
        section: str | None = None
        entry: list[str] | None = None
        final_at = None
        for index, line in enumerate(lines):
            if _FINAL.match(line.strip()):
                final_at = index
        if final_at is None:
            return None
        for line in lines[:final_at]:
            rule = _RULE.match(line)
            if rule:
                section, entry = rule.group(1), None
                continue
            if section in _KEPT_SECTIONS:
                if _ENTRY.match(line) or entry is None:
                    entry = []
                    report.entries.append(entry)
                entry.append(line)
            elif _INTERRUPTED.match(line):  # "Interrupted: ...", "stopping after 1 failures"
                report.final.append(line)
            elif line.startswith(("collected ", "collecting ... collected")):
                report.collected.append(line)
            elif section == _SUMMARY:
                if line.startswith("PASSED "):  # -rA lists the passing tests too
                    report.passed += 1
                elif _STATUS.match(line) or not report.summary:
                    report.summary.append(_clip(line))
                # else: a message's further lines (-vv); its first line says enough
            elif section in (None, "test session starts") and _is_failed_progress(line):
                report.progress_failures.append(line)
        report.final.append(lines[final_at])
        report.after = lines[final_at + 1 :]
        return report

    def render(self, limit: int) -> str:
        """The kept parts as text, dropping failure entries from the end to stay in ``limit``."""
        head = list(self.collected)
        if not self.summary:  # no short summary (-rN): the progress lines name the failures
            head += self.progress_failures
        summary = _capped(self.summary, _SUMMARY_LINES, "summary lines")
        if self.passed:
            summary.append(f"[... {self.passed} PASSED line(s) left out ...]")
        tail = summary + self.final + self.after
        budget = limit - _size(head) - _size(tail)
        shown: list[str] = []
        for number, entry in enumerate(self.entries):
            condensed = [_clip(line) for line in _condense(entry)]
            if not shown and _size(condensed) > budget - 120:  # show at least one, shorter
                condensed = [_clip(line) for line in _condense(entry, compact=True)]
                condensed = _ends(condensed, budget - 240)
            if _size(condensed) > budget - 120:
                left = len(self.entries) - number
                shown.append(
                    f"[... {left} more failure section(s) left out; the short test summary below "
                    "names them: run one at a time to see it, e.g. pytest -q path::test_name ...]"
                )
                break
            shown += condensed
            budget -= _size(condensed)
        text = "\n".join([*head, *shown, *tail])
        return text if len(text) <= limit else _cut_middle(text, limit)


def _is_failed_progress(line: str) -> bool:
    """A verbose progress line of a failing test: ``test_a.py::test_add FAILED  [ 50%]``."""
    return "::" in line and (" FAILED" in line or " ERROR" in line)


def _condense(entry: list[str], *, compact: bool = False) -> list[str]:
    """One ERRORS/FAILURES entry: its header, the first and last frames of its traceback (each
    shortened) and the end of each captured output; ``compact``: the last frame only, and
    less of the output."""
    header = entry[:1] if _ENTRY.match(entry[0]) else []
    body = entry[len(header) :]
    captures: list[list[str]] = []
    for index, line in enumerate(body):
        if _CAPTURE.match(line):
            captures.append(body[index:])
            body = body[:index]
            break
    if captures:  # split the rest into one list per "--- Captured ... ---" block
        rest, captures = captures[0], []
        for line in rest:
            if _CAPTURE.match(line):
                captures.append([])
            captures[-1].append(line)
    frames: list[list[str]] = [[]]
    for line in body:
        if _FRAME_BREAK.match(line):
            frames.append([])
        else:
            frames[-1].append(line)
    out = list(header)
    if len(frames) > 1 and compact:
        out.append(f"[... {len(frames) - 1} earlier frame(s) left out ...]")
    elif len(frames) > 1:
        first = frames[0]
        out += first if len(first) <= _FIRST_FRAME_LINES else _frame(first)
        if len(frames) > 2:
            out.append(f"[... {len(frames) - 2} frame(s) in between left out ...]")
        out.append("_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _")
    out += _frame(frames[-1])
    for block in captures:
        out += block[:1] + _capped_end(block[1:], 5 if compact else _CAPTURE_LINES)
    return out


def _frame(lines: list[str]) -> list[str]:
    """One traceback frame: a few source lines above the ``>`` line, then the rest (``E``
    lines capped)."""
    marker = next((i for i, line in enumerate(lines) if line.startswith(">")), None)
    if marker is None:
        above, rest = [], lines
    else:
        start = max(0, marker - _CONTEXT_LINES)
        above = ([f"[... {start} source line(s) above ...]"] if start else []) + lines[start:marker]
        rest = lines[marker:]
    errors = [i for i, line in enumerate(rest) if line.startswith("E ")]
    if len(errors) > _E_LINES:
        cut = errors[_E_LINES]
        last_e = errors[-1]
        rest = [
            *rest[:cut],
            f"E   [... {len(errors) - _E_LINES} more line(s) of the error left out ...]",
            *rest[last_e + 1 :],
        ]
    return above + rest


def _ends(lines: list[str], chars: int) -> list[str]:
    """The first line of ``lines`` (an entry's header) and as many of the last ones (the
    error and where it happened) as fit in ``chars``."""
    tail: list[str] = []
    for line in reversed(lines[1:]):
        if _size(lines[:1]) + _size(tail) + len(line) + 1 > chars:
            left = len(lines) - 1 - len(tail)
            return [*lines[:1], f"[... {left} line(s) of this failure left out ...]", *tail]
        tail.insert(0, line)
    return lines


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + " [...]"


def _capped(lines: list[str], most: int, what: str) -> list[str]:
    if len(lines) <= most:
        return list(lines)
    return [*lines[:most], f"[... {len(lines) - most} more {what} ...]"]


def _capped_end(lines: list[str], most: int) -> list[str]:
    if len(lines) <= most:
        return lines
    return [f"[... {len(lines) - most} earlier line(s) of output left out ...]", *lines[-most:]]


def _size(lines: list[str]) -> int:
    return sum(len(line) + 1 for line in lines)


def _cut_middle(text: str, limit: int) -> str:
    """Text that is not pytest's report: its start and its end (where a summary would be)."""
    head = max(limit // 3, 0)
    tail = max(limit - head, 0)
    cut = len(text) - head - tail
    return (
        f"{text[:head]}\n[... {cut} characters cut from the middle ...]\n{text[len(text) - tail :]}"
    )
