"""The sockets under fabric's model requests: httpcore's network backend, on asyncio itself.

httpx reaches the network through httpcore, whose default backend goes through anyio: each read
and write opens an anyio cancel scope for its timeout, and each request asks the socket with a
``select`` call whether the server closed it meanwhile. On a loopback model that answers at
once this costs about 0.15-0.3 ms a request, a tenth of a step. ``AsyncioBackend`` does the
same work with an ``asyncio.Protocol``: the event loop hands it the bytes as they come, a
timeout is an ``asyncio.timeout``, and whether an idle connection was closed is known without a
system call when the loop has seen it, else from one ``poll`` (ADR 0008).

Only the model clients use it (``http.ModelHttp``), and only for connections they make
themselves: a proxy's connections keep httpcore's own backend. fabric runs on asyncio
everywhere (the CLI, uvicorn, DBOS), so this is not a second event loop library but the one
already under anyio.
"""

from __future__ import annotations

import asyncio
import collections
import select
import ssl
from collections.abc import Awaitable, Iterable
from typing import Any

import httpcore
import httpx

_HIGH = 1 << 20
"""Bytes a connection holds unread before it stops reading from the socket (a server sending a
large reply faster than it is parsed)."""
_LOW = 1 << 18
"""...and reads again once the held bytes are down to this."""
_EXTRA = {
    "ssl_object": "ssl_object",
    "client_addr": "sockname",
    "server_addr": "peername",
    "socket": "socket",
}
"""httpcore's names for what a connection tells about itself, and asyncio's."""
_NO_LIMIT = 365 * 24 * 3600.0
"""A TLS handshake's limit when httpcore gives none (asyncio's own would be 60 s)."""


class _Link(asyncio.Protocol):
    """One connection's bytes as the event loop delivers them, and its state."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self.held = 0
        self.eof = False
        self.error: Exception | None = None
        self.gone = False
        self.reading_paused = False
        self.closed = False
        """Closed on this side (``AsyncioStream.aclose``)."""
        self._data: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self.held += len(data)
        if self.held > _HIGH and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        self._wake(self._data)

    def eof_received(self) -> bool | None:
        self.eof = True
        self._wake(self._data)
        return None  # the transport closes itself: a half-closed HTTP/1.1 connection is done

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.error = exc
        self._wake(self._data)
        self._wake(self._writable)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake(self._writable)
        self._writable = None

    # for the stream

    def take(self, max_bytes: int) -> bytes:
        chunk = self.chunks.popleft()
        if len(chunk) > max_bytes:
            self.chunks.appendleft(chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        self.held -= len(chunk)
        if self.reading_paused and self.held <= _LOW and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()
        return chunk

    async def data(self) -> None:
        """Until bytes come, the server ends its side, or the connection is lost."""
        if self.chunks or self.eof or self.gone:
            return
        self._data = asyncio.get_running_loop().create_future()
        try:
            await self._data
        finally:
            self._data = None

    @property
    def write_paused(self) -> bool:
        """Whether the transport said its buffer is full."""
        return self._writable is not None

    async def writable(self) -> None:
        """Until the transport takes more bytes again, or the connection is lost."""
        if self._writable is not None:
            await asyncio.shield(self._writable)

    @staticmethod
    def _wake(waiter: asyncio.Future[None] | None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class AsyncioStream(httpcore.AsyncNetworkStream):
    """A connection for httpcore: reads, writes, TLS, and whether it is still usable."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    @property
    def _transport(self) -> asyncio.Transport:
        transport = self._link.transport
        assert transport is not None  # set by connection_made, before the stream is made
        return transport

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        link = self._link
        if not link.chunks:
            try:
                async with asyncio.timeout(timeout):
                    await link.data()
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no data from the server in {timeout} s") from None
        if link.chunks:
            return link.take(max_bytes)
        if link.error is not None:
            raise httpcore.ReadError(str(link.error) or type(link.error).__name__)
        if link.closed:  # a body that runs to the end of the connection must not look whole
            raise httpcore.ReadError("the connection was closed on this side")
        return b""  # the server closed its side

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        link = self._link
        if link.closed or link.gone or self._transport.is_closing():
            raise httpcore.WriteError(str(link.error or "the connection is closed"))
        self._transport.write(buffer)
        if link.write_paused:
            try:
                async with asyncio.timeout(timeout):
                    await link.writable()
            except TimeoutError:
                raise httpcore.WriteTimeout(f"the server took no data in {timeout} s") from None
        if link.gone and link.error is not None:
            raise httpcore.WriteError(str(link.error) or type(link.error).__name__)

    async def aclose(self) -> None:
        link, transport = self._link, self._link.transport
        if transport is None or link.closed:
            return
        link.closed = True  # once: closing an SSL transport twice leaves its socket open
        if link.gone:
            return
        # Say goodbye (a FIN, or TLS close_notify, goes out at once when nothing waits to be
        # sent), then let go of the socket: closing never waits on the server, which may be
        # the reason for closing (a timeout, a cancel, a server that stopped answering).
        transport.close()
        transport.abort()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop, link = asyncio.get_running_loop(), self._link
        if link.gone or link.eof or link.closed or self._transport.is_closing():
            self._transport.abort()
            raise httpcore.ConnectError("the server closed the connection before the handshake")
        try:
            async with asyncio.timeout(timeout):
                upgraded = await loop.start_tls(
                    self._transport,
                    link,
                    ssl_context,
                    server_hostname=server_hostname,
                    # asyncio's own handshake limit (60 s) must not cut in before ours
                    ssl_handshake_timeout=_NO_LIMIT if timeout is None else timeout + 1.0,
                )
        except TimeoutError:
            self._transport.abort()
            raise httpcore.ConnectTimeout(f"the TLS handshake took over {timeout} s") from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.abort()
            raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
        except BaseException:  # cancelled, or refused by the context: the socket goes too
            self._transport.abort()
            raise
        if upgraded is None:  # the connection closed during the handshake
            raise httpcore.ConnectError("the server closed the connection during the handshake")
        assert isinstance(upgraded, asyncio.Transport)
        self._link.transport = upgraded
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # An idle connection that has bytes or an end from the server is done with: httpcore
            # asks this before each request on a kept connection.
            link = self._link
            return bool(link.chunks) or link.eof or link.gone or _waiting(link.transport)
        transport, name = self._link.transport, _EXTRA.get(info)
        if transport is None or name is None:
            return None
        return transport.get_extra_info(name)


def _waiting(transport: asyncio.Transport | None) -> bool:
    """Whether the socket under ``transport`` holds something the loop has not read yet: the
    server's close (or bytes) that came while the loop did not run, because the run went from
    one reply straight on to its next request (a tool that answers at once). Asked of the
    kernel without waiting, one ``poll``, as httpcore's own backend asks."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """Connections for httpcore made with the running event loop."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        return await _connected(
            loop.create_connection(_Link, host, port, local_addr=local, happy_eyeballs_delay=0.25),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await _connected(loop.create_unix_connection(_Link, path), timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


async def _connected(
    connecting: Awaitable[tuple[asyncio.Transport, _Link]],
    timeout: float | None,
    options: Iterable[httpcore.SOCKET_OPTION] | None,
) -> AsyncioStream:
    try:
        async with asyncio.timeout(timeout):
            transport, link = await connecting
    except TimeoutError:
        raise httpcore.ConnectTimeout(f"no connection within {timeout} s") from None
    except OSError as exc:
        raise httpcore.ConnectError(str(exc) or type(exc).__name__) from exc
    sock = transport.get_extra_info("socket")
    try:
        for option in options or ():
            sock.setsockopt(*option)
    except OSError as exc:
        transport.abort()
        raise httpcore.ConnectError(f"cannot set a socket option: {exc}") from exc
    return AsyncioStream(link)


def use_asyncio(client: httpx.AsyncClient) -> bool:
    """Make the connections ``client`` opens itself (not through a proxy) with
    ``AsyncioBackend``; whether it could. httpx has no setting for this: its transport's
    connection pool is reached by name, and a client whose insides differ keeps its own
    backend (slower, not wrong)."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    if type(pool) is not httpcore.AsyncConnectionPool or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = _BACKEND
    return True


_BACKEND = AsyncioBackend()
