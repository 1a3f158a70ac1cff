"""fetch_url and web_search against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings, WebSearchSettings, WebSettings
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools import net_guard
from fabric.infrastructure.tools.net_guard import check_address, check_host
from fabric.infrastructure.tools.web import fetch_url, web_search
from packs.research import ResearchSettings, build

PAGE = b"""<!doctype html>
<html><head><title>Tides</title><style>body { color: red }</style>
<script>var secret = "SCRIPT-CONTENT";</script></head>
<body><noscript>NOSCRIPT-CONTENT</noscript>
<h1>Why tides happen</h1>
<p>The <a href="/moon.html">Moon</a> pulls the oceans.</p>



<p>Twice a day.</p><svg><text>SVG-CONTENT</text></svg>
</body></html>"""


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str | None = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Server:
    """A loopback HTTP server whose replies a test sets per path; it records what it got."""

    port: int
    routes: dict[str, Reply] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def paths(self) -> list[str]:
        return [urlsplit(target).path for target, _ in self.requests]


@pytest.fixture
def server() -> Iterator[Server]:
    state: Server

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, dict(self.headers)))
            reply = state.routes.get(urlsplit(self.path).path, Reply(404, b"no such page"))
            if reply.delay:
                state.stop.wait(reply.delay)
            self.send_response(reply.status)
            if reply.content_type:
                self.send_header("Content-Type", reply.content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state = Server(port=httpd.server_address[1])
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def make_ctx(tmp_path: Path, *, network: bool = True, allow_private: bool = True) -> ToolContext:
    sandbox = SandboxSettings(network=network, allow_private_addresses=allow_private)
    return ToolContext(run_id="test", workspace=tmp_path, sandbox=sandbox)


def run(coro: Coroutine[Any, Any, str]) -> str:
    return asyncio.run(coro)


def fails(coro: Coroutine[Any, Any, str], error: type[ToolError] = ToolError) -> ToolError:
    with pytest.raises(error) as info:
        asyncio.run(coro)
    return info.value


WEB = WebSettings()


# fetch_url: content


def test_html_page_becomes_readable_text(server: Server, tmp_path: Path) -> None:
    server.routes["/tides.html"] = Reply(body=PAGE, content_type="text/html; charset=utf-8")
    out = run(fetch_url(make_ctx(tmp_path), server.url("/tides.html"), WEB))
    assert out.startswith(f"URL: {server.url('/tides.html')}\nStatus: 200\nContent-Type: text/html")
    assert "# Why tides happen" in out
    assert f"[Moon]({server.url('/moon.html')})" in out  # relative link made absolute
    assert "pulls the oceans." in out and "Twice a day." in out
    for hidden in ("SCRIPT-CONTENT", "NOSCRIPT-CONTENT", "SVG-CONTENT", "color: red"):
        assert hidden not in out
    assert "\n\n\n" not in out
    _, headers = server.requests[0]
    assert headers["User-Agent"].startswith("agent-fabric/")


def test_plain_text_and_json_come_back_as_is(server: Server, tmp_path: Path) -> None:
    server.routes["/notes.txt"] = Reply(body="Ünïcode notes\n<b>not html</b>".encode())
    server.routes["/data.json"] = Reply(body=b'{"a": 1}', content_type="application/json")
    server.routes["/latin1.txt"] = Reply(
        body="café".encode("latin-1"), content_type="text/plain; charset=iso-8859-1"
    )
    ctx = make_ctx(tmp_path)
    assert run(fetch_url(ctx, server.url("/notes.txt"), WEB)).endswith(
        "\n\nÜnïcode notes\n<b>not html</b>"
    )
    assert run(fetch_url(ctx, server.url("/data.json"), WEB)).endswith('\n\n{"a": 1}')
    assert run(fetch_url(ctx, server.url("/latin1.txt"), WEB)).endswith("\n\ncafé")


def test_body_is_cut_at_max_bytes(server: Server, tmp_path: Path) -> None:
    server.routes["/big.txt"] = Reply(body=b"a" * 5000 + b"TAIL")
    out = run(fetch_url(make_ctx(tmp_path), server.url("/big.txt"), WebSettings(max_bytes=1024)))
    assert "the body was cut at 1024 bytes" in out
    assert out.endswith("\n\n" + "a" * 1024)


def test_long_text_is_paged_with_start(server: Server, tmp_path: Path) -> None:
    server.routes["/long.txt"] = Reply(body=b"x" * 3000 + b"y" * 3000)
    ctx = make_ctx(tmp_path)
    first = run(fetch_url(ctx, server.url("/long.txt"), WEB, max_chars=3000))
    assert "Showing characters 0-3000 of 6000" in first
    assert "y" not in first.split("\n\n", 1)[1].split("[cut")[0]
    assert "call fetch_url again with start=3000" in first
    second = run(fetch_url(ctx, server.url("/long.txt"), WEB, start=3000, max_chars=3000))
    assert "Showing characters 3000-6000 of 6000" in second
    assert second.endswith("\n\n" + "y" * 3000)


def test_binary_content_is_refused(server: Server, tmp_path: Path) -> None:
    server.routes["/logo.png"] = Reply(body=b"\x89PNG\r\n\x1a\n\x00", content_type="image/png")
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/logo.png"), WEB))
    assert "image/png, not text" in err.message
    assert err.hint


def test_error_status_is_reported_with_a_snippet(server: Server, tmp_path: Path) -> None:
    server.routes["/gone"] = Reply(404, b"<h1>Not here</h1>", content_type="text/html")
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/gone"), WEB))
    assert "HTTP 404" in err.message and "Not here" in err.message
    assert "check the URL" in err.hint
    server.routes["/down"] = Reply(503, b"maintenance")
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/down"), WEB))
    assert "HTTP 503: maintenance" in err.message and "try again later" in err.hint


def test_slow_server_times_out(server: Server, tmp_path: Path) -> None:
    server.routes["/slow"] = Reply(body=b"late", delay=10)
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/slow"), WebSettings(timeout=0.5)))
    assert "timed out after 0.5 s" in err.message


# fetch_url: redirects


def test_redirect_is_followed(server: Server, tmp_path: Path) -> None:
    server.routes["/old"] = Reply(302, headers={"Location": "/new.txt"})
    server.routes["/new.txt"] = Reply(body=b"moved content")
    out = run(fetch_url(make_ctx(tmp_path), server.url("/old", "localhost"), WEB))
    assert out.startswith(f"URL: {server.url('/new.txt', 'localhost')}\n")
    assert out.endswith("moved content")
    assert server.paths == ["/old", "/new.txt"]
    # the connection goes to the checked address, but the server still sees the URL's host
    assert [headers["Host"] for _, headers in server.requests] == [f"localhost:{server.port}"] * 2


def test_redirect_to_a_file_url_is_refused(server: Server, tmp_path: Path) -> None:
    server.routes["/evil"] = Reply(302, headers={"Location": "file:///etc/passwd"})
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/evil"), WEB), SandboxError)
    assert "redirected to: 'file:///etc/passwd'" in err.message


def test_too_many_redirects(server: Server, tmp_path: Path) -> None:
    server.routes["/loop"] = Reply(302, headers={"Location": "/loop"})
    err = fails(fetch_url(make_ctx(tmp_path), server.url("/loop"), WebSettings(max_redirects=2)))
    assert "redirected more than 2 times" in err.message
    assert server.paths == ["/loop"] * 3


def test_every_redirect_hop_is_address_checked(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pretend 127.0.0.1 is public (the tests cannot reach a real public host); a redirect from
    it to "localhost" must then be refused before the second request is sent."""
    real_check = net_guard.check_address
    checked: list[tuple[str | None, str]] = []

    def pretend_127_is_public(
        ip: str, *, allow_private: bool = False, host: str | None = None
    ) -> None:
        checked.append((host, ip))
        real_check(ip, allow_private=allow_private or host == "127.0.0.1", host=host)

    monkeypatch.setattr(net_guard, "check_address", pretend_127_is_public)
    server.routes["/hop"] = Reply(302, headers={"Location": server.url("/admin", "localhost")})
    server.routes["/admin"] = Reply(body=b"internal")
    ctx = make_ctx(tmp_path, allow_private=False)
    err = fails(fetch_url(ctx, server.url("/hop"), WEB), SandboxError)
    assert "localhost resolves to" in err.message and "loopback" in err.message
    assert server.paths == ["/hop"]
    assert [host for host, _ in checked] == ["127.0.0.1", "localhost"]


# fetch_url: refusals before any connection


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "localhost", "[::1]", "2130706433", "0x7f000001", "[::ffff:127.0.0.1]"],
)
def test_loopback_is_refused_without_a_request(server: Server, tmp_path: Path, host: str) -> None:
    server.routes["/"] = Reply(body=b"local secret")
    ctx = make_ctx(tmp_path, allow_private=False)
    err = fails(fetch_url(ctx, server.url("/", host), WEB), SandboxError)
    assert "loopback address" in err.message
    assert "allow_private_addresses" in err.hint
    assert server.requests == []


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://0.0.0.0:8080/", "unspecified"),
        ("https://[fd00::1]/", "private"),
    ],
)
def test_private_addresses_are_refused(tmp_path: Path, url: str, kind: str) -> None:
    err = fails(fetch_url(make_ctx(tmp_path, allow_private=False), url, WEB), SandboxError)
    assert f"a {kind} address" in err.message


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "data:text/plain,hi",
        "gopher://h/",
        "example.com",
    ],
)
def test_non_http_urls_are_refused(tmp_path: Path, url: str) -> None:
    err = fails(fetch_url(make_ctx(tmp_path), url, WEB), SandboxError)
    assert "only fetches http(s) URLs" in err.message


def test_credentials_in_url_are_refused(server: Server, tmp_path: Path) -> None:
    url = f"http://admin:hunter2@127.0.0.1:{server.port}/"
    err = fails(fetch_url(make_ctx(tmp_path), url, WEB), SandboxError)
    assert "credentials" in err.message and "hunter2" not in err.message
    assert server.requests == []


def test_network_off_refuses_both_tools(server: Server, tmp_path: Path) -> None:
    ctx = make_ctx(tmp_path, network=False)
    settings = WebSettings(search=WebSearchSettings(url=server.url("/")))
    for call in (fetch_url(ctx, server.url("/"), settings), web_search(ctx, "tides", settings)):
        err = fails(call, SandboxError)
        assert "network" in err.message and "sandbox.network: true" in err.hint
    assert server.requests == []


@pytest.mark.parametrize(
    ("ip", "kind"),
    [
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
        ("127.0.0.53", "loopback"),
        ("::1", "loopback"),
        ("::ffff:10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("172.16.0.1", "private"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 wrapping 10.0.0.1
        ("100.64.0.1", ""),  # carrier-grade NAT
        ("255.255.255.255", ""),
        ("240.0.0.1", ""),
        ("::", ""),
    ],
)
def test_check_address(ip: str, kind: str | None) -> None:
    if kind is None:
        check_address(ip)
    else:
        with pytest.raises(SandboxError, match=f"a {kind}.*address; fetch_url only reaches public"):
            check_address(ip)
    check_address(ip, allow_private=True)


def test_check_host_resolves_and_checks_every_address() -> None:
    addresses = asyncio.run(check_host("localhost", 80, allow_private=True))
    assert addresses and set(addresses) <= {"127.0.0.1", "::1"}
    with pytest.raises(SandboxError, match="localhost resolves to"):
        asyncio.run(check_host("localhost", 80))


# web_search


def searxng(server: Server, results: list[dict[str, Any]], **extra: Any) -> WebSettings:
    payload = {"query": "q", "results": results, **extra}
    server.routes["/search"] = Reply(
        body=json.dumps(payload).encode(), content_type="application/json"
    )
    return WebSettings(search=WebSearchSettings(url=server.url("/"), max_results=2))


RESULTS = [
    {
        "title": "Tides - Wikipedia",
        "url": "https://en.wikipedia.org/wiki/Tide",
        "content": "Tides are the rise and fall of sea levels.",
    },
    {"title": "NOAA tides", "url": "https://tidesandcurrents.noaa.gov/", "content": ""},
    {"title": "Third", "url": "https://example.org/3", "content": "beyond max_results"},
]


def test_web_search_returns_numbered_results(server: Server, tmp_path: Path) -> None:
    settings = searxng(server, RESULTS)
    out = run(web_search(make_ctx(tmp_path, allow_private=False), "why tides?", settings))
    assert out.splitlines() == [
        "Results for 'why tides?':",
        "1. Tides - Wikipedia",
        "   https://en.wikipedia.org/wiki/Tide",
        "   Tides are the rise and fall of sea levels.",
        "2. NOAA tides",
        "   https://tidesandcurrents.noaa.gov/",
    ]
    target, _ = server.requests[0]
    assert urlsplit(target).path == "/search"
    assert parse_qs(urlsplit(target).query) == {"q": ["why tides?"], "format": ["json"]}


def test_web_search_without_results(server: Server, tmp_path: Path) -> None:
    settings = searxng(server, [], unresponsive_engines=[["google", "timeout"]])
    out = run(web_search(make_ctx(tmp_path), "qwzx", settings))
    assert out.startswith("No results for 'qwzx'")
    assert "google" in out


def test_web_search_not_configured(tmp_path: Path) -> None:
    err = fails(web_search(make_ctx(tmp_path), "tides", WebSettings()))
    assert err.message == "web_search is not configured for this pack"
    assert "web.search: {kind: searxng, url: http://127.0.0.1:8888}" in err.hint


def test_web_search_json_format_disabled(server: Server, tmp_path: Path) -> None:
    server.routes["/search"] = Reply(403, b"Forbidden", content_type="text/html")
    settings = WebSettings(search=WebSearchSettings(url=server.url("/")))
    err = fails(web_search(make_ctx(tmp_path), "tides", settings))
    assert "HTTP 403" in err.message
    assert "search.formats" in err.hint


def test_web_search_invalid_json(server: Server, tmp_path: Path) -> None:
    server.routes["/search"] = Reply(body=b"<html>not json</html>", content_type="text/html")
    settings = WebSettings(search=WebSearchSettings(url=server.url("/")))
    err = fails(web_search(make_ctx(tmp_path), "tides", settings))
    assert "did not answer with SearXNG JSON" in err.message


def test_web_search_backend_down(server: Server, tmp_path: Path) -> None:
    settings = WebSettings(search=WebSearchSettings(url=server.url("/")))
    server.routes["/search"] = Reply(body=b"{}", delay=10)
    err = fails(
        web_search(make_ctx(tmp_path), "tides", settings.model_copy(update={"timeout": 0.5}))
    )
    assert "timed out" in err.message and "SearXNG instance is running" in err.hint


# through the research pack


def test_research_pack_binds_web_settings(server: Server, tmp_path: Path) -> None:
    settings = ResearchSettings(
        builder="packs.research:build",
        sandbox=SandboxSettings(network=True, allow_private_addresses=True),
        web=searxng(server, RESULTS),
    )
    pack = build(settings)
    tools = {tool.spec.name: tool for tool in pack.tools}
    assert set(tools) == {"web_search", "fetch_url"}
    for tool in tools.values():
        assert "web" not in tool.spec.parameters["properties"]
    fetch_schema = tools["fetch_url"].spec.parameters
    assert set(fetch_schema["properties"]) == {"url", "start", "max_chars"}
    assert fetch_schema["required"] == ["url"]
    ctx = make_ctx(tmp_path)
    found = run(tools["web_search"]({"query": "tides"}, ctx))
    assert "1. Tides - Wikipedia" in found
    server.routes["/page.html"] = Reply(body=PAGE, content_type="text/html")
    page = run(tools["fetch_url"]({"url": server.url("/page.html")}, ctx))
    assert "# Why tides happen" in page
    with pytest.raises(ToolError, match="web: Extra inputs"):
        run(tools["fetch_url"]({"url": server.url("/page.html"), "web": {}}, ctx))
