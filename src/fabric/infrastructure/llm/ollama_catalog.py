"""What an Ollama server offers: ``GET /api/tags``, then ``POST /api/show`` for each model.

``/api/show`` says what a model can do (``capabilities``: ``completion``, ``tools``,
``embedding``, ...; servers before 0.6 send none, then tool support is unknown), its context
length (``model_info["<architecture>.context_length"]``) and size
(``details.parameter_size``, e.g. ``"8.0B"``). A model whose details cannot be read is still
listed, with what ``/api/tags`` said.

When the server does not answer and the backend has ``ensure_available``, the catalog starts
``ollama serve`` (only for a server on this machine, only when the ``ollama`` command is
installed), waits until it answers and says so through ``on_status``. The server keeps running
after fabric exits, as Ollama's own app does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from fabric.domain.errors import ModelConnectionError, ModelResponseError, ModelServerError
from fabric.domain.models import ModelInfo

from .http import ClientPool, ModelHttp
from .http_errors import BODY_LIMIT, transport_error

SHOW_CONCURRENCY = 4
START_TIMEOUT = 20.0
_EMBEDDING_FAMILIES = frozenset({"bert", "nomic-bert", "xlm-roberta"})
_SIZE = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*([KMBT])\s*$", re.IGNORECASE)
_SCALE = {"K": 1e-6, "M": 1e-3, "B": 1.0, "T": 1e3}
_STARTED: list[subprocess.Popen[bytes]] = []
"""Servers this process started: kept referenced so they are never reaped while fabric runs."""
DOWNLOAD = "https://ollama.com/download"


def parse_parameter_size(text: Any) -> float | None:
    """Billions of parameters from Ollama's ``parameter_size``: ``"8.0B"`` is 8.0, ``"500M"``
    0.5, ``"1.2T"`` 1200.0, ``"8x7B"`` 56.0; anything else None."""
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        return None
    experts = int(match[1]) if match[1] else 1
    return round(experts * float(match[2]) * _SCALE[match[3].upper()], 6)


class OllamaCatalog:
    """The models of one Ollama server, with what each can do."""

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        ensure_available: bool,
        timeout: httpx.Timeout | float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        on_status: Callable[[str], None] | None = None,
        start_timeout: float = START_TIMEOUT,
        pool: ClientPool | None = None,
    ) -> None:
        self._name = name
        self._pool = pool
        self._base = base_url.rstrip("/")
        self._ensure = ensure_available
        self._timeout = timeout
        self._transport = transport
        self._on_status = on_status
        self._start_timeout = start_timeout

    @property
    def backend(self) -> str:
        return self._name

    async def list_models(self) -> list[ModelInfo]:
        use = ModelHttp(
            self._base, timeout=self._timeout, transport=self._transport, pool=self._pool
        )
        try:
            http = use.client
            entries = await self._tags(http)
            limit = asyncio.Semaphore(SHOW_CONCURRENCY)
            return list(await asyncio.gather(*(self._describe(http, limit, e) for e in entries)))
        finally:
            await use.aclose()

    async def _tags(self, http: httpx.AsyncClient) -> list[Mapping[str, Any]]:
        url = f"{self._base}/api/tags"
        try:
            reply = await http.get("/api/tags")
        except httpx.ConnectError as exc:
            await self._bring_up(http, exc)
            try:
                reply = await http.get("/api/tags")
            except httpx.HTTPError as again:
                raise transport_error(again, url) from again
        except httpx.HTTPError as exc:
            raise transport_error(exc, url) from exc
        if reply.status_code >= 500:
            raise ModelServerError(
                f"Ollama at {self._base} could not list its models ({reply.status_code}): "
                f"{reply.text[:300]}",
                hint="try again, and check the Ollama server's log",
                status_code=reply.status_code,
                body=reply.text[:BODY_LIMIT],
            )
        try:
            models = reply.json()["models"] if reply.status_code < 400 else None
        except (ValueError, KeyError, TypeError):
            models = None
        if not isinstance(models, list):
            raise ModelResponseError(
                f"{url} did not answer with Ollama's model list ({reply.status_code}): "
                f"{reply.text[:200]!r}",
                hint="check that the backend's base_url (or OLLAMA_HOST) points at an Ollama "
                "server's native API, without /v1",
                status_code=reply.status_code,
                body=reply.text[:BODY_LIMIT],
            )
        return [m for m in models if isinstance(m, Mapping) and (m.get("name") or m.get("model"))]

    async def _describe(
        self, http: httpx.AsyncClient, limit: asyncio.Semaphore, entry: Mapping[str, Any]
    ) -> ModelInfo:
        name = str(entry.get("name") or entry.get("model"))
        show: Mapping[str, Any] | None = None
        async with limit:
            try:
                reply = await http.post("/api/show", json={"model": name})
                data = reply.json() if reply.status_code < 400 else None
                show = data if isinstance(data, Mapping) else None
            except (httpx.HTTPError, ValueError):
                show = None
        return model_info(self._name, name, show, entry.get("details"))

    async def _bring_up(self, http: httpx.AsyncClient, exc: httpx.HTTPError) -> None:
        """Start ``ollama serve`` when allowed and possible; else raise what to do."""
        where = f"Ollama is not running at {self._base} ({exc or type(exc).__name__})"
        target = _local_host_port(self._base)
        if not self._ensure:
            raise ModelConnectionError(
                where,
                hint="start it with `ollama serve` (or set ensure_available: true on the backend "
                "to let fabric start it), or pick another backend with --backend",
            )
        if target is None:
            raise ModelConnectionError(
                where,
                hint="it is on another machine, so fabric does not start it: start Ollama "
                "there, or point base_url (or OLLAMA_HOST) at a running server",
            )
        binary = shutil.which("ollama")
        if binary is None:
            raise ModelConnectionError(
                f"{where}, and the `ollama` command is not installed",
                hint=f"install Ollama ({DOWNLOAD}) and start it with `ollama serve`; or run "
                "without a model server: `--backend embedded` (pip install "
                "'agent-fabric[local]'); or configure another backend under llm.backends in "
                "fabric.yaml",
            )
        started = time.monotonic()
        process, log = _spawn(binary, target)
        await self._wait_until_up(http, process, log)
        if self._on_status:
            self._on_status(
                f"started `ollama serve` (pid {process.pid}); it answered after "
                f"{time.monotonic() - started:.1f} s. It keeps running after fabric exits "
                f"(log: {log})"
            )

    async def _wait_until_up(
        self, http: httpx.AsyncClient, process: subprocess.Popen[bytes], log: Path
    ) -> None:
        deadline = time.monotonic() + self._start_timeout
        while True:
            if process.poll() is not None:
                raise ModelConnectionError(
                    f"started `ollama serve` for {self._base}, but it exited at once "
                    f"(code {process.returncode}): {_tail(log)}",
                    hint=f"read its log ({log}); run `ollama serve` yourself to see the problem",
                )
            try:
                reply = await http.get("/api/version", timeout=1.0)
                if reply.status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ModelConnectionError(
                    f"started `ollama serve` (pid {process.pid}), but it did not answer at "
                    f"{self._base} within {self._start_timeout:.0f} s",
                    hint=f"read its log ({log}), and try again once it is up",
                )
            await asyncio.sleep(0.2)


def model_info(
    backend: str, name: str, show: Mapping[str, Any] | None, tag_details: Any = None
) -> ModelInfo:
    """A ``ModelInfo`` from one ``/api/show`` answer (None: it failed) and the model's
    ``details`` in ``/api/tags``."""
    show = show or {}
    details = {**_mapping(tag_details), **_mapping(show.get("details"))}
    family = str(details["family"]) if details.get("family") else None
    families = details["families"] if isinstance(details.get("families"), list) else []
    capabilities = show.get("capabilities")
    tools: bool | None
    if isinstance(capabilities, list):
        tools = "tools" in capabilities
        embedding_only = "embedding" in capabilities and "completion" not in capabilities
    else:  # a server before capabilities (0.6), or no /api/show answer: guess embeddings only
        embedding_only = (
            bool(_EMBEDDING_FAMILIES.intersection([family, *families])) or "embed" in name.lower()
        )
        tools = False if embedding_only else None
    facts = _mapping(show.get("model_info"))
    parameters = parse_parameter_size(details.get("parameter_size"))
    if parameters is None and isinstance(facts.get("general.parameter_count"), int | float):
        parameters = round(facts["general.parameter_count"] / 1e9, 3)
    quantization = details.get("quantization_level")
    return ModelInfo(
        name=name,
        backend=backend,
        tools=tools,
        embedding_only=embedding_only,
        context_length=_context_length(facts),
        parameters_b=parameters,
        family=family,
        quantization=str(quantization) if quantization else None,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _context_length(facts: Mapping[str, Any]) -> int | None:
    architecture = facts.get("general.architecture")
    value = facts.get(f"{architecture}.context_length")
    if value is None:
        value = next((v for k, v in facts.items() if k.endswith(".context_length")), None)
    return value if isinstance(value, int) and value > 0 else None


def _local_host_port(base_url: str) -> str | None:
    """``host:port`` for ``OLLAMA_HOST`` when ``base_url`` is on this machine, else None."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:
            return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _spawn(binary: str, host_port: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``ollama serve`` in its own session, stdin closed, output to a log file."""
    log = _log_dir() / "ollama-serve.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [binary, "serve"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "OLLAMA_HOST": host_port},
        )
    _STARTED.append(process)
    return process, log


def _log_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(cache) / "fabric"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    return folder


def _tail(log: Path, chars: int = 400) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return text[-chars:].strip() or "(empty log)"
