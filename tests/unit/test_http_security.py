"""The HTTP service's guards (``interfaces.http.security``): the bearer token, the Host check,
the body limit, the token file and bind rules, as a client or an operator meets them. The
middlewares are stacked the way the service stacks them: Host check outermost, then the body
limit, then the token."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.responses import StreamingResponse

from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets
from fabric.interfaces.http.redaction import RedactSecrets
from fabric.interfaces.http.security import BearerAuth, BodyLimit, HostCheck
from fabric.interfaces.tokens import (
    ENV_SOURCE,
    check_bind,
    is_loopback_host,
    load_or_create_token,
)

TOKEN = "s3cret-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
AUTH_PAIRS = [("authorization", f"Bearer {TOKEN}")]
HOSTS = ["localhost", "127.0.0.1", "::1"]
LIMIT = 64
Asgi = Any


class Item(BaseModel):
    text: str


def build_app(bodies: list[bytes]) -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/tasks")
    async def tasks() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, Any]:
        body = await request.body()
        bodies.append(body)
        return {"size": len(body), "content_length": request.headers.get("content-length")}

    @app.post("/items")
    async def items(item: Item) -> dict[str, int]:
        bodies.append(item.text.encode())
        return {"size": len(item.text)}

    return app


def guard(app: Asgi, *, max_bytes: int = LIMIT) -> Asgi:
    return HostCheck(BodyLimit(BearerAuth(app, token=TOKEN), max_bytes=max_bytes), allowed=HOSTS)


@pytest.fixture
def bodies() -> list[bytes]:
    return []


class Client:
    """A sync face on httpx's ASGI transport (real request chunks; no sockets)."""

    def __init__(self, app: Asgi) -> None:
        self.app = app

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost:8321"
            ) as http:
                return await http.request(method, path, **kwargs)

        return asyncio.run(go())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)


@pytest.fixture
def client(bodies: list[bytes]) -> Client:
    return Client(guard(build_app(bodies)))


async def chunked(*chunks: bytes) -> AsyncIterator[bytes]:
    """A request body sent in these chunks, without a Content-Length."""
    for chunk in chunks:
        yield chunk


def error_of(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return body["error"]  # type: ignore[no-any-return]


def run_asgi(
    app: Asgi,
    *,
    headers: list[tuple[str, str]],
    chunks: list[bytes] | None = None,
    kind: str = "http",
    path: str = "/echo",
) -> list[dict[str, Any]]:
    """Drive an ASGI app directly, the body in ``chunks`` (no Content-Length unless given)."""
    sent: list[dict[str, Any]] = []
    pending = list(chunks or [b""])

    async def receive() -> dict[str, Any]:
        if pending:
            body = pending.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pending)}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": kind,
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http" if kind == "http" else "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8321),
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))  # the bound only guards a hang
    return sent


def status_and_error(sent: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return starts[0]["status"], json.loads(body)["error"]


# --- the bearer token --------------------------------------------------------------------------


def test_a_request_without_the_token_is_refused_and_told_how_to_send_it(
    client: Client,
) -> None:
    response = client.get("/tasks")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    error = error_of(response)
    assert error["code"] == "unauthorized"
    assert "Authorization: Bearer <token>" in error["message"]


@pytest.mark.parametrize(
    "value",
    [
        "Bearer wrong-token-but-long-enough",
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN}x",
        f"Basic {TOKEN}",
        TOKEN,
        "Bearer",
    ],
)
def test_a_wrong_token_is_refused_without_echoing_any_token(client: Client, value: str) -> None:
    response = client.get("/tasks", headers={"Authorization": value})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert error_of(response)["code"] == "unauthorized"
    assert "not valid" in error_of(response)["message"]
    assert TOKEN not in response.text and TOKEN[:-1] not in response.text


def test_the_right_token_passes_whatever_the_scheme_case(client: Client) -> None:
    assert client.get("/tasks", headers=AUTH).json() == {"ok": True}
    assert client.get("/tasks", headers={"authorization": f"bearer {TOKEN}"}).status_code == 200


def test_the_token_is_not_accepted_in_the_query_string(client: Client) -> None:
    for name in ("token", "access_token"):
        assert client.get("/tasks", params={name: TOKEN}).status_code == 401


def test_two_authorization_headers_are_refused(client: Client) -> None:
    headers = [
        ("Authorization", f"Bearer {TOKEN}"),
        ("Authorization", "Bearer other-token-1234567"),
    ]
    assert client.get("/tasks", headers=headers).status_code == 401


def test_health_is_open_without_a_token(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/healthz/x").status_code == 401  # only the exact path is open


def test_a_websocket_without_the_token_is_closed_before_it_opens(bodies: list[bytes]) -> None:
    sent = run_asgi(guard(build_app(bodies)), headers=[("host", "localhost")], kind="websocket")
    assert sent == [{"type": "websocket.close", "code": 1008}]


def test_a_short_server_token_is_refused_when_the_app_is_built() -> None:
    with pytest.raises(ConfigError, match="at least 16"):
        BearerAuth(FastAPI(), token="short")


# --- the Host header ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8321", "LOCALHOST:1", "127.0.0.1:80", "[::1]:8080", "[::1]"]
)
def test_allowed_hosts_pass_with_or_without_a_port(client: Client, host: str) -> None:
    assert client.get("/tasks", headers={**AUTH, "Host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "[::2]:8080", "[::1", "", "a:b"],
)
def test_other_hosts_are_refused_even_with_the_token(client: Client, host: str) -> None:
    response = client.get("/tasks", headers={**AUTH, "Host": host})
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "host_not_allowed"
    assert "allowed hosts" in error["message"]
    assert error["details"] == {"allowed": ["127.0.0.1", "::1", "localhost"]}


def test_the_host_is_checked_before_the_token(client: Client) -> None:
    response = client.get("/tasks", headers={"Host": "rebound.attacker.example"})
    assert response.status_code == 400 and error_of(response)["code"] == "host_not_allowed"


def test_a_request_without_a_host_header_is_refused(bodies: list[bytes]) -> None:
    status, error = status_and_error(run_asgi(guard(build_app(bodies)), headers=AUTH_PAIRS))
    assert (status, error["code"]) == (400, "host_not_allowed")
    assert "without one Host header" in error["message"]


def test_an_empty_allowed_list_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="empty"):
        HostCheck(FastAPI(), allowed=[])


# --- the body limit ----------------------------------------------------------------------------


def test_a_body_within_the_limit_reaches_the_app(client: Client, bodies: list[bytes]) -> None:
    response = client.post("/echo", headers=AUTH, content=b"x" * LIMIT)
    assert response.json() == {"size": LIMIT, "content_length": str(LIMIT)}
    assert bodies == [b"x" * LIMIT]


def test_a_declared_length_over_the_limit_is_refused_before_reading(
    client: Client, bodies: list[bytes]
) -> None:
    response = client.post("/echo", headers=AUTH, content=b"x" * (LIMIT + 1))
    assert response.status_code == 413
    error = error_of(response)
    assert error["code"] == "body_too_large"
    assert error["details"] == {"max_bytes": LIMIT}
    assert bodies == []


def test_a_chunked_upload_over_the_limit_is_refused(client: Client, bodies: list[bytes]) -> None:
    response = client.post("/echo", headers=AUTH, content=chunked(b"x" * 40, b"y" * 40))
    assert response.status_code == 413 and error_of(response)["code"] == "body_too_large"
    assert bodies == []


def test_a_chunked_upload_within_the_limit_passes(client: Client) -> None:
    response = client.post("/echo", headers=AUTH, content=chunked(b"x" * 30, b"y" * 30))
    assert response.json() == {"size": 60, "content_length": None}


def test_a_validated_json_body_over_the_limit_is_413_not_a_validation_error(
    client: Client, bodies: list[bytes]
) -> None:
    big = json.dumps({"text": "z" * 100}).encode()
    chunks = chunked(big[:40], big[40:])
    response = client.post(
        "/items", headers={**AUTH, "content-type": "application/json"}, content=chunks
    )
    assert response.status_code == 413 and error_of(response)["code"] == "body_too_large"
    assert bodies == []


def test_the_app_never_receives_more_than_the_limit() -> None:
    seen: list[int] = []

    async def reader(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            seen.append(len(message.get("body", b"")))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read it all"})

    sent = run_asgi(BodyLimit(reader, max_bytes=LIMIT), headers=[], chunks=[b"a" * 30] * 5)
    status, error = status_and_error(sent)
    assert (status, error["code"]) == (413, "body_too_large")
    assert sum(seen) <= LIMIT and seen == [30, 30]


def test_a_body_read_in_a_task_group_still_gets_a_413() -> None:
    seen: list[int] = []

    async def read_all(receive: Any) -> None:
        while (message := await receive()).get("more_body"):
            seen.append(len(message["body"]))

    async def reader(scope: Any, receive: Any, send: Any) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(read_all, receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"read it all"})

    sent = run_asgi(BodyLimit(reader, max_bytes=LIMIT), headers=[], chunks=[b"a" * 30] * 5)
    assert status_and_error(sent)[0] == 413
    assert seen == [30, 30]


def test_a_malformed_content_length_still_gets_the_body_counted() -> None:
    async def reader(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass

    headers = [("content-length", "12abc")]
    sent = run_asgi(BodyLimit(reader, max_bytes=LIMIT), headers=headers, chunks=[b"a" * 40] * 2)
    assert status_and_error(sent)[0] == 413


# --- streaming responses -----------------------------------------------------------------------


def test_server_sent_events_pass_through_the_whole_stack_unbuffered() -> None:
    """The app sends its second event only after the client has the first, so a middleware
    that held the response back would hang here instead of passing."""
    client_has_first = asyncio.Event()
    app = FastAPI()

    @app.get("/events")
    async def events() -> StreamingResponse:
        async def stream() -> Any:
            yield b"event: step\nid: 1\ndata: {}\n\n"
            await client_has_first.wait()
            yield b"event: run_finished\nid: 2\ndata: {}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/events", "raw_path": b"/events", "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8321),
        "headers": [(b"host", b"localhost:8321"), (b"authorization", f"Bearer {TOKEN}".encode())],
    }  # fmt: skip

    requested: list[bool] = []

    async def receive() -> dict[str, Any]:
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and b"id: 1" in message.get("body", b""):
            client_has_first.set()

    asyncio.run(asyncio.wait_for(guard(app)(scope, receive, send), 10))  # guards a hang only
    assert sent[0]["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in sent[0]["headers"]
    chunks = [m["body"] for m in sent[1:] if m.get("body")]
    assert chunks == [
        b"event: step\nid: 1\ndata: {}\n\n",
        b"event: run_finished\nid: 2\ndata: {}\n\n",
    ]


def test_an_event_streams_head_leaves_before_its_first_event_through_redaction() -> None:
    """A stream may say nothing for a while (``/runs/stream`` speaks when a run changes): its
    head must not wait for its first event, or a page's EventSource never opens meanwhile.
    The app sends nothing until the client has the head, so holding it back hangs here."""
    client_has_head = asyncio.Event()
    app = FastAPI()

    @app.get("/events")
    async def events() -> StreamingResponse:
        async def stream() -> Any:
            await client_has_head.wait()
            yield f"event: run\ndata: {TOKEN}\n\n".encode()  # (an endpoint redacts its own)

        return StreamingResponse(stream(), media_type="text/event-stream")

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.start":
            client_has_head.set()

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/events", "raw_path": b"/events", "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8321),
        "headers": [(b"host", b"localhost:8321")],
    }  # fmt: skip
    redacting = RedactSecrets(app, secrets=Secrets([TOKEN]))

    async def until_the_first_event() -> None:
        task = asyncio.ensure_future(redacting(scope, receive, send))
        while not any(m.get("body") for m in sent):
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(asyncio.wait_for(until_the_first_event(), 10))  # guards a hang only
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert sent[1]["body"] == f"event: run\ndata: {TOKEN}\n\n".encode()


# --- the token file and the bind address -------------------------------------------------------


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_generated_token_is_stored_owner_only_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "config" / "fabric" / "api-token"
    token, source = load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    assert len(token) >= 32
    assert source == f"generated, stored in {path} (owner-only)"
    assert path.read_text().strip() == token
    assert mode_of(path) == 0o600 and mode_of(path.parent) == 0o700
    again, again_source = load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    assert (again, again_source) == (token, f"file {path}")


def test_the_environment_token_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "api-token"
    load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    before = path.read_text()
    env = {"FABRIC_API_TOKEN": TOKEN}
    token, source = load_or_create_token(env=env, env_name="FABRIC_API_TOKEN", path=path)
    assert (token, source) == (TOKEN, f"{ENV_SOURCE} FABRIC_API_TOKEN")
    assert path.read_text() == before


def test_an_empty_environment_variable_counts_as_unset(tmp_path: Path) -> None:
    path = tmp_path / "api-token"
    _, source = load_or_create_token(
        env={"FABRIC_API_TOKEN": " "}, env_name="FABRIC_API_TOKEN", path=path
    )
    assert source.startswith("generated") and path.exists()


def test_a_short_environment_token_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_or_create_token(
            env={"MY_TOKEN": "hunter2hunter"}, env_name="MY_TOKEN", path=tmp_path / "t"
        )
    assert "$MY_TOKEN is 13 characters long" in str(caught.value)
    assert "at least 16" in str(caught.value) and "hunter2" not in str(caught.value)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_token_file_other_users_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "api-token"
    path.write_text(TOKEN)
    path.chmod(mode)
    with pytest.raises(ConfigError, match="other users") as caught:
        load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    assert f"chmod 600 {path}" in caught.value.hint
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(("content", "match"), [("", "is empty"), ("tiny\n", "at least 16")])
def test_an_empty_or_short_token_file_is_refused(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "api-token"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(ConfigError, match=match):
        load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)


def test_a_symlinked_token_file_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text(TOKEN)
    target.chmod(0o600)
    (tmp_path / "api-token").symlink_to(target)
    with pytest.raises(ConfigError, match="Could not read"):
        load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=tmp_path / "api-token")


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost", "LOCALHOST", "::ffff:127.0.0.1"]
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)
    check_bind(host, "generated, stored in /tmp/x (owner-only)")


@pytest.mark.parametrize(
    "host", ["10.0.0.1", "0.0.0.0", "::", "example.com", "localhost.evil.com", ""]
)
def test_non_loopback_hosts(host: str) -> None:
    assert not is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]"])
def test_listening_everywhere_needs_an_environment_token(tmp_path: Path, host: str) -> None:
    _, file_source = load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=tmp_path / "t")
    with pytest.raises(ConfigError, match="every network interface") as caught:
        check_bind(host, file_source)
    assert "FABRIC_API_TOKEN" in caught.value.hint and "127.0.0.1" in caught.value.hint
    _, env_source = load_or_create_token(
        env={"FABRIC_API_TOKEN": TOKEN}, env_name="FABRIC_API_TOKEN", path=tmp_path / "t"
    )
    check_bind(host, env_source)


def test_a_lan_address_needs_an_environment_token(tmp_path: Path) -> None:
    path = tmp_path / "t"
    load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    _, file_source = load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=path)
    with pytest.raises(ConfigError, match=r"192\.168\.1\.20"):
        check_bind("192.168.1.20", file_source)
    with pytest.raises(ConfigError, match="MY_TOKEN"):
        check_bind("server.lan", file_source, env_name="MY_TOKEN")
    check_bind("192.168.1.20", f"{ENV_SOURCE} FABRIC_API_TOKEN")


def test_the_token_file_is_created_with_owner_only_permissions_despite_a_loose_umask(
    tmp_path: Path,
) -> None:
    old = os.umask(0)
    try:
        load_or_create_token(env={}, env_name="FABRIC_API_TOKEN", path=tmp_path / "d" / "t")
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "d" / "t") == 0o600 and mode_of(tmp_path / "d") == 0o700
