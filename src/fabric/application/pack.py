"""A specialist pack: what a builder returns and the loop runs."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from msgspec import Struct, field
from pydantic import BaseModel, ValidationError

from fabric.config.schema import SandboxSettings

from .context import ToolContext
from .ports import Tool
from .verify import Verifier

FINISH_TOOL = "finish_task"


class Briefing(Struct, frozen=True):
    """What a brief found: the text told to the model, and workspace files the run's file
    tools keep as they are (``keep``, workspace-relative; ``why`` is said when a tool is
    refused one), e.g. the tests that fail at the start of a fix."""

    text: str
    keep: tuple[str, ...] = ()
    why: str = ""
    ran: Mapping[str, int] = field(default_factory=dict)
    """Commands the brief ran and their exit codes (e.g. the project's tests), so a check
    made at the end knows whether it passed before the run changed anything."""


Brief = Callable[[ToolContext], Awaitable["str | Briefing"]]
"""What the pack tells the model about the workspace before its first step (appended to the
task); e.g. the files and how the tests fare (``infrastructure/tools/briefs.py``). A plain
string is a ``Briefing`` that keeps nothing."""


class Appended(Struct, frozen=True):
    """What a convention adds to one tool call's output (``AfterCall``): ``text`` goes to the
    model after the tool's own output; ``meta`` is recorded in the call's ``tool_result``
    (``additions[name]``)."""

    text: str
    meta: Mapping[str, Any] = field(default_factory=dict)


AfterCall = Callable[[str, Mapping[str, Any], ToolContext], Awaitable["Appended | None"]]
"""Told of each tool call that ran and succeeded (the tool's name, its arguments, the run's
context with the call's step and id), before its output goes to the model; returns what to
append to that output, or None. Never called for a call a resumed run re-drives from its log
or a replay answers from it: their recorded outputs hold what was appended then."""

FinishCheck = Callable[[Mapping[str, Any]], list[str]]
"""The problems with finish_task arguments, each ``path: message``; empty when valid."""


def finish_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with a finish schema, or None: it must be valid JSON Schema (2020-12)
    describing an object, since tool arguments are always a JSON object. Says where in the
    schema when the problem is below its top (``finish_schema_issue``)."""
    issue = finish_schema_issue(schema)
    if issue is None:
        return None
    at, problem = issue
    return f"{problem} (at {'.'.join(map(str, at))})" if at else problem


SchemaIssue = tuple[tuple[str | int, ...], str]
"""Where in a schema a problem is (the path of keys to it; empty: the whole schema), and
what it is."""


def finish_schema_issue(schema: Mapping[str, Any]) -> SchemaIssue | None:
    """``finish_schema_problem`` with the place apart from the words. The answer is kept per
    schema (by its JSON text): a pack is checked on every load, each run and replay, and
    twice or three times a load; the check costs about a millisecond."""
    try:
        key = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError):  # no JSON text to know it by: check it each time
        return _schema_issue(schema)
    if key not in _SCHEMA_ISSUES:
        if len(_SCHEMA_ISSUES) >= 64:
            _SCHEMA_ISSUES.clear()
        _SCHEMA_ISSUES[key] = _schema_issue(schema)
    return _SCHEMA_ISSUES[key]


_SCHEMA_ISSUES: dict[str, SchemaIssue | None] = {}


def _schema_issue(schema: Mapping[str, Any]) -> SchemaIssue | None:
    from jsonschema import Draft202012Validator, SchemaError  # ~50 ms: only when needed

    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        return tuple(exc.absolute_path), f"not a valid JSON Schema: {exc.message}"
    declared = schema.get("type", "object")
    if "object" not in (declared if isinstance(declared, list) else [declared]):
        where: tuple[str | int, ...] = ("type",) if "type" in schema else ()
        return where, f"not usable: it must describe an object (type: object), not {declared!r}"
    return None


def schema_check(schema: Mapping[str, Any]) -> FinishCheck:
    """Check arguments against a JSON Schema (for packs declared in YAML)."""
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(dict(schema))

    def check(arguments: Mapping[str, Any]) -> list[str]:
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        return [
            f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}"
            for e in errors
        ]

    return check


def model_check(model: type[BaseModel]) -> FinishCheck:
    """Check arguments against the pydantic model the finish schema was made from, strictly
    (no coercion), which is what that JSON Schema says and costs no jsonschema import."""

    def check(arguments: Mapping[str, Any]) -> list[str]:
        try:
            model.model_validate(dict(arguments), strict=True)
        except ValidationError as exc:
            return [
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
        return []

    return check


class Pack(Struct, frozen=True):
    """Everything the loop needs to run one kind of specialist.

    ``finish_schema`` is the JSON Schema of the run's final output: the parameters of the
    ``finish_task`` tool. ``finish_description`` is that tool's description.
    """

    name: str
    description: str
    system_prompt: str
    tools: Sequence[Tool]
    finish_schema: Mapping[str, Any]
    finish_description: str = "Finish the task and return the final result."
    model: str | None = None
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    finish_model: type[BaseModel] | None = None
    """The pydantic model ``finish_schema`` was generated from, if any: arguments are then
    checked with it (strictly) instead of a JSON Schema validator."""
    brief: Brief | None = None
    """Looks at the workspace before the first step; its text is added to the task and kept
    in the runlog's ``brief`` event (a replay sends the recorded text)."""
    verifiers: Sequence[Verifier] = ()
    """Checks of the work run after a valid finish_task, before the run may end
    ``completed`` (``verify.py``): e.g. the project's tests, or that cited pages were read."""
    after_calls: Mapping[str, AfterCall] = field(default_factory=dict)
    """What fabric's conventions add to tool outputs, by the name of the convention
    (``additions.py``): each is asked after every tool call that ran."""

    def __post_init__(self) -> None:
        names = [t.spec.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pack {self.name!r} declares tool(s) twice: {', '.join(dupes)}")
        if FINISH_TOOL in names:
            raise ValueError(f"pack {self.name!r} must not declare {FINISH_TOOL!r} itself")
        problem = None if self.finish_model else finish_schema_problem(self.finish_schema)
        if problem:
            raise ValueError(f"pack {self.name!r}: finish_schema is {problem}")

    def tool_names(self) -> list[str]:
        return [t.spec.name for t in self.tools] + [FINISH_TOOL]

    def finish_check(self) -> FinishCheck:
        if self.finish_model is not None:
            return model_check(self.finish_model)
        return schema_check(self.finish_schema)
