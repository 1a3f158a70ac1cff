"""The plan (ADR 0029) on a run's page (Chromium, against ``fake_api``) and in the share file:
each ``update_plan`` call shows its checklist in the timeline, the run's summary the newest
one, updated live as the plan events stream in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Locator, expect

from .conftest import Tab
from .fake_api import FakeApi, summary
from .pages import flat, login
from .runlogs import USAGE, Log, show_html, write_runlog

RUN = "20261125T100000.000Z-plan01"
FIRST = [
    {"step": "read the failing test", "status": "in_progress"},
    {"step": "fix parse()", "status": "pending"},
    {"step": "run the tests", "status": "pending"},
]
SECOND = [
    {"step": "read the failing test", "status": "done"},
    {"step": "fix parse()", "status": "in_progress"},
    {"step": "run the tests", "status": "pending"},
]


def planned(log: Log, step: int, items: list[dict[str, str]], **more: Any) -> None:
    """Model call ``step`` asks for update_plan with ``items``, which is saved."""
    ids = {"step": step, "call_id": f"plan_{step}"}
    call = {"id": ids["call_id"], "type": "function",
            "function": {"name": "update_plan", "arguments": "{}"}}  # fmt: skip
    log.emit("llm_request", step=step, messages=[])
    log.emit(
        "llm_response", step=step, finish_reason="tool_calls", usage=USAGE, model="m",
        duration_ms=5.0, message={"role": "assistant", "content": None, "tool_calls": [call]},
    )  # fmt: skip
    log.emit("tool_call", **ids, name="update_plan", arguments={"items": items, **more})
    counts = {
        s: sum(1 for i in items if i["status"] == s) for s in ("pending", "in_progress", "done")
    }
    log.emit("plan", **ids, items=items, counts=counts, **more)
    done = counts["done"]
    log.emit("tool_result", **ids, name="update_plan", ok=True, duration_ms=0.2,
             output=f"Plan saved: {done} of {len(items)} steps done.")  # fmt: skip


def checklist(where: Locator) -> list[list[str]]:
    """Each step of the checklist in ``where``: its mark, its text and its status."""
    rows: list[list[str]] = where.locator(".plan-item").evaluate_all(
        "items => items.map(i => [i.querySelector('.plan-mark').textContent,"
        " i.querySelector('.plan-step').textContent, i.title])",
    )
    return rows


def test_the_run_page_shows_each_plan_and_the_current_one_live(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    log = Log(RUN)
    log.started()
    planned(log, 1, FIRST)
    api.add_run(summary(RUN, "notes", "fix parse", "running", task_id=RUN), log.events)
    api.live.add(RUN)
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector(".tl-summary .current-plan")
    assert flat(page.inner_text(".tl-summary .plan-head")) == "plan: 0/3 done"
    assert checklist(page.locator(".tl-summary")) == [
        ["[>]", "read the failing test", "in_progress"],
        ["[ ]", "fix parse()", "pending"],
        ["[ ]", "run the tests", "pending"],
    ]
    call = page.locator(".item.call").filter(has=page.locator(".tool", has_text="update_plan"))
    assert call.count() == 1 and call.locator(".plan-item").count() == 3
    assert call.locator(".args").count() == 0  # the checklist is what its arguments say

    start = len(log.events)
    planned(log, 2, SECOND, explanation="the test names parse()")
    api.append(RUN, *log.events[start:])
    page.wait_for_function(
        "() => document.querySelector('.tl-summary .plan-head').textContent.includes('1/3')"
    )
    assert checklist(page.locator(".tl-summary"))[:2] == [
        ["[x]", "read the failing test", "done"],
        ["[>]", "fix parse()", "in_progress"],
    ]
    assert flat(page.inner_text(".tl-summary .plan-why")) == "why: the test names parse()"
    assert call.count() == 2
    assert checklist(call.nth(0))[0] == ["[>]", "read the failing test", "in_progress"]
    # what the model was told is there, folded
    told = call.nth(1).locator("details")
    told.locator("summary").click()  # its text is built on the toggle event, which comes after
    expect(told).to_contain_text("Plan saved: 1 of 3 steps done.")
    opened.assert_clean()


def test_the_share_file_shows_the_plan(tab: Callable[..., Tab], tmp_path: Path) -> None:
    log = Log(RUN)
    log.started()
    planned(log, 1, FIRST)
    planned(log, 2, SECOND)
    log.finished()
    page_file = show_html(write_runlog(tmp_path / "run", log.events), tmp_path / "run.html")
    opened = tab(offline=True)
    opened.page.goto(page_file.as_uri())
    opened.page.wait_for_selector(".tl-summary .current-plan")
    summary_plan = checklist(opened.page.locator(".tl-summary"))
    assert summary_plan[1] == ["[>]", "fix parse()", "in_progress"]
    assert opened.page.locator(".item.call .plan").count() == 2
    opened.assert_clean()
