"""Asking a model server which models it has is a model request like any other: a server that
trickles its model list (a byte every 50 ms, for ever) cannot hang a run before it starts; the
listing ends at ``llm.timeouts.request`` with the error that names that limit. A real server on
127.0.0.1; the times are the deadline under test and a hang guard, never speed assertions."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fabric.config.schema import LLMSettings
from fabric.domain.errors import ModelTimeoutError
from fabric.infrastructure.llm.backends import Backends

GUARD = 30.0


@pytest.fixture
def trickling() -> Iterator[str]:
    """A server that answers every request with headers, then a space every 50 ms."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            conn.sendall(head + b"Content-Length: 1000000\r\n\r\n")
            while not stop.is_set():
                try:
                    conn.sendall(b" ")
                except OSError:
                    return  # the client hung up
                time.sleep(0.05)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    host, port = listener.getsockname()[:2]
    try:
        yield f"http://{host}:{port}/v1"
    finally:
        stop.set()
        listener.close()


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_a_trickled_model_list_ends_at_the_request_deadline(trickling: str, kind: str) -> None:
    base = trickling if kind == "openai" else trickling.removesuffix("/v1")
    llm = LLMSettings.model_validate(
        {
            "backend": kind,
            "backends": {kind: {"kind": kind, "base_url": base}},
            "timeouts": {"read": 20, "request": 1},
        }
    )
    catalog = Backends(llm).catalog(kind)
    with pytest.raises(ModelTimeoutError, match=r"llm\.timeouts\.request") as caught:
        asyncio.run(asyncio.wait_for(catalog.list_models(), GUARD))
    assert "raise llm.timeouts.request" in (caught.value.hint or "")
