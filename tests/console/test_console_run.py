"""A run's page in the console (Chromium, against ``fake_api``): the timeline live as the run
goes (model text as it streams), approving or denying a pending call with the rule shown,
cancel, resume (the resumed run followed on), replay with its divergence, and a run of 10,000
events built a page at a time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Tab
from .fake_api import CSRF, FakeApi, summary
from .pages import flat, login
from .runlogs import USAGE, Log, long_run

RUN = "20261125T100000.000Z-aaa001"


def _live_run(api: FakeApi, *, task_id: str | None = RUN) -> Log:
    log = Log(RUN)
    log.started()
    log.step(1)
    api.add_run(summary(RUN, "notes", "tidy up the notes", "running", task_id=task_id), log.events)
    api.live.add(RUN)
    return log


def _ask(log: Log, step: int = 2) -> None:
    ids = {"step": step, "call_id": "call_w"}
    log.emit("llm_request", step=step, messages=[])
    log.emit(
        "llm_response", step=step, finish_reason="tool_calls", usage=USAGE, model="m",
        duration_ms=9.0, message={"role": "assistant", "content": "Writing it now."},
    )  # fmt: skip
    log.emit("tool_call", **ids, name="write_file", arguments={"path": "a.lock", "content": "x"})
    rule = 'rules[0]: {tool: write_file, path: "*.lock", verdict: ask}'
    log.emit("policy_decision", **ids, tool="write_file", verdict="ask", rule=rule,
             reason='the path matches "*.lock" (rules[0]), which asks a person first')  # fmt: skip
    log.emit("approval_requested", **ids, tool="write_file", arguments={"path": "a.lock"},
             rule=rule, timeout_s=300.0)  # fmt: skip


def test_a_run_page_follows_the_run_and_approves_a_call(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    log = _live_run(api)
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector(".item.call .tool")
    assert page.inner_text("#run-status") == "running"
    assert page.locator("#cancel").is_visible()

    start = len(log.events)
    _ask(log)
    api.append(RUN, *log.events[start:])
    page.wait_for_selector(".approval-box")
    box = flat(page.inner_text(".approval-box"))
    assert "step 2: write_file waits for approval" in box
    assert 'asked by the rule rules[0]: {tool: write_file, path: "*.lock", verdict: ask}' in box
    assert page.inner_text("#run-status") == "awaiting_approval"
    assert "Writing it now." in page.inner_text(".tl-list")

    page.click(".approval-box button.approve")
    page.wait_for_selector(".approval-out .flash")
    (post,) = api.posts(f"/tasks/{RUN}/approvals/call_w")
    assert post.body == {"approve": True, "scope": "once"}
    assert post.headers["X-Fabric-CSRF"] == CSRF

    start = len(log.events)
    ids = {"step": 2, "call_id": "call_w"}
    log.emit("approval", **ids, tool="write_file", approved=True, by="http", scope="once")
    log.emit("tool_result", **ids, name="write_file", ok=True, output="wrote 1 bytes",
             duration_ms=1.0)  # fmt: skip
    log.finished()
    api.live.discard(RUN)
    api.add_run(summary(RUN, "notes", "tidy up the notes", "completed", task_id=RUN))
    api.append(RUN, *log.events[start:])
    page.wait_for_selector("#run-status.status-completed")
    assert page.locator(".approval-box").count() == 0
    assert page.locator("#cancel").count() == 0
    assert page.locator("#replay").is_visible()
    assert "approved by http (once)" in page.inner_text(".item.call-ok >> nth=1")
    assert page.get_attribute("#download-html", "href") == f"/runs/{RUN}/html"
    opened.assert_clean()


def test_model_text_shows_as_it_streams(tab: Callable[..., Tab], api: FakeApi) -> None:
    log = _live_run(api)
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector(".item.call")
    log.emit("llm_request", step=2, messages=[])
    api.append(RUN, log.events[-1])
    api.append(RUN, {"kind": "delta", "step": 2, "text": "Let me <b>look"})
    api.append(RUN, {"kind": "delta", "step": 2, "text": "</b> again."})
    page.wait_for_selector(".model-text.streaming")
    page.wait_for_function(
        "() => document.querySelector('.model-text.streaming').textContent.endsWith('again.')"
    )
    assert page.inner_text(".model-text.streaming") == "Let me <b>look</b> again."
    log.emit(
        "llm_response", step=2, finish_reason="stop", usage=USAGE, model="m", duration_ms=9.0,
        message={"role": "assistant", "content": "Let me <b>look</b> again, properly."},
    )  # fmt: skip
    api.append(RUN, log.events[-1])
    page.wait_for_selector(".item.step .model-text:not(.streaming) >> nth=0")
    page.wait_for_function("() => !document.querySelector('.model-text.streaming')")
    texts = page.eval_on_selector_all(".model-text", "ts => ts.map(t => t.textContent)")
    assert texts == ["Let me <b>look</b> again, properly."]
    assert page.locator("b").count() == 0
    opened.assert_clean()


@pytest.mark.parametrize(
    ("button", "body"),
    [("button.deny", {"approve": False, "scope": "once"}),
     ("button.approve-run", {"approve": True, "scope": "run"})],
)  # fmt: skip
def test_deny_or_approve_for_the_run(
    tab: Callable[..., Tab], api: FakeApi, button: str, body: dict[str, Any]
) -> None:
    log = _live_run(api)
    _ask(log)
    api.append(RUN, *log.events[len(log.events) - 5 :])
    opened = login(tab, api, f"#/runs/{RUN}")
    opened.page.click(f".approval-box {button}")
    opened.page.wait_for_selector(".approval-out .flash")
    assert [p.body for p in api.posts(f"/tasks/{RUN}/approvals/call_w")] == [body]
    opened.assert_clean()


def test_cancel_a_running_task(tab: Callable[..., Tab], api: FakeApi) -> None:
    _live_run(api)
    opened = login(tab, api, f"#/runs/{RUN}")
    opened.page.click("#cancel")
    opened.page.wait_for_selector("#run-notice .flash")
    (post,) = api.posts(f"/tasks/{RUN}/cancel")
    assert post.headers["X-Fabric-CSRF"] == CSRF
    assert "cancel asked" in opened.page.inner_text("#run-notice")
    opened.assert_clean()


def test_resume_after_max_steps_follows_the_resumed_run(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    log = Log(RUN)
    log.started()
    log.step(1)
    log.finished("max_steps", payload=None)
    api.add_run(summary(RUN, "notes", "tidy up", "max_steps", task_id=RUN, steps=1), log.events)
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector("#resume")
    page.wait_for_function(  # the steps done and the pack's limit, once run_started is in
        "() => document.querySelector('#resume-steps').value === '31'"
    )
    page.fill("#resume-steps", "5")
    api.live.add(RUN)
    page.click("#resume")
    page.wait_for_selector("#run-notice .flash")
    assert [p.body for p in api.posts(f"/tasks/{RUN}/resume")] == [{"max_steps": 5}]

    # as the service does (ADR 0010): run_resumed takes the end's place and seq
    end = log.events.pop()
    ended = {k: end[k] for k in ("status", "payload", "steps", "usage", "duration_s")}
    resumed = log.emit("run_resumed", from_step=2, reason="max_steps", limits={}, ended=ended)
    assert resumed["seq"] == end["seq"]
    api.replace(RUN, resumed)
    log.step(2)
    log.finished()
    api.live.discard(RUN)
    api.add_run(summary(RUN, "notes", "tidy up", "completed", task_id=RUN, resumed=True))
    api.append(RUN, *log.events[resumed["seq"] + 1 :])
    page.wait_for_selector("#run-status.status-completed")
    assert page.inner_text(".item.resumed") == (
        "resumed at step 2 (it had ended: max_steps after 1 step(s))"
    )
    assert page.locator(".item.finished").count() == 1
    opened.assert_clean()


def test_a_command_line_run_says_where_to_resume_it(tab: Callable[..., Tab], api: FakeApi) -> None:
    log = Log(RUN)
    log.started()
    log.step(1)
    api.add_run(summary(RUN, "notes", "tidy up", "interrupted"), log.events)
    opened = login(tab, api, f"#/runs/{RUN}")
    opened.page.wait_for_selector("#run-actions code")
    assert opened.page.inner_text("#run-actions code") == f"fabric resume {RUN}"
    assert opened.page.locator("#resume").count() == 0
    assert opened.page.inner_text("#run-status") == "interrupted"
    opened.assert_clean()


def test_replay_shows_where_it_diverged(tab: Callable[..., Tab], api: FakeApi) -> None:
    api.add_run(summary(RUN, "notes", "tidy up", "completed"))
    api.replay = {
        "run_id": "20261125T110000.000Z-rep001", "identical": False, "steps": 2,
        "divergence": {"step": 2, "field": "messages[1].content", "recorded": "old text",
                       "now": "new text"},
    }  # fmt: skip
    opened = login(tab, api, f"#/runs/{RUN}")
    opened.page.click("#replay")
    opened.page.wait_for_selector(".replay-result.diverged")
    text = flat(opened.page.inner_text(".replay-result"))
    assert text.startswith("diverged at step 2, in messages[1].content")
    assert "recorded old text now new text" in text
    href = opened.page.get_attribute(".replay-link", "href")
    assert href == "#/runs/20261125T110000.000Z-rep001"
    opened.page.click(".replay-link")
    opened.page.wait_for_selector("main[data-view=run]")
    opened.assert_clean()


def test_a_run_of_ten_thousand_events_streams_into_a_page_at_a_time(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    events = long_run(10_000, run_id=RUN)
    api.add_run(summary(RUN, "notes", "read 10000 notes", "completed"), events)
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector(".tl-summary .status-completed", timeout=30_000)
    opening = {"run_started", "llm_request", "tool_call", "nudge", "run_finished"}
    items = sum(1 for e in events if e["kind"] in opening)  # a model and a call item a step
    page.wait_for_function(  # every event arrived, 150 items of them built
        "n => document.querySelector('.tl-more-text').textContent === n",
        arg=f"{items - 150:,} more item(s) below",
    )
    assert page.locator(".tl-list > li").count() == 150
    assert page.evaluate("() => document.getElementsByTagName('*').length") < 4_000
    page.click(".tl-more-button")
    page.wait_for_function("() => document.querySelectorAll('.tl-list > li').length === 300")
    opened.assert_clean()


def test_artifacts_and_other_runs_are_links(tab: Callable[..., Tab], api: FakeApi) -> None:
    runlog = Path(__file__).parents[1] / "fixtures/runlogs/v3/completed/runlog.jsonl"
    events = [json.loads(line) for line in runlog.read_text("utf-8").splitlines()]
    run_id = events[0]["run_id"]
    events[0]["parent_run_id"] = "20261125T000000.000Z-parent"
    events[22]["child_run_id"] = "20261125T010307.000Z-child1"  # the read of big.txt
    api.add_run(summary(run_id, "fixture", "tidy up the notes", "completed"), events)
    api.add_run(summary("20261125T010307.000Z-child1", "fixture", "a sub-task", "completed"))
    opened = login(tab, api, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector(".artifact-link")
    href = f"/runs/{run_id}/artifacts/step3-read_file-call_0.txt"
    assert page.get_attribute(".artifact-link", "href") == href
    assert page.get_attribute(".facts .parent-link", "href") == "#/runs/20261125T000000.000Z-parent"
    page.click(".child-link")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    assert page.inner_text("#run-id") == "20261125T010307.000Z-child1"
    opened.assert_clean()
