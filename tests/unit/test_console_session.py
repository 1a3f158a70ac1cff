"""The console's session (``interfaces/http/console/session.py``) and the guard that takes it
(``BearerAuth`` with ``sessions``): signed cookies that expire, CSRF tokens tied to them, the
Origin check, and ``Secure`` cookies over https. In process, over httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fabric.interfaces.http.console.session import (
    ConsoleSessions,
    check_cookie_request,
    cookie_values,
    same_origin,
)
from fabric.interfaces.http.security import BearerAuth

TOKEN = "session-unit-token-0123456789"


def headers(**values: str) -> list[tuple[bytes, bytes]]:
    return [(k.replace("_", "-").lower().encode(), v.encode()) for k, v in values.items()]


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://localhost:8321", "localhost:8321", True),
        ("http://LOCALHOST:8321", "localhost:8321", True),
        ("http://localhost", "localhost:80", True),
        ("https://fabric.example", "fabric.example", True),  # behind a TLS proxy
        ("http://[::1]:8321", "[::1]:8321", True),
        ("http://localhost:8322", "localhost:8321", False),
        ("http://evil.example:8321", "localhost:8321", False),
        ("https://localhost", "localhost:80", False),
        ("null", "localhost:8321", False),
        ("file://", "localhost:8321", False),
        ("http://localhost:x", "localhost:8321", False),
    ],
)
def test_the_origin_must_name_the_host_the_request_went_to(
    origin: str, host: str, same: bool
) -> None:
    assert same_origin(headers(origin=origin, host=host)) is same


def test_a_request_without_an_origin_passes_the_origin_check() -> None:
    assert same_origin(headers(host="localhost:8321"))
    two = [(b"origin", b"http://localhost"), (b"origin", b"http://localhost"), (b"host", b"x")]
    assert not same_origin(two)


def test_a_cookie_is_good_until_it_expires_and_only_for_its_token() -> None:
    now = [1_000_000.0]
    sessions = ConsoleSessions(TOKEN, clock=lambda: now[0], lifetime=60)
    cookie, csrf = sessions.issue()
    assert sessions.csrf_for(cookie) == csrf
    assert ConsoleSessions("another-token-0123456789").csrf_for(cookie) is None
    now[0] += 59
    assert sessions.csrf_for(cookie) == csrf
    now[0] += 1
    assert sessions.csrf_for(cookie) is None
    other, other_csrf = ConsoleSessions(TOKEN, clock=lambda: 1_000_000.0).issue()
    assert other != cookie and other_csrf != csrf  # a nonce of its own


def test_cookie_values_are_read_from_every_cookie_header() -> None:
    sent = [(b"cookie", b"a=1; fabric_console=one"), (b"Cookie", b'fabric_console="two"; b=2')]
    assert cookie_values(sent, "fabric_console") == ["one", "two"]
    assert cookie_values([(b"cookie", b"fabric_consolex=no")], "fabric_console") == []


def test_a_valid_cookie_among_stale_ones_is_found() -> None:
    sessions = ConsoleSessions(TOKEN)
    cookie, csrf = sessions.issue()
    sent = [(b"cookie", f"fabric_console=stale; fabric_console={cookie}".encode())]
    assert sessions.csrf_of_request(sent) == csrf


@pytest.mark.parametrize(
    ("method", "extra", "verdict"),
    [
        ("GET", {}, None),
        ("HEAD", {}, None),
        ("POST", {}, "csrf"),
        ("DELETE", {}, "csrf"),
        ("POST", {"x_fabric_csrf": "CSRF"}, None),
        ("POST", {"x_fabric_csrf": "CSRF", "origin": "http://localhost:8321"}, None),
        ("POST", {"x_fabric_csrf": "CSRF", "origin": "http://evil.example"}, "csrf"),
        ("PUT", {"x_fabric_csrf": "wrong"}, "csrf"),
    ],
)
def test_only_safe_methods_pass_on_the_cookie_alone(
    method: str, extra: dict[str, str], verdict: str | None
) -> None:
    sessions = ConsoleSessions(TOKEN)
    cookie, csrf = sessions.issue()
    sent = {k: v.replace("CSRF", csrf) for k, v in extra.items()}
    scope = {
        "method": method,
        "headers": headers(host="localhost:8321", cookie=f"fabric_console={cookie}", **sent),
    }
    assert check_cookie_request(sessions, scope) == verdict
    assert check_cookie_request(sessions, {"method": "GET", "headers": []}) == "no_session"


def _app() -> Any:
    app = FastAPI()

    @app.get("/runs")
    async def runs() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/runs/x/replay")
    async def replay() -> dict[str, bool]:
        return {"replayed": True}

    return BearerAuth(app, token=TOKEN, sessions=ConsoleSessions(TOKEN))


def _ask(method: str, path: str, **kwargs: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=_app())
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            return await http.request(method, path, **kwargs)

    return asyncio.run(go())


def test_the_guard_takes_the_bearer_token_or_the_cookie_and_its_csrf_token() -> None:
    cookie, csrf = ConsoleSessions(TOKEN).issue()
    jar = {"Cookie": f"fabric_console={cookie}"}
    assert _ask("GET", "/runs", headers=jar).json() == {"ok": True}
    refused = _ask("POST", "/runs/x/replay", headers=jar)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "csrf_failed"
    assert _ask("POST", "/runs/x/replay", headers={**jar, "X-Fabric-CSRF": csrf}).status_code == 200
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert _ask("POST", "/runs/x/replay", headers=bearer).status_code == 200
    # a wrong bearer token is not rescued by a good cookie
    wrong = {**jar, "X-Fabric-CSRF": csrf, "Authorization": "Bearer not-the-token-0123"}
    assert _ask("POST", "/runs/x/replay", headers=wrong).status_code == 401
    anonymous = _ask("GET", "/runs")
    assert anonymous.status_code == 401
    assert "log in at /console" in anonymous.json()["error"]["message"]


def test_a_login_over_https_sets_a_secure_cookie() -> None:
    from fabric.interfaces.http.console.routes import console_router

    sessions = ConsoleSessions(TOKEN)
    app = FastAPI()
    app.include_router(console_router(sessions, TOKEN))

    async def go(base: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base) as http:
            return await http.post("/console/login", json={"token": TOKEN})

    assert "; Secure" in asyncio.run(go("https://fabric.example")).headers["set-cookie"]
    assert "Secure" not in asyncio.run(go("http://localhost")).headers["set-cookie"]
