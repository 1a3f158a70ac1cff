"""Running attempts through the real runner (one composition root) with a scripted model: the
wall-clock cap, a stop in the middle, the case's verify reaching the run, a configuration error
stopping the eval, what each attempt is kept apart from, and the results, summary and
comparison built from the attempts."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sandbox.host import confining_backends
from support import assert_valid_runlog, read_events, write

from fabric.application.evals.attempts import EvalRun, plan, run_eval
from fabric.application.evals.compare import compare, render_compare
from fabric.application.evals.ports import EvalPorts
from fabric.application.evals.records import AttemptRecord, CheckResult
from fabric.application.evals.results import build_results
from fabric.application.evals.summary import render_summary
from fabric.config.eval_suite import EvalCase, FileCheck, RunCheck
from fabric.config.loader import load_config
from fabric.domain.errors import PackError
from fabric.domain.models import ChatResponse, Message
from fabric.interfaces.compose import Runner, build_runner
from fabric.interfaces.eval_session import EvalOptions, execute, prepare
from fabric.interfaces.eval_setup import AttemptFolders, ConfinedChecks, RunnerTasks
from fabric.interfaces.eval_store import EvalFolder
from fabric.testing import FunctionChatClient, tool_call

CONFIG = """
version: 1
llm: {backend: openai, models: {default: m}}
packs:
  engineering: {builder: packs.engineering:build}
"""


class _Log:
    def __init__(self) -> None:
        self.records: list[AttemptRecord] = []

    def append(self, record: AttemptRecord) -> None:
        self.records.append(record)


def _case(case_id: str, **given: Any) -> EvalCase:
    fields: dict[str, Any] = {
        "id": case_id,
        "tier": "easy",
        "pack": "engineering",
        "task": f"[{case_id}] do the work",
        "workspace": None,
        "max_steps": 8,
        "timeout_s": 30.0,
        "verify": "off",
        "tags": (),
        "checks": (FileCheck(file="done.txt", contains="done"),),
        "where": "suite.yaml:1",
    }
    return EvalCase(**{**fields, **given})


def _runner(tmp_path: Path, answer: Any) -> Runner:
    async def respond(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
        return await answer(messages)

    loaded = load_config(write(tmp_path, CONFIG))
    return build_runner(
        loaded,
        chat_factory=lambda model: FunctionChatClient(respond),
        runs_dir=tmp_path / "out" / "runs",
    )


def _eval(
    tmp_path: Path, runner: Runner, cases: list[EvalCase], stop: asyncio.Event | None = None
) -> tuple[EvalRun, _Log]:
    log = _Log()
    ports = EvalPorts(
        RunnerTasks(runner, backend=None, model=None), AttemptFolders(), ConfinedChecks(runner), log
    )

    async def go() -> EvalRun:
        try:
            return await run_eval(plan(cases, 1), ports, out=tmp_path / "out", stop=stop)
        finally:
            await runner.aclose()

    return asyncio.run(go()), log


def test_a_run_past_its_cap_is_cancelled_and_fails_as_timeout(tmp_path: Path) -> None:
    async def never(messages: Sequence[Message]) -> ChatResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    run, log = _eval(tmp_path, _runner(tmp_path, never), [_case("slow", timeout_s=0.3)])
    [record] = log.records
    assert (record.status, record.passed, record.false_success) == ("timeout", False, False)
    assert record.error and "passed its 0.3 s cap" in record.error["message"]
    events = assert_valid_runlog(tmp_path / "out" / record.runlog)
    assert events[-1]["status"] == "cancelled"
    assert run.finished == [record] and not run.left


def test_a_stop_cancels_running_attempts_and_keeps_none_of_them(tmp_path: Path) -> None:
    stop = asyncio.Event()

    async def stop_then_wait(messages: Sequence[Message]) -> ChatResponse:
        stop.set()  # Ctrl-C while the model thinks
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    runner = _runner(tmp_path, stop_then_wait)
    run, log = _eval(tmp_path, runner, [_case("a"), _case("b")], stop=stop)
    assert log.records == [] and run.finished == []
    assert sorted(p.case.id for p in run.left) == ["a", "b"]
    [runlog] = list((tmp_path / "out" / "runs").glob("*/runlog.jsonl"))
    assert assert_valid_runlog(runlog)[-1]["status"] == "cancelled"


def test_the_cases_verify_reaches_the_run_and_checks_judge_the_workspace(tmp_path: Path) -> None:
    async def work(messages: Sequence[Message]) -> ChatResponse:
        step = sum(m["role"] == "assistant" for m in messages)
        if step == 0:
            return tool_call("write_file", path="done.txt", content="done")
        return tool_call("finish_task", summary="wrote done.txt")

    failing = "python -c 'raise SystemExit(3)'"
    check = RunCheck(run="cat done.txt", output_contains="done")
    cases = [
        _case("checked", verify=failing, checks=(check,)),
        _case("confirmed", verify="cat done.txt"),
        _case("unchecked"),
    ]
    _, log = _eval(tmp_path, _runner(tmp_path, work), cases)
    by_case = {r.case: r for r in log.records}
    checked, unchecked = by_case["checked"], by_case["unchecked"]
    assert checked.status == "unverified" and checked.passed and not checked.false_success
    assert checked.checks[0].evidence == "exit code 0"
    assert (by_case["confirmed"].status, by_case["confirmed"].passed) == ("completed", True)
    # no command checked it (verify: off): done, the eval's checks say, but not confirmed
    assert (unchecked.status, unchecked.passed) == ("completed_unconfirmed", True)
    started = read_events(tmp_path / "out" / checked.runlog)[0]
    assert started["workspace"] == str((tmp_path / "out" / "work" / "checked" / "1").resolve())
    assert (tmp_path / "out" / "work" / "unchecked" / "1" / "done.txt").read_text() == "done"


def test_a_configuration_error_stops_the_eval(tmp_path: Path) -> None:
    async def unused(messages: Sequence[Message]) -> ChatResponse:
        raise AssertionError("no run should start")

    cases = [_case("a", pack="nope"), _case("b", pack="nope")]
    run, log = _eval(tmp_path, _runner(tmp_path, unused), cases)
    assert isinstance(run.error, PackError) and "no pack named 'nope'" in run.error.message
    assert log.records == [] and len(run.left) == 2


def _record(
    case: str, attempt: int, *, passed: bool, status: str = "completed", **more: Any
) -> AttemptRecord:
    fields: dict[str, Any] = {
        "case": case, "attempt": attempt, "tier": "easy", "pack": "p", "status": status,
        "passed": passed, "checks": (CheckResult("run", "run: t", passed, "exit code 0"),),
        "steps": 4, "tokens": 100, "cost_usd": 0.01, "wall_s": 2.0, "run_id": f"r{attempt}",
        "runlog": f"runs/{case}-{attempt}/runlog.jsonl", "finished": "2026-01-01T00:00:00Z",
        "model": "m",
    }  # fmt: skip
    return AttemptRecord(**{**fields, **more})


def test_results_per_case_tier_and_overall() -> None:
    cases = [_case("a"), _case("b", tier="hard"), _case("c", tier="hard")]
    records = [
        _record("a", 1, passed=True, prompt_tokens=360),
        _record("a", 2, passed=False, cost_usd=0.03, prompt_tokens=360),
        _record("a", 3, passed=True, steps=10),  # an older fabric's: requests not counted
        _record("b", 1, passed=False, tier="hard"),
        _record("b", 2, passed=False, tier="hard", status="max_steps"),
        _record("b", 3, passed=False, tier="hard", status="timeout", cost_usd=None),
        _record("gone", 1, passed=True),  # a case the suite no longer has
    ]
    results = build_results(records, cases, 3, {"suite": {"name": "s"}, "command": "fabric eval s"})
    a, b, c = results["cases"]
    assert (a["attempts"], a["passed"], a["pass_rate"]) == (3, 2, 0.6667)
    assert a["interval"] == [0.2077, 0.9385]  # Wilson, 2 of 3
    assert a["pass_at_k"] == {"1": 0.6667, "2": 1.0, "3": 1.0}
    assert (a["mean_steps"], a["mean_tokens"], a["mean_wall_s"]) == (6.0, 100.0, 2.0)
    assert a["prompt_tokens_per_request"] == 90.0  # 720 tokens over the 8 requests counted
    assert b["prompt_tokens_per_request"] is None
    assert (a["total_cost_usd"], a["mean_cost_usd"]) == (0.05, 0.016667)
    assert a["false_successes"] == 1 and a["statuses"] == {"completed": 3}
    assert b["statuses"] == {"completed": 1, "max_steps": 1, "timeout": 1}
    assert b["false_successes"] == 1 and b["total_cost_usd"] == 0.02
    assert c["attempts"] == 0 and c["pass_rate"] is None and c["runs"] == []
    assert [r["runlog"] for r in a["runs"]] == [f"runs/a-{n}/runlog.jsonl" for n in (1, 2, 3)]
    overall = results["overall"]
    assert (overall["attempts"], overall["passed"], overall["cases"]) == (6, 2, 2)
    assert overall["pass_at_k"] == {"1": 0.3333, "2": 0.5, "3": 0.5}  # mean over a and b
    assert results["tiers"]["hard"]["attempts"] == 3 and "medium" not in results["tiers"]
    assert (results["complete"], results["missing"]) == (False, 3)
    summary = render_summary(results)
    assert "`fabric eval s`" in summary and "**3 attempt(s) not made yet**" in summary
    assert "| a | easy | 2/3 | 67% (21% to 94%) | @1 67%, @2 100%, @3 100% | 1 |" in summary
    assert "| mean tokens | prompt tokens / request |" in summary
    assert "| 1 | 0 | 6.0 | 100 | 90 | $0.0500 / $0.0167 |" in summary
    assert "| b | 2 | max_steps | run: t: exit code 0 | [b-2](runs/b-2/runlog.jsonl) |" in summary


def test_an_unconfirmed_claim_that_failed_is_counted_apart_from_false_successes() -> None:
    """``completed_unconfirmed`` told the reader to look: when the case's checks fail it is
    not a false success, but the summary still counts it, beside them."""
    unconfirmed = "completed_unconfirmed"
    records = [
        _record("a", 1, passed=False, status=unconfirmed),
        _record("a", 2, passed=True, status=unconfirmed),
        _record("a", 3, passed=False),
    ]
    results = build_results(records, [_case("a")], 3, {"suite": {"name": "s"}, "command": "c"})
    [a] = results["cases"]
    assert (a["false_successes"], a["unconfirmed_failures"]) == (1, 1)
    assert [r["unconfirmed_failure"] for r in a["runs"]] == [True, False, False]
    again = AttemptRecord.from_json(records[0].as_json())
    assert again.unconfirmed_failure and again.extra == {}
    summary = render_summary(results)
    assert "| false successes | unconfirmed, failed |" in summary
    assert "| a | easy | 1/3 | 33% (6% to 79%) | @1 33%, @2 67%, @3 100% | 1 | 1 |" in summary


def test_compare_says_which_differences_are_beyond_the_noise() -> None:
    cases = [_case("a"), _case("b")]
    before = [_record("a", n, passed=n == 1) for n in range(1, 6)]
    before += [_record("b", n, passed=True) for n in range(1, 6)]
    after = [msgspec.structs.replace(r, passed=True) for r in before if r.case == "a"]
    after += [_record("b", n, passed=n < 5) for n in range(1, 6)]
    a = build_results(before, cases, 5, {"suite": {"name": "s"}, "date": "d1"})
    b = build_results(after, cases, 5, {"suite": {"name": "s"}, "date": "d2"})
    result = compare(a, b)
    rows = {r["case"]: r for r in result["cases"]}
    assert rows["a"]["verdict"] == "B better" and rows["a"]["difference"] == 0.8
    assert rows["b"]["verdict"] == "within noise" and rows["b"]["interval"][0] < 0
    assert result["overall"]["verdict"] == "within noise"  # 6/10 against 9/10
    table = render_compare(result)
    assert "| a | easy | 1/5 (20%) | 5/5 (100%) | +80 pp (+" in table
    assert "1 case(s) better in B, 0 worse, beyond the noise (95%)." in table
    assert "2 cases compared, each at 95%: about 0.1 would look different by chance" in table
    assert "different suite contents" not in table
    other = {**b, "suite": {"name": "s", "hash": "changed"}}
    assert "note: A and B ran different suite contents" in render_compare(compare(a, other))
    only = compare(a, build_results(after[:5], [cases[0]], 5, {}))
    assert {r["case"]: r["verdict"] for r in only["cases"]}["b"] == "only in A"


@pytest.mark.parametrize("repeats", [1, 3])
def test_plan_skips_what_is_done_and_puts_first_attempts_first(repeats: int) -> None:
    cases = [_case("a"), _case("b")]
    planned = plan(cases, repeats, done={("a", 1)}, pack="other")
    assert planned[0].key == ("b", 1)
    assert {p.case.pack for p in planned} == {"other"}
    assert len(planned) == 2 * repeats - 1


def test_an_attempt_is_kept_apart_from_the_rest_of_the_eval_folder(tmp_path: Path) -> None:
    """What each attempt's runs and checks hide (tests/e2e/test_eval_isolation.py attacks it):
    all made before any attempt starts, and a folder emptied in place, never made anew (a
    bubblewrap cover lies on the folder that was there when a command started)."""
    folder = EvalFolder.open(tmp_path / "out", {"suite_hash": "h"}, restart=False)
    folder.reserve([("a", 1), ("a", 2), ("b", 1)])
    own, out = folder.workspace("a", 2), (tmp_path / "out").resolve()
    hidden = {out / name for name in ("eval.json", "attempts.jsonl", "runs", "work/b", "work/a/1")}
    assert set(folder.apart(own)) == hidden and all(p.exists() for p in hidden)
    (own / "left.txt").write_text("from an attempt cut short")
    inode = own.stat().st_ino
    AttemptFolders().prepare(None, own)
    assert own.stat().st_ino == inode and not any(own.iterdir())
    changed = EvalFolder.open(tmp_path / "out", {"suite_hash": "h2"}, restart=False)
    assert changed.manifest()["suite_hash"] == "h2"  # nothing finished: started over quietly


PEEK_SUITE = """
version: 1
name: peek
defaults: {{pack: engineering, limits: {{max_steps: 4, timeout_s: 60}}, verify: "off"}}
pack_settings:
  engineering: {{sandbox: {{confinement: {backend}}}}}
cases:
  - id: peek
    task: "Copy the answer from {solution}"
    checks:
      - run: cat {solution}
"""


@pytest.mark.parametrize("backend", confining_backends())
def test_neither_runs_nor_checks_can_read_the_suite(tmp_path: Path, backend: str) -> None:
    """Under Landlock the host's temp folder is readable, so this shows the suite folder itself
    is hidden (under bubblewrap the temp folder is private anyway), also with pytest's
    ``pytest-current`` symlink to the test's folder beside it (tests/sandbox/probes_links.py)."""
    suite = tmp_path / "suite"
    solution = write(suite, "THE-REFERENCE-ANSWER\n", "solutions/peek/answer.txt")
    write(suite, PEEK_SUITE.format(backend=backend, solution=solution), "suite.yaml")

    async def peek(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
        if sum(m["role"] == "assistant" for m in messages) == 0:
            return tool_call("shell", command=f"cat {solution}")
        return tool_call("finish_task", summary="copied")

    loaded = load_config(write(tmp_path, CONFIG))
    prepared = prepare(loaded, EvalOptions(suite=suite, out=tmp_path / "out"))
    report = asyncio.run(
        execute(
            prepared,
            loaded,
            stop=asyncio.Event(),
            chat_factory=lambda model: FunctionChatClient(peek),
        )
    )
    [record] = report.run.finished
    refused = ("No such file", "Permission denied")  # bubblewrap / Landlock
    # it claimed the copy was done (no check could confirm it) and the case's check failed
    assert record.unconfirmed_failure, record.checks
    assert any(r in record.checks[0].evidence for r in refused), record.checks
    events = read_events(tmp_path / "out" / record.runlog)
    assert events[0]["confinement"]["backend"] == backend
    [result] = [e for e in events if e["kind"] == "tool_result"]
    assert any(r in result["output"] for r in refused), result["output"]
    assert "THE-REFERENCE" not in result["output"]
    assert report.results["overall"]["unconfirmed_failures"] == 1
    assert report.results["overall"]["false_successes"] == 0
    assert (tmp_path / "out" / "summary.md").is_file()


@pytest.mark.parametrize("backend", confining_backends())
def test_runs_cannot_read_the_suites_repository_or_other_evals(
    tmp_path: Path, backend: str
) -> None:
    """The solutions are also in the git objects of the repository that holds the suite, and
    solved workspaces in earlier evals' output folders beside this one."""
    repo = tmp_path / "repo"
    suite = repo / "evals" / "peek"
    solution = write(suite, "THE-REFERENCE-ANSWER\n", "solutions/peek/answer.txt")
    write(suite, PEEK_SUITE.format(backend=backend, solution=solution), "suite.yaml")
    write(repo, "THE-REFERENCE-ANSWER in an object\n", ".git/objects/ab/cdef")
    earlier = write(tmp_path / "outs" / "earlier", "{}", "eval.json").parent
    write(earlier, "THE-REFERENCE-ANSWER solved\n", "work/peek/1/answer.txt")
    targets = [repo / ".git" / "objects" / "ab" / "cdef", earlier / "work/peek/1/answer.txt"]

    async def peek(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
        step = sum(m["role"] == "assistant" for m in messages)
        if step < len(targets):
            return tool_call("shell", command=f"cat {targets[step]}")
        return tool_call("finish_task", summary="copied")

    loaded = load_config(write(tmp_path, CONFIG))
    prepared = prepare(loaded, EvalOptions(suite=suite, out=tmp_path / "outs" / "now"))
    report = asyncio.run(
        execute(
            prepared,
            loaded,
            stop=asyncio.Event(),
            chat_factory=lambda model: FunctionChatClient(peek),
        )
    )
    [record] = report.run.finished
    events = read_events(tmp_path / "outs" / "now" / record.runlog)
    outputs = [e["output"] for e in events if e["kind"] == "tool_result"]
    assert len(outputs) == 2 and not any("THE-REFERENCE" in o for o in outputs), outputs


def test_a_check_that_could_not_run_is_no_false_success() -> None:
    from fabric.application.evals.records import AttemptRecord, CheckResult

    def record(check: CheckResult) -> AttemptRecord:
        return AttemptRecord(
            case="c", attempt=1, tier="easy", pack="p", status="completed", passed=False,
            checks=(check,), steps=1, tokens=1, cost_usd=None, wall_s=1.0, run_id="r",
            runlog="runs/r/runlog.jsonl", finished="2026-11-25T00:00:00Z",
        )  # fmt: skip

    failed = record(CheckResult("run", "pytest", False, "exit code 1"))
    broken = record(CheckResult("run", "pytest", False, "could not run: no python", errored=True))
    assert failed.false_success and not broken.false_success and broken.check_error
    again = AttemptRecord.from_json(broken.as_json())
    assert again.check_error and not again.false_success


def test_a_summary_says_when_attempts_ran_on_more_than_one_model_and_how_many_at_once() -> None:
    """A continued eval whose model changed meanwhile mixes two models in every figure; and
    attempts run at once share the machine, which their wall times show."""
    records = [_record("a", 1, passed=True), _record("a", 2, passed=False, model="other")]
    results = build_results(records, [_case("a")], 2, {"jobs": 2})
    summary = render_summary(results)
    assert "**the attempts ran on 2 models**: every figure below mixes them" in summary
    assert "- repeats: 2; jobs: 2" in summary
    one = render_summary(build_results(records[:1], [_case("a")], 1, {}))
    assert "models**" not in one and "jobs" not in one


def test_an_unexpected_failure_cancels_the_other_attempts_before_it_surfaces(
    tmp_path: Path,
) -> None:
    """Two attempts at once; logging the first fails (a full disk, say): the error reaches
    the caller as itself, and only after the other attempt was cancelled, never left running
    while the eval writes its results and closes the model."""

    slow_started = asyncio.Event()

    async def answer(messages: Sequence[Message]) -> ChatResponse:
        if "[slow]" in str(messages):
            slow_started.set()
            await asyncio.Event().wait()
        await slow_started.wait()  # the fast one ends (and fails) while the slow one runs
        return tool_call("finish_task", summary="done")

    class FullDisk(_Log):
        def append(self, record: AttemptRecord) -> None:
            raise OSError(28, "No space left on device")

    runner = _runner(tmp_path, answer)
    ports = EvalPorts(
        RunnerTasks(runner, backend=None, model=None), AttemptFolders(), ConfinedChecks(runner),
        FullDisk(),
    )  # fmt: skip
    still_running: list[asyncio.Task[Any]] = []

    async def go() -> None:
        try:
            await run_eval(plan([_case("fast"), _case("slow")], 1), ports, out=tmp_path / "out",
                           jobs=2)  # fmt: skip
        except OSError:
            me = asyncio.current_task()
            still_running.extend(t for t in asyncio.all_tasks() if t is not me)
            raise
        finally:
            await runner.aclose()

    with pytest.raises(OSError, match="No space left on device"):
        asyncio.run(go())
    assert still_running == []
    slow = [
        p for p in (tmp_path / "out" / "runs").glob("*/runlog.jsonl") if "[slow]" in p.read_text()
    ]
    assert assert_valid_runlog(slow[0])[-1]["status"] == "cancelled"
