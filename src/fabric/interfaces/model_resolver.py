"""How a run's model is chosen and opened, in one place.

- **Which model a pack asks for** (``model_for``): ``--model`` (a key of ``llm.models`` or a
  model name), else the name its key maps to in ``llm.models``, else ``auto``.
- **Which backend and model it gets** (``resolve``): ``application/resolve.py`` walks the
  backends (``--backend``, ``FABRIC_BACKEND``, ``llm.backend``, or ``llm.auto`` in order) and
  ``application/selection.py`` picks among one backend's models; the catalogs come from
  ``infrastructure/llm/backends.py``; whether an unknown model calls tools is probed once and
  kept on disk. Answers are kept ``RESOLVE_TTL`` seconds.
- **The client a run talks to** (``open_chat``): the backend's client, with retries and the
  configured fallbacks (``application/resilience.py``); or, in tests and benches, what an
  injected ``chat_factory`` makes.

A model that cannot be found or started is not raised: it becomes the run's start error, so
the run still has a runlog that says what happened (configuration errors are raised).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from msgspec import Struct, field

from fabric.application.ports import ChatClient, RunLog
from fabric.application.resilience import FallbackChatClient, RetryingChatClient
from fabric.application.resolve import Resolution, probe_tools, resolve_llm
from fabric.config.loader import LoadedConfig
from fabric.config.schema import FallbackStep
from fabric.domain.errors import ConfigError, FabricError, RunError
from fabric.infrastructure.llm.backends import Backends, base_url_of

RESOLVE_TTL = 30.0
"""Seconds a resolution is reused before the backends are asked again."""
ChatFactory = Callable[[str], ChatClient]
"""Makes the chat client for a model name, instead of resolving one (tests, benches)."""


class ModelResolver(Struct):
    """Chooses and opens the model of a run, for one config."""

    loaded: LoadedConfig
    backends: Backends
    chat_factory: ChatFactory | None = None
    _resolved: dict[tuple[str, str | None, str | None], tuple[float, Resolution]] = field(
        default_factory=dict
    )

    def model_for(self, model_key: str, override: str | None = None) -> str:
        """The model name a pack with ``model_key`` asks for: ``override`` (``--model``, a
        key or a name), else its key's name in llm.models ('auto' when no table names it)."""
        models = self.loaded.config.llm.models
        if override:
            return models.get(override, override)
        return models.get(model_key, "auto")

    async def resolve(
        self,
        model_key: str,
        *,
        backend: str | None = None,
        model: str | None = None,
        fresh: bool = False,
    ) -> Resolution:
        """Which backend and model a pack with ``model_key`` would use, and why; kept for
        ``RESOLVE_TTL`` seconds, so a busy runner does not ask the server for its models
        before every run; ``fresh`` asks again."""
        key = (model_key, backend, model)
        kept = self._resolved.get(key)
        if kept and not fresh and time.monotonic() - kept[0] < RESOLVE_TTL:
            return kept[1]
        llm = self.loaded.config.llm
        resolution = await resolve_llm(
            llm,
            model_key=model_key,
            catalogs=self.backends.catalog,
            backend=backend,
            model=model,
            probe=self._probe if llm.selection.probe_tools else None,
        )
        self._resolved[key] = (time.monotonic(), resolution)
        return resolution

    async def try_resolve(
        self, model_key: str, backend: str | None, model: str | None
    ) -> tuple[Resolution | None, FabricError | None]:
        """The run's model, or why none could be found (recorded as a failed run, with its
        runlog; configuration errors are raised). Skipped when a chat factory is injected."""
        if self.chat_factory is not None:
            return None, None
        try:
            return await self.resolve(model_key, backend=backend, model=model), None
        except ConfigError:
            raise
        except Exception as exc:
            return None, setup_error(exc)

    async def open_chat(
        self,
        model_key: str,
        model: str | None,
        resolved: tuple[Resolution | None, FabricError | None],
        runlog: RunLog,
    ) -> tuple[ChatClient | None, FabricError | None]:
        """The run's chat client, or why it could not be set up (e.g. the embedded model
        server failed to start); ``resolved`` is what ``try_resolve`` answered."""
        resolution, unresolved = resolved
        if self.chat_factory is not None:
            return self.chat_factory(self.model_for(model_key, model)), None
        if resolution is None:
            return None, unresolved
        try:
            return await self._chat(resolution, runlog), None
        except Exception as exc:
            return None, setup_error(exc)

    async def _probe(self, backend: str, model: str) -> bool:
        from fabric.infrastructure.llm.probe_cache import ProbeCache

        options = self.backends.options(model)
        if options.text_tool_calls or options.constrained_tool_calls:
            return True  # the user chose how this model's calls are read; a probe cannot judge
        cache = ProbeCache()
        url = base_url_of(self.backends.settings(backend)) or backend
        known = cache.get(backend, url, model)
        if known is not None:
            return known
        client = await self.backends.client(backend, model)
        try:
            answer = await probe_tools(client)
        finally:
            await client.aclose()
        cache.set(backend, url, model, answer)
        return answer

    async def _chat(self, resolution: Resolution, runlog: RunLog) -> ChatClient:
        """The resolved model's client, with retries and the configured fallbacks."""
        llm = self.loaded.config.llm
        inner = await self.backends.client(resolution.backend, resolution.model, resolution.info)
        chat: ChatClient = RetryingChatClient(inner, llm.retry, on_event=runlog.emit)
        if llm.fallback:
            steps = [(step, self._fallback(step, runlog)) for step in llm.fallback]
            chat = FallbackChatClient(chat, steps, on_event=runlog.emit, backend=resolution.backend)
        return chat

    def _fallback(self, step: FallbackStep, runlog: RunLog) -> Callable[[], Awaitable[ChatClient]]:
        retry = self.loaded.config.llm.retry

        async def make() -> ChatClient:
            inner = await self.backends.client(step.backend, step.model)
            return RetryingChatClient(inner, retry, on_event=runlog.emit)

        return make


def setup_error(exc: Exception) -> FabricError:
    """Why no model could be set up, as the error a failed run records."""
    if isinstance(exc, FabricError):
        return exc
    return RunError(
        f"the model could not be set up: {type(exc).__name__}: {exc}",
        hint="check the backend's settings and files (e.g. the model file); see the runlog",
    )
