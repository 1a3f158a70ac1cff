"""The console in Chromium against a real ``fabric serve`` (a child process on a loopback port)
whose model is a scripted loopback server: what a person sees when logging in, reading the
runs list, watching a run live, approving or denying a call, cancelling, resuming, starting a
task from the form, downloading the share file and opening it offline, and replaying.

One service for the module: each test's runs have a tag of their own in their task text (the
model's script is picked by it, the list is searched by it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.test_service import TOKEN
from playwright.sync_api import Page

from fabric.testing import completion

from .conftest import Tab
from .live import (
    Live,
    RestartedService,
    finish,
    last_tool_output,
    live_service,
    live_tab,
    open_console,
    open_shared,
    screenshot,
)
from .pages import flat

RULE = "rules[0]: {tool: write_file, verdict: ask}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_service(tmp_path_factory.mktemp("live")) as running:
        yield running


@pytest.fixture(autouse=True)
def _let_held_calls_go(live: Live) -> Iterator[None]:
    """A test that failed while the model was held leaves nothing waiting behind it."""
    yield
    live.model.release_all()


def test_login_keeps_a_strict_httponly_session_across_a_reload_until_logout(
    tab: Callable[..., Tab], live: Live
) -> None:
    opened = live_tab(tab)
    page = opened.page
    page.goto(f"{live.url}/console/")
    page.wait_for_selector("main[data-view=login][data-state=ready]")
    assert page.locator("#nav").is_hidden()
    screenshot(opened, "login")

    page.fill("#token", "not-the-token-of-this-service")
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#login-message .error")
    assert flat(page.inner_text("#login-message")) == (
        "That is not this service's token. hint: check for a typo or a token of another service"
    )
    assert page.context.cookies() == []

    page.fill("#token", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("main[data-view=runs][data-state=ready]")
    assert page.url.endswith("/console/#/runs")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    (cookie,) = page.context.cookies()
    assert cookie["name"] == "fabric_console"
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["domain"] == "127.0.0.1" and cookie["path"] == "/"
    kept = page.evaluate("JSON.stringify([localStorage, sessionStorage, location.href])")
    assert TOKEN not in kept and TOKEN not in cookie["value"]

    page.reload()
    page.wait_for_selector("main[data-view=runs][data-state=ready]")
    assert page.locator("#logout").is_visible()

    page.click("#logout")
    page.wait_for_selector("main[data-view=login][data-state=ready]")
    assert page.context.cookies() == []
    page.reload()
    page.wait_for_selector("main[data-view=login][data-state=ready]")
    opened.assert_clean()


def test_a_run_updates_live_as_the_model_goes(tab: Callable[..., Tab], live: Live) -> None:
    tag = live.model.script(
        "#live-run",
        completion("I will write the notes first.",
                   [("write_file", {"path": "live-notes.txt", "content": "one\ntwo\n"})]),
        completion("Now I read them back.", [("read_file", {"path": "live-notes.txt"})]),
        finish("wrote and read live-notes.txt"),
    )  # fmt: skip
    first, second = live.model.hold(tag, 0), live.model.hold(tag, 1)
    saying = live.model.hold_mid_stream(tag, 0)  # its words sent, its tool call not yet
    run_id = live.submit("writer", "write the notes", tag)
    first.wait_reached()

    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector("#run-status.status-running")
    page.wait_for_selector(".item.step .waiting")  # step 1 asked, no answer yet
    assert page.locator(".item.call").count() == 0
    assert page.locator("#cancel").is_visible()

    first.release()  # the model's words stream in, as they come
    page.wait_for_selector(".model-text.streaming")
    saying.wait_reached()
    page.wait_for_function(
        "() => document.querySelector('.model-text.streaming').textContent.endsWith('first.')"
    )
    assert page.inner_text(".model-text.streaming") == "I will write the notes first."
    assert page.locator(".item.call").count() == 0

    saying.release()
    page.wait_for_selector(".item.call .tool >> text=write_file")
    assert page.locator(".model-text.streaming").count() == 0
    call = flat(page.inner_text(".item.call >> nth=0"))
    assert "live-notes.txt" in call and "one two" in call
    assert "I will write the notes first." in page.inner_text(".model-text >> nth=0")
    page.wait_for_selector(".item.call.call-ok >> nth=0")
    assert page.inner_text("#run-status") == "running"
    assert page.locator(".item.finished").count() == 0
    # the write as a diff of the file it created, and what the step cost
    assert page.inner_text(".change-path") == "live-notes.txt"
    assert page.inner_text(".change-what") == "created"
    adds = page.eval_on_selector_all(".d-add", "ds => ds.map(d => d.textContent)")
    assert adds == ["+one\n", "+two\n"]
    assert page.inner_text(".item.step .usage >> nth=0") == "15 tokens (10 in, 5 out)"

    second.release()
    page.wait_for_selector("#run-status.status-completed")
    page.wait_for_selector(".item.finished")
    tools = page.eval_on_selector_all(".item.call .tool", "ts => ts.map(t => t.textContent)")
    assert tools == ["write_file", "read_file", "finish_task"]
    assert "two" in page.inner_text(".item.call >> nth=1 >> pre.output")
    assert page.inner_text(".payload td.value") == "wrote and read live-notes.txt"
    assert page.locator("#cancel").count() == 0
    assert page.locator("#replay").is_visible()
    opened.assert_clean()


def test_approving_a_pending_call_runs_it_and_the_run_completes(
    tab: Callable[..., Tab], live: Live
) -> None:
    tag = live.model.script(
        "#approve",
        completion("This write needs a yes first.",
                   [("write_file", {"path": "approved.txt", "content": "approved\n"})]),
        lambda body: finish(f"the tool said: {last_tool_output(body)}"),
    )  # fmt: skip
    run_id = live.submit("asker", "write approved.txt", tag)
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector(".approval-box")
    page.wait_for_selector("#run-status.status-awaiting_approval")
    box = flat(page.inner_text(".approval-box"))
    assert box.startswith("step 1: write_file waits for approval asked by the rule ")
    assert page.inner_text(".approval-box .rule") == RULE
    assert "approved.txt" in page.inner_text(".approval-box .approval-args")
    assert "waiting for approval" in page.inner_text(".item.call.call-waiting")
    screenshot(opened, "approval")
    assert not (live.workspace / "approve" / "approved.txt").exists()

    page.click(".approval-box button.approve")
    page.wait_for_selector("#run-status.status-completed")
    assert page.locator(".approval-box").count() == 0
    call = page.inner_text(".item.call >> nth=0")
    assert "approved by http (once)" in call
    assert (live.workspace / "approve" / "approved.txt").read_text() == "approved\n"
    assert page.inner_text(".payload td.value").startswith("the tool said: wrote ")
    opened.assert_clean()


def test_denying_a_pending_call_tells_the_model(tab: Callable[..., Tab], live: Live) -> None:
    tag = live.model.script(
        "#deny",
        completion(None, [("write_file", {"path": "denied.txt", "content": "no\n"})]),
        lambda body: finish(f"the tool said: {last_tool_output(body)}"),
    )  # fmt: skip
    run_id = live.submit("asker", "write denied.txt", tag)
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.click(".approval-box button.deny")
    page.wait_for_selector("#run-status.status-completed")
    call = flat(page.inner_text(".item.call >> nth=0"))
    assert "refused by http (once)" in call
    assert not (live.workspace / "deny" / "denied.txt").exists()
    refusal = "a person refused this write_file call (http)"
    assert f"approval_denied {refusal}" in call  # the call's error, with its hint
    assert "hint: do not repeat this call" in call
    told = page.inner_text(".payload td.value")  # and the model was told so
    assert told.startswith(f"the tool said: error: {refusal}")
    opened.assert_clean()


def test_a_task_queued_behind_another_shows_queued_then_runs_live(
    tab: Callable[..., Tab], live: Live
) -> None:
    first = live.model.script("#queue-first")
    held = live.model.hold(first, 0)
    second = live.model.script(
        "#queue-second",
        completion(None, [("write_file", {"path": "second.txt", "content": "2\n"})]),
        finish("wrote second.txt"),
    )  # fmt: skip
    shared = live.workspace_of("#queue")  # one workspace: one task at a time
    live.service.submit("writer", f"go first {first}", workspace=shared)
    held.wait_reached()
    second_id = live.service.submit("writer", f"go second {second}", workspace=shared)
    opened = open_console(tab, live.url, f"#/runs/{second_id}")
    page = opened.page
    assert page.inner_text("#run-status") == "queued"
    assert page.inner_text(".tl-summary .status") == "queued"
    assert page.locator("#cancel").is_visible()
    held.release()
    page.wait_for_selector("#run-status.status-completed")
    assert page.inner_text(".payload td.value") == "wrote second.txt"
    opened.assert_clean()


def test_a_long_output_is_folded_with_a_link_to_the_whole_of_it(
    tab: Callable[..., Tab], live: Live
) -> None:
    lines = "".join(f"line {n} of a long file, {'and more ' * 8}\n" for n in range(1, 401))
    tag = live.model.script(
        "#long",
        completion(None, [("write_file", {"path": "long.txt", "content": lines})]),
        completion(None, [("read_file", {"path": "long.txt"})]),
        finish("read long.txt"),
    )  # fmt: skip
    run_id = live.submit("writer", "read a long file", tag)
    assert live.service.wait_final(run_id)["status"] == "completed"
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    read = page.locator(".item.call").nth(1)
    assert read.locator(".tool").inner_text() == "read_file"
    assert read.locator("pre.output.preview").inner_text().endswith("…")
    assert "line 400 of" not in read.inner_text()  # a preview; the whole is the artifact
    opened.assert_clean()
    read.locator(".artifact-link").click()
    page.wait_for_url(f"**/runs/{run_id}/artifacts/*")
    whole = page.inner_text("body")
    assert whole.startswith("  1| line 1 of a long file, and more")
    assert "400| line 400 of a long file, and more" in whole


def test_cancel_from_the_page_ends_the_run_cancelled(tab: Callable[..., Tab], live: Live) -> None:
    tag = live.model.script("#cancel")
    held = live.model.hold(tag, 0)
    run_id = live.submit("writer", "never finishes", tag)
    held.wait_reached()
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector("#run-status.status-running")
    page.click("#cancel")
    page.wait_for_selector("#run-status.status-cancelled")
    page.wait_for_selector(".item.finished.status-cancelled")
    assert page.locator("#cancel").count() == 0
    held.release()
    opened.assert_clean()


def test_a_run_stopped_at_max_steps_resumes_from_the_page(
    tab: Callable[..., Tab], live: Live
) -> None:
    tag = live.model.script(
        "#resume",
        completion(None, [("write_file", {"path": "resumed.txt", "content": "1\n"})]),
        finish("wrote resumed.txt"),
    )  # fmt: skip
    run_id = live.submit("writer", "write resumed.txt", tag, max_steps=1)
    assert live.service.wait_final(run_id)["status"] == "max_steps"
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.wait_for_selector("#run-status.status-max_steps")
    page.wait_for_function("() => document.querySelector('#resume-steps').value !== ''")
    assert page.input_value("#resume-steps") == "2"  # the step done and its limit again
    page.fill("#resume-steps", "3")
    page.click("#resume")
    page.wait_for_selector("#run-status.status-completed")
    assert page.inner_text(".item.resumed") == (
        "resumed at step 2 (it had ended: max_steps after 1 step(s))"
    )
    assert page.locator(".item.finished").count() == 1
    assert page.inner_text(".payload td.value") == "wrote resumed.txt"
    opened.assert_clean()


def test_the_new_task_form_starts_a_run_and_lands_on_its_live_page(
    tab: Callable[..., Tab], live: Live
) -> None:
    tag = live.model.script(
        "#form",
        completion(None, [("write_file", {"path": "todo.txt", "content": "- buy milk\n"})]),
        finish("wrote todo.txt"),
    )  # fmt: skip
    held = live.model.hold(tag, 1)
    (live.workspace / "notes-project").mkdir()
    opened = open_console(tab, live.url, "#/new")
    page = opened.page
    page.select_option("#new-pack", "writer")
    assert page.inner_text("#pack-about .pack-description") == (
        "Writes and reads files in its workspace."
    )
    page.select_option("#new-pack", "asker")
    assert "Asks a person before it writes a file." in page.inner_text("#pack-about")
    page.select_option("#new-pack", "writer")
    page.fill("#new-task", f"write a todo list {tag}")
    page.fill("#new-workspace", "notes-project")
    screenshot(opened, "new-task")
    page.click("#new-submit")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    run_id = page.inner_text("#run-id")
    assert page.url.endswith(f"#/runs/{run_id}")
    page.wait_for_selector(".item.call .tool >> text=write_file")
    assert page.inner_text("#run-status") == "running"
    held.release()
    page.wait_for_selector("#run-status.status-completed")
    assert (live.workspace / "notes-project" / "todo.txt").read_text() == "- buy milk\n"
    assert flat(page.inner_text(".tl-summary .task dd")) == f"write a todo list {tag}"
    opened.assert_clean()


def test_replay_from_the_page_is_identical(tab: Callable[..., Tab], live: Live) -> None:
    tag = live.model.script(
        "#replay",
        completion(None, [("write_file", {"path": "replayed.txt", "content": "r\n"})]),
        finish("wrote replayed.txt"),
    )  # fmt: skip
    run_id = live.submit("writer", "write replayed.txt", tag)
    assert live.service.wait_final(run_id)["status"] == "completed"
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    page = opened.page
    page.click("#replay")
    page.wait_for_selector(".replay-result")
    assert flat(page.inner_text(".replay-result")).startswith(
        "identical: the replay made the same 2 step(s) · the replay: run "
    )
    page.click(".replay-link")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    page.wait_for_selector("#run-status.status-completed")
    assert page.inner_text("#run-id") != run_id
    assert page.inner_text(".facts .replay-of-link") == run_id
    opened.assert_clean()


def test_the_share_file_opens_from_disk_with_the_network_off(
    tab: Callable[..., Tab], live: Live, tmp_path: Path
) -> None:
    tag = live.model.script(
        "#share",
        completion("Writing the file to share.",
                   [("write_file", {"path": "shared.txt", "content": "shared\n"})]),
        finish("wrote shared.txt"),
    )  # fmt: skip
    run_id = live.submit("writer", "write shared.txt", tag)
    assert live.service.wait_final(run_id)["status"] == "completed"
    opened = open_console(tab, live.url, f"#/runs/{run_id}")
    shared = open_shared(tab, opened, tmp_path / "shared-run.html")
    assert shared.suggested == f"{run_id}.html"
    offline, saved, asked, page = shared.offline, shared.saved, shared.asked, shared.offline.page
    assert page.inner_text("#share-title") == f"fabric run {run_id}"
    assert "Writing the file to share." in page.inner_text(".model-text")
    assert page.inner_text(".tl-summary .status") == "completed"
    assert page.inner_text(".payload td.value") == "wrote shared.txt"
    assert asked == [saved.as_uri()]
    offline.assert_clean()
    opened.assert_clean()


def _cells(page: Page, run_id: str) -> list[str]:
    found: list[str] = page.eval_on_selector_all(
        f"tr[data-run-id='{run_id}'] td", "tds => tds.map(td => td.innerText.trim())"
    )
    return found


def _rows(page: Page) -> list[str]:
    found: list[str] = page.eval_on_selector_all(
        "tr[data-run-id]", "rows => rows.map(r => r.dataset.runId)"
    )
    return found


def test_the_runs_list_shows_command_line_runs_and_tasks_and_follows_them(
    tab: Callable[..., Tab], live: Live
) -> None:
    cli = live.model.script("#list-cli", completion(None, [("finish_task", {"verdict": "fine"})]))
    done = live.model.script(
        "#list-done",
        completion(None, [("write_file", {"path": "list.txt", "content": "x\n"})]),
        finish("wrote list.txt"),
    )  # fmt: skip
    failed = live.model.script("#list-failed", (400, {"error": {"message": "no such model"}}))
    done_id = live.submit("writer", "write list.txt", done)
    assert live.service.wait_final(done_id)["status"] == "completed"
    failed_id = live.submit("writer", "write nothing", failed)
    assert live.service.wait_final(failed_id)["status"] == "failed"

    opened = open_console(tab, live.url)
    page = opened.page
    page.wait_for_selector("#runs-live.on")
    page.fill("#filter-q", "#LIST-")  # the search ignores case
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 2")
    assert _rows(page) == [failed_id, done_id]  # newest first

    # `fabric run` in another process, on the same runs folder: it shows up as it is
    cli_id = live.cli_run("reviewer", "review the list code", cli)["run_id"]
    page.wait_for_selector(f"tr[data-run-id='{cli_id}'] .status-completed")
    assert _rows(page) == [cli_id, failed_id, done_id]
    # status, run, pack, model, task, steps, tokens
    assert _cells(page, done_id)[:7] == [
        "completed", done_id, "writer", "m", "write list.txt #list-done", "2", "30"
    ]  # fmt: skip
    assert _cells(page, cli_id)[:7] == [
        "completed", cli_id, "reviewer", "m", "review the list code #list-cli", "1", "15"
    ]  # fmt: skip
    assert _cells(page, failed_id)[:5] == [
        "failed", failed_id, "writer", "m", "write nothing #list-failed"
    ]  # fmt: skip
    assert "no such model" in (page.get_attribute(f"tr[data-run-id='{failed_id}']", "title") or "")

    page.select_option("#filter-status", "failed")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 1")
    assert _rows(page) == [failed_id]
    page.select_option("#filter-status", "")
    page.select_option("#filter-pack", "reviewer")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 1")
    assert _rows(page) == [cli_id]
    page.select_option("#filter-pack", "")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 3")

    # a task submitted while the page is open: it appears, then its status changes
    later = live.model.script("#list-later")
    held = live.model.hold(later, 0)
    later_id = live.submit("writer", "write later", later)
    page.wait_for_selector(f"tr[data-run-id='{later_id}'] .status-running")
    assert _rows(page) == [later_id, cli_id, failed_id, done_id]
    held.release()
    page.wait_for_selector(f"tr[data-run-id='{later_id}'] .status-completed")
    assert _cells(page, later_id)[5] == "1"

    page.fill("#filter-q", "")  # every run again (those of the other tests too)
    page.wait_for_function("() => location.hash === '#/runs'")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length >= 4")
    screenshot(opened, "runs")
    opened.assert_clean()


def test_the_live_list_keeps_the_order_a_reload_gives(tab: Callable[..., Tab], live: Live) -> None:
    """Newest first is by submission (run id), also for a task that waited in the queue and
    began after a newer one."""
    busy = live.model.script("#order-busy")
    held = live.model.hold(busy, 0)
    shared = live.workspace_of("#order")
    opened = open_console(tab, live.url)
    page = opened.page
    page.wait_for_selector("#runs-live.on")
    page.fill("#filter-q", "#order-")
    page.wait_for_function("() => location.hash.includes('q=')")
    busy_id = live.service.submit("writer", f"keep it busy {busy}", workspace=shared)
    page.wait_for_selector(f"tr[data-run-id='{busy_id}'] .status-running")
    queued_id = live.service.submit("writer", "wait for it #order-queued", workspace=shared)
    page.wait_for_selector(f"tr[data-run-id='{queued_id}'] .status-queued")
    free_id = live.submit("writer", "run at once", "#order-free")
    page.wait_for_selector(f"tr[data-run-id='{free_id}'] .status-completed")
    assert _rows(page) == [free_id, queued_id, busy_id]
    held.release()
    page.wait_for_selector(f"tr[data-run-id='{queued_id}'] .status-completed")
    assert _rows(page) == [free_id, queued_id, busy_id]
    page.reload()
    page.wait_for_selector(f"tr[data-run-id='{queued_id}']")
    assert _rows(page) == [free_id, queued_id, busy_id]
    opened.assert_clean()


def test_the_packs_page_shows_each_packs_tools_policy_and_schema(
    tab: Callable[..., Tab], live: Live
) -> None:
    opened = open_console(tab, live.url, "#/packs")
    page = opened.page
    asker = flat(page.inner_text("section.pack[data-pack=asker]"))
    assert "Asks a person before it writes a file." in asker
    assert "write_file" in asker and "0 write_file ask" in asker
    assert "required: summary" in asker
    writer = flat(page.inner_text("section.pack[data-pack=writer]"))
    assert all(tool in writer for tool in ("read_file", "write_file", "list_files"))
    screenshot(opened, "packs")
    page.click("section.pack[data-pack=asker] a.new-with-pack")
    page.wait_for_selector("main[data-view=new][data-state=ready]")
    assert page.input_value("#new-pack") == "asker"

    page.click("#nav a[data-view=models]")  # and the models, with what the runs measured
    page.wait_for_selector("main[data-view=models][data-state=ready]")
    assert "A run of engineering would use m on openai" in page.inner_text("#model-pick")
    measured = live.submit("writer", "measure the model", "#models")  # a reply, at least
    assert live.service.wait_final(measured)["status"] == "completed"
    page.reload()
    page.wait_for_selector("tr.measured-row")
    assert flat(page.inner_text("tr.measured-row")).startswith("openai mock ")
    opened.assert_clean()


def test_a_run_cut_by_a_crash_goes_on_under_the_open_page(
    tab: Callable[..., Tab], tmp_path: Path
) -> None:
    with live_service(tmp_path) as first:
        tag = first.model.script(
            "#crash",
            completion(None, [("write_file", {"path": "crashed.txt", "content": "1\n"})]),
            finish("wrote crashed.txt"),
        )  # fmt: skip
        held = first.model.hold(tag, 1)
        run_id = first.submit("writer", "write crashed.txt", tag)
        opened = open_console(tab, first.url, f"#/runs/{run_id}")
        page = opened.page
        page.wait_for_selector(".item.call.call-ok")  # the write is done; the model is held
        held.wait_reached()
        assert page.inner_text("#run-status") == "running"
        first.service.kill()  # SIGKILL, mid-run, with the page open on it
        held.release()  # (the answer goes nowhere)
        with RestartedService(first.service):  # it goes on from its last recorded step
            page.wait_for_selector("#run-status.status-completed")
            assert page.inner_text(".item.resumed") == (
                "resumed at step 2 (a durable run recovered: its process had died)"
            )
            assert page.inner_text(".payload td.value") == "wrote crashed.txt"
            opened.assert_clean()
