"""What the timeline shows of real runs (the v3 fixture runlogs, via ``fabric show --html``)
and of the parts those runs lack (file changes, long outputs, a resume, sub-runs): tool calls
with their arguments, verdicts and results, errors with their hints, usage per step, the
final payload against the finish schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import Tab
from .runlogs import USAGE, Log, show_html, write_runlog

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runlogs" / "v3"


def _open(tab: Callable[..., Tab], runlog: Path, tmp_path: Path) -> Tab:
    page_file = show_html(runlog, tmp_path / "run.html")
    opened = tab(offline=True)
    opened.page.goto(page_file.as_uri())
    opened.page.wait_for_selector(".tl-summary .status")
    return opened


def _flat(text: str) -> str:
    return " ".join(text.split())


def _call(opened: Tab, tool: str, nth: int = 0) -> str:
    """The text of the nth item of a call to ``tool``, its white space made single spaces."""
    items = opened.page.locator(".item.call").filter(
        has=opened.page.locator(".tool", has_text=tool)
    )
    return _flat(items.nth(nth).inner_text())


def _text(opened: Tab, selector: str) -> str:
    return _flat(opened.page.locator(selector).first.inner_text())


def test_a_completed_run(tab: Callable[..., Tab], tmp_path: Path) -> None:
    runlog = FIXTURES / "completed" / "runlog.jsonl"
    events = [json.loads(line) for line in runlog.read_text("utf-8").splitlines()]
    opened = _open(tab, runlog, tmp_path)
    page = opened.page

    assert _text(opened, ".tl-summary .status") == "completed"
    assert "9 step(s) · 135 tokens (90 in, 45 out) · 0.7 s" in _text(opened, ".tl-summary .outcome")
    rows = page.eval_on_selector_all(
        ".payload tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.innerText.trim()))"
    )
    assert rows == [
        ["summary", "string", "required, present", "wrote milk to out.txt, tidied the notes"],
        ["files", "array", "present", '[\n  "out.txt",\n  "notes.txt"\n]'],
    ]
    # every tool call, in order, with its arguments
    calls = [e["name"] for e in events if e["kind"] == "tool_call"]
    assert (
        page.eval_on_selector_all(".item.call .tool", "ts => ts.map(t => t.textContent)") == calls
    )
    # usage and duration of each model call
    assert (
        page.eval_on_selector_all(".item.step .usage", "us => us.map(u => u.textContent)")
        == ["15 tokens (10 in, 5 out)"] * 9
    )
    durations = page.eval_on_selector_all(
        ".item.step .duration", "ds => ds.map(d => d.textContent)"
    )
    assert durations[:3] == ["3.0 ms", "66 ms", "10 ms"]  # 2.964, 65.768 and 10.347 ms

    asked = _call(opened, "read_file", 1)  # big.txt: the rule asks a person
    assert "path big.txt" in asked
    assert asked.startswith("step 3 read_file ask ok 1.0 ms")  # step, tool, verdict, result
    assert 'rule rules[0]: {tool: read_file, path: "big.txt", verdict: ask}' in asked
    assert "approved by cli --yes (once)" in asked
    assert "full output: artifacts/step3-read_file-call_0.txt" in asked

    denied = _call(opened, "write_file", 1)  # poetry.lock: denied by rules[1]
    assert denied.startswith("step 4 write_file deny failed 0.0 ms")
    assert "policy_denied the policy denies this write_file call" in denied
    assert (
        "hint: do not repeat this call; find another way, or finish and say what needs approval"
        in denied
    )

    unknown = _call(opened, "delete_everything")
    assert "unknown tool 'delete_everything'" in unknown
    assert "hint: use one of: read_file, write_file, list_files, finish_task" in unknown
    malformed = _call(opened, "read_file", 2)
    assert 'arguments (not a JSON object): {"path": "notes.txt"' in malformed

    checks = page.eval_on_selector_all(".check", "cs => cs.map(c => c.innerText)")
    assert checks[0].startswith("NOT verified: `python check_notes.py` failed with exit code 1")
    assert "notes.txt has no line 'tidied' yet" in checks[0]
    assert checks[1] == "verified: `python check_notes.py` passed (exit code 0)"
    retry = _text(opened, ".item.retry")
    assert "2/2" in retry and "server_error" in retry and "the model is overloaded" in retry
    assert "from m on openai to m2 on openai (server_error)" in _text(opened, ".item.fallback")
    assert "no tool called" in _text(opened, ".item.nudge")
    assert page.locator("a").count() == 0  # a share file links nowhere
    opened.assert_clean()


@pytest.mark.parametrize(
    ("fixture", "status", "end"),
    [
        ("unverified", "unverified", "the work still failed verification after 2 repair round(s)"),
        ("max_steps", "max_steps", None),
        ("killed", "no end yet", None),
    ],
)
def test_how_a_run_ended(
    tab: Callable[..., Tab], tmp_path: Path, fixture: str, status: str, end: str | None
) -> None:
    opened = _open(tab, FIXTURES / fixture / "runlog.jsonl", tmp_path)
    page = opened.page
    assert _text(opened, ".tl-summary .status") == status
    if fixture == "unverified":
        assert _text(opened, ".run-error .error-message").startswith(end or "")
        hint = "see the verification events in the runlog (fabric show); try a stronger model"
        assert _text(opened, ".run-error .hint-text").startswith(hint)
        assert "required, present" in _text(opened, ".payload")
    if fixture == "max_steps":
        assert _text(opened, ".no-payload") == "no final payload"
        assert "max_steps after 2 step(s) · 30 tokens" in _text(opened, ".item.finished")
    if fixture == "killed":
        assert page.locator(".item.finished").count() == 0
        assert page.locator(".payload").count() == 0
    opened.assert_clean()


def _crafted() -> list[dict[str, object]]:
    """A run resumed after max_steps, with a file change, a long output, a sub-run, and a
    payload that lacks a required field."""
    log = Log("20261125T020000.000Z-craft1")
    log.started(parent_run_id="20261125T015959.000Z-parent")
    log.step(1)
    log.emit(
        "run_resumed", from_step=2, reason="max_steps", limits={"max_steps": 5},
        ended={"status": "max_steps", "payload": None, "steps": 1, "usage": USAGE,
               "duration_s": 1.0, "ts": "2026-11-25T01:59:00.000Z"},
    )  # fmt: skip
    changed = {"resumed": True, "added": [{"name": "shop__new"}], "removed": ["shop__old"]}
    log.emit("llm_request", step=2, messages=[], tools=[], tools_changed=changed)
    log.emit(
        "llm_response", step=2, finish_reason="tool_calls", usage=USAGE, model="m",
        duration_ms=5.0, message={"role": "assistant", "content": None},
    )  # fmt: skip
    ids = {"step": 2, "call_id": "w1"}
    log.emit(
        "tool_call", **ids, name="write_file", arguments={"path": "notes.txt", "content": "b\n"}
    )
    diff = "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n-a\n+b\n same\n"
    log.emit(
        "tool_result", **ids, name="write_file", ok=True, output="wrote 2 bytes", duration_ms=1.0,
        changes=[{"path": "notes.txt", "diff": diff, "created": False, "deleted": False},
                 {"path": "new/todo.md", "diff": "+++ b/new/todo.md\n+x\n", "created": True,
                  "deleted": False}],
    )  # fmt: skip
    ids = {"step": 2, "call_id": "r1"}
    log.emit("tool_call", **ids, name="read_file", arguments={"path": "big.txt"})
    big = "".join(f"{i:4}| the quick brown fox\n" for i in range(300))
    log.emit(
        "tool_result", **ids, name="read_file", ok=True, output=big, duration_ms=1.0,
        artifact="artifacts/step2-read_file-r1.txt", child_run_id="20261125T020001.000Z-child1",
    )  # fmt: skip
    log.finished("completed_from_text", payload={"files": ["notes.txt"]})
    return log.events


def test_diffs_long_outputs_resumes_sub_runs_and_a_missing_field(
    tab: Callable[..., Tab], tmp_path: Path
) -> None:
    events = _crafted()
    opened = _open(tab, write_runlog(tmp_path / "run", events), tmp_path)
    page = opened.page

    classes = page.eval_on_selector_all(
        ".change:first-child pre.diff span", "ss => ss.map(s => s.className)"
    )
    assert classes == ["d-file", "d-file", "d-hunk", "d-del", "d-add", "d-ctx"]
    colours = page.evaluate(
        """() => Object.fromEntries(['d-add', 'd-del', 'd-ctx'].map(c => [c,
             getComputedStyle(document.querySelector('pre.diff .' + c)).backgroundColor]))"""
    )
    assert len(set(colours.values())) == 3, colours  # added, removed and kept lines differ
    heads = page.eval_on_selector_all(".change-head", "hs => hs.map(h => h.innerText)")
    assert heads == ["notes.txt changed", "new/todo.md created"]

    big = next(
        e["output"] for e in events if e.get("call_id") == "r1" and e["kind"] == "tool_result"
    )
    item = page.locator(".item.call").filter(has=page.locator(".tool", has_text="read_file")).last
    assert len(item.locator("pre.output.preview").inner_text()) < 700
    assert big not in item.inner_text()  # collapsed
    item.locator("summary", has_text=f"show all {len(big):,} characters").click()
    assert item.locator(".all pre.output").text_content() == big
    assert "full output: artifacts/step2-read_file-r1.txt" in _flat(item.inner_text())
    assert "sub-run: 20261125T020001.000Z-child1" in _flat(item.inner_text())

    resumed = page.locator(".item.resumed")
    assert resumed.inner_text() == "resumed at step 2 (it had ended: max_steps after 1 step(s))"
    order = page.eval_on_selector_all(".tl-list > li", "ls => ls.map(l => l.className)")
    assert order.index("item resumed") == 3  # after run_started and step 1's two items
    assert order[4] == "item note tools"  # step 2 says its tools changed
    assert _text(opened, ".item.tools") == (
        "step 2 the tools offered changed (the run was resumed): added shop__new; removed shop__old"
    )
    assert "sub-run of 20261125T015959.000Z-parent" in _text(opened, ".item.started")
    assert _text(opened, ".facts .parent-link") == "20261125T015959.000Z-parent"

    rows = page.eval_on_selector_all(
        ".payload tbody tr",
        "rs => rs.map(r => [r.className, r.cells[0].innerText, r.cells[2].innerText])",
    )
    assert rows == [
        ["missing", "summary", "required, missing"],
        ["present", "files", "present"],
    ]
    opened.assert_clean()
