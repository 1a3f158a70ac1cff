"""Git's config files, read as git reads them, and cut down to settings that run nothing.

A repository a run made (or a config it changed) is the run's output, but git reads its
``config`` on every command the user runs there, and from the enclosing repository too when the
run registered it as a submodule: ``core.fsmonitor``, ``core.hooksPath``, aliases, filter and
diff drivers, ``core.sshCommand``, ``include.path`` and many more name programs, or where to
find settings that do. So the git audit rewrites such a config to the settings of
``RUNS_NOTHING`` (ADR 0013), and ``host_code.py`` reads a pre-existing repository's config for
the hooks folder and the files it takes from the workspace.

The parser follows git's own (``config.c``: sections ``[section]``, ``[section "sub"]`` and
``[section.sub]``, names case-insensitive, values with quotes, escapes, comments and
continuation lines). A line git would refuse is dropped, with every setting after it until the
next section header; the rewritten file holds only what was understood, written afresh.

Standard library only: the git audit runs in the run ledger too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Setting:
    """One ``name = value`` line (``value`` None: the name alone, which means true)."""

    section: str
    subsection: str | None
    name: str
    value: str | None

    @property
    def key(self) -> str:
        """As ``git config --list`` shows it: ``section.subsection.name``."""
        middle = "" if self.subsection is None else f".{self.subsection}"
        return f"{self.section}{middle}.{self.name}"


def _boolean(value: str | None) -> bool:
    text = (value or "").lower()
    return value is None or text in {"true", "yes", "on", "false", "no", "off", ""} or _int(text)


def _int(value: str | None) -> bool:
    return value is not None and value.strip().removeprefix("-").isdigit()


def _word(*words: str) -> Callable[[str | None], bool]:
    return lambda value: value is not None and value.lower() in words


def _text(value: str | None) -> bool:
    return value is not None and not any(ord(c) < 32 for c in value)


def _location(value: str | None) -> bool:
    """A remote's address: not ``ext::``/``fd::`` (transports that run a command or talk over
    descriptors) nor one that git could take for an option."""
    lowered = (value or "").lower()
    return _text(value) and not lowered.startswith(("ext::", "fd::", "-"))


RUNS_NOTHING: dict[tuple[str, str], Callable[[str | None], bool]] = {
    ("core", "repositoryformatversion"): _int,
    ("core", "filemode"): _boolean,
    ("core", "bare"): _boolean,
    ("core", "logallrefupdates"): lambda v: _boolean(v) or (v or "").lower() == "always",
    ("core", "ignorecase"): _boolean,
    ("core", "precomposeunicode"): _boolean,
    ("core", "symlinks"): _boolean,
    ("core", "autocrlf"): lambda v: _boolean(v) or (v or "").lower() == "input",
    ("core", "eol"): _word("lf", "crlf", "native"),
    ("core", "sparsecheckout"): _boolean,
    ("core", "sparsecheckoutcone"): _boolean,
    ("extensions", "objectformat"): _word("sha1", "sha256"),
    ("extensions", "refstorage"): _word("files", "reftable"),
    ("extensions", "partialclone"): _text,
    ("user", "name"): _text,
    ("user", "email"): _text,
    ("init", "defaultbranch"): _text,
    ("remote.", "url"): _location,
    ("remote.", "pushurl"): _location,
    ("remote.", "fetch"): _text,
    ("remote.", "promisor"): _boolean,
    ("remote.", "partialclonefilter"): _text,
    ("branch.", "remote"): _text,
    ("branch.", "merge"): _text,
    ("submodule.", "url"): _location,
    ("submodule.", "active"): _boolean,
}
"""The settings a rewritten config keeps, each with what its value must look like (``section.``:
in a subsection, such as ``remote "origin"``): the repository's format (a partial clone's
too), who commits, where its remotes are and which branches follow them. None of them names a
program, a hook or another file to read settings from."""


def runs_nothing(setting: Setting) -> bool:
    """Whether ``setting`` is one of ``RUNS_NOTHING``, with a value of the right shape."""
    section = setting.section if setting.subsection is None else f"{setting.section}."
    check = RUNS_NOTHING.get((section, setting.name))
    return check is not None and check(setting.value)


def parse(text: str) -> tuple[list[Setting], list[int]]:
    """The settings in ``text`` (a config file's content), in order, and the numbers of the
    lines git would refuse (what follows such a line, up to the next section, is left out)."""
    return _Parser(text).run()


def sanitized(text: str, keep: Callable[[Setting], bool]) -> tuple[str | None, list[str]]:
    """``text`` cut down to the settings ``keep`` accepts, written afresh, and what was left
    out (keys; ``line N`` for a line git would refuse). None when nothing was left out."""
    settings, bad = parse(text)
    kept = [s for s in settings if keep(s)]
    dropped = [s.key for s in settings if not keep(s)] + [f"line {n}" for n in bad]
    if not dropped:
        return None, []
    return render(kept), list(dict.fromkeys(dropped))


def render(settings: Iterable[Setting]) -> str:
    """``settings`` as a config file git reads back to the same settings."""
    lines: list[str] = []
    header: tuple[str, str | None] | None = None
    for setting in settings:
        if (setting.section, setting.subsection) != header:
            header = (setting.section, setting.subsection)
            sub = setting.subsection
            sub = "" if sub is None else f' "{_escaped(sub, header=True)}"'
            lines.append(f"[{setting.section}{sub}]")
        value = "" if setting.value is None else f' = "{_escaped(setting.value)}"'
        lines.append(f"\t{setting.name}{value}")
    return "".join(f"{line}\n" for line in lines)


def _escaped(text: str, *, header: bool = False) -> str:
    """``text`` inside double quotes: in a section header git reads ``\\x`` as ``x``."""
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    if header:
        return text
    return text.replace("\n", "\\n").replace("\t", "\\t").replace("\b", "\\b")


class _Refused(Exception):
    """A line git would refuse (``bad config line``)."""


_SPACE = " \t\n\r"
_ESCAPES = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}


def _keychar(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "-")


class _Parser:
    """Git's ``git_parse_source``, a character at a time (``\\r\\n`` read as ``\\n``)."""

    def __init__(self, text: str) -> None:
        self.text = text.removeprefix("\ufeff").replace("\r\n", "\n")
        self.at, self.line = 0, 1
        self.section: tuple[str, str | None] | None = None
        self.settings: list[Setting] = []
        self.bad: list[int] = []

    def run(self) -> tuple[list[Setting], list[int]]:
        while self.at < len(self.text):
            start = self.line
            try:
                self._statement()
            except _Refused:
                self.bad.append(start)
                self.section = None  # what follows, up to a header, belongs to no section
                if self.text[self.at - 1 : self.at] != "\n":
                    self._skip_line()
        return self.settings, self.bad

    def _next(self) -> str:
        """The next character; ``\\n`` at the end (as git's ``get_next_char``)."""
        if self.at >= len(self.text):
            self.at += 1
            return "\n"
        c = self.text[self.at]
        self.at += 1
        if c == "\n":
            self.line += 1
        elif c == "\0":
            raise _Refused
        return c

    def _skip_line(self) -> None:
        while self.at < len(self.text) and self._next_raw() != "\n":
            pass

    def _next_raw(self) -> str:
        c = self.text[self.at]
        self.at += 1
        self.line += c == "\n"
        return c

    def _statement(self) -> None:
        c = self._next()
        if c in _SPACE:
            return
        if c in "#;":
            self._skip_line()
        elif c == "[":
            self.section = self._header()
        elif c.isascii() and c.isalpha():
            self._setting(c)
        else:
            raise _Refused

    def _header(self) -> tuple[str, str | None]:
        name = ""
        while True:
            c = self._next()
            if c == "]":
                break
            if c in _SPACE:
                return self._quoted_header(name, c)
            if not _keychar(c) and c != ".":
                raise _Refused
            name += c.lower()
        if not name:
            raise _Refused
        section, dot, sub = name.partition(".")  # [branch.main]: git lowercases it all
        return section, sub if dot else None

    def _quoted_header(self, name: str, c: str) -> tuple[str, str | None]:
        while c in _SPACE:
            if c == "\n":
                raise _Refused
            c = self._next()
        if c != '"' or "." in name:
            raise _Refused  # [a.b "c"] is no section fabric would keep anything of
        sub = ""
        while (c := self._next()) != '"':
            if c == "\\":
                c = self._next()
            if c == "\n":
                raise _Refused
            sub += c
        if self._next() != "]":
            raise _Refused
        return name, sub

    def _setting(self, first: str) -> None:
        name = first.lower()
        while _keychar(c := self._next()):
            name += c.lower()
        while c in " \t":
            c = self._next()
        value = None
        if c != "\n":
            if c != "=":
                raise _Refused
            value = self._value()
        if self.section is None:
            raise _Refused  # a setting in no section (or after a line git would refuse)
        self.settings.append(Setting(*self.section, name, value))

    def _value(self) -> str:
        value, quote, comment, space = "", False, False, 0
        while True:
            c = self._next()
            if c == "\n":
                if quote:
                    raise _Refused
                return value
            if comment:
                continue
            if c in _SPACE and not quote:
                space += bool(value)
                continue
            if not quote and c in ";#":
                comment = True
                continue
            value += " " * space
            space = 0
            if c == "\\":
                c = self._next()
                if c == "\n":
                    continue  # a continuation line
                if c not in _ESCAPES:
                    raise _Refused
                value += _ESCAPES[c]
            elif c == '"':
                quote = not quote
            else:
                value += c
