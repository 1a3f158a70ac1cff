"""Script and HTML payloads through the real path: a pack whose description and policy rules
in fabric.yaml hold markup, task text, the model's words, tool-call arguments and file
names, a tool the pack lacks, a file's content read back by a tool, error messages (a missing
file, the model server's refusal, a bad workspace) — all through a real ``fabric serve`` and
its scripted model, then shown in Chromium on the runs list, a run page (with an approval
box), the packs page, the new-task form and the share file opened offline. Nothing runs (no
dialog, the payloads' marker unset, none of their elements in the page, no CSP violation) and
each reads as it was written."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fabric.testing import completion

from .conftest import Tab
from .live import (
    SUMMARY,
    Live,
    finish,
    live_service,
    open_console,
    open_shared,
)
from .pages import assert_nothing_ran, texts
from .runlogs import PAYLOADS, hostile

PACK = "notes"
"""The pack. A pack name cannot hold markup: the config refuses one at its line
(tests/e2e/test_packs_without_code.py); the pages' handling of one that comes through the API
anyway is in test_console_xss.py."""
FILE = '<img src=x onerror="window.__pwned=1;alert(1)">.txt'
"""A file name the workspace takes: written, then read back."""
MARKED = '<i onmouseover="window.__pwned=9;alert(9)">'
ASKED = f"{MARKED}asked.txt"
"""A file name the pack's policy asks about, by a rule whose path is markup too."""
RULES = [
    {"tool": "read_file", "path": f"{PAYLOADS[4]}/*", "verdict": "deny"},
    {"tool": "write_file", "path": f"{MARKED}*", "verdict": "ask"},
]
TOOL = f"{PAYLOADS[0]}tool"
"""A tool the model calls that the pack does not have."""
MARKUP = PAYLOADS[:-1]
"""The payloads that are markup (the last one is line separators, which some messages show
escaped or as spaces)."""


def has_every_payload(text: str) -> bool:
    return all(payload in text for payload in MARKUP)


@dataclass
class HostileRuns:
    live: Live
    run_id: str
    """Writes FILE (the payloads its content) and a file named with the payloads, reads FILE
    back and a missing file, calls a tool the pack lacks, and finishes with the payloads."""
    failed_id: str
    """Failed: the model server refused it with the payloads as its message."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileRuns]:
    pack = {
        "builder": "declarative",
        "description": hostile("pack description"),
        "system_prompt": "You write files.",
        "tools": ["read_file", "write_file"],
        "finish_schema": SUMMARY,
        "sandbox": {"policy": {"rules": RULES}},
    }
    with live_service(tmp_path_factory.mktemp("xss"), {PACK: pack}) as live:
        tag = live.model.script(
            "#xss-run",
            completion(hostile("model output"), [
                ("write_file", {"path": FILE, "content": hostile("file content")}),
                ("write_file", {"path": hostile("file name"), "content": "x"}),
            ]),
            completion(None, [
                ("read_file", {"path": FILE}),
                ("read_file", {"path": hostile("missing file")}),
                (TOOL, {hostile("argument name"): hostile("argument")}),
            ]),
            finish(hostile("payload value")),
        )  # fmt: skip
        refused = live.model.script("#xss-fail", (400, {"error": {"message": hostile("model")}}))
        run_id = live.submit(PACK, hostile("task"), tag)
        failed_id = live.submit(PACK, hostile("task"), refused)
        assert live.service.wait_final(run_id)["status"] == "completed"
        assert live.service.wait_final(failed_id)["status"] == "failed"
        yield HostileRuns(live, run_id, failed_id)


def test_the_runs_list(tab: Callable[..., Tab], runs: HostileRuns) -> None:
    opened = open_console(tab, runs.live.url)
    page = opened.page
    page.wait_for_selector(f"tr[data-run-id='{runs.failed_id}']")
    page.fill("#filter-q", "#xss-")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 2")
    assert texts(opened, "tr[data-run-id] td.task") == [
        f"{hostile('task')} #xss-fail",
        f"{hostile('task')} #xss-run",
    ]
    assert texts(opened, "tr[data-run-id] td.pack-name") == [PACK, PACK]
    title = page.get_attribute(f"tr[data-run-id='{runs.failed_id}']", "title") or ""
    assert hostile("model") in title
    page.select_option("#filter-pack", PACK)
    page.wait_for_function("() => location.hash.includes('pack=')")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 2")
    assert_nothing_ran(opened)


def test_the_run_page(tab: Callable[..., Tab], runs: HostileRuns) -> None:
    opened = open_console(tab, runs.live.url, f"#/runs/{runs.run_id}")
    page = opened.page
    page.wait_for_selector(".item.finished")
    # the stream's events are drawn in batches: wait for the last calls' parts, not only the end
    page.wait_for_function("() => document.querySelectorAll('.error-message').length >= 2")
    page.wait_for_selector(".arg-value")
    shown = {
        "task": texts(opened, ".tl-summary .task dd"),
        "pack": texts(opened, ".item.started .pack"),
        "model output": texts(opened, ".model-text"),
        "payload value": texts(opened, ".payload td.value"),
        "arguments": texts(opened, ".arg-value"),
        "file names": texts(opened, ".change-path"),
        "diff": texts(opened, ".d-add"),
        "outputs": texts(opened, "pre.output"),
        "errors": texts(opened, ".error-message"),
    }
    assert shown["task"] == [f"{hostile('task')} #xss-run"]
    assert shown["pack"] == [PACK]
    assert shown["model output"] == [hostile("model output")]
    assert shown["payload value"] == [hostile("payload value")]
    for written in (FILE, hostile("file content"), hostile("file name"), hostile("missing file")):
        assert written in shown["arguments"], written
    assert shown["file names"] == [FILE, hostile("file name")]
    assert any(hostile("file content").split("\u2028")[0] in line for line in shown["diff"])
    assert f"wrote 1 bytes to {hostile('file name')}" in shown["outputs"]
    assert f"  1| {hostile('file content')}\n" in shown["outputs"]  # the file, read back
    assert hostile("argument") in shown["arguments"]
    assert hostile("argument name") in texts(opened, ".args dt")
    assert TOOL in texts(opened, ".item.call .tool")
    missing, unknown = shown["errors"]
    assert has_every_payload(missing) and "[missing file]" in missing
    assert TOOL in unknown, unknown
    page.click(".item.started summary")  # the run's setup: its prompt, limits and policy
    page.wait_for_selector(".item.started .rules td")  # built when opened
    rules = texts(opened, ".item.started .rules td")
    assert RULES[0]["path"] in rules and RULES[1]["path"] in rules
    assert_nothing_ran(opened)

    page.goto(f"{runs.live.url}/console/#/runs/{runs.failed_id}")
    page.wait_for_selector("main[data-view=run][data-state=ready] .item.finished")
    (error,) = texts(opened, ".run-error .error-message")
    assert error.startswith("the model server answered 400 for model 'm': ")
    assert hostile("model") in error
    assert_nothing_ran(opened)


def test_an_approval_box(tab: Callable[..., Tab], runs: HostileRuns) -> None:
    live = runs.live
    tag = live.model.script(
        "#xss-ask",
        completion(hostile("asking"), [("write_file", {"path": ASKED, "content": "ok"})]),
    )
    run_id = live.submit(PACK, hostile("ask task"), tag)
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector(".approval-box")
    rule = texts(opened, ".approval-box .rule")[0]
    assert f"path: {json.dumps(RULES[1]['path'])}" in rule  # the rule that asked, as text
    assert json.dumps(ASKED) in texts(opened, ".approval-box .approval-args")[0]  # JSON, as text
    assert_nothing_ran(opened)
    page.click(".approval-box button.approve")
    page.wait_for_selector("#run-status.status-completed")
    assert (live.workspace / "xss-ask" / ASKED).read_text() == "ok"
    assert_nothing_ran(opened)


def test_the_packs_page_and_the_new_task_form(tab: Callable[..., Tab], runs: HostileRuns) -> None:
    live = runs.live
    opened = open_console(tab, live.url, "#/packs")
    page = opened.page
    names = texts(opened, "section.pack .pack-name")
    assert PACK in names
    section = page.locator("section.pack").nth(names.index(PACK))
    assert section.get_attribute("data-pack") == PACK
    assert section.locator(".pack-description").text_content() == hostile("pack description")
    rules = section.locator(".rules td").all_text_contents()
    assert RULES[0]["path"] in rules and RULES[1]["path"] in rules
    assert_nothing_ran(opened)

    page.click("#nav a[data-view=new]")
    page.wait_for_selector("main[data-view=new][data-state=ready]")
    page.select_option("#new-pack", PACK)
    assert texts(opened, "#pack-about .pack-description") == [hostile("pack description")]
    page.fill("#new-task", f"{hostile('form task')} #xss-form")
    page.fill("#new-workspace", hostile("workspace"))
    page.click("#new-submit")
    page.wait_for_selector("#new-problem .error")
    (problem,) = texts(opened, "#new-problem .error-message")
    assert has_every_payload(problem) and problem.endswith("is not a folder")
    assert_nothing_ran(opened)

    page.fill("#new-workspace", live.workspace_of("#xss-form"))
    page.click("#new-submit")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    page.wait_for_selector("#run-status.status-completed")
    page.wait_for_selector(".tl-summary .task dd")  # the summary comes with run_finished
    assert texts(opened, ".tl-summary .task dd") == [f"{hostile('form task')} #xss-form"]
    assert texts(opened, ".item.started .pack") == [PACK]
    assert_nothing_ran(opened)


def test_the_share_file_opened_from_disk(
    tab: Callable[..., Tab], runs: HostileRuns, tmp_path: Path
) -> None:
    opened = open_console(tab, runs.live.url, f"#/runs/{runs.run_id}")
    shared = open_shared(tab, opened, tmp_path / "hostile-run.html")
    offline, saved, asked = shared.offline, shared.saved, shared.asked
    assert texts(offline, ".tl-summary .task dd") == [f"{hostile('task')} #xss-run"]
    assert texts(offline, ".model-text") == [hostile("model output")]
    assert f"  1| {hostile('file content')}\n" in texts(offline, "pre.output")
    assert asked == [saved.as_uri()]
    assert_nothing_ran(offline, scripts=("application/json", "module"))
