"""Pointing at the line of a mistake in a YAML file: a YAML syntax error, or a value pydantic
refused, becomes one message naming the file, the line (and key path) a person should look at.

Two places where the obvious line is the wrong one:

- YAML errors: PyYAML notices a missing ``:``, closing quote or bracket only on a later line,
  where the value it was reading ran into the next key. The line to fix is where that value
  began (and, for a quote never closed, where the quote opened).
- A check across keys (a model validator) is reported by pydantic on their common parent, e.g.
  ``llm``; its message quotes the offending value (``backend 'nope' ...``), so the line is that
  of the value under the parent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fabric.domain.errors import ConfigError

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


def validation_error(
    exc: ValidationError,
    source: str,
    text: str,
    model: type[BaseModel],
    prefix: Sequence[str | int],
) -> ConfigError:
    """One message for all of a validation error's problems, each with key path and line."""
    lines = []
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    for err in exc.errors(include_url=False):
        loc = _without_tags(data, [*prefix, *err["loc"]])
        msg = error_message(err)
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _valid_keys_hint(model, loc[len(prefix) :])
        elif isinstance(err.get("ctx", {}).get("error"), KeyProblem):
            loc = [*loc, *err["ctx"]["error"].loc]
        elif err["type"] == "value_error":
            loc = _quoted_value(text, loc, msg) or loc
        line = line_of(text, loc)
        where = f"{source}:{line}" if line else source
        key = ".".join(str(p) for p in loc) or "(top level)"
        lines.append(f"{where}: {key}: {msg}")
    head = "invalid configuration" if len(lines) > 1 else lines[0]
    body = "\n".join(f"  {ln}" for ln in lines) if len(lines) > 1 else ""
    return ConfigError(head + ("\n" + body if body else ""), hint="fix the key and run again")


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


def _valid_keys_hint(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    """For an unknown key, list the keys that the enclosing model accepts."""
    model: type[BaseModel] | None = root
    for part in list(loc)[:-1]:
        if model is None:
            return ""
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a dict key such as a pack name: stay on the value's model
        model = _model_of(field.annotation)
    return f" (valid keys: {', '.join(model.model_fields)})" if model else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _compose(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text)
    except yaml.YAMLError:
        return None


def line_of(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML key at ``loc``, or of its nearest parent key that exists
    (so a missing ``packs.p.system_prompt`` points at ``p:``)."""
    node = _compose(text)
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


def _quoted_value(text: str, loc: list[str | int], message: str) -> list[str | int] | None:
    """For a check across keys that pydantic reports on their parent (``loc``): the path of
    the value under it that the message quotes (``backend 'nope' is not ...``), if any."""
    node = _compose(text)
    for part in loc:
        node = _child(node, part)
    if not isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        return None  # the error is about one value already
    for wanted in _QUOTED.findall(message):
        found = list(_find_values(node, wanted, []))
        named = [p for p in found if any(isinstance(k, str) and k in message for k in p)]
        if named or found:  # the one whose key the message names, else the first
            return [*loc, *(named or found)[0]]
    return None


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        return next((v for k, v in _pairs(node) if k.value == str(part)), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    return None


def _find_values(node: yaml.Node, wanted: str, path: list[str | int]) -> Iterator[list[str | int]]:
    """The paths, under ``node``, of the scalar values (not keys) equal to ``wanted``."""
    if isinstance(node, yaml.ScalarNode):
        if node.value == wanted:
            yield path
        return
    children: list[tuple[str | int, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        children = [(str(k.value), v) for k, v in _pairs(node)]
    elif isinstance(node, yaml.SequenceNode):
        children = list(enumerate(node.value))
    for part, child in children:
        yield from _find_values(child, wanted, [*path, part])
