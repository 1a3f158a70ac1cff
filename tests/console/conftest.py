"""Browser fixtures for the console's tests: one headless Chromium (Debian's ``chromium``,
driven by Playwright; never ``playwright install``) for this folder's tests, and per test a
fresh context and page that record what must never happen on a fabric page: a dialog
(``alert``), an uncaught error, a Content-Security-Policy violation.

The live-server tests reuse these: ``tab()`` for a page on ``http://127.0.0.1:<port>``,
``tab(offline=True)`` for a file opened from disk with the network off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from .fake_api import FakeApi, served
from .pages import MODELS, PACK

CHROMIUM = os.environ.get("FABRIC_TEST_CHROMIUM", "/usr/bin/chromium")

# Runs before any script of the page (a DevTools hook, which the page's CSP does not govern):
# every CSP violation is kept where the test can read it.
_RECORD_VIOLATIONS = """
window.__fabricTestViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__fabricTestViolations.push(
    e.violatedDirective + ' ' + (e.blockedURI || '') + ' ' + (e.sample || ''));
});
"""


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the tests of this folder. Not for the whole session: while Playwright's
    sync API is started, its event loop counts as running in this thread, so a later test's
    ``asyncio.run`` would fail; it stops when the last test here is done."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Tab:
    """A page and what went wrong on it."""

    page: Page
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        found = self.page.evaluate("window.__fabricTestViolations")
        assert isinstance(found, list), "the violation recorder did not run on this page"
        return found

    def assert_clean(self) -> None:
        """No dialog, no uncaught error, no CSP violation on the page."""
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.errors == [], f"the page raised: {self.errors}"
        assert self.violations() == [], f"CSP violations: {self.violations()}"


@pytest.fixture
def tab(browser: Browser) -> Iterator[Callable[..., Tab]]:
    """``tab(offline=False, **context_options)`` → a new page in its own context; all of
    them are closed after the test."""
    contexts: list[Any] = []

    def open_tab(*, offline: bool = False, **options: Any) -> Tab:
        context = browser.new_context(offline=offline, **options)
        contexts.append(context)
        context.set_default_timeout(10_000)
        context.add_init_script(_RECORD_VIOLATIONS)
        page = context.new_page()
        opened = Tab(page)

        def on_dialog(dialog: Any) -> None:
            opened.dialogs.append(f"{dialog.type}: {dialog.message}")
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.on("pageerror", lambda exc: opened.errors.append(str(exc)))
        page.on(
            "console",
            lambda msg: opened.console_errors.append(msg.text) if msg.type == "error" else None,
        )
        return opened

    yield open_tab
    for context in contexts:
        context.close()


@pytest.fixture
def api() -> Iterator[FakeApi]:
    """The stand-in API on 127.0.0.1 (``fake_api``), with a pack and a models report."""
    fake = FakeApi()
    fake.packs = [PACK]
    fake.models = MODELS
    with served(fake):
        yield fake
