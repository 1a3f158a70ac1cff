"""The service's guards: pure ASGI middlewares and the API token.

Stack them with the Host check outermost, then the body limit, then the token check::

    app = HostCheck(BodyLimit(BearerAuth(app, token=t), max_bytes=n), allowed=hosts)

(with Starlette's ``add_middleware`` the last one added is the outermost). The middlewares only
look at the request; responses, Server-Sent Events included, pass through message by message.
Every refusal is the service's JSON error shape ``{"error": {"code", "message", "details"}}``.

The token is only read from the ``Authorization`` header, never from the query string: URLs end
up in proxy and access logs and in browser history. A browser ``EventSource`` cannot set
headers, so SSE clients use a fetch-based reader (or any HTTP client) that sends the header.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MIN_TOKEN_LENGTH = 16
ENV_SOURCE = "environment variable"
"""How ``load_or_create_token``'s source starts when the token came from the environment."""
_MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
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
    """Every request outside ``open_paths`` needs ``Authorization: Bearer <token>``."""

    def __init__(
        self, app: ASGIApp, *, token: str, open_paths: Collection[str] = ("/healthz",)
    ) -> None:
        check_token(token, "the server settings")
        self.app = app
        self._token = token.encode()
        self._open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in _GUARDED or scope["path"] in self._open_paths:
            await self.app(scope, receive, send)
            return
        values = _header_values(scope, b"authorization")
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


_TEXT_TYPES = (b"application/json", b"application/x-ndjson", b"text/")


class RedactSecrets:
    """Every whole response body of text or JSON leaves without the service's ``secrets``
    (its token, the API keys, secret-looking environment values), with its Content-Length
    set again: task documents, errors (the guards' refusals too, when this one is outside
    them), model listings. A streamed body (events, the runlog download) is its endpoint's to
    redact (``Secrets.redact_lines``); it goes through as it is."""

    def __init__(self, app: ASGIApp, *, secrets: Secrets) -> None:
        self.app = app
        self._secrets = secrets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._secrets:
            await self.app(scope, receive, send)
            return
        held: Message | None = None  # the response start, until the body shows what it is

        async def redacting_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and _is_text(message):
                held = message
                return
            if held is not None:
                start, held = held, None
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    body = self._redact(message.get("body", b""), start)
                    start = {**start, "headers": _with_length(start.get("headers", ()), body)}
                    message = {**message, "body": body}
                await send(start)
            await send(message)

        await self.app(scope, receive, redacting_send)

    def _redact(self, body: bytes, start: Message) -> bytes:
        text = body.decode("utf-8", "surrogateescape")
        json_body = _header(start, b"content-type").startswith(b"application/json")
        safe = self._secrets.redact_json(text) if json_body else self._secrets.redact(text)
        return body if safe is text else safe.encode("utf-8", "surrogateescape")


def _header(message: Message, name: bytes) -> bytes:
    return next((v for k, v in message.get("headers", ()) if k.lower() == name), b"").lower()


def _is_text(start: Message) -> bool:
    return _header(start, b"content-type").startswith(_TEXT_TYPES)


def _with_length(headers: Any, body: bytes) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    return [*kept, (b"content-length", b"%d" % len(body))]


# --- the token -------------------------------------------------------------------------------


def check_token(token: str, where: str) -> None:
    """Refuse tokens too short to resist guessing, or that cannot travel in a header."""
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"The API token from {where} is {len(token)} characters long; "
            f"it needs at least {MIN_TOKEN_LENGTH}.",
            hint=f"Use a random one: {_MAKE_ONE}",
        )
    if not all(33 <= ord(c) <= 126 for c in token):
        raise ConfigError(
            f"The API token from {where} has spaces, control or non-ASCII characters, "
            "which an Authorization header cannot carry.",
            hint=f"Use a random one: {_MAKE_ONE}",
        )


def load_or_create_token(*, env: Mapping[str, str], env_name: str, path: Path) -> tuple[str, str]:
    """The API token and where it came from: ``env_name`` if set, else the token file, else a
    new random token written to that file (owner-only). Errors never contain the token."""
    if from_env := env.get(env_name, "").strip():
        check_token(from_env, f"${env_name}")
        return from_env, f"{ENV_SOURCE} {env_name}"
    if path.exists() or path.is_symlink():
        return _read_token_file(path), f"file {path}"
    token = secrets.token_urlsafe(32)
    try:
        _write_token_file(path, token)
    except FileExistsError:  # another server created it meanwhile: share its token
        return _read_token_file(path), f"file {path}"
    except OSError as exc:
        raise ConfigError(
            f"Could not write a new API token to {path}: {exc.strerror or exc}.",
            hint=f"Set {env_name}, or point the token file setting at a writable place.",
        ) from exc
    return token, f"generated, stored in {path} (owner-only)"


def _read_token_file(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, encoding="utf-8") as file:
            info = os.fstat(file.fileno())
            token = file.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"Could not read the API token file {path}: {reason}.",
            hint="It must be a text file you own, not a symlink; delete it to get a new token.",
        ) from exc
    if os.name == "posix" and info.st_mode & 0o077:
        raise ConfigError(
            f"The API token file {path} is open to other users (mode {info.st_mode & 0o777:o}).",
            hint=f"Make it owner-only: chmod 600 {path}",
        )
    if os.name == "posix" and info.st_uid != os.getuid():
        raise ConfigError(
            f"The API token file {path} belongs to another user.",
            hint="Use a token file you own, or delete this one to have a new one generated.",
        )
    if not token:
        raise ConfigError(
            f"The API token file {path} is empty.",
            hint="Delete it to have a new token generated, or write a token into it.",
        )
    check_token(token, str(path))
    return token


def _write_token_file(path: Path, token: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(token + "\n")
            file.flush()
            os.fsync(file.fileno())
    except BaseException:
        path.unlink(missing_ok=True)  # never leave an empty or partial token behind
        raise


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped, also in brackets) and ``localhost``."""
    host = host.strip().strip("[]").lower().removesuffix(".")
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def check_bind(host: str, token_source: str, *, env_name: str = "FABRIC_API_TOKEN") -> None:
    """Refuse to listen beyond this machine (a non-loopback address, or all of them with
    0.0.0.0 / ::) unless the token was set on purpose in the environment: a token generated
    into a local file is not enough to expose the service."""
    if is_loopback_host(host) or token_source.startswith(ENV_SOURCE):
        return
    bare = host.strip().strip("[]")
    try:
        everywhere = not bare or ipaddress.ip_address(bare).is_unspecified
    except ValueError:
        everywhere = False
    where = f"every network interface ({bare or 'all'})" if everywhere else host
    raise ConfigError(
        f"Refusing to listen on {where}: that exposes the service to other machines, and its "
        f"token was not set on purpose ({token_source}).",
        hint=f"Set {env_name} to a long random token you share with the clients, "
        "or listen on 127.0.0.1.",
    )


def redact(text: str, secrets_: Collection[str]) -> str:
    """``text`` with every secret of 8 characters or more replaced by ``[redacted]`` (for log
    lines; see ``fabric.domain.secrets``)."""
    return Secrets(secrets_).redact(text)
