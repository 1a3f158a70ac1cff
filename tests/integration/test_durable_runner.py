"""``Runner.run`` with checkpoints (ADR 0020), driven again for a run whose runlog already
holds its end (the process died as the run ended, before the database had its result): the
logged result comes back, nothing is asked or run, and the runlog is left as it was."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

CONFIG = """
    llm: {backends: {mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}}}
    runs_dir: runs
    packs:
      helper:
        builder: declarative
        system_prompt: You help.
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
"""


class Recorder:
    """Checkpoints in memory, as JSON."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self.at = 0

    async def step(
        self, name: str, call: Callable[[], Awaitable[Any]], *, looks: bool = False
    ) -> Any:
        self.at += 1
        if self.at > len(self.values):
            self.values.append(json.dumps(await call()))
        return json.loads(self.values[self.at - 1])


def test_a_run_whose_log_holds_its_end_is_not_run_again(tmp_path: Path) -> None:
    config = tmp_path / "fabric.yaml"
    config.write_text(textwrap.dedent(CONFIG))
    (tmp_path / "ws").mkdir()
    script = [tool_call("finish_task", {"answer": "42"})]
    runner = build_runner(load_config(config), chat_factory=lambda m: ScriptedChatClient(script))
    request = RunRequest("helper", "answer", workspace=tmp_path / "ws", run_id="r-durable-1")
    first = asyncio.run(runner.run(request, None, Recorder()))
    assert first.status.value == "completed" and first.payload == {"answer": "42"}
    runlog = Path(first.runlog_path or "")
    before = runlog.read_bytes()

    silent = build_runner(load_config(config), chat_factory=lambda m: ScriptedChatClient([]))
    again = asyncio.run(silent.run(request, None, Recorder()))
    assert (again.status, again.payload, again.steps) == (first.status, first.payload, 1)
    assert again.runlog_path == first.runlog_path
    assert runlog.read_bytes() == before  # nothing written again
