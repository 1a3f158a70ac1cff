"""Tool calls written as JSON in a model's text (the per-model ``text_tool_calls`` option):
the shapes small local models emit, what stays text, and that no input can break it."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import jsonschema
import pytest

from fabric.domain.models import ChatRequest, ChatResponse, ToolCall, Usage
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.infrastructure.llm.text_tool_calls import (
    apply_text_tool_calls,
    extract_tool_calls,
    tool_call_schema,
)
from fabric.testing import MockOpenAIServer, completion

NAMES = {"read_file", "run_command", "finish_task"}
READ = {"path": "src/app.py"}
QWEN_TEXT = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>'


def found(text: str, names: set[str] = NAMES) -> tuple[str, list[tuple[str, str, Any]]]:
    remaining, calls = extract_tool_calls(text, names)
    for call in calls:
        assert call.arguments_error is None and isinstance(call.arguments, dict)
        assert json.loads(call.raw_arguments) == call.arguments
    return remaining, [(c.id, c.name, c.arguments) for c in calls]


# --- shapes that count ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        '{"name": "read_file", "arguments": {"path": "src/app.py"}}',  # Qwen2.5 / Hermes
        '{"name": "read_file", "parameters": {"path": "src/app.py"}}',  # Llama 3.1 / 3.2
        '{"type": "function", "name": "read_file", "parameters": {"path": "src/app.py"}}',
        '{"tool": "read_file", "args": {"path": "src/app.py"}}',
        '{"tool_name": "read_file", "input": {"path": "src/app.py"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"src/app.py\\"}"}',  # string of JSON
        '{"type": "function", "function": {"name": "read_file", '
        '"arguments": {"path": "src/app.py"}}}',
        '{"function_call": {"name": "read_file", "arguments": "{\\"path\\":\\"src/app.py\\"}"}}',
        '{"tool_calls": [{"id": "x", "type": "function", "function": {"name": "read_file", '
        '"arguments": {"path": "src/app.py"}}}]}',
        '{\n  "name": "read_file",\n  "arguments": {\n    "path": "src/app.py"\n  }\n}',
    ],
)
def test_one_call_in_the_common_shapes(written: str) -> None:
    assert found(written) == ("", [("text_call_0", "read_file", READ)])


@pytest.mark.parametrize(
    ("text", "rest"),
    [
        ('```json\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n```', ""),
        (
            'Reading it.\n```\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n```',
            "Reading it.",
        ),
        (
            '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n</tool_call>',
            "",
        ),
        (
            '<TOOL_CALL>{"name": "read_file", "arguments": {"path": "src/app.py"}}</TOOL_CALL> ok',
            "ok",
        ),
        ('<tool_call>\n{"name": "read_file", "arguments": {"path": "src/app.py"}}', ""),  # unclosed
        ('<|python_tag|>{"name": "read_file", "parameters": {"path": "src/app.py"}}', ""),
        ('[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "src/app.py"}}]', ""),
        (
            'Let me look.\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\nThen fix.',
            "Let me look.\nThen fix.",
        ),
    ],
)
def test_fences_tags_and_markers_go_with_the_call(text: str, rest: str) -> None:
    assert found(text) == (rest, [("text_call_0", "read_file", READ)])


def test_several_calls_in_one_text_in_order() -> None:
    text = (
        "First the file.\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>\n'
        "Then the tests.\n"
        '<tool_call>\n{"name": "run_command", "arguments": {"command": "pytest"}}\n</tool_call>\n'
        '```json\n{"name": "read_file", "arguments": {"path": "b"}}\n'
        '{"name": "read_file", "arguments": {"path": "c"}}\n```'
    )
    remaining, calls = found(text)
    assert calls == [
        ("text_call_0", "read_file", {"path": "a"}),
        ("text_call_1", "run_command", {"command": "pytest"}),
        ("text_call_2", "read_file", {"path": "b"}),
        ("text_call_3", "read_file", {"path": "c"}),
    ]
    assert remaining == "First the file.\nThen the tests."


def test_a_json_list_of_calls() -> None:
    text = (
        '[{"name": "read_file", "arguments": {"path": "a"}}, '
        '{"name": "finish_task", "arguments": {}}]'
    )
    assert found(text)[1] == [
        ("text_call_0", "read_file", {"path": "a"}),
        ("text_call_1", "finish_task", {}),
    ]


def test_missing_arguments_are_empty() -> None:
    assert found('{"name": "finish_task"}')[1] == [("text_call_0", "finish_task", {})]


def test_braces_and_quotes_inside_strings_do_not_confuse_it() -> None:
    code = 'def f():\n    return {"a": "}"}  # {'
    text = "Note: { is a brace and } too. " + json.dumps(
        {"name": "run_command", "arguments": {"command": code}}
    )
    remaining, calls = found(text)
    assert calls == [("text_call_0", "run_command", {"command": code})]
    assert remaining == "Note: { is a brace and } too."


def test_a_call_after_broken_json_is_still_found() -> None:
    text = (
        '{"name": "read_file", "arguments": {"path": oops}}\n'
        '{"name": "read_file", "arguments": {"path": "b"}}'
    )
    remaining, calls = found(text)
    assert calls == [("text_call_0", "read_file", {"path": "b"})]
    assert remaining == '{"name": "read_file", "arguments": {"path": oops}}'


# --- what stays text --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "rm_everything", "arguments": {}}',  # not offered
        '{"name": "read_file", "arguments": "path=a"}',  # arguments not an object
        '{"name": "read_file", "arguments": "[1, 2]"}',
        '{"name": "read_file", "arguments": [1, 2]}',
        '{"name": "read_file", "arguments": {"path": "a"}, "reason": "x"}',  # other keys: data
        '{"name": "read_file", "tool": "run_command", "arguments": {}}',  # two names
        '{"name": "read_file", "arguments": {}, "parameters": {}}',  # two argument sets
        '{"name": 3, "arguments": {}}',
        '{"name": "read_file", "arguments": {"n": NaN}}',  # not JSON
        '{"name": "read_file", "arguments": {"n": 1e999}}',  # no finite number
        '[{"name": "read_file", "arguments": {}}, {"name": "nope", "arguments": {}}]',
        "[]",
        '{"action": {"name": "read_file", "arguments": {}}}',  # a call inside other JSON
        "{'name': 'read_file', 'arguments': {}}",  # a Python dict, not JSON
        '<think>\n{"name": "read_file", "arguments": {}}\n</think>',  # thinking aloud
        '<think>unclosed {"name": "read_file", "arguments": {}}',
        "The function read_file takes a path.",
    ],
)
def test_not_a_call(text: str) -> None:
    assert extract_tool_calls(text, NAMES) == (text, [])


def test_no_offered_tools_means_no_calls() -> None:
    text = '{"name": "read_file", "arguments": {}}'
    assert extract_tool_calls(text, []) == (text, [])


# --- never raises -----------------------------------------------------------------------------

ODD = [
    "",
    " ",
    "{",
    "}",
    "[",
    "[{",
    '{"',
    '{"name":',
    '{"name": "read_file", "arguments": {',
    '{"name": "read_file", "arguments": {"path": "unterminated',
    "\x00{\x00}",
    '\ud800{"name": "read_file"}\udfff',
    '"' * 1000,
    "\\" * 1000,
    "{" * 100_000,
    "[" * 100_000,
    '[{"name": ' * 20_000,
    '{"a": {"a": ' * 50_000,
    "```json\n" * 1000,
    "<tool_call>" * 1000,
    "x { y } " * 100_000,
    '{"name": "read_file", "arguments": {}}' * 5_000,
]


@pytest.mark.parametrize("text", ODD, ids=range(len(ODD)))
def test_odd_inputs_never_raise(text: str) -> None:
    remaining, calls = extract_tool_calls(text, NAMES)
    assert isinstance(remaining, str)
    assert all(c.name in NAMES and isinstance(c.arguments, dict) for c in calls)
    assert [c.id for c in calls] == [f"text_call_{i}" for i in range(len(calls))]


def test_a_thousand_random_mixtures_of_json_tokens_never_raise() -> None:
    tokens = [
        "{", "}", "[", "]", '"', ":", ",", "\\", "\n", " ", "```", "json", "<tool_call>",
        "</tool_call>", "<think>", '"name"', '"arguments"', '"read_file"', '"nope"', "{}",
        '{"path": "a"}', "1", "null", "é", "\ud83d", "NaN",
    ]  # fmt: skip
    rng = random.Random(1234)
    for _ in range(1000):
        text = "".join(rng.choice(tokens) for _ in range(rng.randint(0, 60)))
        remaining, calls = extract_tool_calls(text, NAMES)
        assert isinstance(remaining, str)
        assert all(c.name == "read_file" and isinstance(c.arguments, dict) for c in calls)


# --- applying it to a reply -------------------------------------------------------------------

TOOLS = [
    {"type": "function", "function": {"name": n, "description": "d", "parameters": {}}}
    for n in sorted(NAMES)
]


def reply(content: str | None, calls: tuple[ToolCall, ...] = ()) -> ChatResponse:
    return ChatResponse(
        message={"role": "assistant", "content": content},
        content=content,
        tool_calls=calls,
        usage=Usage(3, 4),
        finish_reason="stop",
        model="qwen2.5-coder:0.5b",
        warnings=("w",),
    )


def test_a_reply_with_calls_in_its_text_gets_native_calls_and_history() -> None:
    text = f"I will read it.\n{QWEN_TEXT}"
    out = apply_text_tool_calls(reply(text), TOOLS)
    assert out.tool_calls_from_text is True
    assert out.content == "I will read it."
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [
        ("text_call_0", "read_file", {"path": "a"})
    ]
    assert out.message == {
        "role": "assistant",
        "content": "I will read it.",
        "tool_calls": [
            {
                "id": "text_call_0",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a"}'},
            }
        ],
    }
    assert (out.usage, out.finish_reason, out.model, out.warnings) == (
        Usage(3, 4),
        "stop",
        "qwen2.5-coder:0.5b",
        ("w",),
    )


def test_only_call_text_leaves_no_content() -> None:
    out = apply_text_tool_calls(reply('{"name": "finish_task", "arguments": {}}'), TOOLS)
    assert out.content is None and out.message["content"] is None


def test_native_calls_win_and_plain_text_is_untouched() -> None:
    native = reply('{"name": "read_file", "arguments": {}}', (ToolCall("c", "run_command", {}),))
    assert apply_text_tool_calls(native, TOOLS) is native
    plain = reply("All done.")
    assert apply_text_tool_calls(plain, TOOLS) is plain
    assert apply_text_tool_calls(reply(None), TOOLS).tool_calls == ()
    calls_text = reply('{"name": "read_file", "arguments": {}}')
    assert apply_text_tool_calls(calls_text, []) is calls_text


# --- the schema for constrained calls ---------------------------------------------------------


def test_the_constraint_schema_admits_exactly_calls_of_offered_tools() -> None:
    """A pydantic-made schema with a nested model (``$defs``/``$ref``) keeps resolving."""
    edit = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "change": {"$ref": "#/$defs/Change"}},
        "required": ["path", "change"],
        "$defs": {
            "Change": {
                "type": "object",
                "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["old", "new"],
            }
        },
    }
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": "edit_file", "parameters": edit}},
        {"type": "function", "function": {"name": "finish_task"}},  # no parameters at all
        {"type": "not a function"},
    ]
    schema = tool_call_schema(tools)
    validator = jsonschema.Draft202012Validator(schema)
    good = [
        {"name": "edit_file", "arguments": {"path": "a", "change": {"old": "x", "new": "y"}}},
        {"name": "finish_task", "arguments": {"anything": 1}},
    ]
    bad = [
        {"name": "edit_file", "arguments": {"path": "a", "change": {"old": "x"}}},
        {"name": "edit_file", "arguments": {"path": "a"}},
        {"name": "delete_all", "arguments": {}},
        {"name": "finish_task"},
        {"name": "finish_task", "arguments": {}, "reason": "extra keys are text, not a call"},
        "finish_task",
    ]
    assert all(validator.is_valid(call) for call in good)
    assert not any(validator.is_valid(call) for call in bad)
    assert "Change" in schema["$defs"] and '"$defs":' not in json.dumps(schema["anyOf"])
    for call in good:  # what the schema admits, extract_tool_calls reads as that call
        _, (parsed,) = extract_tool_calls(json.dumps(call), {"edit_file", "finish_task"})
        assert (parsed.name, parsed.arguments) == (call["name"], call["arguments"])


# --- through the OpenAI-compatible client -----------------------------------------------------


def chat(answer: httpx.Response, *, stream: bool, text_tool_calls: bool) -> ChatResponse:
    async def main() -> ChatResponse:
        client = OpenAIChatClient(
            base_url="http://llm.test/v1",
            model="m",
            stream=stream,
            text_tool_calls=text_tool_calls,
            transport=httpx.MockTransport(lambda request: answer),
        )
        try:
            return await client.chat(ChatRequest([{"role": "user", "content": "x"}], TOOLS))
        finally:
            await client.aclose()

    return asyncio.run(main())


def streamed(text: str) -> httpx.Response:
    events = [
        {"choices": [{"index": 0, "delta": {"content": text[i : i + 5]}}]}
        for i in range(0, len(text), 5)
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


@pytest.mark.parametrize("stream", [False, True])
def test_the_client_parses_text_calls_only_when_the_option_is_on(stream: bool) -> None:
    def answer() -> httpx.Response:
        return streamed(QWEN_TEXT) if stream else httpx.Response(200, json=completion(QWEN_TEXT))

    on = chat(answer(), stream=stream, text_tool_calls=True)
    assert on.tool_calls_from_text and on.content is None
    assert [(c.name, c.arguments) for c in on.tool_calls] == [("read_file", {"path": "a"})]
    off = chat(answer(), stream=stream, text_tool_calls=False)
    assert not off.tool_calls_from_text and off.tool_calls == () and off.content == QWEN_TEXT


def test_the_history_after_text_calls_is_accepted_by_a_server_with_unique_ids() -> None:
    """MockOpenAIServer answers 400 to a history whose tool results match no call."""
    script = [completion(QWEN_TEXT), completion(QWEN_TEXT), completion("done")]
    with MockOpenAIServer(script) as server:

        async def main() -> ChatResponse:
            client = OpenAIChatClient(base_url=server.base_url, model="m", text_tool_calls=True)
            history: list[dict[str, Any]] = [{"role": "user", "content": "read a"}]
            try:
                while True:
                    response = await client.chat(ChatRequest(history, TOOLS))
                    if not response.tool_calls:
                        return response
                    history.append(response.message)
                    for call in response.tool_calls:
                        history.append({"role": "tool", "tool_call_id": call.id, "content": "t"})
            finally:
                await client.aclose()

        last = asyncio.run(main())
    assert last.content == "done" and len(server.requests) == 3
    sent = server.requests[2]["messages"]
    assert [m["tool_calls"][0]["id"] for m in sent if m.get("tool_calls")] == [
        "text_call_0",
        "text_call_1",
    ]


def test_ids_continue_after_the_calls_already_in_the_history() -> None:
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}]},
        {"role": "tool", "tool_call_id": "a", "content": "."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "text_call_2"}]},
    ]
    text = '{"name": "read_file", "arguments": {}} {"name": "finish_task", "arguments": {}}'
    out = apply_text_tool_calls(reply(text), TOOLS, history)
    assert [c.id for c in out.tool_calls] == ["text_call_3", "text_call_4"]
    assert extract_tool_calls(text, NAMES, first=7)[1][1].id == "text_call_8"
