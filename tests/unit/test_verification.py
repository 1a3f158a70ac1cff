"""Honest final status: a valid finish_task is a claim, and the pack's checks of the work decide
whether the run ends ``completed``. A failed check goes back to the model as the result of its
finish_task (a repair round); when the rounds run out the run ends ``unverified`` with the
evidence; every check is in the runlog, and a replay or a resume answers it from there."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from support import assert_valid_runlog, kinds

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Control, Job, Kit
from fabric.application.pack import Pack
from fabric.application.replay import replay
from fabric.application.resume import plan_resume, resume_task
from fabric.application.verify import RunRecord, ToolUse, Verdict
from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.errors import ConfigError
from fabric.domain.models import ChatRequest, ChatResponse, RunResult, RunStatus, ToolSpec
from fabric.infrastructure.tools.function_tool import FunctionTool
from fabric.infrastructure.tools.html_text import html_to_text
from fabric.infrastructure.tools.verifiers import CitationVerifier
from fabric.testing import MemoryRunLog, ScriptedChatClient, tool_call

SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


class Check:
    """A check whose verdicts are scripted; counts how often it really ran."""

    def __init__(self, *verdicts: Verdict | Exception | None, name: str = "tests") -> None:
        self.verdicts, self._name, self.ran = list(verdicts), name, 0

    @property
    def name(self) -> str:
        return self._name

    async def verify(
        self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
    ) -> Verdict | None:
        self.ran += 1
        verdict = self.verdicts.pop(0)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict


def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    return f"noted: {text}"


def pack(*checks: Check | CitationVerifier, tools: tuple[Any, ...] = ()) -> Pack:
    return Pack(
        name="p",
        description="",
        system_prompt="You work.",
        tools=[FunctionTool(note), *tools],
        finish_schema=SCHEMA,
        verifiers=checks,
    )


FAILED = Verdict(False, "`pytest -q` failed with exit code 1", "FAILED tests/test_a.py::test_x")
PASSED = Verdict(True, "`pytest -q` passed (exit code 0)")


def run(
    p: Pack, script: list[Any], workspace: Path, repairs: int = 2
) -> tuple[RunResult, MemoryRunLog, ScriptedChatClient]:
    chat, log = ScriptedChatClient(script), MemoryRunLog("r1")
    result = asyncio.run(
        execute_task(
            Job("do it", p, "r1", workspace, Limits(max_steps=8, finish_repairs=repairs)),
            Kit(chat, log),
        )
    )
    assert_valid_runlog(log.events)
    return result, log, chat


def finish(summary: str = "fixed it") -> Any:
    return tool_call("finish_task", summary=summary)


def test_a_failed_check_goes_back_to_the_model_and_a_later_pass_completes(
    workspace: Path,
) -> None:
    check = Check(FAILED, PASSED)
    script = [tool_call("note", text="a"), finish("done"), tool_call("note", text="b"), finish()]
    result, log, chat = run(pack(check), script, workspace)

    assert result.status is RunStatus.COMPLETED and result.payload == {"summary": "fixed it"}
    shown = [m for m in chat.requests[2][0] if m.get("role") == "tool"][-1]["content"]
    assert "did not pass verification" in shown and "FAILED tests/test_a.py::test_x" in shown
    assert "Attempts left: 2" in shown
    checks = [e for e in log.events if e["kind"] == "verification"]
    assert [(c["step"], c["ok"], c["check"]) for c in checks] == [
        (2, False, "tests"),
        (4, True, "tests"),
    ]
    assert checks[0]["evidence"] == "FAILED tests/test_a.py::test_x"
    assert log.events[0]["verify"] == ["tests"]


def test_when_the_repairs_run_out_the_run_is_unverified_not_completed(workspace: Path) -> None:
    check = Check(FAILED, FAILED)
    result, log, _ = run(pack(check), [finish("all tests pass"), finish("really")], workspace, 1)

    assert result.status is RunStatus.UNVERIFIED and not result.succeeded
    assert result.payload == {"summary": "really"}  # the last claim, kept for the reader
    assert result.error is not None and result.error["code"] == "unverified"
    assert "FAILED tests/test_a.py::test_x" in result.error["message"]
    end = log.events[-1]
    assert end["kind"] == "run_finished" and end["status"] == "unverified"


def test_schema_repairs_and_verification_repairs_share_the_rounds(workspace: Path) -> None:
    check = Check(FAILED)
    script = [tool_call("finish_task", wrong=1), finish()]
    result, _, _ = run(pack(check), script, workspace, repairs=1)
    assert result.status is RunStatus.UNVERIFIED and check.ran == 1


def test_a_check_that_cannot_run_ends_the_run_unverified_at_once(workspace: Path) -> None:
    check = Check(ConfigError("the verification program 'pytest' is not installed", hint="x"))
    result, log, _ = run(pack(check), [finish(), finish()], workspace)

    assert result.status is RunStatus.UNVERIFIED and result.steps == 1
    assert result.error is not None and "could not be verified" in result.error["message"]
    event = next(e for e in log.events if e["kind"] == "verification")
    assert event["ok"] is False and event["error"]["code"] == "config_error"


def test_nothing_to_check_is_recorded_as_skipped(workspace: Path) -> None:
    result, log, _ = run(pack(Check(None)), [finish()], workspace)
    # a check with nothing to check confirms nothing: the claim is kept, said to be unconfirmed
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED and not result.succeeded
    assert result.payload == {"summary": "fixed it"}
    event = next(e for e in log.events if e["kind"] == "verification")
    assert event["skipped"] is True and event["ok"] is True and event["confirms"] is False


def test_checks_see_every_tool_call_uncut(workspace: Path) -> None:
    seen: list[RunRecord] = []

    class Spy(Check):
        async def verify(
            self, payload: Mapping[str, Any], ctx: ToolContext, record: RunRecord
        ) -> Verdict | None:
            seen.append(record)
            return PASSED

    run(pack(Spy()), [tool_call("note", text="x" * 20_000), finish()], workspace)
    (use,) = seen[0].uses
    assert use.name == "note" and use.ok and len(use.output) == len("noted: ") + 20_000


UNSURE = Verdict(True, "the summary's 2 figure(s) were all seen in the run", confirms=False)


def test_passes_that_cannot_confirm_the_work_end_the_run_completed_unconfirmed(
    workspace: Path,
) -> None:
    result, log, _ = run(pack(Check(UNSURE, name="figures")), [finish()], workspace)
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED and not result.succeeded
    assert result.payload == {"summary": "fixed it"}  # the claim, for the reader to judge
    assert result.error is not None and result.error["code"] == "unconfirmed"
    assert "- figures: the summary's 2 figure(s) were all seen" in result.error["message"]
    assert "verify" in result.error["hint"]
    end = log.events[-1]
    assert end["status"] == "completed_unconfirmed" and end["error"] == result.error
    [event] = [e for e in log.events if e["kind"] == "verification"]
    assert (event["ok"], event["confirms"]) == (True, False)


def test_one_check_that_confirms_the_work_is_enough_to_complete(workspace: Path) -> None:
    checks = (Check(UNSURE, name="figures"), Check(PASSED))
    result, log, _ = run(pack(*checks), [finish()], workspace)
    assert result.status is RunStatus.COMPLETED and result.error is None
    events = [e for e in log.events if e["kind"] == "verification"]
    assert [(e["check"], e["confirms"]) for e in events] == [("figures", False), ("tests", True)]


def test_a_pack_without_checks_completes_on_a_valid_claim(workspace: Path) -> None:
    result, log, _ = run(pack(), [finish()], workspace)
    assert result.status is RunStatus.COMPLETED
    assert "verification" not in kinds(log.events)


def replayed(log: MemoryRunLog, workspace: Path) -> Any:
    """The replay of a recorded run with a check that would fail if it were asked."""
    again = Check()
    report = asyncio.run(
        replay(
            log.events,
            pack=pack(again),
            run_id="r2",
            workspace=workspace,
            kit=Kit(None, MemoryRunLog("r2")),
        )
    )
    assert report.identical, report.divergence
    assert again.ran == 0
    return report


def test_a_replay_of_an_unconfirmed_run_ends_unconfirmed_again(workspace: Path) -> None:
    _result, log, _ = run(pack(Check(UNSURE)), [finish()], workspace)
    assert replayed(log, workspace).result.status is RunStatus.COMPLETED_UNCONFIRMED


def test_a_pass_recorded_before_fabric_told_confirming_checks_apart_still_confirms() -> None:
    """Runlogs of older fabric have no ``confirms``: every pass counted then, and a replay of
    such a log reaches the ``completed`` it recorded."""
    old = {"check": "tests", "ok": True, "summary": "`pytest -q` passed (exit code 0)"}
    assert Verdict.from_event(old).confirms is None  # counted as confirming
    assert "confirms" not in Verdict.from_event(old).as_event()  # a replay writes it as it was
    assert Verdict.from_event({**old, "confirms": False}).confirms is False


def test_a_replay_answers_the_checks_from_the_runlog(workspace: Path) -> None:
    check = Check(FAILED, PASSED)
    script = [finish("done"), tool_call("note", text="b"), finish()]
    _result, log, _ = run(pack(check), script, workspace)
    assert replayed(log, workspace).result.status is RunStatus.COMPLETED
    assert kinds(log.events).count("verification") == 2


def test_a_replay_of_an_unverified_run_ends_unverified_again(workspace: Path) -> None:
    _result, log, _ = run(pack(Check(FAILED, FAILED)), [finish(), finish()], workspace, 1)
    assert replayed(log, workspace).result.status is RunStatus.UNVERIFIED


def test_a_resumed_run_checks_its_new_steps_for_real(workspace: Path) -> None:
    check = Check(FAILED)
    _, log, _ = run(pack(check), [finish("done"), tool_call("note", text="b")], workspace)
    events = [e for e in log.events if e["kind"] != "run_finished"]  # as if killed after step 2
    live = Check(PASSED)
    plan = plan_resume(events)
    resumed_log = MemoryRunLog("r1")
    result = asyncio.run(
        resume_task(
            plan,
            pack=pack(live),
            workspace=workspace,
            kit=Kit(ScriptedChatClient([finish()]), resumed_log),
        )
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert live.ran == 1  # only the new step's check ran; step 1's came from the log


def test_a_run_cannot_be_resumed_without_the_checks_it_started_with(workspace: Path) -> None:
    _, log, _ = run(pack(Check(FAILED)), [finish(), tool_call("note", text="b")], workspace)
    plan = plan_resume([e for e in log.events if e["kind"] != "run_finished"])
    with pytest.raises(ConfigError, match="no longer has: tests"):
        asyncio.run(
            resume_task(
                plan,
                pack=pack(),
                workspace=workspace,
                kit=Kit(ScriptedChatClient([]), MemoryRunLog("r1")),
            )
        )


# --- the research pack's check: cited pages must have been read during the run ---------------


def fetch_url(url: str) -> str:
    """Fetch a page.

    Args:
        url: The page.
    """
    pages = {
        "https://example.org/a": "URL: https://example.org/a/\nStatus: 200\n\n"
        "# Tides\nThe **harbour** closes at “dusk” on Sundays.\n"
        "Removed `acquire()`, kept `idle_timeout`.",
        "https://example.org/old": "URL: https://example.org/new\nStatus: 200\n\nMoved here.",
        "https://example.org/tides": "URL: https://example.org/tides\nStatus: 200\n\n"
        "High tide on 9 February 2021 was at 06:40, at 3.2 m. The gauge has logged "
        "26,212,352 readings since 1998.",
    }
    return pages[url]


def cite(*citations: tuple[str, str]) -> Any:
    return tool_call(
        "finish_task",
        summary="answer",
        citations=[{"url": u, "quote": q} for u, q in citations],
    )


def research(workspace: Path, script: list[Any]) -> tuple[RunResult, MemoryRunLog]:
    p = msgspec.structs.replace(
        pack(CitationVerifier(), tools=(FunctionTool(fetch_url),)),
        finish_schema={"type": "object"},
    )
    result, log, _ = run(p, script, workspace, repairs=0)
    return result, log


def test_a_citation_of_a_page_never_fetched_is_not_accepted(workspace: Path) -> None:
    result, log = research(workspace, [cite(("https://example.org/b", "anything"))])
    assert result.status is RunStatus.UNVERIFIED
    event = next(e for e in log.events if e["kind"] == "verification")
    assert "was not read during this run" in event["evidence"]


def test_a_quote_that_is_not_on_the_page_is_not_accepted(workspace: Path) -> None:
    script = [
        tool_call("fetch_url", url="https://example.org/a"),
        cite(("https://example.org/a", "the harbour never closes")),
    ]
    result, log = research(workspace, script)
    assert result.status is RunStatus.UNVERIFIED
    assert (
        "the quote is not on"
        in next(e for e in log.events if e["kind"] == "verification")["evidence"]
    )


def test_quotes_read_during_the_run_are_accepted_loosely(workspace: Path) -> None:
    script = [
        tool_call("fetch_url", url="https://example.org/a"),
        tool_call("fetch_url", url="https://example.org/old"),
        cite(
            ("https://example.org/a/", 'The harbour closes at "dusk"...on Sundays'),
            ("https://example.org/new#top", "moved HERE"),
            ("https://example.org/a", "Removed acquire(), kept idle_timeout"),
        ),
    ]
    result, log = research(workspace, script)
    # real quotes ground an answer; whether it answers the question is the reader's to judge
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED, result.error
    event = next(e for e in log.events if e["kind"] == "verification")
    assert event["ok"] and event["summary"] == "all 3 citation(s) were read and quoted"
    assert event["confirms"] is False


def test_an_answer_without_citations_has_nothing_to_check(workspace: Path) -> None:
    result, log = research(workspace, [cite()])
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED
    assert next(e for e in log.events if e["kind"] == "verification")["skipped"] is True


# --- grounding: the figures an answer states must be in its quotes ---------------------------

SUITE = Path(__file__).resolve().parents[2] / "evals" / "research"
SITE = "http://127.0.0.1:8765"
UNQUOTED = (
    '- "{}" (in the answer) is in none of the quotes: quote the sentence of the page that '
    "states it, or leave it out"
)


def fetched(*paths: str) -> RunRecord:
    """The suite's pages as fetch_url returns them (same Markdown), as if read in this run."""
    uses = []
    for path in paths:
        url = f"{SITE}/{path}"
        text = html_to_text((SUITE / "pages" / path).read_text("utf-8"), url)
        uses.append(ToolUse("fetch_url", {"url": url}, True, f"URL: {url}\nStatus: 200\n\n{text}"))
    return RunRecord(uses)


def ground(
    answer: str, *citations: tuple[str, str], task: str = "", verifier: Any = None
) -> Verdict | None:
    """The research check's verdict on ``answer`` citing suite pages (path, quote)."""
    record = fetched(*sorted({path for path, _ in citations}))
    record.task = task
    payload = {
        "answer": answer,
        "citations": [{"url": f"{SITE}/{path}", "quote": q} for path, q in citations],
    }
    ctx = ToolContext("r", SUITE, SandboxSettings(network=True))
    return asyncio.run((verifier or CitationVerifier()).verify(payload, ctx, record))


def task_of(case: str) -> str:
    return str(yaml.safe_load((SUITE / "cases" / f"{case}.yaml").read_text("utf-8"))["task"])


def test_the_false_success_of_quillscript_match_blocks_is_refused() -> None:
    """docs/evals.md, the research pack's first run: the wrong release and date, 'backed' by
    the page's opening sentence, which states neither."""
    verdict = ground(
        "The oldest Quillscript version they run on is 1.0, which was released on March 14, 2017.",
        (
            "quillscript/releases.html",
            "Every release of Quillscript since the first public one. Dates are the day the "
            "release was tagged.",
        ),
        task=task_of("quillscript-match-blocks"),
    )
    assert verdict is not None and not verdict.ok
    assert verdict.summary == "2 of the answer's 2 figure(s) are in none of the quotes"
    assert UNQUOTED.format("1.0") in verdict.evidence.splitlines()
    assert UNQUOTED.format("March 14, 2017") in verdict.evidence.splitlines()
    assert verdict.detail == {"unquoted": ["1.0", "March 14, 2017"]}


def test_the_false_success_of_tidepool_acquire_removed_is_refused() -> None:
    """The same run: version 1.1 stated, three real lines of the pages quoted, none saying
    it. The 1.2 the answer repeats comes from the question and needs no quote."""
    verdict = ground(
        "The old service of ours calls `pool.acquire()` and crashes after we moved it to "
        "tidepool 1.2. The replacement should be `pool.lease()` and the version in which "
        "acquire() stopped working was 1.1.",
        ("tidepool/changelog.html", "New: pool.stats() reports open, idle and leased connections."),
        ("tidepool/api.html", "Pool(dsn, max_size=10, max_idle=4, idle_timeout=300.0)"),
        ("tidepool/api.html", "pool.lease()"),
        task=task_of("tidepool-acquire-removed"),
    )
    assert verdict is not None and not verdict.ok
    assert verdict.summary == "1 of the answer's 2 figure(s) is in none of the quotes"
    assert verdict.evidence.splitlines()[0] == UNQUOTED.format("1.1")
    assert "1.2" not in verdict.evidence


def test_the_right_answers_pass_with_the_quote_that_states_them() -> None:
    verdict = ground(
        "acquire() was removed in tidepool 1.0 (2023-04-02): call pool.lease() instead.",
        ("tidepool/changelog.html", "1.0 (2023-04-02) ... Removed `acquire()`"),
    )
    assert verdict is not None and verdict.ok, verdict
    assert (
        verdict.summary
        == "all 1 citation(s) were read and quoted; they hold the answer's 2 figure(s)"
    )


@pytest.mark.parametrize(
    "date", ["9 February 2021", "February 9, 2021", "9th Feb 2021", "2021-02-09", "Feb 2021"]
)
def test_a_date_is_backed_by_the_same_date_spelled_another_way(date: str) -> None:
    verdict = ground(
        f"Match blocks came with Quillscript 2.4, released {date}.",
        ("quillscript/releases.html", "| 2.4 | 9 February 2021 | Match blocks"),
    )
    assert verdict is not None and verdict.ok, verdict


def test_a_different_date_or_version_is_not_backed() -> None:
    verdict = ground(
        "Match blocks came with Quillscript 2.4.0 on 9 February 2020, in March 2021.",
        ("quillscript/releases.html", "| 2.4 | 9 February 2021 | Match blocks"),
    )
    assert verdict is not None and not verdict.ok
    assert verdict.detail == {"unquoted": ["2.4.0", "9 February 2020", "March 2021"]}


def test_numbers_the_question_states_need_no_quote() -> None:
    answer = "After your move to tidepool 1.2, call pool.lease(): acquire() was removed in 1.0."
    quote = ("tidepool/changelog.html", "1.0 (2023-04-02) ... Removed `acquire()`")
    asked = ground(answer, quote, task=task_of("tidepool-acquire-removed"))
    assert asked is not None and asked.ok, asked
    not_asked = ground(answer, quote, task="What should a tidepool user call instead of acquire()?")
    assert not_asked is not None and not_asked.detail == {"unquoted": ["1.2"]}


def test_an_answer_that_states_figures_and_cites_nothing_is_refused() -> None:
    verdict = ground("The default idle_timeout is 300 seconds.")
    assert verdict is not None and not verdict.ok
    assert verdict.summary == "the answer states 1 figure(s) and cites no page that holds them"
    assert UNQUOTED.format("300") in verdict.evidence
    assert ground("I could not find it: no page says.") is None


def test_grounding_can_be_turned_off() -> None:
    verifier = CitationVerifier(grounded=False)
    assert "figure" not in verifier.name
    verdict = ground(
        "Removed in 1.1.", ("tidepool/changelog.html", "Removed `acquire()`"), verifier=verifier
    )
    assert verdict is not None and verdict.ok


def test_a_model_told_which_figure_is_unquoted_can_fix_its_answer(workspace: Path) -> None:
    page = "https://example.org/tides"

    def answer(text: str, quote: str) -> Any:
        return tool_call("finish_task", answer=text, citations=[{"url": page, "quote": quote}])

    script = [
        tool_call("fetch_url", url=page),
        answer("High tide was 3.4 m, at 06:40.", "High tide on 9 February 2021 was at 06:40"),
        answer(
            "High tide on 9 Feb 2021 was 3.2 m, at 6:40; the gauge has 26 212 352 readings.",
            "High tide on 9 February 2021 was at 06:40, at 3.2 m. The gauge has logged "
            "26,212,352 readings",
        ),
    ]
    p = msgspec.structs.replace(
        pack(CitationVerifier(), tools=(FunctionTool(fetch_url),)),
        finish_schema={"type": "object"},
    )
    result, log, chat = run(p, script, workspace, repairs=1)
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED, result.error
    shown = [m for m in chat.requests[2][0] if m.get("role") == "tool"][-1]["content"]
    assert UNQUOTED.format("3.4") in shown and "06:40" not in shown
    checks = [e for e in log.events if e["kind"] == "verification"]
    assert [c["ok"] for c in checks] == [False, True]
    assert checks[0]["unquoted"] == ["3.4"]


# --- where a pack's checks come from: fabric.yaml, the task, the recorded run --------------


def test_the_checks_a_run_gets_from_config_task_and_recording(tmp_path: Path) -> None:
    from support import write

    from fabric.config.loader import load_config
    from fabric.domain.errors import PackError
    from fabric.interfaces.compose import build_runner

    config = write(
        tmp_path,
        """\
        version: 1
        packs:
          engineering: {builder: engineering}
          reviewer:
            builder: declarative
            system_prompt: Review.
            tools: [read_file]
            finish_schema: {type: object}
            verify: {command: "python -m pytest -q", when: always}
          research: {builder: research}
        """,
    )
    runner = build_runner(load_config(config))

    def names(lp: Any) -> list[str]:
        return [v.name for v in lp.pack.verifiers]

    assert names(runner.pack("engineering")) == [
        "figures: every number the summary states was seen during the run",
        "command: auto (python -m pytest -q -x -p no:cacheprovider, when the workspace has tests)",
    ]
    engineering_off = names(runner.pack("engineering").for_run("off"))
    assert engineering_off == ["figures: every number the summary states was seen during the run"]
    reviewer = runner.pack("reviewer")
    assert names(reviewer) == ["command: python -m pytest -q"]
    assert reviewer.starts_commands  # a check command needs the confined runner, shell or not
    assert names(reviewer.for_run("off")) == [] and not reviewer.for_run("off").starts_commands
    assert names(reviewer.for_run("make check")) == ["command: make check"]
    research = runner.pack("research")
    assert [n.split(":")[0] for n in names(research.for_run("off"))] == ["citations"]
    resumed = runner.pack_for({"pack": "reviewer", "verify_override": "python -V"})
    assert names(resumed) == ["command: python -V"]

    bad = write(
        tmp_path / "bad",
        'version: 1\npacks:\n  e: {builder: engineering, verify: {command: "./t.sh"}}\n',
    )
    with pytest.raises(PackError, match=r"fabric.yaml:3.*packs.e.verify.command: .*program name"):
        build_runner(load_config(bad)).pack("e")


def test_a_cancel_before_the_checks_ends_the_run_cancelled_not_completed(workspace: Path) -> None:
    check = Check(PASSED)
    cancel = asyncio.Event()

    class CancellingChat(ScriptedChatClient):
        async def chat(self, request: ChatRequest) -> ChatResponse:
            reply = await super().chat(request)
            cancel.set()  # the user presses Ctrl-C as the final answer arrives
            return reply

    result = asyncio.run(
        execute_task(
            Job("do it", pack(check), "r", workspace),
            Kit(CancellingChat([finish()]), MemoryRunLog("r")),
            Control(cancel=cancel),
        )
    )
    assert result.status is RunStatus.CANCELLED and check.ran == 0
    assert result.payload == {"summary": "fixed it"}  # kept, and said to be unchecked
    assert result.error is not None and "before the work was checked" in result.error["message"]


def test_the_same_call_with_the_same_result_gets_a_note(workspace: Path) -> None:
    same = tool_call("note", text="x")
    _, log, _ = run(pack(), [same, same, same, tool_call("note", text="y"), finish()], workspace)
    outputs = [e["output"] for e in log.events if e["kind"] == "tool_result"]
    assert outputs[0] == "noted: x"
    assert "same call 2 times in a row" in outputs[1] and "same call 3 times" in outputs[2]
    assert outputs[3] == "noted: y"


class _Look:
    """A tool that takes any arguments and always says the same."""

    spec = ToolSpec("look", "Look.", {"type": "object"})

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        return "seen"


@pytest.mark.parametrize(
    ("first", "again", "same"),
    [
        ({"a": 1, "b": [2, {"c": None}]}, {"b": [2, {"c": None}], "a": 1}, True),
        ({"text": "a\ud800b"}, {"text": "a\ud800b"}, True),  # one msgspec will not write
        ({"n": 1}, {"n": 1.0}, False),
        ({"n": 1}, {"n": True}, False),
        ({"n": None}, {"n": "null"}, False),
        ({"big": 2**70}, {"big": 2**70 + 1}, False),
    ],
)
def test_a_call_is_the_same_call_when_its_arguments_are_the_same_json(
    workspace: Path, first: dict[str, Any], again: dict[str, Any], same: bool
) -> None:
    """The order of keys does not matter; a value JSON writes differently does."""
    calls = [tool_call("look", first), tool_call("look", again), finish()]
    _, log, _ = run(pack(tools=(_Look(),)), calls, workspace)
    outputs = [e["output"] for e in log.events if e["kind"] == "tool_result"]
    assert outputs[0] == "seen"
    assert ("same call 2 times in a row" in outputs[1]) is same
    assert outputs[1] == "seen" or same


def test_only_the_newest_repeat_note_is_sent_again_and_the_runlog_keeps_each(
    workspace: Path,
) -> None:
    same = tool_call("note", text="x")
    _, log, chat = run(pack(), [same, same, same, tool_call("note", text="y"), finish()], workspace)
    sent = [m["content"] for m in chat.requests[4][0] if m["role"] == "tool"]
    assert sent[:3] == ["noted: x", "noted: x", sent[2]]  # the second's note is left out now
    assert "same call 3 times in a row" in sent[2] and sent[3] == "noted: y"
    at_step_3 = [m["content"] for m in chat.requests[2][0] if m["role"] == "tool"]
    assert "same call 2 times in a row" in at_step_3[1]  # it went with its output once
    outputs = [e["output"] for e in log.events if e["kind"] == "tool_result"]
    assert "same call 2 times" in outputs[1] and "same call 3 times" in outputs[2]
    replayed(log, workspace)


def test_a_run_of_repeated_calls_replays_and_resumes_as_it_ran(workspace: Path) -> None:
    """The recorded outputs carry their notes, some do not: counted without them, a replay
    and a resume give each call the note it got then, and no second one."""
    same = tool_call("note", text="x")
    _result, log, _ = run(pack(), [same] * 7 + [finish()], workspace)
    replayed(log, workspace)
    cut = [e for e in log.events if e["kind"] != "run_finished"]
    resumed = MemoryRunLog("r1")
    result = asyncio.run(
        resume_task(
            plan_resume(cut),
            pack=pack(),
            workspace=workspace,
            kit=Kit(ScriptedChatClient([finish()]), resumed),
        )
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert "run_resumed" in kinds(resumed.events)


# --- the pack's look at the workspace before the first step ---------------------------------


def test_the_brief_is_added_to_the_task_recorded_and_replayed_as_it_was(workspace: Path) -> None:
    looks: list[str] = []

    async def brief(ctx: ToolContext) -> str:
        looks.append(str(ctx.workspace))
        return "Files: a.py"

    briefed = msgspec.structs.replace(pack(Check(PASSED)), brief=brief)
    result, log, chat = run(briefed, [finish()], workspace)
    assert result.status is RunStatus.COMPLETED and len(looks) == 1
    assert chat.requests[0][0][1] == {"role": "user", "content": "do it\n\nFiles: a.py"}
    assert kinds(log.events)[:3] == ["run_started", "brief", "llm_request"]

    async def other(ctx: ToolContext) -> str:
        raise AssertionError("a replay must not look again")

    report = asyncio.run(
        replay(
            log.events,
            pack=msgspec.structs.replace(pack(Check()), brief=other),
            run_id="r2",
            workspace=workspace,
            kit=Kit(None, MemoryRunLog("r2")),
        )
    )
    assert report.identical, report.divergence


def test_a_brief_that_fails_is_said_and_the_run_goes_on(workspace: Path) -> None:
    async def broken(ctx: ToolContext) -> str:
        raise OSError("disk on fire")

    result, _, chat = run(msgspec.structs.replace(pack(), brief=broken), [finish()], workspace)
    assert result.status is RunStatus.COMPLETED
    assert "could not look at the workspace first: OSError: disk on fire" in str(
        chat.requests[0][0][1]["content"]
    )


def test_a_resumed_run_tells_the_recorded_brief_once(workspace: Path) -> None:
    async def brief(ctx: ToolContext) -> str:
        return "Files: a.py"

    briefed = msgspec.structs.replace(pack(), brief=brief)
    _, log, _ = run(briefed, [tool_call("note", text="a"), tool_call("note", text="b")], workspace)
    events = [e for e in log.events if e["kind"] != "run_finished"]
    resumed = MemoryRunLog("r1")

    async def never(ctx: ToolContext) -> str:
        raise AssertionError("a resume must not look again")

    result = asyncio.run(
        resume_task(
            plan_resume(events),
            pack=msgspec.structs.replace(pack(), brief=never),
            workspace=workspace,
            kit=Kit(ScriptedChatClient([finish()]), resumed),
        )
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert "brief" not in kinds(resumed.events)


def test_files_the_brief_keeps_are_refused_to_file_tools_recorded_and_kept_on_resume(
    workspace: Path,
) -> None:
    """A brief that keeps the failing test: write_file and edit_file refuse it with the
    brief's reason, other files are written, the brief event records what is kept, and a
    resume keeps it too without looking again."""
    from fabric.application.pack import Briefing
    from fabric.infrastructure.tools.library import library_tools

    (workspace / "tests").mkdir()
    (workspace / "tests" / "test_a.py").write_text("def test_x():\n    assert False\n")

    async def brief(ctx: ToolContext) -> Briefing:
        return Briefing("Tests fail.", ("tests/test_a.py",), "it is a failing test")

    tools = tuple(library_tools("write_file", "edit_file"))
    briefed = msgspec.structs.replace(pack(tools=tools), brief=brief)
    script = [
        tool_call("write_file", path="tests/test_a.py", content="def test_x():\n    pass\n"),
        tool_call("edit_file", path="tests/test_a.py", old="assert False", new="assert True"),
        tool_call("write_file", path="a.py", content="x = 1\n"),
        tool_call("note", text="paused"),
        finish(),
    ]
    result, log, _ = run(briefed, script, workspace)
    assert result.status is RunStatus.COMPLETED
    results = [e for e in log.events if e["kind"] == "tool_result"]
    for refused in results[:2]:
        assert not refused["ok"]
        assert refused["output"].startswith(
            "error: tests/test_a.py is kept as it is in this run: it is a failing test"
        )
    assert results[2]["ok"] and (workspace / "a.py").read_text() == "x = 1\n"
    assert (workspace / "tests" / "test_a.py").read_text() == "def test_x():\n    assert False\n"
    (event,) = [e for e in log.events if e["kind"] == "brief"]
    assert event["keep"] == ["tests/test_a.py"] and event["keep_why"] == "it is a failing test"

    # resumed after step 3: the recorded brief's keep holds for the steps run anew
    events = [e for e in log.events if e["kind"] != "run_finished" and e.get("step", 0) <= 3]
    resumed = MemoryRunLog("r1")

    async def never(ctx: ToolContext) -> str:
        raise AssertionError("a resume must not look again")

    again = [
        tool_call("edit_file", path="tests/test_a.py", old="assert False", new="assert 1"),
        finish(),
    ]
    outcome = asyncio.run(
        resume_task(
            plan_resume(events),
            pack=msgspec.structs.replace(briefed, brief=never),
            workspace=workspace,
            kit=Kit(ScriptedChatClient(again), resumed),
        )
    )
    assert outcome.status is RunStatus.COMPLETED, outcome.error
    (refused,) = [e for e in resumed.events if e["kind"] == "tool_result" and e["step"] == 4]
    assert "is kept as it is in this run" in refused["output"]
    assert (workspace / "tests" / "test_a.py").read_text() == "def test_x():\n    assert False\n"


def test_a_run_cut_off_while_the_pack_looked_looks_again_when_resumed(workspace: Path) -> None:
    """Killed during the brief: the log has run_started and nothing else. The resumed run
    tells the model what a fresh look finds, and the log records that look."""
    looks: list[str] = []

    async def brief(ctx: ToolContext) -> str:
        looks.append("looked")
        return "Files: a.py"

    briefed = msgspec.structs.replace(pack(), brief=brief)
    _, log, _ = run(briefed, [finish()], workspace)
    cut = [e for e in log.events if e["kind"] == "run_started"]  # killed mid-look
    resumed, chat = MemoryRunLog("r1"), ScriptedChatClient([finish()])
    result = asyncio.run(
        resume_task(plan_resume(cut), pack=briefed, workspace=workspace, kit=Kit(chat, resumed))
    )
    assert result.status is RunStatus.COMPLETED, result.error
    assert looks == ["looked", "looked"]
    assert chat.requests[0][0][1]["content"] == "do it\n\nFiles: a.py"
    assert kinds(resumed.events)[:2] == ["run_resumed", "brief"]
