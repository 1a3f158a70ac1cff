"""The console's own routes: the page and its files (open: they hold no data), and the session
(log in with the service token, see whether the cookie still holds, log out).

The page is package data in ``static/`` (no framework, no build step); ``/console`` and
``/console/`` answer its ``index.html``, ``/console/static/<file>`` the rest.
"""

from __future__ import annotations

import hmac
import re
from importlib import resources
from importlib.abc import Traversable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from fabric.application.tasks import NotFound
from fabric.interfaces.http.shapes import error_response

from .session import CSRF_HINT, CSRF_MESSAGE, ConsoleSessions, check_cookie_request, same_origin

OPEN_PATHS = ("/console", "/console/", "/console/login", "/console/session", "/console/logout")
"""The console's paths that need no token (the session ones check the cookie themselves)."""
OPEN_PREFIXES = ("/console/static/",)
_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")
_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "mjs": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "json": "application/json",
    "map": "application/json",
    "svg": "image/svg+xml",
    "png": "image/png",
    "ico": "image/x-icon",
    "woff2": "font/woff2",
    "txt": "text/plain; charset=utf-8",
    "md": "text/plain; charset=utf-8",
}
_NO_STORE = {"Cache-Control": "no-store"}


class LoginIn(BaseModel):
    """The service token, typed into the console once."""

    model_config = ConfigDict(extra="forbid")

    token: str = Field(max_length=4096, description="The token `fabric serve` uses.")


def static_files() -> Traversable:
    """The console's files, shipped as package data."""
    return resources.files("fabric.interfaces.http.console").joinpath("static")


def console_router(sessions: ConsoleSessions, token: str) -> APIRouter:
    router = APIRouter(tags=["console"])
    expected = token.encode()

    @router.get("/console", include_in_schema=False)
    @router.get("/console/", include_in_schema=False)
    async def page() -> Response:
        return _file("index.html")

    @router.get("/console/static/{name:path}", include_in_schema=False)
    async def static(name: str) -> Response:
        return _file(name)

    @router.post(
        "/console/login",
        summary="Start a console session with the service token",
        description="Answers the CSRF token and sets the HttpOnly, SameSite=Strict session "
        "cookie (12 hours). Requests with the cookie instead of a bearer token must send the "
        "CSRF token as X-Fabric-CSRF with anything but GET and HEAD.",
    )
    async def login(body: LoginIn, request: Request) -> Response:
        if not same_origin(request.scope.get("headers", ())):
            return error_response(403, "csrf_failed", CSRF_MESSAGE, {"hint": CSRF_HINT})
        if not hmac.compare_digest(body.token.strip().encode(), expected):
            return error_response(
                401,
                "unauthorized",
                "That is not the service's token: no session was started.",
                {"hint": "Use the token `fabric serve` uses (it prints where it comes from)."},
            )
        cookie, csrf = sessions.issue()
        answer = JSONResponse({"csrf": csrf}, headers=_NO_STORE)
        answer.headers["set-cookie"] = sessions.set_cookie(cookie, secure=_https(request))
        return answer

    @router.get("/console/session", summary="The CSRF token of the current console session")
    async def session(request: Request) -> Response:
        csrf = sessions.csrf_of_request(request.scope.get("headers", ()))
        if csrf is None:
            return error_response(
                401,
                "unauthorized",
                "There is no console session (or it expired): log in with the service token.",
                {"hint": 'POST /console/login with {"token": "<the service token>"}'},
            )
        return JSONResponse({"csrf": csrf}, headers=_NO_STORE)

    @router.post("/console/logout", summary="End the console session in this browser")
    async def logout(request: Request) -> Response:
        if check_cookie_request(sessions, request.scope) == "csrf":
            return error_response(403, "csrf_failed", CSRF_MESSAGE, {"hint": CSRF_HINT})
        answer = JSONResponse({"status": "logged out"}, headers=_NO_STORE)
        answer.headers["set-cookie"] = sessions.clear_cookie(secure=_https(request))
        return answer

    return router


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def _file(name: str) -> Response:
    """A file of the console's package data, by a '/'-separated name of plain parts."""
    parts = name.split("/")
    if not all(_PART.fullmatch(part) and ".." not in part for part in parts):
        raise _missing(name)
    target = static_files().joinpath(*parts)
    if not target.is_file():
        raise _missing(name)
    kind = _TYPES.get(parts[-1].rpartition(".")[2].lower(), "application/octet-stream")
    return Response(target.read_bytes(), media_type=kind, headers={"Cache-Control": "no-cache"})


def _missing(name: str) -> NotFound:
    return NotFound(
        f"the console has no file {name!r}",
        hint="open /console; if it is missing too, reinstall fabric (its page is package data)",
    )
