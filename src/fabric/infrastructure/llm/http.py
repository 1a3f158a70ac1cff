"""The HTTP client every model adapter uses, and the JSON body encoding they share.

- TLS is verified against the CA bundle, loaded once per process (~15-30 ms) and only when an
  https endpoint is used: most local servers are plain http on loopback.
- Proxy settings from the environment (HTTPS_PROXY, NO_PROXY, ...) apply to remote servers,
  never to loopback ones, where a corporate proxy would only get in the way.
- Redirects are not followed: a model endpoint that redirects is misconfigured.
- One whole request has a deadline (``within_deadline``, ``llm.timeouts.request``) besides
  httpx's timeouts, which bound each read only: a server that sends a byte a second never
  trips them.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import ssl
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson

from fabric.application.ports import ModelCatalog
from fabric.domain.errors import ModelTimeoutError
from fabric.domain.models import ModelInfo

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


def model_client(
    base_url: str,
    *,
    timeout: httpx.Timeout | float,
    headers: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` for the model server at ``base_url``."""
    https = base_url.lower().startswith("https:")
    return httpx.AsyncClient(
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


@dataclass(frozen=True, slots=True)
class DeadlinedCatalog:
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
