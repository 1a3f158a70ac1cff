"""Web tools: ``fetch_url`` reads one page, ``web_search`` asks a SearXNG instance.

``fetch_url`` only speaks http(s) and, unless the pack sets ``sandbox.allow_private_addresses``,
only reaches public addresses: every hop (redirects are followed by hand) resolves its host,
refuses it if any address is loopback, private, link-local, multicast or otherwise not public,
and then connects to the address it checked (so a DNS answer cannot change in between). Time
(redirects included), body size and returned text are capped. HTML becomes Markdown-like text.

The search backend is configured by the operator, so it is trusted and not address-checked.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from fabric import __version__
from fabric.application.context import ToolContext
from fabric.config.schema import WebSettings
from fabric.domain.errors import SandboxError, ToolError

from . import net_guard

_USER_AGENT = f"agent-fabric/{__version__} (+fetch_url)"
_ACCEPT = "text/html, text/plain;q=0.9, application/json;q=0.9, */*;q=0.5"
_REDIRECTS = {301, 302, 303, 307, 308}
_HTML_TYPES = {"text/html", "application/xhtml+xml"}
_TEXT_TYPES = {"application/json", "application/xml", "application/javascript", "application/yaml"}
_META_CHARSET = re.compile(rb"""<meta[^>]+charset=["']?([\w.:-]+)""", re.IGNORECASE)
_BLANK_RUNS = re.compile(r"\n[ \t]*(?:\n[ \t]*)+")
_NETWORK_HINT = "set sandbox.network: true for the pack in fabric.yaml"


async def fetch_url(
    ctx: ToolContext, url: str, web: WebSettings, start: int = 0, max_chars: int = 12_000
) -> str:
    """Fetch a public web page (http or https) and return its readable text: HTML comes back
    as Markdown with headings and absolute links; plain text, JSON and XML come back as-is.

    Args:
        url: The http(s) URL to fetch.
        start: Character offset to read from, to continue a long page.
        max_chars: How many characters of text to return at most.
    """
    _require_network(ctx)
    current = _parse_url(url)
    try:
        async with (
            asyncio.timeout(web.timeout),
            _client(web, Accept=_ACCEPT) as client,
        ):
            for _hop in range(web.max_redirects + 1):
                response = await _open(client, current, ctx.sandbox.allow_private_addresses)
                try:
                    location = response.headers.get("Location")
                    if response.status_code in _REDIRECTS and location:
                        current = _parse_url(location, base=current)
                        continue
                    body, cut = await _read_capped(response, web.max_bytes, current)
                    status, ctype = response.status_code, response.headers.get("Content-Type", "")
                    charset = response.charset_encoding
                finally:
                    await response.aclose()
                break
            else:
                raise ToolError(
                    f"{url} redirected more than {web.max_redirects} times",
                    hint="fetch the final URL directly, or use another source",
                )
    except (TimeoutError, httpx.TimeoutException):
        raise ToolError(
            f"fetching {url} timed out after {web.timeout:g} s",
            hint="try again later or use another source",
        ) from None
    except httpx.HTTPError as exc:
        raise ToolError(
            f"fetching {url} failed: {type(exc).__name__}: {exc}",
            hint="check the URL, or use another source",
        ) from None
    text = await asyncio.to_thread(_to_text, body, ctype, charset, str(current))
    if not 200 <= status < 300:
        snippet = " ".join(text.split())[:300]
        raise ToolError(f"{current} answered HTTP {status}: {snippet}", hint=_status_hint(status))
    header = [f"URL: {current}", f"Status: {status}", f"Content-Type: {ctype or 'unknown'}"]
    if cut:
        header.append(f"Note: the body was cut at {web.max_bytes} bytes")
    begin = min(max(start, 0), len(text))
    part = text[begin : begin + max(max_chars, 1)]
    end = begin + len(part)
    if begin or end < len(text):
        header.append(f"Showing characters {begin}-{end} of {len(text)}")
    if end < len(text):
        part += f"\n\n[cut: call fetch_url again with start={end} to read on]"
    return "\n".join(header) + "\n\n" + part


async def web_search(ctx: ToolContext, query: str, web: WebSettings) -> str:
    """Search the web. Returns numbered results with title, URL and a snippet; read a result
    with fetch_url.

    Args:
        query: What to search for, as you would type it into a search engine.
    """
    _require_network(ctx)
    search = web.search
    if search is None:
        raise ToolError(
            "web_search is not configured for this pack",
            hint="add a SearXNG instance to fabric.yaml: packs.<name>.web.search: "
            "{kind: searxng, url: http://127.0.0.1:8888}",
        )
    if not query.strip():
        raise ToolError("the query is empty", hint="say what to search for")
    endpoint = str(search.url).rstrip("/") + "/search"
    try:
        async with (
            asyncio.timeout(web.timeout),
            _client(web, Accept="application/json") as client,
        ):
            response = await client.get(endpoint, params={"q": query, "format": "json"})
    except (TimeoutError, httpx.HTTPError) as exc:
        problem = "timed out" if isinstance(exc, TimeoutError | httpx.TimeoutException) else exc
        raise ToolError(
            f"the search backend at {endpoint} failed: {problem}",
            hint="check that the SearXNG instance is running and that "
            "packs.<name>.web.search.url points at it",
        ) from None
    if response.status_code != 200:
        hint = (
            "enable the json format in the instance's settings.yml (search.formats: [html, json])"
            if response.status_code == 403
            else "check the SearXNG instance's logs"
        )
        snippet = " ".join(response.text.split())[:200]
        raise ToolError(
            f"the search backend answered HTTP {response.status_code}: {snippet}", hint=hint
        )
    try:
        data: Any = response.json()
        results = data["results"]
        if not isinstance(results, list):
            raise TypeError("results is not a list")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ToolError(
            f"the search backend did not answer with SearXNG JSON results ({exc})",
            hint="check that packs.<name>.web.search.url points at a SearXNG instance",
        ) from None
    lines = [f"Results for {query!r}:"]
    hits = [r for r in results if isinstance(r, dict) and r.get("url")][: search.max_results]
    for number, hit in enumerate(hits, 1):
        title = " ".join(str(hit.get("title") or hit["url"]).split())
        snippet = " ".join(str(hit.get("content") or "").split())[:400]
        lines += [f"{number}. {title}", f"   {hit['url']}"] + ([f"   {snippet}"] if snippet else [])
    if not hits:
        down = data.get("unresponsive_engines") if isinstance(data, dict) else None
        extra = f" (engines not answering: {json.dumps(down)})" if down else ""
        return f"No results for {query!r}{extra}. Try other words or a broader query."
    return "\n".join(lines)


def _client(web: WebSettings, **headers: str) -> httpx.AsyncClient:
    """No proxies or .netrc from the environment, no automatic redirects."""
    headers["User-Agent"] = _USER_AGENT
    return httpx.AsyncClient(
        trust_env=False, follow_redirects=False, timeout=web.timeout, headers=headers
    )


def _require_network(ctx: ToolContext) -> None:
    if not ctx.sandbox.network:
        raise SandboxError("this pack's sandbox does not allow network access", hint=_NETWORK_HINT)


def _parse_url(url: str, *, base: httpx.URL | None = None) -> httpx.URL:
    """``url`` (resolved against ``base``, for a redirect) if it is an http(s) URL with a host
    and no credentials."""
    what = "redirected to" if base else "given"
    try:
        parsed = base.join(url.strip()) if base else httpx.URL(url.strip())
    except httpx.InvalidURL as exc:
        raise ToolError(
            f"invalid URL {what}: {url!r} ({exc})", hint="give a full http(s) URL"
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise SandboxError(
            f"fetch_url only fetches http(s) URLs with a host; {what}: {url!r}",
            hint="give a URL starting with http:// or https://",
        )
    if parsed.userinfo:
        raise SandboxError(
            f"URLs with credentials (user:password@) are not allowed; {what}: {parsed.host}",
            hint="fetch a public URL without credentials",
        )
    return parsed


async def _open(client: httpx.AsyncClient, url: httpx.URL, allow_private: bool) -> httpx.Response:
    """Send GET ``url`` to one of its host's checked addresses (the first that connects)."""
    host = url.raw_host.decode("ascii")
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = await net_guard.check_host(host, port, allow_private=allow_private)
    error: httpx.ConnectError | None = None
    for ip in addresses:
        request = client.build_request(
            "GET",
            url.copy_with(host=ip),
            headers={"Host": url.netloc.decode("ascii")},
            extensions={"sni_hostname": host} if url.scheme == "https" else {},
        )
        try:
            return await client.send(request, stream=True)
        except httpx.ConnectError as exc:
            error = exc
    raise ToolError(f"cannot connect to {url.netloc.decode()}: {error}", hint="check the URL")


async def _read_capped(
    response: httpx.Response, max_bytes: int, url: httpx.URL
) -> tuple[bytes, bool]:
    """The body, up to ``max_bytes``, and whether it was cut. Binary content is refused (or, on
    an error status, skipped) before it is read."""
    ctype = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if ctype and not _is_text(ctype):
        if not response.is_success:
            return b"", False
        raise ToolError(
            f"{url} is {ctype}, not text",
            hint="fetch_url reads HTML, plain text, JSON and XML; look for a text or HTML version",
        )
    body = bytearray()
    async for chunk in response.aiter_bytes():
        if len(body) + len(chunk) > max_bytes:
            body += chunk[: max_bytes - len(body)]
            return bytes(body), True
        body += chunk
    return bytes(body), False


def _is_text(ctype: str) -> bool:
    known = ctype in _HTML_TYPES | _TEXT_TYPES or ctype.endswith(("+json", "+xml"))
    return known or ctype.startswith("text/")


def _to_text(body: bytes, content_type: str, charset: str | None, base_url: str) -> str:
    ctype = content_type.split(";")[0].strip().lower()
    if not ctype and b"\x00" in body[:4096]:
        raise ToolError(f"{base_url} is binary, not text", hint="look for a text or HTML version")
    head = body[:4096].lstrip().lower()
    is_html = ctype in _HTML_TYPES or (not ctype and head.startswith((b"<!doctype html", b"<html")))
    if is_html and charset is None and (meta := _META_CHARSET.search(body[:4096])):
        charset = meta.group(1).decode("ascii")
    try:
        text = body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    if is_html:
        from .html_text import html_to_text  # markdownify is slow to import: only when needed

        text = html_to_text(text, base_url)
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return _BLANK_RUNS.sub("\n\n", text).strip()


def _status_hint(status: int) -> str:
    if status in (401, 403, 404, 410):
        return "the page is missing or refuses access; check the URL or use another source"
    if status == 429 or status >= 500:
        return "the site is busy or failing; try again later or use another source"
    return "check the URL, or use another source"
