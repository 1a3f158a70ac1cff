"""A pack is checked when it is built, so a broken one fails with its name, not mid-run."""

from __future__ import annotations

from typing import Any

import pytest

from fabric.application.pack import FINISH_TOOL, Pack, finish_schema_problem
from fabric.infrastructure.tools.function_tool import FunctionTool


def note(text: str) -> str:
    """Take a note.

    Args:
        text: The note.
    """
    return text


def test_a_well_formed_pack_lists_its_tools_and_finish_task() -> None:
    pack = Pack("p", "d", "s", [FunctionTool(note)], {"type": "object"})
    assert pack.tool_names() == ["note", FINISH_TOOL]


def test_a_tool_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="declares tool\\(s\\) twice: note"):
        Pack("p", "d", "s", [FunctionTool(note), FunctionTool(note)], {"type": "object"})


def test_a_pack_cannot_bring_its_own_finish_task() -> None:
    with pytest.raises(ValueError, match="must not declare 'finish_task'"):
        Pack("p", "d", "s", [FunctionTool(note, name=FINISH_TOOL)], {"type": "object"})


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "objekt"}, "not a valid JSON Schema"),
        ({"properties": {"a": {"type": 5}}}, "not a valid JSON Schema"),
        ({"required": "answer"}, "not a valid JSON Schema"),
        ({"type": "array"}, "must describe an object"),
        ({"type": "string"}, "must describe an object"),
    ],
)
def test_a_finish_schema_that_can_never_be_met_is_refused(
    schema: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ValueError, match=expected) as info:
        Pack("broken", "d", "s", [], schema)
    assert "'broken'" in str(info.value)


@pytest.mark.parametrize(
    "schema", [{}, {"type": "object"}, {"type": ["object", "null"]}, {"properties": {}}]
)
def test_object_schemas_are_accepted(schema: dict[str, Any]) -> None:
    assert Pack("p", "d", "s", [], schema).finish_schema == schema


def test_a_finish_schema_is_judged_the_same_every_time() -> None:
    """The verdict on a schema is kept by its JSON text: asked again, for the same schema or an
    equal one, it is the same; a changed schema is judged anew."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "string"}}}
    for _ in range(3):
        assert finish_schema_problem(schema) is None
        assert finish_schema_problem({**schema}) is None
    schema["properties"]["a"]["type"] = 5
    for _ in range(3):
        assert "not a valid JSON Schema" in (finish_schema_problem(schema) or "")
    odd = {"type": "object", "properties": {"a": {"default": float("nan")}}}
    assert finish_schema_problem(odd) is None  # no JSON text: checked, not kept
