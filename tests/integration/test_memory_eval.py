"""Memory in ``fabric eval`` (ADR 0030): a case's ``memory:`` is what its attempt's workspace
remembers as the run starts, and nothing an earlier attempt in that folder kept; a case with
memories needs a pack with memory on. The shipped memory suite's case is won by a scripted
model that takes the terms from its memory, as a real model would have to."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import read_events, write

from fabric.application.memory import workspace_key
from fabric.config.loader import load_config
from fabric.domain.models import ChatResponse, Message
from fabric.infrastructure.additions.memory_store import MemoryStore
from fabric.interfaces.eval_session import EvalOptions, execute, prepare
from fabric.interfaces.eval_setup import SEEDED, AttemptFolders
from fabric.testing import FunctionChatClient, tool_call, tool_calls

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "evals" / "memory"
SHOP = SUITE / "workspaces" / "shopcodes"
CONFIG = """
version: 1
llm: {backend: openai, models: {default: m}}
packs:
  engineering: {builder: packs.engineering:build}
"""


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MemoryStore:
    path = tmp_path / "data" / "memory.sqlite3"
    monkeypatch.setenv("FABRIC_MEMORY_DB", str(path))
    return MemoryStore(path)


def test_an_attempt_starts_with_the_cases_memories_and_no_others(
    tmp_path: Path, store: MemoryStore
) -> None:
    folders, folder, other = AttemptFolders(), tmp_path / "work" / "1", tmp_path / "work" / "2"
    folders.prepare(SHOP, other, ["the other attempt's note"])
    folders.prepare(SHOP, folder, ["first\nnote", "second note"])
    key = workspace_key(folder)
    assert [(f.text, f.run_id) for f in store.facts(key)] == [
        ("first note", SEEDED),
        ("second note", SEEDED),
    ]
    store.add(key, "what the attempt's run kept", "run-1", "engineering", most=9)
    folders.prepare(SHOP, folder, ["second note"])  # the attempt again (eval --restart)
    assert [f.text for f in store.facts(key)] == ["second note"]
    assert [f.text for f in store.facts(workspace_key(other))] == ["the other attempt's note"]
    folders.prepare(None, other)
    assert store.facts(workspace_key(other)) == []


def test_a_case_with_memories_needs_a_pack_with_memory_on(
    tmp_path: Path, store: MemoryStore
) -> None:
    suite = write(
        tmp_path / "suite",
        """
        version: 1
        name: forgetful
        defaults: {pack: engineering}
        cases:
          - id: recall
            task: What did we settle?
            memory: [We settled on blue.]
            checks: [{payload: summary, contains: blue}]
        """,
        "suite.yaml",
    ).parent
    loaded = load_config(write(tmp_path, CONFIG))
    prepared = prepare(loaded, EvalOptions(suite=suite, out=tmp_path / "out"))
    report = asyncio.run(execute(prepared, loaded, stop=asyncio.Event()))
    assert report.run.error is not None and not report.run.finished
    assert "case recall has memories, but pack 'engineering' has memory off" in str(
        report.run.error
    )
    assert "pack_settings" in report.run.error.hint
    assert not store.path.exists()


def _terms(said: str) -> tuple[str, int, int, bool]:
    """What the code and its terms are, as the search found them (a guess when it found
    nothing)."""
    code = re.search(r"the code is (\w+)", said)
    percent = re.search(r"(\d+)% off", said)
    least = re.search(r"at least (\d+)\.(\d\d) EUR", said)
    if not (code and percent and least):
        return "SPRING", 10, 0, False
    cents = int(least.group(1)) * 100 + int(least.group(2))
    return code.group(1), int(percent.group(1)), cents, "gift cards never count" in said


def test_the_memory_suite_is_won_from_memory(tmp_path: Path, store: MemoryStore) -> None:
    said: list[str] = []

    async def model(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
        step = sum(m["role"] == "assistant" for m in messages)
        if step == 0:
            return tool_call("search_memory", query="spring discount code terms")
        if step == 1:
            said.append(str(messages[-1]["content"]))
            return _solution(*_terms(said[0]))
        return tool_call("finish_task", summary="added the spring code with its tests")

    loaded = load_config(write(tmp_path, CONFIG))
    prepared = prepare(loaded, EvalOptions(suite=SUITE, out=tmp_path / "out"))
    report = asyncio.run(
        execute(
            prepared,
            loaded,
            stop=asyncio.Event(),
            chat_factory=lambda name: FunctionChatClient(model, model=name),
        )
    )
    assert report.run.error is None, report.run.error
    [record] = report.run.finished
    assert "SPRING24" in said[0] and "eval-seed" in said[0]
    assert record.passed, [(c.label, c.evidence) for c in record.checks]
    started = read_events(tmp_path / "out" / record.runlog)[0]
    assert started["additions"]["memory"]["facts"] == 4


def _solution(code: str, percent: int, cents: int, no_cards: bool) -> ChatResponse:
    rule = (
        f'"{code}": Rule(percent={percent}, minimum_cents={cents}, excludes_gift_cards={no_cards}),'
    )
    last = '        discount_cents(Cart([Line("book", 2000)]), "FREEBIE")\n'
    test = (
        f"\n\ndef test_the_spring_code() -> None:\n"
        f'    assert discount_cents(Cart([Line("book", 5000)]), "{code}") == 750\n'
    )
    welcome = '"WELCOME5": Rule(percent=5),'
    return tool_calls(
        ("edit_file", {"path": "discounts.py", "old": welcome, "new": f"{welcome}\n    {rule}"}),
        ("edit_file", {"path": "tests/test_discounts.py", "old": last, "new": last + test}),
    )
