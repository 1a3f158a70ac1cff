"""The engineering pack's summary check: a number the model states must be one the run saw
(in the task, the brief or a tool's output), so an answer made up in one step is sent back."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fabric.application.context import ToolContext
from fabric.application.verify import RunRecord, ToolUse, Verdict
from fabric.config.loader import load_config
from fabric.config.schema import SandboxSettings
from fabric.infrastructure.packs.registry import load_pack
from fabric.infrastructure.tools.verifiers import SeenFigures

REPO = Path(__file__).resolve().parents[2]
TASK = "What is the size, in bytes, of the largest PNG the upload endpoint stores?"


def check(summary: str, record: RunRecord, tmp_path: Path) -> Verdict | None:
    ctx = ToolContext("r", tmp_path, SandboxSettings())
    return asyncio.run(SeenFigures().verify({"summary": summary}, ctx, record))


def test_a_made_up_number_is_sent_back_with_what_to_do(tmp_path: Path) -> None:
    record = RunRecord(task=TASK, brief="Files: upload.py\nThe tests pass now: 4 passed")
    verdict = check("The largest PNG the endpoint stores is 1024 bytes.", record, tmp_path)
    assert verdict is not None and not verdict.ok
    assert verdict.summary == "1 of the summary's 1 figure(s) were never seen during the run"
    assert '- "1024" (in the summary) is in no file, test or command output this run saw' in (
        verdict.evidence
    )
    assert "run the code or read the file that gives it" in verdict.evidence
    assert verdict.detail == {"unseen": ["1024"]}


def test_numbers_the_run_saw_pass_in_any_spelling(tmp_path: Path) -> None:
    shell = ToolUse("shell", {"command": "python -c ..."}, True, "[exit code 0]\n26212352\n")
    read = ToolUse("read_file", {"path": "rules.py"}, True, " 12| SIGNATURE_FROM = 250\n")
    record = RunRecord([shell, read], task=TASK, brief="The tests pass now: 4 passed")
    summary = "rules.py line 12: above 250 euros; the limit is 26,212,352 bytes; 4 tests pass."
    verdict = check(summary, record, tmp_path)
    assert verdict is not None and verdict.ok, verdict
    assert verdict.summary == "the summary's 4 figure(s) were all seen in the run"


def test_a_summary_without_figures_has_nothing_to_check(tmp_path: Path) -> None:
    assert check("Fixed the comparison in shipping_cost.", RunRecord(task=TASK), tmp_path) is None


def test_the_engineering_pack_checks_its_summary_and_its_tests() -> None:
    loaded = load_config(REPO / "fabric.yaml")
    names = [v.name for v in load_pack(loaded, "engineering").pack.verifiers]
    assert names[0] == "figures: every number the summary states was seen during the run"
    assert names[1].startswith("command: auto")
