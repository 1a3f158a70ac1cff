"""Content on spans is made from what a model sent, which may be anything."""

from __future__ import annotations

import json

from fabric.infrastructure.telemetry.content import output_messages


def test_a_reply_s_arguments_nested_too_deeply_stay_text() -> None:
    raw = '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}"
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": raw}},
        {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": '{"a": 1}'}},
    ]}  # fmt: skip
    (reply,) = json.loads(output_messages(message, "tool_calls"))
    arguments = [part["arguments"] for part in reply["parts"]]
    assert arguments == [raw, {"a": 1}]
