"""The suite's web service: static pages and a SearXNG-style search over them, as the research
pack's own web tools see them (real loopback sockets)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support import write

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings, WebSearchSettings, WebSettings
from fabric.infrastructure.tools.web import fetch_url, web_search
from fabric.interfaces.eval_web import WebFixture


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    folder = tmp_path / "pages"
    write(folder, "<html><head><title>SQLite limits</title></head><body><p>A database "
          "holds at most 2**64 rows.</p><script>var rows = 1;</script></body></html>",
          "sqlite.html")  # fmt: skip
    write(folder, "<html><body><h1>Rows and columns</h1><p>Spreadsheets have rows.</p>"
          "</body></html>", "sheets/index.html")  # fmt: skip
    write(folder, "# Notes\nNothing about databases here.\n", "notes.md")
    return folder


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_search_ranks_pages_by_the_query_words_in_searxng_json(pages: Path) -> None:
    with WebFixture(pages) as web:
        status, body = _get(f"{web.url}/search?q=how+many+rows+in+an+SQLite+database&format=json")
        assert status == 200
        results = json.loads(body)["results"]
        assert [r["url"] for r in results] == [f"{web.url}/sqlite.html", f"{web.url}/sheets/"]
        assert results[0]["title"] == "SQLite limits"
        assert "2**64 rows" in results[0]["content"] and "var rows" not in results[0]["content"]
        assert _get(f"{web.url}/search?q=rows")[0] == 403  # like SearXNG without the format
        assert json.loads(_get(f"{web.url}/search?q=zebra&format=json")[1])["results"] == []
        notes = json.loads(_get(f"{web.url}/search?q=notes&format=json")[1])["results"]
        assert [(r["url"], r["title"]) for r in notes] == [(f"{web.url}/notes.md", "Notes")]
        assert _get(f"{web.url}/sheets/")[1].startswith("<html><body><h1>Rows")
        assert _get(f"{web.url}/../../etc/passwd")[0] == 404


def test_the_research_tools_work_against_it(pages: Path) -> None:
    with WebFixture(pages) as web:
        settings = WebSettings(search=WebSearchSettings(url=web.url))  # type: ignore[arg-type]
        sandbox = SandboxSettings(network=True, allow_private_addresses=True)
        ctx = ToolContext("t", pages, sandbox)
        found = asyncio.run(web_search(ctx, "sqlite rows", settings))
        assert found.startswith("Results for 'sqlite rows':\n1. SQLite limits")
        assert f"{web.url}/sqlite.html" in found
        page = asyncio.run(fetch_url(ctx, f"{web.url}/sqlite.html", settings))
        assert "Status: 200" in page and "A database holds at most 2**64 rows." in page
