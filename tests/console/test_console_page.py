"""The console page (``index.html`` + ``console.js``) in Chromium against the contract's API,
served by ``fake_api`` on 127.0.0.1 with the contract's CSP: login on a 401 (the token kept out
of the page), the CSRF header on posts, the runs list with its filters, search and live
updates, the new-task form, the packs and models pages. The same journeys against a real
``fabric serve``: ``test_console_live.py``."""

from __future__ import annotations

from collections.abc import Callable

from .conftest import Tab
from .fake_api import CSRF, TOKEN, FakeApi, summary
from .pages import flat, login

RUN = "20261125T100000.000Z-aaa001"


def test_login_keeps_the_token_out_of_the_page_and_a_401_asks_again(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    api.add_run(summary(RUN, "notes", "tidy up", "completed"))
    opened = tab()
    page = opened.page
    page.goto(f"{api.url}/console/")
    page.wait_for_selector("main[data-view=login]")
    page.fill("#token", "not-the-token-at-all")
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#login-message .error")
    assert "That is not this service's token." in page.inner_text("#login-message")

    page.fill("#token", TOKEN)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector(f"tr[data-run-id='{RUN}']")
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script can read it
    stored = page.evaluate("JSON.stringify([localStorage, sessionStorage, location.href])")
    assert TOKEN not in stored

    page.click("#logout")
    page.wait_for_selector("main[data-view=login]")
    page.goto(f"{api.url}/console/#/packs")  # no session: the login view, not the page
    page.wait_for_selector("main[data-view=login]")
    opened.assert_clean()


def test_posts_carry_the_csrf_token(tab: Callable[..., Tab], api: FakeApi) -> None:
    api.add_run(summary(RUN, "notes", "tidy up", "completed"))
    api.replay = {"run_id": "r2", "identical": True, "divergence": None, "steps": 2}
    opened = login(tab, api, f"#/runs/{RUN}")
    opened.page.click("#replay")
    opened.page.wait_for_selector(".replay-result")
    (post,) = api.posts(f"/runs/{RUN}/replay")
    assert post.headers["X-Fabric-CSRF"] == CSRF
    assert post.body == {"live_tools": False}
    assert all(s.headers.get("X-Fabric-CSRF") for s in api.seen if s.method == "POST"
               and s.path != "/console/login")  # fmt: skip
    opened.assert_clean()


def test_the_runs_list_filters_searches_and_updates_live(
    tab: Callable[..., Tab], api: FakeApi
) -> None:
    api.add_run(summary("20261125T090000.000Z-aaa001", "notes", "tidy the notes", "completed"))
    api.add_run(summary("20261125T091000.000Z-aaa002", "notes", "fix the bug", "failed"))
    api.add_run(summary("20261125T092000.000Z-aaa003", "research", "read about owls", "max_steps"))
    opened = login(tab, api)
    page = opened.page
    rows = "tr[data-run-id]"
    page.wait_for_selector("#runs-live.on")
    ids = page.eval_on_selector_all(rows, "rs => rs.map(r => r.dataset.runId)")
    assert ids == [f"20261125T09{m}000.000Z-aaa00{n}" for m, n in (("2", 3), ("1", 2), ("0", 1))]
    first = flat(page.inner_text(f"{rows} >> nth=0"))
    assert first.startswith("max_steps 20261125T092000.000Z-aaa003 research m read about owls")
    assert "120" in first and "3.5 s" in first

    page.select_option("#filter-status", "failed")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 1")
    assert page.url.endswith("#/runs?status=failed")
    assert any(s.path.startswith("/runs?status=failed") for s in api.seen)
    page.select_option("#filter-status", "")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 3")
    page.fill("#filter-q", "OWLS")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 1")
    assert page.inner_text(f"{rows} .task") == "read about owls"
    page.fill("#filter-q", "")
    page.wait_for_function("() => document.querySelectorAll('tr[data-run-id]').length === 3")

    # a run starts, another changes: the list follows without a reload
    api.add_run(summary("20261125T093000.000Z-aaa004", "notes", "new work", "running"))
    page.wait_for_selector("tr[data-run-id='20261125T093000.000Z-aaa004'] .status-running")
    assert page.eval_on_selector(rows, "r => r.dataset.runId") == "20261125T093000.000Z-aaa004"
    api.add_run(summary("20261125T093000.000Z-aaa004", "notes", "new work", "completed"))
    page.wait_for_selector("tr[data-run-id='20261125T093000.000Z-aaa004'] .status-completed")
    assert page.locator(rows).count() == 4
    page.click("tr[data-run-id='20261125T091000.000Z-aaa002'] a.run-link")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    assert page.inner_text("#run-id") == "20261125T091000.000Z-aaa002"
    opened.assert_clean()


def test_a_new_task_lands_on_its_live_page(tab: Callable[..., Tab], api: FakeApi) -> None:
    opened = login(tab, api, "#/new")
    page = opened.page
    assert "Tidies notes in a folder." in page.inner_text("#pack-about")
    assert "pytest" in page.inner_text("#new-verify-row")
    assert page.get_attribute("#new-max-steps", "max") == "100"
    page.fill("#new-task", "tidy the <b>notes</b>")
    page.fill("#new-workspace", "notes")
    page.fill("#new-max-steps", "12")
    page.click("#new-submit")
    page.wait_for_selector("main[data-view=run][data-state=ready]")
    (post,) = api.posts("/tasks")
    assert post.body == {"pack": "notes", "task": "tidy the <b>notes</b>", "workspace": "notes",
                         "max_steps": 12}  # fmt: skip
    run_id = list(api.runs)[-1]
    assert page.url.endswith(f"#/runs/{run_id}")
    assert page.inner_text("#run-status") == "queued"
    opened.assert_clean()


def test_packs_and_models(tab: Callable[..., Tab], api: FakeApi) -> None:
    opened = login(tab, api, "#/packs")
    page = opened.page
    pack = flat(page.inner_text("section.pack[data-pack=notes]"))
    assert "Tidies notes in a folder." in pack
    assert "read_file Read a text file. path (required)" in pack
    assert "default: allow · approval timeout 5 min" in pack
    assert "0 write_file *.lock deny" in pack
    assert "max_steps 30" in pack and "required: summary" in pack
    page.click("#nav a[data-view=models]")
    page.wait_for_selector("main[data-view=models][data-state=ready]")
    assert flat(page.inner_text("tr.measured-row")) == "openai m 3 4,200 10.5 s 400.0"
    assert "A run of notes would use m on openai" in page.inner_text("#model-pick")
    opened.assert_clean()
