"""``/mcp``: fabric's MCP server over streamable HTTP, inside the service (ADR 0019).

It sits behind the same guards as the API (the Host check, the body limit, the token or the
console's cookie with its CSRF token); here it also refuses a request whose ``Origin`` is
another site's (the MCP transport's rule against DNS rebinding and cross-site pages), unless
that origin is one of ``serve.cors_origins``. The SDK is imported only when this is mounted
(``serve.mcp``, on by default)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from fabric.interfaces.runner import Runner

from .console.session import header, same_origin
from .security import ASGIApp, Receive, Scope, Send, send_error

PATH = "/mcp"


class OriginCheck:
    """A request that says it comes from a page (``Origin``) must come from this service's own
    origin or an allowed one."""

    def __init__(self, app: ASGIApp, *, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(o.rstrip("/").lower() for o in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = list(scope.get("headers", ()))
        origins = header(headers, b"origin")
        if same_origin(headers) or (
            len(origins) == 1 and origins[0].strip().rstrip("/").lower() in self.allowed
        ):
            await self.app(scope, receive, send)
            return
        shown = origins[0][:200] if origins else ""
        message = (
            f"This MCP endpoint does not answer requests from pages of {shown!r}: a page of "
            "another site may not drive fabric. Call it from an MCP client (which sends no "
            "Origin), or add that origin to serve.cors_origins in fabric.yaml."
        )
        await send_error(send, 403, "origin_not_allowed", message)


def mount_mcp(
    app: FastAPI, runner: Runner, roots: Sequence[Path], cors_origins: Collection[str]
) -> AbstractAsyncContextManager[Any]:
    """Add ``/mcp`` to ``app``; returns what runs its sessions, to enter in the lifespan."""
    from fabric.interfaces.mcp.server import http_app

    endpoint, running = http_app(runner, roots)
    guarded: Any = OriginCheck(endpoint, allowed=cors_origins)  # an ASGI app: Route takes it
    app.add_route(PATH, guarded, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    session: AbstractAsyncContextManager[Any] = running()
    return session
