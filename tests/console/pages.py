"""What the console's tests share: a pack and a models report as the API describes them, and
a page logged in through the login view."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .fake_api import TOKEN, FakeApi
from .runlogs import ELEMENTS_FROM_PAYLOADS

if TYPE_CHECKING:
    from .conftest import Tab

PACK: dict[str, Any] = {
    "name": "notes",
    "description": "Tidies notes in a folder.",
    "tools": ["read_file", "write_file"],
    "asks": "m",
    "will_use": {"backend": "openai", "model": "m", "reason": "configured"},
    "tools_detail": [
        {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    ],
    "policy": {
        "default": "allow",
        "approval_timeout": 300.0,
        "rules": [{"tool": "write_file", "command": None, "path": "*.lock", "verdict": "deny"}],
    },
    "limits": {
        "max_steps": 30,
        "finish_repairs": 2,
        "tool_timeout": 600.0,
        "tool_output_chars": 4000,
    },
    "finish_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string"}},
        "required": ["summary"],
    },
    "inputs": {"workspace": True, "verify": ["pytest"], "max_steps": {"max": 100}},
}
MODELS: dict[str, Any] = {
    "pack": "notes",
    "backends": [{"name": "openai", "kind": "openai", "url": "http://127.0.0.1:1/v1",
                  "models": [{"name": "m", "tools": True, "context_length": 8192,
                              "context_used": 8192, "parameters_b": 1.5, "family": "qwen",
                              "verdict": "ok"}],
                  "pick": {"model": "m", "reason": "configured"}}],
    "pick": {"backend": "openai", "model": "m", "reason": "configured", "skipped": []},
    "measured": [{"backend": "openai", "model": "m", "runs": 3, "completion_tokens": 4200,
                  "llm_seconds": 10.5, "tokens_per_s": 400.0}],
}  # fmt: skip


def login(tab: Callable[..., Tab], api: FakeApi, route: str = "#/runs") -> Tab:
    """A page on ``route`` of the console, logged in through its login view."""
    opened = tab()
    opened.page.goto(f"{api.url}/console/{route}")
    opened.page.wait_for_selector("#login-form")
    opened.page.fill("#token", TOKEN)
    opened.page.click("#login-form button[type=submit]")
    opened.page.wait_for_selector("main#view[data-state=ready]:not([data-view=login])")
    return opened


def flat(text: str) -> str:
    """``text`` with its white space made single spaces (as a reader takes it in)."""
    return " ".join(text.split())


def assert_nothing_ran(opened: Tab, scripts: tuple[str, ...] = ("module",)) -> None:
    """No payload shown on the page ran or became markup: no dialog, no uncaught error, no
    CSP violation, the payloads' marker unset, none of their elements (or event handler
    attributes) in the page, only the page's own ``scripts``, links only to the console."""
    found: dict[str, Any] = opened.page.evaluate(ELEMENTS_FROM_PAYLOADS)
    assert found["bad"] == [] and found["handlers"] == [], found
    assert found["scripts"] == list(scripts)
    hrefs = opened.page.eval_on_selector_all("a[href]", "as => as.map(a => a.getAttribute('href'))")
    assert all(h.startswith(("#/", "/")) and not h.startswith("//") for h in hrefs), hrefs
    assert opened.page.evaluate("typeof window.__pwned") == "undefined"
    opened.assert_clean()


def texts(opened: Tab, selector: str) -> list[str]:
    """The text content of every element ``selector`` finds."""
    found: list[str] = opened.page.eval_on_selector_all(
        selector, "es => es.map(e => e.textContent)"
    )
    return found
