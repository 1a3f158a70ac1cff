"""A specialist pack: what a builder returns and the loop runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator, SchemaError

from fabric.config.schema import SandboxSettings

from .ports import Tool

FINISH_TOOL = "finish_task"


def finish_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with a finish schema, or None: it must be valid JSON Schema (2020-12)
    describing an object, since tool arguments are always a JSON object."""
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    declared = schema.get("type", "object")
    if "object" not in (declared if isinstance(declared, list) else [declared]):
        return f"not usable: it must describe an object (type: object), not {declared!r}"
    return None


@dataclass(frozen=True)
class Pack:
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

    def __post_init__(self) -> None:
        names = [t.spec.name for t in self.tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pack {self.name!r} declares tool(s) twice: {', '.join(dupes)}")
        if FINISH_TOOL in names:
            raise ValueError(f"pack {self.name!r} must not declare {FINISH_TOOL!r} itself")
        problem = finish_schema_problem(self.finish_schema)
        if problem:
            raise ValueError(f"pack {self.name!r}: finish_schema is {problem}")

    def tool_names(self) -> list[str]:
        return [t.spec.name for t in self.tools] + [FINISH_TOOL]
