"""The service's answers leave without its secrets (ADR 0014): a pure ASGI middleware that
redacts every whole text or JSON response body.

It sits inside the access log and outside the guards (``security``), so their refusals are
redacted too. Streamed bodies (events, the runlog download) are redacted by their endpoints.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fabric.domain.secrets import Secrets

_TEXT_TYPES = (b"application/json", b"application/x-ndjson", b"text/")
_EVENT_STREAM = b"text/event-stream"


class RedactSecrets:
    """Every whole response body of text or JSON leaves without the service's ``secrets``
    (its token, the API keys, secret-looking environment values), with its Content-Length
    set again: task documents, errors (the guards' refusals too, when this one is outside
    them), model listings. A streamed body (events, the runlog download) is its endpoint's to
    redact (``Secrets.redact_lines``); it goes through as it is, and an event stream's head
    at once: a client sees the stream open before its first event, which may be long in
    coming (``/runs/stream`` sends one when a run changes)."""

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
    kind = _header(start, b"content-type")
    return kind.startswith(_TEXT_TYPES) and not kind.startswith(_EVENT_STREAM)


def _with_length(headers: Any, body: bytes) -> list[tuple[bytes, bytes]]:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    return [*kept, (b"content-length", b"%d" % len(body))]
