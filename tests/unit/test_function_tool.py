"""FunctionTool: the JSON schema a model sees comes from the signature and docstring; calls
are validated before the function runs; results come back as text."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from fabric.application.context import ToolContext
from fabric.config.schema import WebSettings
from fabric.domain.errors import ToolArgumentError, ToolError
from fabric.infrastructure.tools.function_tool import FunctionTool, parse_docstring


def call(tool: FunctionTool, ctx: ToolContext, **arguments: Any) -> str:
    return asyncio.run(tool(arguments, ctx))


SEARCHES: list[str] = []
"""Every call that reached ``search``."""


def search(
    ctx: ToolContext,
    query: str,
    limit: int = 10,
    kinds: list[str] | None = None,
    mode: Literal["fast", "deep"] = "fast",
    score: float = 0.5,
    exact: bool = False,
) -> str:
    """Search the notes.

    Longer explanation that the model should also see.

    Args:
        query: Words to look for.
        limit (int): How many hits at most;
            more lines of the same description.
        kinds: Only these kinds of note.
        mode: How hard to look.
        score: Lowest score kept.
        exact: Match whole words only.

    Returns:
        The hits, one a line.

    Raises:
        ToolError: when the index is missing.
    """
    SEARCHES.append(query)
    return f"{query}|{limit}|{kinds}|{mode}|{score}|{exact}|{ctx.run_id}"


# --- the schema ---------------------------------------------------------------------------


def test_schema_has_types_required_defaults_and_docstring_descriptions() -> None:
    spec = FunctionTool(search).spec
    assert spec.name == "search"
    assert (
        spec.description
        == "Search the notes.\n\nLonger explanation that the model should also see."
    )
    schema = spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert list(props) == ["query", "limit", "kinds", "mode", "score", "exact"]  # ctx hidden
    assert props["query"] == {"type": "string", "description": "Words to look for."}
    assert props["limit"] == {
        "type": "integer",
        "default": 10,
        "description": "How many hits at most; more lines of the same description.",
    }
    assert props["kinds"]["anyOf"] == [
        {"type": "array", "items": {"type": "string"}},
        {"type": "null"},
    ]
    assert props["mode"]["enum"] == ["fast", "deep"]
    assert props["score"]["type"] == "number" and props["exact"]["type"] == "boolean"
    assert props["exact"]["description"] == "Match whole words only."
    assert "title" not in schema and all("title" not in p for p in props.values())
    assert "The hits" not in json.dumps(schema) and "index is missing" not in json.dumps(schema)


def test_the_spec_is_an_openai_tool_entry() -> None:
    entry = FunctionTool(search).spec.as_openai()
    assert entry["type"] == "function"
    assert entry["function"]["name"] == "search"
    assert entry["function"]["parameters"]["required"] == ["query"]
    json.dumps(entry)  # plain JSON, ready for the wire


def test_name_override_and_missing_docstring() -> None:
    def undocumented(x: int) -> str:
        return str(x)

    tool = FunctionTool(undocumented, name="count")
    assert tool.spec.name == "count" and tool.spec.description == "count"
    assert tool.spec.parameters["properties"]["x"] == {"type": "integer"}


def test_bound_parameters_are_hidden_and_passed(ctx: ToolContext) -> None:
    seen: list[WebSettings] = []

    def fetch(ctx: ToolContext, url: str, web: WebSettings) -> str:
        """Fetch a page.

        Args:
            url: Where.
            web: Settings (bound by the pack).
        """
        seen.append(web)
        return url

    settings = WebSettings(max_bytes=4096)
    tool = FunctionTool(fetch, bind={"web": settings, "not_a_parameter": 1})
    assert list(tool.spec.parameters["properties"]) == ["url"]
    assert call(tool, ctx, url="http://x") == "http://x"
    assert seen == [settings]
    with pytest.raises(ToolArgumentError, match="web: Extra inputs are not permitted"):
        call(tool, ctx, url="http://x", web={"max_bytes": 1})  # the model cannot override it


def test_tools_made_from_one_function_share_nothing_they_could_change(ctx: ToolContext) -> None:
    """A function's shape is read once and kept; each tool still gets its own bound values,
    its own name and its own copy of the schema."""
    seen: list[WebSettings] = []

    def fetch(ctx: ToolContext, url: str, web: WebSettings | None = None) -> str:
        """Fetch a page.

        Args:
            url: Where.
            web: Settings (bound by the pack).
        """
        seen.append(web or WebSettings())
        return url

    first, second = WebSettings(max_bytes=4096), WebSettings(max_bytes=8192)
    one = FunctionTool(fetch, bind={"web": first})
    two = FunctionTool(fetch, bind={"web": second})
    free = FunctionTool(fetch, name="fetch_any")
    assert one.spec == two.spec and list(one.spec.parameters["properties"]) == ["url"]
    assert list(free.spec.parameters["properties"]) == ["url", "web"]
    assert free.spec.name == "fetch_any"
    one.spec.parameters["properties"]["url"]["description"] = "changed"
    assert two.spec.parameters["properties"]["url"]["description"] == "Where."
    assert FunctionTool(fetch).spec.parameters["properties"]["url"]["description"] == "Where."
    call(one, ctx, url="a")
    call(two, ctx, url="b")
    assert seen == [first, second]


def test_parameters_named_like_pydantic_attributes_work(ctx: ToolContext) -> None:
    """``schema``, ``json``, ``copy`` and ``model_*`` are fine names for tool parameters."""

    def query(schema: str, json: bool = False, copy: int = 1, model_name: str = "m") -> str:
        """Query.

        Args:
            schema: Database schema.
        """
        return f"{schema}/{json}/{copy}/{model_name}"

    tool = FunctionTool(query)
    props = tool.spec.parameters["properties"]
    assert list(props) == ["schema", "json", "copy", "model_name"]
    assert props["schema"]["description"] == "Database schema."
    assert call(tool, ctx, schema="s", json=True, copy=2, model_name="x") == "s/True/2/x"
    with pytest.raises(ToolArgumentError, match="schema: Field required"):
        call(tool, ctx)


def test_context_is_passed_wherever_it_is_declared(ctx: ToolContext) -> None:
    def where(path: str, ctx: ToolContext) -> str:
        """Where am I."""
        return f"{ctx.workspace}/{path}"

    tool = FunctionTool(where)
    assert list(tool.spec.parameters["properties"]) == ["path"]
    assert call(tool, ctx, path="a") == f"{ctx.workspace}/a"


def test_an_annotation_that_cannot_be_resolved_is_named() -> None:
    def local(x: Undefined) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Uses a type that does not exist at module level."""
        return ""

    with pytest.raises(TypeError, match="tool local: cannot resolve its type hints"):
        FunctionTool(local)


def test_signatures_that_cannot_be_described_are_refused() -> None:
    def star(*names: str) -> str:
        return ""

    def kw(**options: str) -> str:
        return ""

    def positional(x: int, /) -> str:
        return ""

    for fn in (star, kw, positional):
        with pytest.raises(TypeError, match=fn.__name__):
            FunctionTool(fn)


# --- validation before the call --------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "problems"),
    [
        ({}, ["query: Field required"]),
        ({"query": 3}, ["query: Input should be a valid string"]),
        ({"query": "q", "limit": "lots"}, ["limit: Input should be a valid integer"]),
        ({"query": "q", "mode": "slow"}, ["mode: Input should be 'fast' or 'deep'"]),
        ({"query": "q", "kinds": "note"}, ["kinds: Input should be a valid list"]),
        ({"query": "q", "ctx": {}}, ["ctx: Extra inputs are not permitted"]),
        (
            {"limit": 1.5, "verbose": True},
            ["query: Field required", "limit: Input should be a valid integer", "verbose:"],
        ),
    ],
)
def test_bad_arguments_are_refused_before_the_function_runs(
    ctx: ToolContext, arguments: dict[str, Any], problems: list[str]
) -> None:
    SEARCHES.clear()
    tool = FunctionTool(search)
    with pytest.raises(ToolArgumentError) as info:
        asyncio.run(tool(arguments, ctx))
    assert SEARCHES == []
    error = info.value
    assert isinstance(error, ToolError)
    assert error.message.startswith("invalid arguments for search: ")
    for problem in problems:
        assert problem in error.message
    assert "call search again" in error.hint


def test_valid_arguments_arrive_typed_with_defaults_filled_in(ctx: ToolContext) -> None:
    tool = FunctionTool(search)
    assert call(tool, ctx, query="cats") == "cats|10|None|fast|0.5|False|test-run"
    out = call(tool, ctx, query="x", limit="3", kinds=["a"], mode="deep", score=1, exact=True)
    assert out == "x|3|['a']|deep|1.0|True|test-run"  # "3" and 1 were coerced as declared


class Edit(BaseModel):
    line: int
    text: str


def test_nested_models_are_validated_and_passed_as_models(ctx: ToolContext) -> None:
    def apply(edits: list[Edit]) -> str:
        """Apply edits.

        Args:
            edits: The changes, in order.
        """
        return ",".join(f"{e.line}:{e.text}" for e in edits)

    tool = FunctionTool(apply)
    assert call(tool, ctx, edits=[{"line": 1, "text": "a"}, {"line": 2, "text": "b"}]) == "1:a,2:b"
    with pytest.raises(ToolArgumentError, match=r"edits\.0\.line: Field required"):
        call(tool, ctx, edits=[{"text": "a"}])


# --- running ---------------------------------------------------------------------------------


def test_sync_tools_run_in_a_worker_thread(ctx: ToolContext) -> None:
    def where() -> str:
        """Report the thread."""
        return str(threading.get_ident())

    async def main() -> tuple[str, int]:
        return await FunctionTool(where)({}, ctx), threading.get_ident()

    tool_thread, loop_thread = asyncio.run(main())
    assert int(tool_thread) != loop_thread


def test_a_slow_sync_tool_does_not_block_other_work(ctx: ToolContext) -> None:
    release = threading.Event()

    def wait_for_release() -> str:
        """Block until released."""
        assert release.wait(10), "the event loop was blocked"
        return "released"

    async def main() -> str:
        pending = asyncio.create_task(FunctionTool(wait_for_release)({}, ctx))
        await asyncio.sleep(0.01)  # the loop is free while the tool blocks its thread
        release.set()
        return await pending

    assert asyncio.run(main()) == "released"


def test_async_tools_are_awaited_on_the_loop(ctx: ToolContext) -> None:
    async def later(ctx: ToolContext, n: int) -> str:
        """Wait a moment.

        Args:
            n: A number.
        """
        await asyncio.sleep(0)
        return f"{n}@{threading.get_ident()}"

    async def main() -> tuple[str, int]:
        return await FunctionTool(later)({"n": 4}, ctx), threading.get_ident()

    out, loop_thread = asyncio.run(main())
    assert out == f"4@{loop_thread}"


@dataclass
class Point:
    x: int
    y: int


class Summary(BaseModel):
    title: str
    tags: list[str]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        ("", ""),
        ({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2]}),
        ([1, "two", None], [1, "two", None]),
        (42, 42),
        (None, None),
        (True, True),
        (Summary(title="t", tags=["x"]), {"title": "t", "tags": ["x"]}),
        (Point(1, 2), {"x": 1, "y": 2}),
        (Path("a/b.txt"), "a/b.txt"),
        ({"text": "grüße 日本"}, {"text": "grüße 日本"}),
    ],
)
def test_results_that_are_not_text_come_back_as_json(
    ctx: ToolContext, value: Any, expected: Any
) -> None:
    def give() -> Any:
        """Give the value."""
        return value

    out = call(FunctionTool(give), ctx)
    if isinstance(value, str):
        assert out == value
    else:
        assert json.loads(out) == expected
    if isinstance(value, dict) and "text" in value:
        assert "grüße 日本" in out  # readable, not \\u-escaped


def test_errors_raised_by_the_tool_pass_through_unchanged(ctx: ToolContext) -> None:
    def refuse(path: str) -> str:
        """Refuse."""
        raise ToolError(f"no access to {path}", hint="ask nicely")

    with pytest.raises(ToolError, match="no access to x") as info:
        call(FunctionTool(refuse), ctx, path="x")
    assert info.value.hint == "ask nicely"


# --- docstrings ------------------------------------------------------------------------------


def test_parse_docstring_sections_do_not_leak_into_arguments() -> None:
    description, args = parse_docstring(
        """Summary line.

        Details.

        Args:
            path (str): The path.
            mode: One of
                'r' or 'w'.

        Note:
            Not an argument.

        Example:
            tool(path="a")
        """
    )
    assert description == "Summary line.\n\nDetails."
    assert args == {"path": "The path.", "mode": "One of 'r' or 'w'."}


def test_parse_docstring_of_nothing() -> None:
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Just a summary.") == ("Just a summary.", {})
