"""A run of 10,000 events stays usable: the page builds the first page of the timeline (not
10,000 subtrees), shows how the run ended at the top, and builds more as the user scrolls to
the end of the list (or presses "show more")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support import assert_valid_runlog

from .conftest import Tab
from .runlogs import long_run, show_html, write_runlog

PAGE = 150  # timeline.js PAGE_SIZE: items built per page

# A function, not an expression: the page's policy forbids eval, which Playwright uses for
# expressions.
_AT_LEAST = "n => document.querySelectorAll('.tl-list > li').length >= n"


def _items(events: list[dict[str, object]]) -> int:
    """Items of the timeline: the start, a model item and a call item a step, each nudge, the
    end."""
    opening = {"run_started", "llm_request", "tool_call", "nudge", "run_finished"}
    return sum(1 for e in events if e["kind"] in opening)


_COUNT = """() => ({items: document.querySelectorAll('.tl-list > li').length,
                     nodes: document.getElementsByTagName('*').length})"""


def test_ten_thousand_events_render_a_page_at_a_time(
    tab: Callable[..., Tab], tmp_path: Path
) -> None:
    events = long_run(10_000)  # the generator's lines are checked against the schema below
    assert len(events) == 10_000
    page_file = show_html(write_runlog(tmp_path / "run", events), tmp_path / "long.html")
    opened = tab(offline=True, viewport={"width": 1200, "height": 900})
    page = opened.page
    page.goto(page_file.as_uri())
    page.wait_for_selector(".tl-list > li")

    first = page.evaluate(_COUNT)
    assert first["items"] == PAGE
    assert first["nodes"] < 4_000, first  # a page of items, not the whole run
    items = _items(events)
    assert page.inner_text(".tl-more-text") == f"{items - PAGE:,} more item(s) below"
    # how it ended is at the top, without scrolling through it
    assert page.inner_text(".tl-summary .status") == "completed"
    assert "required, present" in page.inner_text(".payload")

    page.locator(".tl-more").scroll_into_view_if_needed()
    page.wait_for_function(_AT_LEAST, arg=2 * PAGE)
    second = page.evaluate(_COUNT)
    assert second["items"] == 2 * PAGE
    last = page.locator(".tl-list > li").last.inner_text()
    assert "step 150" in last or "step 149" in last  # the list goes on in order

    page.locator(".tl-more-button").click()  # without scrolling, too
    page.wait_for_function(_AT_LEAST, arg=3 * PAGE)
    assert page.evaluate(_COUNT)["items"] == 3 * PAGE
    opened.assert_clean()


def test_scrolling_reaches_the_end(tab: Callable[..., Tab], tmp_path: Path) -> None:
    """A run a few pages long: scrolling to the bottom again and again shows its last item."""
    events = assert_valid_runlog(long_run(2_000))
    page_file = show_html(write_runlog(tmp_path / "run", events), tmp_path / "run.html")
    opened = tab(offline=True, viewport={"width": 1200, "height": 900})
    page = opened.page
    page.goto(page_file.as_uri())
    page.wait_for_selector(".tl-list > li")
    for _ in range(10):
        if page.locator(".item.finished").count():
            break
        before = page.evaluate(_COUNT)["items"]
        page.mouse.wheel(0, 100_000)
        page.wait_for_function(_AT_LEAST, arg=before + 1)
    assert page.locator(".item.finished").count() == 1
    assert page.locator(".tl-more").is_hidden()
    assert page.evaluate(_COUNT)["items"] == _items(events)
    opened.assert_clean()
