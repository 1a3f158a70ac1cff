"""The HTTP client every model adapter uses, and the JSON body encoding they share.

- TLS is verified against the CA bundle, loaded once per process (~15-30 ms) and only when an
  https endpoint is used: most local servers are plain http on loopback.
- Proxy settings from the environment (HTTPS_PROXY, NO_PROXY, ...) apply to remote servers,
  never to loopback ones, where a corporate proxy would only get in the way.
- Redirects are not followed: a model endpoint that redirects is misconfigured.
- A runner's chat clients and model listings take their HTTP client from a pool
  (``ClientPool``): a run reuses the connection a run or a listing before it opened.
- One whole request has a deadline (``within_deadline``, ``llm.timeouts.request``) besides
  httpx's timeouts, which bound each read only: a server that sends a byte a second never
  trips them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import ssl
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any, TypeVar

import httpx
import orjson
from msgspec import Struct, field

from fabric.application.ports import ModelCatalog
from fabric.domain.errors import ModelTimeoutError
from fabric.domain.models import ModelInfo

from .network import use_asyncio

_LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}
DEFAULT_REQUEST_TIMEOUT = 900.0
"""Seconds one model request may take in all: the default of ``llm.timeouts.request``."""
T = TypeVar("T")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@functools.cache
def _no_tls_context() -> ssl.SSLContext:
    """What a plain-http client holds, since httpx makes every client a TLS context: one that
    trusts no certificate, so should a request ever reach an https URL its handshake fails
    (safer than ``verify=False``). Made once: a new context costs ~0.5 ms a run."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def is_loopback(url: str) -> bool:
    host = httpx.URL(url).host
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ModelHttp:
    """The HTTP client of one chat client or one model listing: taken from ``pool`` (unless a
    ``transport`` of the caller's is given) and given back by ``aclose``, or its own and
    closed by ``aclose``; either once, however often ``aclose`` is called. A listing and the
    chats after it then share one connection (one TLS handshake with a cloud API)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: httpx.Timeout | float,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        pool: ClientPool | None = None,
    ) -> None:
        self._pool = pool if transport is None else None
        if self._pool is not None:
            self.client = self._pool.take(base_url, timeout=timeout, headers=headers or {})
        else:
            self.client = _new_client(base_url, timeout, headers, transport)
        self._done = False

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        if self._pool is not None:
            await self._pool.give_back(self.client)
        else:
            await self.client.aclose()


def _new_client(
    base_url: str,
    timeout: httpx.Timeout | float,
    headers: Mapping[str, str] | None,
    transport: httpx.AsyncBaseTransport | None,
) -> httpx.AsyncClient:
    https = base_url.lower().startswith("https:")
    client = httpx.AsyncClient(
        base_url=base_url,
        headers=dict(headers or {}),
        timeout=timeout,
        transport=transport,
        trust_env=not is_loopback(base_url),
        # Plain http has no TLS to verify; building a verifying context anyway loads the whole
        # CA bundle (~30 ms) for nothing. https always gets the verifying context.
        verify=_tls_context() if https else _no_tls_context(),
        follow_redirects=False,
    )
    if transport is None:
        use_asyncio(client)
    return client


_Key = tuple[str, tuple[tuple[str, str], ...], str]
IDLE_CLIENTS = 32
"""Clients kept idle per event loop, for the runs to come; past that the one idle longest is
closed (a server that went away, or the embedded one started anew on another port, then
leaves nothing behind in a long-running service)."""


class _Held(Struct):
    """One event loop's clients: the idle ones, the last given back last, and those lent to
    runs now."""

    idle: list[tuple[_Key, httpx.AsyncClient]] = field(default_factory=list)
    lent: dict[httpx.AsyncClient, _Key] = field(default_factory=dict)


class ClientPool:
    """The HTTP clients of one ``Backends``, kept from one run to the next: a run takes one
    for its model server (URL, headers, timeouts) and gives it back when it ends; the next
    run on that server takes it again, with its connection open. It saves connecting again
    (and a TLS handshake with a cloud API), 1.5-3 ms a run on loopback. Runs at the same time
    each have a client of their own: one shared by many made each request look through all
    their connections (50 runs at once took twice as long).

    A client belongs to the event loop it was made in, as its connections do. ``aclose``
    closes those of the loop it is called in; the others close as their loop shuts down
    (``asyncio.run`` and every other runner of a loop close its async generators as it ends,
    and one of them, ``_keep``, holds that loop's clients)."""

    def __init__(self) -> None:
        self._kept: dict[asyncio.AbstractEventLoop, tuple[_Held, AsyncGenerator[None, None]]]
        self._kept = {}

    def take(
        self, base_url: str, *, timeout: httpx.Timeout | float, headers: Mapping[str, str]
    ) -> httpx.AsyncClient:
        """A client for ``base_url`` with ``headers`` in the running event loop: the one given
        back last, else a new one. Give it back with ``give_back``."""
        loop = asyncio.get_running_loop()
        kept = self._kept.get(loop)
        if kept is None:
            held = _Held()
            keeper = self._keep(loop, held)
            self._kept[loop] = kept = (held, keeper)
            _first_step(keeper)
        held = kept[0]
        key = (base_url.rstrip("/"), tuple(sorted(headers.items())), repr(timeout))
        http = _idle_one(held.idle, key)
        if http is None:
            http = _new_client(base_url, timeout, headers, None)
        held.lent[http] = key
        return http

    async def give_back(self, http: httpx.AsyncClient) -> None:
        """Keep ``http`` for the next run on its server (closing the client idle longest if
        there are too many), or close it if it is not this loop's."""
        kept = self._kept.get(asyncio.get_running_loop())
        key = kept[0].lent.pop(http, None) if kept is not None else None
        if kept is None or key is None or http.is_closed:
            await http.aclose()
            return
        idle = kept[0].idle
        idle.append((key, http))
        while len(idle) > IDLE_CLIENTS:
            await idle.pop(0)[1].aclose()

    async def aclose(self) -> None:
        """Close the clients of the running event loop."""
        kept = self._kept.get(asyncio.get_running_loop())
        if kept is not None:
            await kept[1].aclose()

    async def _keep(
        self, loop: asyncio.AbstractEventLoop, held: _Held
    ) -> AsyncGenerator[None, None]:
        """Holds ``loop``'s clients until it is closed: by ``aclose``, or by the loop as it
        shuts down."""
        try:
            yield
        finally:
            del self._kept[loop]
            for http in [*held.lent, *(client for _key, client in held.idle)]:
                with contextlib.suppress(Exception):  # a connection already broken
                    await http.aclose()


def _idle_one(idle: list[tuple[_Key, httpx.AsyncClient]], key: _Key) -> httpx.AsyncClient | None:
    """The client for ``key`` given back last and still open, taken out of ``idle``."""
    for at in range(len(idle) - 1, -1, -1):
        if idle[at][0] == key:
            http = idle.pop(at)[1]
            if not http.is_closed:
                return http
    return None


def _first_step(keeper: AsyncGenerator[None, None]) -> None:
    """Take ``keeper`` to its first ``yield`` now, which also registers it with the running
    loop (its async generator hooks), so that the loop closes it as it shuts down. Its first
    step awaits nothing: the awaitable, driven by hand, finishes at once."""
    step = keeper.asend(None)
    try:
        step.send(None)
    except StopIteration:
        return
    raise AssertionError("a keeper awaited before its first yield")


def encode_json(body: Mapping[str, Any]) -> bytes:
    """A request body as compact UTF-8 JSON.

    orjson writes it about ten times faster than ``json`` (a 15 KB history: ~15 µs against
    ~170 µs, on every step; the body grows with the run). What orjson refuses goes through
    ``json``: a lone surrogate (a model can send one as a JSON escape; it cannot be UTF-8, so
    the body goes ASCII-escaped, surrogate and all), an integer wider than 64 bits, a key that
    is not a string. orjson writes a NaN or infinity as null, which is valid JSON; ``json``
    would write a token no server parses."""
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError is one
        pass
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


async def within_deadline(request: Awaitable[T], seconds: float, url: str) -> T:
    """``request`` (one whole model request: connecting, sending, reading the reply to its last
    byte), cancelled once it has taken ``seconds``. The request closes its response on the way
    out, so the server sees the connection go; the caller gets a ``ModelTimeoutError`` (which
    retries treat like any timeout) that says which limit ran out."""
    try:
        async with asyncio.timeout(seconds) as deadline:
            return await request
    except TimeoutError:
        if not deadline.expired():
            raise  # a TimeoutError of the request's own, not this deadline
        raise ModelTimeoutError(
            f"the model server at {url} did not finish its reply within {seconds:g} s "
            "(llm.timeouts.request, the limit for one whole request): it is slow, overloaded "
            "or stuck",
            hint="if the model is just slow (a large model on CPU, a long reply), raise "
            "llm.timeouts.request in fabric.yaml; otherwise check the model server (its log "
            "and load), or use a smaller or faster model",
        ) from None


class DeadlinedCatalog(Struct, frozen=True):
    """A model catalog whose listing (which may start a local server) must end within
    ``seconds``, like any model request."""

    inner: ModelCatalog
    seconds: float
    url: str

    @property
    def backend(self) -> str:
        return self.inner.backend

    async def list_models(self) -> list[ModelInfo]:
        return await within_deadline(self.inner.list_models(), self.seconds, self.url)
