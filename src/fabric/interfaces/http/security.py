"""The service's guards: pure ASGI middlewares and the API token.

Stack them with the Host check outermost, then the body limit, then the token check::

    app = HostCheck(BodyLimit(BearerAuth(app, token=t), max_bytes=n), allowed=hosts)

(with Starlette's ``add_middleware`` the last one added is the outermost). The middlewares only
look at the request; responses, Server-Sent Events included, pass through message by message.
Every refusal is the service's JSON error shape ``{"error": {"code", "message", "details"}}``.

The token itself (made, kept, checked) is in ``tokens.py``. It is only read from the
``Authorization`` header, never from the query string: URLs end
up in proxy and access logs and in browser history. A browser ``EventSource`` cannot set
headers, so SSE clients use a fetch-based reader (or any HTTP client) that sends the header.
The web console's page is the other way in: the session cookie it got by logging in with the
token (``console/session.py``), with a CSRF token on every request that changes something.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any

from fabric.domain.errors import ConfigError
from fabric.interfaces.tokens import check_token

from .console.session import CSRF_HINT, CSRF_MESSAGE, ConsoleSessions, check_cookie_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_GUARDED = ("http", "websocket")


async def send_error(
    send: Send, status: int, code: str, message: str, *, details: Any = None, headers: Any = ()
) -> None:
    """Answer with the service's JSON error shape (``headers``: extra (name, value) bytes)."""
    body = json.dumps({"error": {"code": code, "message": message, "details": details}}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": [*head, *headers]})
    await send({"type": "http.response.body", "body": body})


async def _refuse(
    scope: Scope, send: Send, status: int, code: str, message: str, **kw: Any
) -> None:
    if scope["type"] == "websocket":  # closing before accepting makes the server answer 403
        await send({"type": "websocket.close", "code": 1008})
    else:
        await send_error(send, status, code, message, **kw)


def _header_values(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope.get("headers", ()) if key.lower() == name]


class BearerAuth:
    """Every request outside ``open_paths`` (exact paths) and ``open_prefixes`` needs
    ``Authorization: Bearer <token>``, or, with ``sessions``, a valid console session cookie
    (and, for anything but GET and HEAD, its CSRF token from this origin: else 403)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str,
        open_paths: Collection[str] = ("/healthz",),
        open_prefixes: Collection[str] = (),
        sessions: ConsoleSessions | None = None,
    ) -> None:
        check_token(token, "the server settings")
        self.app = app
        self._token = token.encode()
        self._open_paths = frozenset(open_paths)
        self._open_prefixes = tuple(open_prefixes)
        self._sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (
            scope["type"] not in _GUARDED
            or path in self._open_paths
            or path.startswith(self._open_prefixes)
        ):
            await self.app(scope, receive, send)
            return
        values = _header_values(scope, b"authorization")
        if not values and self._sessions is not None and scope["type"] == "http":
            refused = check_cookie_request(self._sessions, scope)
            if refused is None:
                await self.app(scope, receive, send)
                return
            if refused == "csrf":
                details = {"hint": CSRF_HINT}
                await send_error(send, 403, "csrf_failed", CSRF_MESSAGE, details=details)
                return
        scheme, _, given = values[0].partition(b" ") if values else (b"", b"", b"")
        # compare_digest first, whatever the rest says, so timing tells nothing
        if hmac.compare_digest(given.strip(), self._token) and (
            len(values) == 1 and scheme.lower() == b"bearer"
        ):
            await self.app(scope, receive, send)
            return
        if not values:
            challenge = b'Bearer realm="fabric"'
            message = (
                "This endpoint needs the API token: send 'Authorization: Bearer <token>'. "
                "`fabric serve` prints where its token comes from when it starts."
                + (" In a browser, log in at /console." if self._sessions else "")
            )
        else:
            challenge = b'Bearer realm="fabric", error="invalid_token"'
            message = (
                "The bearer token is not valid. Send 'Authorization: Bearer <token>' with the "
                "token `fabric serve` uses (it prints where that token comes from)."
            )
        headers = [(b"www-authenticate", challenge)]
        await _refuse(scope, send, 401, "unauthorized", message, headers=headers)


def _host_part(value: str) -> str | None:
    """The host of a Host header value (no port, no IPv6 brackets), or None if malformed."""
    value = value.strip()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        if not sep or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
    elif value.count(":") > 1:  # a bare IPv6 address
        host = value
    else:
        host, sep, port = value.partition(":")
        if sep and not port.isdigit():
            return None
    return host.lower().removesuffix(".") or None


class HostCheck:
    """The Host header must name this service; this blocks DNS rebinding from web pages."""

    def __init__(self, app: ASGIApp, *, allowed: Collection[str]) -> None:
        hint = "List the names clients use to reach the service, e.g. localhost, 127.0.0.1."
        hosts = {name: _host_part(name) for name in allowed}
        if bad := sorted(name for name, host in hosts.items() if host is None):
            raise ConfigError(f"These allowed hosts are not host names: {bad}.", hint=hint)
        if not hosts:
            raise ConfigError("The allowed hosts list is empty: all would be refused.", hint=hint)
        self.app = app
        self._allowed = frozenset(host for host in hosts.values() if host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GUARDED:
            await self.app(scope, receive, send)
            return
        values = _header_values(scope, b"host")
        raw = values[0].decode("latin-1") if len(values) == 1 else ""
        if len(values) == 1 and _host_part(raw) in self._allowed:
            await self.app(scope, receive, send)
            return
        said = f"the Host {raw!r}" if len(values) == 1 else "a request without one Host header"
        message = (
            f"This service does not answer to {said}. Reach it by one of its allowed names, "
            "or add the name to the server's allowed hosts setting."
        )
        details = {"allowed": sorted(self._allowed)}
        await _refuse(scope, send, 400, "host_not_allowed", message, details=details)


class _BodyRefused(Exception):
    """Raised from ``receive`` once the body is over a limit."""


MAX_JSON_DEPTH = 32
"""Arrays and objects nested deeper than this are refused before any parser sees them (no
request of this API nests more than two levels; a parser would recurse on each level)."""
_JSON_MARKS = re.compile(rb'[\[\]{}"\\]')


class _JsonDepth:
    """How deep arrays and objects nest in a body read chunk by chunk (strings skipped)."""

    def __init__(self) -> None:
        self.depth, self.deepest, self.in_string, self.escaped = 0, 0, False, False

    def feed(self, chunk: bytes) -> int:
        """Read the next chunk; return the deepest nesting seen so far."""
        free = 1 if self.escaped else 0  # the first byte was escaped by the last chunk's "\"
        for mark in _JSON_MARKS.finditer(chunk):
            at, byte = mark.start(), chunk[mark.start()]
            if at < free:
                continue
            if self.in_string:
                if byte == 0x5C:  # a backslash escapes the byte after it
                    free = at + 2
                self.in_string = byte != 0x22
            elif byte == 0x22:
                self.in_string = True
            elif byte in b"[{":
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            elif byte in b"]}":
                self.depth -= 1
        self.escaped = free > len(chunk)
        return self.deepest


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413, and bodies whose JSON nests deeper
    than ``max_depth`` with 400; the app never gets more than that."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header_values(scope, b"content-length")  # servers refuse malformed ones
        if declared and declared[0].strip().isdigit() and int(declared[0]) > self.max_bytes:
            await self._too_large(send)
            return
        received, refused, started = 0, "", False
        nesting = _JsonDepth()

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                raise _BodyRefused
            message = await receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                received += len(body)
                if received > self.max_bytes:
                    refused = "large"
                elif nesting.feed(body) > self.max_depth:
                    refused = "deep"
                if refused:
                    raise _BodyRefused
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused and not started:
                return  # the app's answer to the failed read: ours comes below
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except* _BodyRefused:  # also when it comes out of the app's task group
            if started:
                raise  # too late to answer: let the server drop the connection
        if refused == "large" and not started:
            await self._too_large(send)
        elif refused == "deep" and not started:
            await self._too_deep(send)

    async def _too_large(self, send: Send) -> None:
        message = (
            f"The request body is larger than the service accepts ({self.max_bytes} bytes). "
            "Send less (large inputs belong in the workspace), or raise the server's limit."
        )
        headers = [(b"connection", b"close")]  # the unread rest must not be taken for a request
        details = {"max_bytes": self.max_bytes}
        await send_error(send, 413, "body_too_large", message, details=details, headers=headers)

    async def _too_deep(self, send: Send) -> None:
        message = (
            f"The request body nests arrays or objects more than {self.max_depth} levels deep; "
            "no request of this API needs that. Send the fields the API documents "
            "(GET /openapi.json) as flat JSON."
        )
        headers = [(b"connection", b"close")]  # the unread rest must not be taken for a request
        details = {"max_depth": self.max_depth}
        await send_error(send, 400, "body_too_deep", message, details=details, headers=headers)
