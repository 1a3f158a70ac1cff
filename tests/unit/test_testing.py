"""The test helpers fabric ships for pack authors behave like the real thing: the scripted
client answers in order, records what it got, and refuses histories a real server would
refuse; the mock server speaks the OpenAI API over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pytest

from fabric.domain.errors import ModelError, ModelResponseError
from fabric.domain.models import ChatRequest, ChatResponse, Message, Usage
from fabric.testing import (
    FunctionChatClient,
    MockOpenAIServer,
    ScriptedChatClient,
    check_history,
    completion,
    reply,
    tool_call,
    tool_calls,
)

SYSTEM: Message = {"role": "system", "content": "s"}
USER: Message = {"role": "user", "content": "u"}


def assistant_calling(*ids: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ],
    }


def tool_result(call_id: str, content: Any = "ok") -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# --- building scripted turns -------------------------------------------------------------------


def test_reply_is_plain_text_with_default_or_given_usage() -> None:
    answer = reply("hi")
    assert answer.message == {"role": "assistant", "content": "hi"}
    assert answer.content == "hi" and answer.tool_calls == () and answer.finish_reason == "stop"
    assert answer.usage == Usage(10, 5)
    assert reply("x", usage=Usage(1, 2)).usage == Usage(1, 2)


def test_tool_call_keyword_and_mapping_forms_are_the_same() -> None:
    by_keywords = tool_call("write_file", path="a.txt", content="hi")
    by_mapping = tool_call("write_file", {"path": "a.txt", "content": "hi"})
    assert by_keywords == by_mapping
    (call,) = by_keywords.tool_calls
    assert (call.id, call.name, call.arguments) == (
        "call_0",
        "write_file",
        {"path": "a.txt", "content": "hi"},
    )
    wire = by_keywords.message["tool_calls"][0]
    assert wire["function"]["name"] == "write_file"
    assert json.loads(wire["function"]["arguments"]) == {"path": "a.txt", "content": "hi"}
    assert by_keywords.finish_reason == "tool_calls"


def test_tool_call_with_no_arguments_sends_an_empty_object() -> None:
    (call,) = tool_call("list_files").tool_calls
    assert call.arguments == {} and call.raw_arguments == "{}"
    (empty,) = tool_call("list_files", "").tool_calls  # as the HTTP client reads ""
    assert empty.arguments == {} and empty.raw_arguments == "{}"


@pytest.mark.parametrize(
    ("raw", "error"),
    [("{broken", "invalid JSON"), ("[1]", "expected an object"), ('{"a": NaN}', "invalid JSON")],
)
def test_a_raw_string_sends_malformed_arguments_as_a_model_would(raw: str, error: str) -> None:
    (call,) = tool_call("f", raw).tool_calls
    assert call.arguments is None and call.raw_arguments == raw
    assert call.arguments_error is not None and error in call.arguments_error
    assert tool_call("f", raw).message["tool_calls"][0]["function"]["arguments"] == raw


def test_tool_calls_numbers_ids_and_takes_usage() -> None:
    turn = tool_calls(("a", {}), ("b", {"x": 1}), usage=Usage(7, 3))
    assert [c.id for c in turn.tool_calls] == ["call_0", "call_1"]
    assert [c["id"] for c in turn.message["tool_calls"]] == ["call_0", "call_1"]
    assert turn.usage == Usage(7, 3)


# --- the scripted client -------------------------------------------------------------------------


def test_scripted_client_answers_in_order_and_records_snapshots() -> None:
    first, second = reply("one"), reply("two")
    client = ScriptedChatClient([first, second], model="my-model")
    history = [SYSTEM, USER]

    async def main() -> list[ChatResponse]:
        answers = [await client.chat(ChatRequest(history, [{"type": "function"}]))]
        history.extend([first.message, {"role": "user", "content": "more"}])
        answers.append(await client.chat(ChatRequest(history, [])))
        await client.aclose()
        return answers

    assert asyncio.run(main()) == [first, second]
    assert client.model == "my-model" and client.closed
    assert client.requests[0] == ([SYSTEM, USER], [{"type": "function"}])  # not the later list
    assert len(client.requests[1][0]) == 4


def test_scripted_client_raises_scripted_errors_and_says_when_the_script_ends() -> None:
    client = ScriptedChatClient([ModelError("boom", hint="h")])

    async def ask() -> ChatResponse:
        return await client.chat(ChatRequest([SYSTEM, USER], []))

    with pytest.raises(ModelError, match="boom"):
        asyncio.run(ask())
    with pytest.raises(ModelResponseError, match="the script has 1 responses but step 2") as info:
        asyncio.run(ask())
    assert "add responses" in info.value.hint


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([SYSTEM, USER, assistant_calling("a"), USER], "before tool call(s) ['a'] got results"),
        ([SYSTEM, USER, assistant_calling("a")], "ends before tool call(s) ['a'] got results"),
        ([SYSTEM, USER, assistant_calling("a", "b"), tool_result("a"), USER], "['b']"),
        ([SYSTEM, USER, tool_result("a")], "answers tool call 'a', which is not pending"),
        ([SYSTEM, USER, assistant_calling("a"), tool_result("b")], "'b', which is not pending"),
        ([SYSTEM, USER, assistant_calling("a"), tool_result("a"), tool_result("a")], "not pending"),
        ([SYSTEM, USER, assistant_calling("a"), tool_result("a", None)], "must be a string"),
        ([SYSTEM, {"role": "robot", "content": "x"}], "unknown role 'robot'"),
        ([SYSTEM, "not a message"], "unknown role None"),
    ],
)
def test_histories_a_server_would_refuse_are_refused(history: list[Any], problem: str) -> None:
    found = check_history(history)
    assert found is not None and problem in found
    client = ScriptedChatClient([reply("never")])
    with pytest.raises(ModelError) as info:
        asyncio.run(client.chat(ChatRequest(history, [])))
    assert info.value.status_code == 400 and problem in info.value.message


@pytest.mark.parametrize(
    "history",
    [
        [SYSTEM, USER],
        [SYSTEM, USER, {"role": "assistant", "content": "hi"}, USER],
        [SYSTEM, USER, assistant_calling("a", "b"), tool_result("b"), tool_result("a"), USER],
        [
            SYSTEM,
            USER,
            assistant_calling("a"),
            tool_result("a"),
            assistant_calling("a"),
            tool_result("a"),
        ],
    ],
)
def test_well_formed_histories_pass(history: list[Message]) -> None:
    assert check_history(history) is None


def test_function_client_answers_from_the_function() -> None:
    async def echo_last(
        messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> ChatResponse:
        return reply(f"{messages[-1]['content']} ({len(tools)} tools)")

    client = FunctionChatClient(echo_last, model="fn")

    async def main() -> ChatResponse:
        answer = await client.chat(ChatRequest([SYSTEM, USER], [{}, {}]))
        await client.aclose()
        return answer

    assert asyncio.run(main()).content == "u (2 tools)"
    assert client.model == "fn"


# --- the mock OpenAI server ----------------------------------------------------------------------


def _post(base_url: str, body: Any, **kwargs: Any) -> httpx.Response:
    with httpx.Client(trust_env=False) as http:
        if isinstance(body, bytes):
            return http.post(f"{base_url}/chat/completions", content=body, **kwargs)
        return http.post(f"{base_url}/chat/completions", json=body, **kwargs)


def test_mock_server_answers_the_script_in_order_then_500() -> None:
    with MockOpenAIServer([completion("one"), completion("two")]) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        body = {"model": "m", "messages": [USER]}
        answers = [_post(server.base_url, body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 500]
    assert [a.json()["choices"][0]["message"]["content"] for a in answers[:2]] == ["one", "two"]
    assert "ran out" in answers[2].json()["error"]["message"]
    assert len(server.requests) == 3 and server.requests[0]["model"] == "m"


def test_mock_server_with_a_handler_and_recorded_headers() -> None:
    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, completion(f"you sent {len(body['messages'])}")

    with MockOpenAIServer(handler) as server:
        answer = _post(
            server.base_url, {"messages": [SYSTEM, USER]}, headers={"Authorization": "Bearer k"}
        )
        models = httpx.get(f"{server.base_url}/models", trust_env=False)
    assert answer.json()["choices"][0]["message"]["content"] == "you sent 2"
    assert server.requests[0]["_authorization"] == "Bearer k"
    assert server.requests[0]["_path"] == "/v1/chat/completions"
    assert models.json()["data"][0]["id"] == "mock"


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'"text"'])
def test_mock_server_refuses_bodies_that_are_not_objects(body: bytes) -> None:
    with MockOpenAIServer([completion("x")]) as server:
        answer = _post(server.base_url, body)
    assert answer.status_code == 400 and "JSON object" in answer.json()["error"]["message"]


def test_mock_server_refuses_a_malformed_history_like_openai() -> None:
    with MockOpenAIServer([completion("x")]) as server:
        answer = _post(server.base_url, {"messages": [SYSTEM, USER, assistant_calling("a"), USER]})
        then = _post(server.base_url, {"messages": [SYSTEM, USER]})
    assert answer.status_code == 400
    assert "got results" in answer.json()["error"]["message"]
    assert then.status_code == 200  # the refused request did not use up the script
    assert then.json()["choices"][0]["message"]["content"] == "x"


def test_completion_builds_an_openai_body() -> None:
    body = completion(
        "thinking", [("f", {"a": 1}), ("g", "{raw")], prompt_tokens=3, completion_tokens=4
    )
    message = body["choices"][0]["message"]
    assert message["content"] == "thinking"
    assert [c["function"]["arguments"] for c in message["tool_calls"]] == ['{"a": 1}', "{raw"]
    assert [c["id"] for c in message["tool_calls"]] == ["call_0", "call_1"]
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert "tool_calls" not in completion("plain")["choices"][0]["message"]
