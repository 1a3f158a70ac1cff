"""The web service a suite can ask for (``services.web``): a loopback HTTP server with the
static pages of a folder and a SearXNG-compatible search over them, so research cases run
offline and the same every time.

- ``GET /<path>``: a page of the folder (``/`` and folders: their ``index.html``).
- ``GET /search?q=...&format=json``: SearXNG's JSON shape (``results``: url, title, content),
  the pages ranked by how many of the query's words their title and text hold (title words
  count double). Other formats answer 403, as a SearXNG instance without them does.

The pages are read once, at start: requests never touch the file system.
"""

from __future__ import annotations

import html
import json
import mimetypes
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from msgspec import Struct

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_TAG = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.IGNORECASE | re.DOTALL)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>|<h1[^>]*>(.*?)</h1>", re.IGNORECASE | re.DOTALL)
_STOP = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "how", "in", "is", "it",
     "of", "on", "or", "the", "to", "what", "which", "who", "why", "with"}
)  # fmt: skip
MAX_RESULTS = 10
SNIPPET_CHARS = 240


class Page(Struct, frozen=True):
    path: str
    """The URL path, '/'-separated, without the leading '/'."""
    body: bytes
    content_type: str
    title: str
    text: str

    @property
    def url_path(self) -> str:
        """How search results name it: a folder's index page by the folder."""
        return self.path.removesuffix("index.html")


def read_pages(folder: Path) -> dict[str, Page]:
    """Every file under ``folder`` (symlinks not followed), by URL path."""
    pages = {}
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = file.relative_to(folder).as_posix()
        body = file.read_bytes()
        ctype = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype in ("application/json", "application/xml"):
            ctype += "; charset=utf-8"
        title, text = _title_and_text(body, ctype, file.stem)
        pages[rel] = Page(rel, body, ctype, title, text)
    return pages


def search(pages: dict[str, Page], query: str, base_url: str) -> list[dict[str, str]]:
    """The pages holding the query's words, best first, as SearXNG results."""
    words = {w for w in _words(query) if w not in _STOP} or set(_words(query))
    scored = []
    for page in pages.values():
        if not page.text and not page.title:
            continue
        title, text = Counter(_words(page.title)), Counter(_words(page.text))
        score = sum(2 * (w in title) + (w in text) for w in words)
        if score:
            scored.append((-score, page.path, page))
    return [
        {
            "url": f"{base_url}/{page.url_path}",
            "title": page.title,
            "content": _snippet(page.text, words),
            "engine": "fabric-eval",
        }
        for _, _, page in sorted(scored)[:MAX_RESULTS]
    ]


class WebFixture:
    """``with WebFixture(folder) as web: web.url``: serves the folder on 127.0.0.1."""

    def __init__(self, folder: Path) -> None:
        self.pages = read_pages(folder)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> WebFixture:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fixture = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path == "/search":
                    self._search(parse_qs(parts.query))
                    return
                rel = unquote(parts.path).strip("/")
                page = fixture.pages.get(rel) or fixture.pages.get(f"{rel}/index.html".lstrip("/"))
                if page is None:
                    self._send(404, b"<h1>404 Not Found</h1>", "text/html; charset=utf-8")
                else:
                    self._send(200, page.body, page.content_type)

            def _search(self, query: dict[str, list[str]]) -> None:
                if query.get("format", [""])[0] != "json":
                    self._send(403, b"Forbidden: only format=json", "text/plain")
                    return
                text = query.get("q", [""])[0]
                results = search(fixture.pages, text, fixture.url)
                answer = {"query": text, "number_of_results": len(results), "results": results,
                          "unresponsive_engines": []}  # fmt: skip
                self._send(200, json.dumps(answer).encode(), "application/json")

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return _Handler


def _title_and_text(body: bytes, ctype: str, stem: str) -> tuple[str, str]:
    if not ctype.startswith(("text/", "application/json")):
        return stem, ""
    raw = body.decode("utf-8", errors="replace")
    if not ctype.startswith("text/html"):
        first = next((ln.strip("# ").strip() for ln in raw.splitlines() if ln.strip()), stem)
        return first[:120], " ".join(raw.split())
    found = _TITLE.search(raw)
    title = _plain(found.group(1) or found.group(2)) if found else stem
    return title or stem, _plain(raw)


def _plain(markup: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", markup)).split())


def _words(text: str) -> list[str]:
    return [w.casefold() for w in _WORD.findall(text)]


def _snippet(text: str, words: set[str]) -> str:
    """Some text around the first query word the page holds."""
    lowered = text.casefold()
    spots = [i for w in words if (i := lowered.find(w)) >= 0]
    start = max(0, min(spots) - SNIPPET_CHARS // 3) if spots else 0
    piece = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")
