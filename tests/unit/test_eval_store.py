"""An eval's output folder: continued with the same settings, refused with others (unless
restarted), never taken over when it is not an eval's; attempts read back as written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabric.application.evals.records import AttemptRecord, CheckResult
from fabric.domain.errors import ConfigError
from fabric.interfaces.eval_store import EvalFolder, load_results

MANIFEST = {"suite_hash": "h1", "pack": None, "backend": None, "model": "m", "repeats": 1}


def _record(case: str, attempt: int, passed: bool = True) -> AttemptRecord:
    return AttemptRecord(
        case=case, attempt=attempt, tier="easy", pack="p", status="completed", passed=passed,
        checks=(CheckResult("file", "file: a", passed, "ok"),), steps=2, tokens=10,
        cost_usd=None, wall_s=1.5, run_id="r", runlog="runs/r/runlog.jsonl", finished="t",
    )  # fmt: skip


def _open(path: Path, restart: bool = False, **changes: Any) -> EvalFolder:
    return EvalFolder.open(path, {**MANIFEST, **changes}, restart=restart)


def test_a_folder_is_continued_with_the_same_settings(tmp_path: Path) -> None:
    out = tmp_path / "out"
    folder = _open(out)
    folder.append(_record("a", 1))
    folder.append(_record("a", 1, passed=False))  # the same attempt again: the last counts
    again = _open(out, repeats=3)
    [record] = again.records()
    assert record.passed is False and record.checks[0].evidence == "ok"
    assert json.loads((out / "eval.json").read_text())["repeats"] == 3


def test_other_settings_are_refused_unless_restarted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _open(out).append(_record("a", 1))
    (out / "work" / "a" / "1").mkdir(parents=True)
    with pytest.raises(ConfigError) as caught:
        _open(out, model="other", suite_hash="h2")
    message = str(caught.value)
    assert "cannot be continued" in message and "model: 'm' then, 'other' now" in message
    assert "suite_hash: 'h1' then, 'h2' now" in message and "--restart" in message
    restarted = _open(out, restart=True, model="other")
    assert restarted.records() == [] and not (out / "work" / "a").exists()
    assert json.loads((out / "eval.json").read_text())["model"] == "other"


def test_a_folder_where_nothing_finished_starts_over_quietly(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _open(out)
    assert _open(out, suite_hash="fixed").manifest()["suite_hash"] == "fixed"


def test_a_folder_that_is_not_an_evals_is_never_taken(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    for restart in (False, True):
        with pytest.raises(ConfigError, match="is not an eval output folder"):
            _open(tmp_path, restart=restart)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_a_broken_line_is_skipped_and_said(tmp_path: Path) -> None:
    folder = _open(tmp_path / "out")
    folder.append(_record("a", 1))
    with (tmp_path / "out" / "attempts.jsonl").open("a") as out:
        out.write('{"case": "b", "attem')  # a crash in the middle of a line
    assert [r.case for r in folder.records()] == ["a"]
    assert folder.problems and "attempts.jsonl:2: skipped" in folder.problems[0]


def test_load_results_says_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"is not an eval's results\.json"):
        load_results(tmp_path)
    (tmp_path / "results.json").write_text('{"cases": []}')
    assert load_results(tmp_path / "results.json") == {"cases": []}
