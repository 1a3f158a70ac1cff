"""The sockets under fabric's model requests (``network.AsyncioBackend``, ADR 0008): what a
user of a model server would notice, against real servers on loopback. A reply arrives whole,
however large or slow; a server that stops answering or reading trips the timeout it should;
a connection the server closed is not used again; TLS is verified; a request cancelled halfway
leaves no connection behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpcore
import httpx
import pytest
import trustme

from fabric.domain.errors import ModelConnectionError, ModelTimeoutError
from fabric.domain.models import ChatRequest
from fabric.infrastructure.llm.http import ModelHttp
from fabric.infrastructure.llm.network import AsyncioBackend, use_asyncio
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.testing import completion

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Server:
    """An asyncio TCP server on 127.0.0.1 in the test's own loop; counts connections and
    notices when each one ends."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.opened = 0
        self.ended = 0
        self.port = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.ended += 1
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def ended_one(self) -> bool:
        """Whether a connection has ended, waiting up to 5 s for one to."""
        for _ in range(500):
            if self.ended:
                return True
            await asyncio.sleep(0.01)
        return False

    @contextlib.asynccontextmanager
    async def running(self, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        try:
            yield f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        finally:
            server.close()
            await server.wait_closed()


async def _request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request with a Content-Length body (or none); its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return await reader.readexactly(length)


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Takes the request and answers nothing, until the client hangs up."""
    await _request(reader)
    await reader.read()


def _reply(body: bytes, *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def _client(base_url: str, **timeouts: float) -> httpx.AsyncClient:
    http = ModelHttp(base_url, timeout=httpx.Timeout(timeouts.get("all", 10.0), **timeouts))
    return http.client


def _uses_ours(client: httpx.AsyncClient) -> bool:
    pool = client._transport._pool  # type: ignore[attr-defined]
    return isinstance(pool._network_backend, AsyncioBackend)


def test_a_model_client_makes_its_connections_with_the_asyncio_backend() -> None:
    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                body = await _request(reader)
                writer.write(_reply(body))
                await writer.drain()

        server = Server(echo)
        async with server.running() as url:
            client = _client(url)
            assert _uses_ours(client)
            replies = [await client.post(url, content=b'{"n": %d}' % i) for i in range(5)]
            await client.aclose()
        assert [r.json() for r in replies] == [{"n": i} for i in range(5)]
        assert server.opened == 1  # kept and used again

    asyncio.run(main())


def test_a_client_whose_insides_are_not_httpx_s_own_is_left_as_it_is() -> None:
    async def main() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(204)))
        assert use_asyncio(client) is False
        assert (await client.get("http://127.0.0.1:9/")).status_code == 204
        await client.aclose()

    asyncio.run(main())


def test_large_request_and_reply_bodies_arrive_whole_through_a_slow_reader() -> None:
    """8 MB each way: the client waits while the server's socket is full, and stops reading
    from its own while the reply waits to be parsed."""
    size = 8 * 1024 * 1024

    async def slow_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        got = bytearray()
        while len(got) < length:
            got += await reader.read(65536)
            await asyncio.sleep(0)  # read slowly: the client's writes back up
        writer.write(_reply(bytes(got)))
        await writer.drain()

    async def main() -> None:
        server = Server(slow_echo)
        body = bytes(range(256)) * (size // 256)
        async with server.running() as url:
            client = _client(url)
            reply = await client.post(url, content=body)
            await client.aclose()
        assert reply.status_code == 200
        assert reply.content == body

    asyncio.run(main())


def test_a_server_that_stops_answering_trips_the_read_timeout() -> None:
    async def main() -> None:
        server = Server(_silent)
        async with server.running() as url:
            client = _client(url, read=0.3)
            with pytest.raises(httpx.ReadTimeout):
                await client.post(url, content=b"{}")
            assert await server.ended_one()  # the connection did not outlive the timeout
            await client.aclose()

    asyncio.run(main())


def test_a_server_that_stops_reading_trips_the_write_timeout() -> None:
    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    async def main() -> None:
        server = Server(deaf)
        async with server.running() as url:
            client = _client(url, write=0.3)
            with pytest.raises(httpx.WriteTimeout):
                await client.post(url, content=b"x" * (64 * 1024 * 1024))
            await client.aclose()

    asyncio.run(main())


def test_nobody_listening_is_a_connect_error() -> None:
    async def main() -> None:
        server = Server(_never)
        async with server.running() as url:
            pass  # closed again: the port is free, nobody listens
        client = _client(url)
        with pytest.raises(httpx.ConnectError):
            await client.post(url, content=b"{}")
        await client.aclose()

    asyncio.run(main())


async def _never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    raise AssertionError("nobody should connect")


def test_a_connection_the_server_closed_while_idle_is_not_used_again() -> None:
    """The server answers, then hangs up without saying so: the next request opens a new
    connection instead of failing on the dead one."""

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_reply(b'{"ok": true}'))
        await writer.drain()

    async def main() -> None:
        server = Server(once)
        async with server.running() as url:
            client = _client(url)
            first = await client.post(url, content=b"{}")
            while server.ended < 1:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the FIN reaches the client's loop
            second = await client.post(url, content=b"{}")
            await client.aclose()
        assert first.json() == second.json() == {"ok": True}
        assert server.opened == 2

    asyncio.run(main())


def test_a_close_the_loop_has_not_seen_yet_does_not_fail_the_next_request() -> None:
    """The server hangs up just after a reply (as llama.cpp's server does after some requests
    on one connection), while the client goes straight on to its next request without the
    event loop running in between (a tool that answers at once): the close is in the socket,
    not yet seen by the loop. The request goes on a new connection; it does not fail with
    "Server disconnected"."""
    listener = socket.create_server(("127.0.0.1", 0))
    opened: list[int] = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            opened.append(1)
            with conn:
                conn.recv(65536)
                conn.sendall(_reply(b'{"ok": true}'))
                threading.Event().wait(0.05)  # then hangs up, without having said so

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"

    async def main() -> None:
        client = _client(url)
        first = await client.post(url, content=b"{}")
        threading.Event().wait(0.3)  # the loop does not run: the FIN waits in the socket
        second = await client.post(url, content=b"{}")
        await client.aclose()
        assert first.json() == second.json() == {"ok": True}

    try:
        asyncio.run(main())
    finally:
        thread.join(5)
        listener.close()
    assert len(opened) == 2


def test_a_reply_cut_short_is_a_connection_error_the_run_can_report() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{"choices":')
        await writer.drain()
        writer.transport.abort()

    async def main() -> None:
        server = Server(cut)
        async with server.running() as url:
            chat = OpenAIChatClient(base_url=url + "/v1", model="m")
            with pytest.raises(ModelConnectionError) as caught:
                await chat.chat(ChatRequest([{"role": "user", "content": "hi"}], []))
            await chat.aclose()
        assert "127.0.0.1" in str(caught.value)

    asyncio.run(main())


def test_a_cancelled_request_leaves_no_connection_open() -> None:
    async def main() -> None:
        server = Server(_silent)
        async with server.running() as url:
            client = _client(url)
            task = asyncio.create_task(client.post(url, content=b"{}"))
            while server.opened < 1:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await server.ended_one()
            await client.aclose()

    asyncio.run(main())


def test_the_whole_request_deadline_still_applies() -> None:
    """A server that sends a byte at a time never trips a read timeout; the request deadline
    (``llm.timeouts.request``) ends it."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(100000):
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.05)

    async def main() -> None:
        server = Server(trickle)
        async with server.running() as url:
            chat = OpenAIChatClient(base_url=url + "/v1", model="m", request_timeout=0.5)
            with pytest.raises(ModelTimeoutError):
                await chat.chat(ChatRequest([{"role": "user", "content": "hi"}], []))
            await chat.aclose()

    asyncio.run(main())


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def _tls_server(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return context


def test_https_works_and_verifies_the_server(ca: trustme.CA) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_reply(json.dumps(completion("over TLS")).encode()))
        await writer.drain()

    async def main() -> None:
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        server = Server(answer)
        async with server.running(tls=_tls_server(ca)) as url:
            client = httpx.AsyncClient(verify=trusted)
            assert use_asyncio(client)
            reply = await client.post(url + "/v1/chat/completions", content=b"{}")
            await client.aclose()

            stranger = httpx.AsyncClient(verify=ssl.create_default_context())
            use_asyncio(stranger)
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await stranger.post(url + "/v1/chat/completions", content=b"{}")
            await stranger.aclose()
        assert reply.json()["choices"][0]["message"]["content"] == "over TLS"

    asyncio.run(main())


def test_a_unix_socket_server_is_reached_too(tmp_path: Path) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(_reply(b'{"via": "unix"}'))
        await writer.drain()
        writer.close()

    async def main() -> None:
        path = str(tmp_path / "model.sock")
        server = await asyncio.start_unix_server(answer, path)
        client = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=path))
        assert use_asyncio(client)
        reply = await client.post("http://model/v1", content=b"{}")
        await client.aclose()
        server.close()
        await server.wait_closed()
        assert reply.json() == {"via": "unix"}

    asyncio.run(main())


def test_the_backend_reports_errors_as_httpcore_does() -> None:
    """httpx turns httpcore's errors into its own; the backend raises those, never a bare
    OSError or TimeoutError."""

    async def main() -> None:
        backend = AsyncioBackend()
        server = Server(_never)
        async with server.running():
            port = server.port
        with pytest.raises(httpcore.ConnectError):
            await backend.connect_tcp("127.0.0.1", port, timeout=5)

    asyncio.run(main())


def test_a_reply_cut_by_closing_the_client_fails_instead_of_looking_whole() -> None:
    """A body that runs to the end of the connection (no length) is being read when the
    client is closed: the reader gets an error, not the part that came as if it were all."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart-1;")
        for part in range(2, 200):
            await asyncio.sleep(0.05)
            writer.write(b"part-%d;" % part)

    async def main() -> None:
        server = Server(trickle)
        async with server.running() as url:
            client = _client(url)
            got: list[bytes] = []

            async def read() -> None:
                async with client.stream("GET", url) as reply:
                    async for chunk in reply.aiter_raw():
                        got.append(chunk)

            reading = asyncio.create_task(read())
            while not got:
                await asyncio.sleep(0.01)
            await client.aclose()
            with pytest.raises(httpx.ReadError):
                await reading

    asyncio.run(main())


def test_a_connection_closed_twice_at_once_over_tls_lets_go_of_its_socket(
    ca: trustme.CA,
) -> None:
    """A request to an https server that never answers (nor answers a TLS goodbye) is
    cancelled, and the client is closed while that connection is still closing: the socket
    is gone, the server sees the end, instead of it lingering until asyncio's TLS shutdown
    timeout (30 s)."""
    listener = socket.create_server(("127.0.0.1", 0))
    context = _tls_server(ca)
    shaken, ended = threading.Event(), threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            shaken.set()
            # Read the bytes as they come, unencrypted (the request, a TLS goodbye, which
            # is never answered) until the client's socket is closed.
            with socket.socket(fileno=os.dup(tls.fileno())) as raw, contextlib.suppress(OSError):
                while raw.recv(65536):
                    pass
        ended.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def main() -> None:
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        client = httpx.AsyncClient(verify=trusted, timeout=30)
        assert use_asyncio(client)
        url = f"https://127.0.0.1:{listener.getsockname()[1]}/v1/models"
        asking = asyncio.create_task(client.get(url))
        assert await asyncio.to_thread(shaken.wait, 10)
        await asyncio.sleep(0.1)  # the request is out; the server keeps quiet
        asking.cancel()
        await asyncio.sleep(0.1)  # its connection is closing
        await client.aclose()
        with pytest.raises(asyncio.CancelledError):
            await asking
        assert await asyncio.to_thread(ended.wait, 10)

    try:
        asyncio.run(main())
    finally:
        listener.close()
        thread.join(10)
