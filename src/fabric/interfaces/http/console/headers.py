"""The headers every answer of the console (``/console`` and below) carries: a strict Content
Security Policy (scripts, styles, fonts and connections from this origin only; no inline
script, no eval; no framing), ``nosniff`` and no referrer. ``ConsoleHeaders`` is a pure ASGI
middleware, so the guards' refusals of those paths carry them too."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SHARE_CSP = "sandbox allow-scripts"
"""The share file's header: a sandbox; its own meta tag allows its one inline script."""
ARTIFACT_CSP = "sandbox"
"""An artifact is plain text in a sandbox: nothing in it may run."""
PLAIN = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
"""Besides a Content Security Policy, on every answer a browser may show."""
_PAGE_HEADERS = [
    (b"content-security-policy", CONSOLE_CSP.encode()),
    *((name.lower().encode(), value.encode()) for name, value in PLAIN.items()),
]


def is_console_path(path: str) -> bool:
    return path == "/console" or path.startswith("/console/")


class ConsoleHeaders:
    """Adds the console's security headers to every answer under ``/console``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.lower() for name, _ in message.get("headers", ())}
                added = [(n, v) for n, v in _PAGE_HEADERS if n not in names]
                message = {**message, "headers": [*message.get("headers", ()), *added]}
            await send(message)

        await self.app(scope, receive, with_headers)
