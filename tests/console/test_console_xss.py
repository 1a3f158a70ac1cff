"""Script and HTML payloads in what the API returns stay text on every view of the console
(runs list, run page, new task, packs, models), under the contract's CSP: no dialog, the
payloads' marker unset, none of their elements in the page, links only where the page built
them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .conftest import Tab
from .fake_api import FakeApi, served, summary
from .pages import MODELS, PACK, assert_nothing_ran, login, texts
from .runlogs import HOSTILE, HOSTILE_URL, PLACES, hostile, hostile_run

RUN = "20261125T100000.000Z-xss001"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    fake.packs = [
        {**PACK, "name": hostile("pack name"), "description": hostile("pack description"),
         "tools": [hostile("tool")], "asks": hostile("asks"),
         "tools_detail": [{"name": hostile("tool"), "description": hostile("tool description"),
                           "parameters": {"type": "object",
                                          "properties": {hostile("parameter"): {}}}}],
         "policy": {"default": "allow", "approval_timeout": 1.0,
                    "rules": [{"tool": hostile("rule tool"), "command": None, "path": None,
                               "verdict": "ask"}]},
         "inputs": {"workspace": True, "verify": [hostile("program")]}},
    ]  # fmt: skip
    fake.models = {
        **MODELS, "pack": hostile("models pack"),
        "measured": [{"backend": hostile("backend"), "model": hostile("measured model"),
                      "runs": 1, "completion_tokens": 1, "llm_seconds": 1.0,
                      "tokens_per_s": 1.0}],
    }  # fmt: skip
    fake.replay = {
        "run_id": HOSTILE_URL, "identical": False, "steps": 1,
        "divergence": {"step": 1, "field": hostile("field"), "recorded": hostile("recorded"),
                       "now": hostile("now")},
    }  # fmt: skip
    events = hostile_run(RUN)
    fake.add_run(
        summary(RUN, hostile("pack"), hostile("task"), "unverified", model=hostile("model"),
                error={"code": "x", "message": hostile("summary error")}),
        events,
    )  # fmt: skip
    with served(fake):
        yield fake


def test_the_runs_list(tab: Callable[..., Tab], api: FakeApi) -> None:
    opened = login(tab, api)
    opened.page.wait_for_selector("tr[data-run-id]")
    row = texts(opened, "tr[data-run-id]")[0]
    for where in ("pack", "task", "model"):
        assert hostile(where) in row
    assert opened.page.get_attribute("tr[data-run-id]", "title") == hostile("summary error")
    assert_nothing_ran(opened)


def test_the_run_page_and_its_replay(tab: Callable[..., Tab], api: FakeApi) -> None:
    opened = login(tab, api, f"#/runs/{RUN}")
    page = opened.page
    page.wait_for_selector(".item.finished")
    for where, selector in PLACES.items():
        assert any(hostile(where) in t for t in texts(opened, selector)), (where, selector)
    # links the page builds from ids stay in the console: routes and artifact paths
    assert page.get_attribute(".child-link", "href") == (
        "#/runs/javascript%3Awindow.__pwned%3D8%3Balert(8)"
    )
    assert page.get_attribute(".artifact-link", "href") == (
        f"/runs/{RUN}/javascript%3Awindow.__pwned%3D8%3Balert(8)"
    )
    page.click("#replay")
    page.wait_for_selector(".replay-result.diverged")
    result = texts(opened, ".replay-result")[0]
    assert all(hostile(w) in result for w in ("field", "recorded", "now"))
    assert HOSTILE_URL in result
    assert_nothing_ran(opened)


def test_new_task_packs_and_models(tab: Callable[..., Tab], api: FakeApi) -> None:
    opened = login(tab, api, "#/new")
    page = opened.page
    about = texts(opened, "#pack-about")[0]
    assert hostile("pack description") in about and hostile("tool") in about
    assert hostile("program") in texts(opened, "#new-verify-row")[0]
    assert page.eval_on_selector("#new-pack option", "o => o.value") == hostile("pack name")
    assert_nothing_ran(opened)

    page.click("#nav a[data-view=packs]")
    page.wait_for_selector("main[data-view=packs][data-state=ready]")
    pack = texts(opened, "section.pack")[0]
    for where in ("pack name", "pack description", "tool", "tool description", "parameter",
                  "rule tool", "asks"):  # fmt: skip
        assert hostile(where) in pack, where
    assert_nothing_ran(opened)

    page.click("#nav a[data-view=models]")
    page.wait_for_selector("main[data-view=models][data-state=ready]")
    models = texts(opened, "main")[0]
    for where in ("models pack", "backend", "measured model"):
        assert hostile(where) in models, where
    assert HOSTILE in models
    assert_nothing_ran(opened)
