"""Script and HTML in a run's texts stay text in the share file: opened from disk in Chromium
with the network off, every payload reads literally where it was put, no dialog opens, the
marker the payloads would set stays unset, and none of their elements exists."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .conftest import Tab
from .runlogs import (
    ELEMENTS_FROM_PAYLOADS,
    FOLDED,
    HOSTILE,
    HOSTILE_URL,
    PLACES,
    hostile,
    hostile_run,
    show_html,
    write_runlog,
)


def _texts(tab: Tab, selector: str) -> list[str]:
    texts: list[str] = tab.page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")
    return texts


def test_hostile_texts_stay_text_in_the_share_file(tab: Callable[..., Tab], tmp_path: Path) -> None:
    runlog = write_runlog(tmp_path / "run", hostile_run())
    page_file = show_html(runlog, tmp_path / "hostile.html")
    opened = tab(offline=True)
    opened.page.goto(page_file.as_uri())
    opened.page.wait_for_selector(".item.finished")
    for detail in FOLDED.values():  # open what is folded, so its text is on the page too
        opened.page.eval_on_selector_all(detail, "els => els.forEach(d => { d.open = true; })")
    opened.page.wait_for_selector(".item.nudge details .note-text")

    for where, selector in {**PLACES, **FOLDED}.items():
        expected = hostile(where)
        assert any(expected in text for text in _texts(opened, selector)), (where, selector)
    # the title and heading, from the pack name
    assert hostile("pack") in opened.page.title()
    assert hostile("pack") in _texts(opened, "#share-title")[0]
    # ids and artifacts that are javascript: URLs are shown, never linked
    assert HOSTILE_URL in _texts(opened, ".child-link")[0]
    assert HOSTILE_URL in _texts(opened, ".parent-link, .replay-of-link")[0]
    assert HOSTILE_URL in _texts(opened, ".artifact-link")[0]

    found = opened.page.evaluate(ELEMENTS_FROM_PAYLOADS)
    assert found == {
        "bad": [],
        "handlers": [],
        "links": [],
        "scripts": ["application/json", "module"],
    }
    assert opened.page.evaluate("typeof window.__pwned") == "undefined"
    opened.assert_clean()


def test_the_payloads_would_run_were_they_markup(tab: Callable[..., Tab], tmp_path: Path) -> None:
    """The control: the same payloads written into a page as HTML do set the marker and open
    dialogs, so the test above would see them."""
    page_file = tmp_path / "unsafe.html"
    page_file.write_text(f"<!doctype html><body><div>{HOSTILE}</div></body>", "utf-8")
    opened = tab(offline=True)
    opened.page.goto(page_file.as_uri())
    opened.page.wait_for_function("() => window.__pwned !== undefined")
    assert opened.dialogs


def test_a_violation_of_the_policy_would_be_seen(tab: Callable[..., Tab], tmp_path: Path) -> None:
    """The control for ``assert_clean``: a script the page's policy refuses is reported."""
    page_file = tmp_path / "refused.html"
    csp = "default-src 'none'"
    page_file.write_text(
        f'<!doctype html><meta http-equiv="Content-Security-Policy" content="{csp}">'
        "<script>window.__pwned = 1</script>",
        "utf-8",
    )
    opened = tab(offline=True)
    opened.page.goto(page_file.as_uri())
    opened.page.wait_for_function("() => window.__fabricTestViolations.length > 0")
    assert opened.violations()[0].startswith("script-src-elem")
    assert opened.page.evaluate("typeof window.__pwned") == "undefined"
