"""The plan (ADR 0029): a pack with ``plan.enabled`` gives its runs ``update_plan``; each valid
call is a ``plan`` event with the whole checklist, an invalid one a tool error saying what to
fix. Off by default (no tool, no prompt). Resumed and replayed runs, the terminal's lines and
``fabric show``, and the checks that must not take the plan as evidence."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, kinds, read_events
from typer.testing import CliRunner

from fabric.application.job import Control, RunRequest
from fabric.application.plan import PROMPT, TOOL
from fabric.application.verify import RunRecord, ToolUse
from fabric.config.loader import load_config
from fabric.domain.errors import ConfigError
from fabric.domain.models import ChatResponse, Message
from fabric.infrastructure.telemetry.attributes import event_attributes
from fabric.infrastructure.tools.verifiers import PLAN_TOOL, CommandVerifier, SeenFigures
from fabric.interfaces.cli.app import app
from fabric.interfaces.cli.render import Progress
from fabric.interfaces.compose import build_runner
from fabric.testing import FunctionChatClient, tool_call

CONFIG = """\
version: 1
llm: {models: {default: m}}
runs_dir: runs
packs:
  notes:
    builder: declarative
    system_prompt: You tidy notes.
    tools: [read_file, write_file]
    finish_schema: {type: object, properties: {summary: {type: string}}, required: [summary]}
    plan: PLAN
"""
ON = "{enabled: true, max_items: 4, item_chars: 40}"
FIRST = [
    {"step": "read the notes", "status": "in_progress"},
    {"step": "write the summary", "status": "pending"},
]
SECOND = [
    {"step": "read the notes", "status": "done"},
    {"step": "write the summary", "status": "in_progress"},
]


def items(*statuses: str) -> list[dict[str, str]]:
    return [{"step": f"part {n}", "status": s} for n, s in enumerate(statuses, 1)]


class Model:
    """Answers model call n with ``script[n - 1]`` (a tool name and its arguments), then
    finishes; keeps the tools and system prompt it was offered."""

    def __init__(self, script: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.script = list(script)
        self.steps: list[int] = []
        self.tools: list[list[str]] = []
        self.system = ""
        self.seen: list[str] = []

    def __call__(self, model: str) -> FunctionChatClient:
        async def answer(
            messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
        ) -> ChatResponse:
            step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
            self.steps.append(step)
            self.tools.append([t["function"]["name"] for t in tools])
            self.system = str(messages[0]["content"])
            if messages[-1].get("role") == "tool":
                self.seen.append(str(messages[-1]["content"]))
            if step <= len(self.script):
                name, arguments = self.script[step - 1]
                return tool_call(name, **arguments)
            return tool_call("finish_task", summary="tidied")

        return FunctionChatClient(answer, model=model)


def runner(tmp_path: Path, model: Model, plan: str = ON) -> Any:
    (tmp_path / "fabric.yaml").write_text(CONFIG.replace("PLAN", plan))
    return build_runner(load_config(tmp_path / "fabric.yaml"), chat_factory=model)


def run(tmp_path: Path, workspace: Path, model: Model, **request: Any) -> list[dict[str, Any]]:
    result = asyncio.run(
        runner(tmp_path, model).run(RunRequest("notes", "tidy", workspace=workspace, **request))
    )
    return assert_valid_runlog(read_events(str(result.runlog_path)), finished=True)


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == kind]


def plan_results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in of(events, "tool_result") if e["name"] == "update_plan"]


# --- off by default -------------------------------------------------------------------------------


def test_without_the_setting_a_run_has_no_plan_tool_and_no_word_of_it(
    tmp_path: Path, workspace: Path
) -> None:
    model = Model([])
    (tmp_path / "fabric.yaml").write_text(CONFIG.replace("    plan: PLAN\n", ""))
    built = build_runner(load_config(tmp_path / "fabric.yaml"), chat_factory=model)
    result = asyncio.run(built.run(RunRequest("notes", "tidy", workspace=workspace)))
    events = assert_valid_runlog(read_events(str(result.runlog_path)))
    assert model.tools == [["read_file", "write_file", "finish_task"]]
    assert "update_plan" not in model.system and PROMPT not in model.system
    started = events[0]
    assert "plan" not in started.get("additions", {})
    assert "update_plan" not in started["system_prompt"]
    assert built.pack("notes").settings.plan.enabled is False


# --- a run that keeps a plan ----------------------------------------------------------------------


def test_each_update_is_a_plan_event_with_the_whole_list(tmp_path: Path, workspace: Path) -> None:
    model = Model(
        [
            ("update_plan", {"items": FIRST}),
            ("update_plan", {"items": SECOND, "explanation": "read them"}),
        ]
    )
    events = run(tmp_path, workspace, model)
    assert model.tools[0] == ["read_file", "write_file", "update_plan", "finish_task"]
    assert model.system.endswith(PROMPT)
    assert events[0]["additions"]["plan"] == {"max_items": 4, "item_chars": 40}
    offered = of(events, "llm_request")[0]["tools"]
    spec = next(t["function"] for t in offered if t["function"]["name"] == "update_plan")
    assert spec["parameters"]["properties"]["items"]["maxItems"] == 4
    assert "at most 4 steps" in spec["description"]

    plans = of(events, "plan")
    assert [(p["step"], p["call_id"]) for p in plans] == [(1, "call_0"), (2, "call_0")]
    assert [p["items"] for p in plans] == [FIRST, SECOND]
    assert plans[0]["counts"] == {"pending": 1, "in_progress": 1, "done": 0}
    assert plans[1]["counts"] == {"pending": 0, "in_progress": 1, "done": 1}
    assert "explanation" not in plans[0] and plans[1]["explanation"] == "read them"
    # each plan event comes between its call and its result
    order = kinds(events)
    first = order.index("plan")
    assert order[first - 2 : first + 2] == ["tool_call", "policy_decision", "plan", "tool_result"]
    assert [r["ok"] for r in plan_results(events)] == [True, True]
    assert model.seen[0] == (
        "Plan saved: 0 of 2 steps done.\n[>] read the notes\n[ ] write the summary"
    )
    assert model.seen[1].startswith("Plan saved: 1 of 2 steps done.\n[x] read the notes\n")


def test_steps_are_kept_on_one_line(tmp_path: Path, workspace: Path) -> None:
    given = [{"step": "  read\nthe\tnotes  ", "status": "done"}]
    events = run(tmp_path, workspace, Model([("update_plan", {"items": given})]))
    (plan,) = of(events, "plan")
    assert plan["items"] == [{"step": "read the notes", "status": "done"}]
    assert plan_results(events)[0]["output"].startswith("Plan saved: all 1 steps done.")


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"items": items("in_progress", "in_progress", "pending")},
         "2 steps are in_progress (items 1, 2); at most one may be"),
        ({"items": items(*["pending"] * 5)}, "the plan has 5 steps; at most 4 are allowed"),
        ({"items": [{"step": "x" * 41, "status": "pending"}]},
         "item 1 is 41 characters long; at most 40"),
        ({"items": [{"step": "a", "status": "doing"}]},
         "item 1 has status 'doing'; use pending, in_progress or done"),
        ({"items": [{"step": " ", "status": "done"}]}, "item 1 has no step text"),
        ({"items": [{"step": "a", "status": "done", "id": 1}]}, "item 1 has unknown keys: id"),
        ({"items": ["read it"]}, "item 1 is not an object with step and status"),
        ({"items": []}, "items is empty"),
        ({"items": "read, then write"}, "items must be a list of steps"),
        ({"items": [{"step": "a\x1b[2Jb", "status": "done"}]}, "item 1 holds control characters"),
        ({"items": items("done"), "note": "x"}, "unknown argument 'note'"),
        ({"items": items("done"), "explanation": "y" * 401}, "explanation is 401 characters"),
    ],
)  # fmt: skip
def test_a_plan_that_breaks_a_rule_is_refused_with_what_to_fix(
    tmp_path: Path, workspace: Path, arguments: dict[str, Any], said: str
) -> None:
    events = run(tmp_path, workspace, Model([("update_plan", arguments)]))
    assert of(events, "plan") == []
    (result,) = plan_results(events)
    assert result["ok"] is False and result["error"]["code"] == "tool_error"
    assert result["error"]["message"].startswith("the plan was not saved: ")
    assert said in result["error"]["message"]
    assert "call update_plan again with the whole list" in result["error"]["hint"]


def test_every_problem_is_said_at_once(tmp_path: Path, workspace: Path) -> None:
    bad = [{"step": "a", "status": "doing"}, *items("in_progress", "in_progress")]
    events = run(tmp_path, workspace, Model([("update_plan", {"items": bad})]))
    message = plan_results(events)[0]["error"]["message"]
    assert "item 1 has status 'doing'" in message
    assert "2 steps are in_progress (items 2, 3)" in message


def test_the_settings_are_checked_where_they_are_written(tmp_path: Path) -> None:
    (tmp_path / "fabric.yaml").write_text(CONFIG.replace("PLAN", "{enabled: true, max_items: 0}"))
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "fabric.yaml")
    assert "plan.max_items" in str(caught.value) and "fabric.yaml:10" in str(caught.value)
    (tmp_path / "fabric.yaml").write_text(CONFIG.replace("PLAN", "{enabeld: true}"))
    with pytest.raises(ConfigError, match="enabeld"):
        load_config(tmp_path / "fabric.yaml")


# --- resume and replay ----------------------------------------------------------------------------


def test_a_resumed_run_goes_on_with_its_plan(tmp_path: Path, workspace: Path) -> None:
    third = [dict(i, status="done") for i in SECOND]
    model = Model(
        [("update_plan", {"items": FIRST}), ("update_plan", {"items": SECOND}),
         ("update_plan", {"items": third})]
    )  # fmt: skip
    built = runner(tmp_path, model)
    first = asyncio.run(built.run(RunRequest("notes", "tidy", workspace=workspace, max_steps=2)))
    assert first.status.value == "max_steps"
    path = Path(str(first.runlog_path))
    before = read_events(path)
    assert [p["items"] for p in of(before, "plan")] == [FIRST, SECOND]

    result = asyncio.run(built.resume(before, path, max_steps=5))
    assert result.status.value == "completed", result.error
    assert model.steps == [1, 2, 3, 4]  # steps 1 and 2 came from the log
    after = assert_valid_runlog(path)
    plans = of(after, "plan")
    assert [(p["step"], p["items"]) for p in plans] == [(1, FIRST), (2, SECOND), (3, third)]
    assert plans[2]["counts"] == {"pending": 0, "in_progress": 0, "done": 2}
    assert kinds(after).index("run_resumed") < after.index(plans[2])


def test_a_run_with_a_plan_replays_identically(tmp_path: Path, workspace: Path) -> None:
    model = Model([("update_plan", {"items": FIRST}), ("update_plan", {"items": SECOND})])
    built = runner(tmp_path, model)
    result = asyncio.run(built.run(RunRequest("notes", "tidy", workspace=workspace)))
    path = Path(str(result.runlog_path))

    recorded = asyncio.run(built.replay(path))
    assert recorded.identical, recorded.divergence
    # the recorded results answer the plan's calls: the replay's log tells no plan of its own
    assert of(read_events(str(recorded.result.runlog_path)), "plan") == []

    live = asyncio.run(built.replay(path, live=True))
    assert live.identical, live.divergence
    replayed = assert_valid_runlog(read_events(str(live.result.runlog_path)))
    assert [p["items"] for p in of(replayed, "plan")] == [FIRST, SECOND]


def test_a_replay_with_the_plan_turned_off_says_where_it_differs(
    tmp_path: Path, workspace: Path
) -> None:
    model = Model([("update_plan", {"items": FIRST})])
    result = asyncio.run(
        runner(tmp_path, model).run(RunRequest("notes", "tidy", workspace=workspace))
    )
    report = asyncio.run(runner(tmp_path, model, plan="{enabled: false}").replay(
        Path(str(result.runlog_path))
    ))  # fmt: skip
    assert not report.identical and report.divergence is not None
    assert report.divergence.step == 1 and report.divergence.field.startswith("messages[0]")


# --- what people see ------------------------------------------------------------------------------


def test_the_terminal_shows_the_checklist_as_it_changes(tmp_path: Path, workspace: Path) -> None:
    long = [{"step": f"part {n} of the notes, with words", "status": "pending"} for n in (1, 2, 3)]
    model = Model(
        [("update_plan", {"items": FIRST}), ("read_file", {"path": "x"}),
         ("update_plan", {"items": FIRST}), ("update_plan", {"items": SECOND, "explanation": "ok"}),
         ("update_plan", {"items": long}), ("update_plan", {"items": items("doing")})]
    )  # fmt: skip
    out = io.StringIO()
    built = runner(tmp_path, model)
    asyncio.run(
        built.run(
            RunRequest("notes", "tidy", workspace=workspace), Control(observers=[Progress(out)])
        )
    )
    lines = out.getvalue().splitlines()
    plan_lines = [line for line in lines if "update_plan" in line or "plan (" in line]
    assert plan_lines[:3] == [
        "  step  1  plan (0/2 done): [>] read the notes  [ ] write the summary",
        "  step  3  plan (0/2 done): unchanged",
        "  step  4  plan (1/2 done): [x] read the notes  [>] write the summary",
    ]
    at = lines.index(plan_lines[2])
    assert lines[at + 1] == "             why: ok"
    at = lines.index(plan_lines[3])
    assert lines[at : at + 4] == [
        "  step  5  plan (0/3 done):",
        "             [ ] part 1 of the notes, with words",
        "             [ ] part 2 of the notes, with words",
        "             [ ] part 3 of the notes, with words",
    ]
    # a refused plan is shown as the tool's error; a saved one only as its checklist
    assert plan_lines[4].startswith("  step  6  update_plan items=")
    assert "→ error: the plan was not saved: item 1 has status 'doing'" in plan_lines[4]
    assert len(plan_lines) == 5

    # fabric show tells the same story from the runlog
    shown = CliRunner().invoke(app, ["show", str(next((tmp_path / "runs").glob("*/runlog.jsonl")))])
    assert shown.exit_code == 0, shown.output
    assert "\n".join(lines[at : at + 4]) in shown.stdout
    assert "  step  1  plan (0/2 done): [>] read the notes  [ ] write the summary" in shown.stdout
    assert "update_plan items=" in shown.stdout  # the refused one
    assert shown.stdout.count("update_plan") == 1


# --- the checks of the work -----------------------------------------------------------------------


def plan_use(output: str) -> ToolUse:
    return ToolUse(TOOL, {"items": items("done")}, True, output)


def test_a_figure_the_model_wrote_into_its_plan_is_not_evidence(ctx: Any) -> None:
    record = RunRecord(uses=[plan_use("Plan saved: all 1 steps done.\n[x] the limit is 4096 MB")])
    verdict = asyncio.run(SeenFigures().verify({"summary": "The limit is 4096 MB."}, ctx, record))
    assert verdict is not None and not verdict.ok and "4096" in verdict.evidence


def test_a_run_that_only_read_and_planned_has_nothing_to_verify(ctx: Any) -> None:
    record = RunRecord(uses=[ToolUse("read_file", {"path": "a"}, True, "x"), plan_use("ok")])
    assert PLAN_TOOL == TOOL  # the checks know the plan's tool by name
    verifier = CommandVerifier("python -c 'raise SystemExit(1)'", when="changed")
    assert asyncio.run(verifier.verify({"summary": "s"}, ctx, record)) is None


def test_the_plan_event_is_described_by_the_published_schema() -> None:
    schema = json.loads(
        (Path(__file__).parents[2] / "src/fabric/runlog.schema.json").read_text("utf-8")
    )
    assert "plan" in schema["properties"]["kind"]["enum"]


def test_a_trace_keeps_the_plan_as_a_span_event_its_steps_only_when_content_is_captured() -> None:
    event = {"kind": "plan", "step": 2, "call_id": "c1", "items": FIRST,
             "counts": {"pending": 1, "in_progress": 1, "done": 0}}  # fmt: skip
    attrs = event_attributes(event, capture=False)
    assert attrs is not None and attrs["fabric.call_id"] == "c1"
    assert json.loads(attrs["fabric.counts"]) == event["counts"]
    assert "fabric.items" not in attrs
    captured = event_attributes(event, capture=True)
    assert captured is not None and json.loads(captured["fabric.items"]) == FIRST
