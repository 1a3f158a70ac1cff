"""Pointing at a mistake in the configuration: a YAML syntax error, or a value pydantic
refused, becomes one message naming where it was written (the file and line a person should
look at; for a value from the environment or the command line, the variable or option: see
``Places``), the key path, and what would be right: for an unknown key the closest valid keys
and all of them, for a value that is not one of its choices (a ``kind``, a literal) the
choices.

Two places where the obvious line is the wrong one:

- YAML errors: PyYAML notices a missing ``:``, closing quote or bracket only on a later line,
  where the value it was reading ran into the next key. The line to fix is where that value
  began (and, for a quote never closed, where the quote opened).
- A check across keys (a model validator) is reported by pydantic on their common parent, e.g.
  ``llm``; its message quotes the offending value (``backend 'nope' ...``), so the line is that
  of the value under the parent.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ValidationError

from fabric.domain.errors import ConfigError

from .keys import keys_at, kinds_at
from .schema.base import KeyProblem

_PREFIXES = ("Value error, ", "Assertion failed, ")
"""What pydantic puts before the text of a ValueError or AssertionError a validator raised."""
_YAML_HINT = "check indentation and quoting around that line"
_QUOTED = re.compile(r"'([^'\n]{1,200})'")


def error_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message as a person should read it: the validator's own words,
    without pydantic's "Value error, " prefix."""
    message = str(error.get("msg", ""))
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def yaml_error(exc: yaml.YAMLError, source: str, text: str) -> ConfigError:
    """A YAML syntax error as a ConfigError at ``file:line:column`` of what to fix."""
    problem = getattr(exc, "problem", None) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ConfigError(f"{source}: not valid YAML: {problem}", hint=_YAML_HINT)
    where, problem = _what_to_fix(exc, text, mark, problem)
    return ConfigError(
        f"{source}:{where.line + 1}:{where.column + 1}: not valid YAML: {problem}",
        hint=_YAML_HINT,
    )


def _what_to_fix(
    exc: yaml.YAMLError, text: str, mark: yaml.Mark, problem: str
) -> tuple[yaml.Mark, str]:
    """Where PyYAML's error comes from, when that is before the line it noticed it on."""
    context = getattr(exc, "context", None) or ""
    opened = getattr(exc, "context_mark", None)
    noticed = mark.line + 1
    if "quoted scalar" in context and opened is not None and opened.line < mark.line:
        return (
            opened,
            f"the quoted value that starts here is never closed ({problem}, line {noticed})",
        )
    start = _runaway_value(text, mark.line)
    if start is not None:
        return start, (
            f"the value that starts here runs on to line {noticed}, where: {problem} (a ':' "
            "after a key, or a closing quote or bracket, may be missing)"
        )
    return mark, problem


def _runaway_value(text: str, line: int) -> yaml.Mark | None:
    """Where a value began that PyYAML read on into ``line`` (0-based), the line of the
    error: a missing ``:`` makes ``key value`` and the next line one plain value, a missing
    closing quote or bracket one quoted value or collection. None when none did."""
    start: yaml.Mark | None = None
    try:
        for token in yaml.scan(text):
            ends_here = isinstance(token, yaml.ScalarToken) and token.end_mark.line == line
            if ends_here and token.start_mark.line < line and start is None:
                start = token.start_mark
            if token.start_mark.line > line:
                break
    except yaml.YAMLError:
        pass  # the error itself: the tokens before it are what counts
    return start


class Places(Protocol):
    """Where the values of one parsed document were written: what a message points at."""

    @property
    def data(self) -> Any:
        """The parsed document (plain dicts and lists), as the model was given it."""
        ...

    def where(self, loc: Sequence[str | int]) -> str:
        """``file:line`` of the key at ``loc``, or what else set it (a variable, an option)."""
        ...

    def fix(self, locs: Sequence[Sequence[str | int]]) -> str:
        """What to do about mistakes at ``locs``: the hint of the error."""
        ...


class YamlPlaces:
    """The places of one YAML text: ``file:line`` of each key."""

    def __init__(self, source: str, text: str) -> None:
        self.source, self.text = source, text

    @functools.cached_property
    def data(self) -> Any:
        try:
            return yaml.safe_load(self.text)
        except yaml.YAMLError:
            return None

    @functools.cached_property
    def node(self) -> yaml.Node | None:
        return compose(self.text)

    def where(self, loc: Sequence[str | int]) -> str:
        line = line_in(self.node, loc)
        return f"{self.source}:{line}" if line else self.source

    def fix(self, locs: Sequence[Sequence[str | int]]) -> str:
        return "fix the key and run again"


def validation_error(
    exc: ValidationError,
    source: str,
    text: str,
    model: type[BaseModel],
    prefix: Sequence[str | int],
) -> ConfigError:
    """``located_error`` for a part of one YAML file (at ``prefix``)."""
    return located_error(exc, YamlPlaces(source, text), model, prefix)


def located_error(
    exc: ValidationError, places: Places, model: type[BaseModel], prefix: Sequence[str | int]
) -> ConfigError:
    """One message for all of a validation error's problems with the part of a document at
    ``prefix``, each with its place (``file:line``, variable or option), key path and what is
    wrong: an unknown key with the closest valid keys, a value not among its choices with
    them listed."""
    lines, locs = [], []
    for err in exc.errors(include_url=False):
        loc, msg = _problem(err, places.data, model, prefix)
        key = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"{places.where(loc)}: {key}: {msg}")
        locs.append(loc)
    head = "invalid configuration" if len(lines) > 1 else lines[0]
    body = "\n".join(f"  {ln}" for ln in lines) if len(lines) > 1 else ""
    return ConfigError(head + ("\n" + body if body else ""), hint=places.fix(locs))


def _problem(
    err: Mapping[str, Any], data: Any, root: type[BaseModel], prefix: Sequence[str | int]
) -> tuple[list[str | int], str]:
    """The key path (as written in the file) and the message of one pydantic error."""
    raw = list(err["loc"])
    loc = _without_tags(data, [*prefix, *raw])
    kind, msg = err["type"], error_message(err)
    if kind == "extra_forbidden":
        valid = keys_at(root, raw[:-1])
        listed = f" (valid keys: {', '.join(valid)})" if valid else ""
        return loc, f"unknown key{listed}{_mean(_closest(str(loc[-1]), valid, 3))}"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        given, kinds = err.get("ctx", {}).get("tag"), kinds_at(root, raw)
        if given is None:
            return loc, f"this entry names no kind; add kind: one of {', '.join(kinds)}"
        close = _closest(str(given), kinds, 1)
        return [*loc, "kind"], f"{given!r} is not one of {', '.join(kinds)}{_mean(close, repr)}"
    if kind == "literal_error":  # pydantic's message lists the choices
        given = err.get("input")
        choices = _QUOTED.findall(str(err.get("ctx", {}).get("expected")))
        return loc, f"{msg}, not {given!r}{_mean(_closest(str(given), choices, 1), repr)}"
    problem = err.get("ctx", {}).get("error")
    if isinstance(problem, KeyProblem):  # a problem at a key inside the value (a schema's)
        return [*loc, *problem.loc], msg
    if kind == "value_error":
        loc = _quoted_value(data, loc, msg) or loc
    return loc, msg


def _closest(word: str, words: Sequence[str], n: int) -> list[str]:
    import difflib  # only for a message about a mistake

    return difflib.get_close_matches(word, words, n=n, cutoff=0.6)


def _mean(close: Sequence[str], shown: Callable[[str], str] = str) -> str:
    """``; did you mean x or y?``, or nothing when nothing is close."""
    return f"; did you mean {' or '.join(map(shown, close))}?" if close else ""


def _without_tags(data: Any, loc: list[str | int]) -> list[str | int]:
    """The key path without the union tags pydantic puts in it: ``backends.mine.openai.x``
    is ``backends.mine.x`` in the file (``openai`` being that entry's ``kind``)."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(data, dict) and part not in data and data.get("kind") == part:
            continue
        out.append(part)
        data = data.get(part) if isinstance(data, dict) else None
    return out


def compose(text: str) -> yaml.Node | None:
    """The YAML node tree of ``text`` (None when it is no YAML), to find lines in."""
    try:
        return yaml.compose(text)
    except yaml.YAMLError:
        return None


def line_of(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML key at ``loc``, or of its nearest parent key that exists
    (so a missing ``packs.p.system_prompt`` points at ``p:``)."""
    return line_in(compose(text), loc)


def line_in(node: yaml.Node | None, loc: Sequence[str | int]) -> int | None:
    """``line_of`` in a composed text (``compose``), to look up many keys of one file."""
    best = None if node is None else node.start_mark.line + 1
    for part in loc:
        if node is None:
            break
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in _pairs(node):
                if key.value == str(part):
                    best, child = key.start_mark.line + 1, value
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
            best = child.start_mark.line + 1
        node = child
    return best


def _pairs(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.Node]]:
    """A mapping's keys and values, those it takes from ``<<: *anchor`` merges last (where
    they are written: at the anchor)."""
    merged: list[yaml.Node] = []
    for key, value in node.value:
        if key.tag.endswith(":merge"):
            merged += value.value if isinstance(value, yaml.SequenceNode) else [value]
        else:
            yield key, value
    for source in merged:
        if isinstance(source, yaml.MappingNode):
            yield from _pairs(source)


def _quoted_value(data: Any, loc: list[str | int], message: str) -> list[str | int] | None:
    """For a check across keys that pydantic reports on their parent (``loc``): the path of
    the value under it that the message quotes (``backend 'nope' is not ...``), if any."""
    for part in loc:
        data = _child(data, part)
    if not isinstance(data, dict | list):
        return None  # the error is about one value already
    for wanted in _QUOTED.findall(message):
        found = list(_find_values(data, wanted, []))
        named = [p for p in found if any(isinstance(k, str) and k in message for k in p)]
        if named or found:  # the one whose key the message names, else the first
            return [*loc, *(named or found)[0]]
    return None


def _child(data: Any, part: str | int) -> Any:
    if isinstance(data, dict):
        return data.get(part)
    if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        return data[part]
    return None


def _find_values(data: Any, wanted: str, path: list[str | int]) -> Iterator[list[str | int]]:
    """The paths, under ``data``, of the plain values (not keys) written as ``wanted``."""
    if isinstance(data, dict | list):
        items = data.items() if isinstance(data, dict) else enumerate(data)
        for part, child in items:
            yield from _find_values(child, wanted, [*path, part])
    elif isinstance(data, str | int | float) and str(data) == wanted:
        yield path
