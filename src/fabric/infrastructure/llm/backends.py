"""Building model catalogs and chat clients from the typed config, by backend kind.

Heavy adapter modules are imported only when their backend is used. One ``Backends`` lives
as long as a runner: each embedded chat client holds a lease on the shared embedded model
server while it is open (see ``embedded``); ``aclose`` lets go of the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx

from fabric.application.ports import ChatClient, ModelCatalog
from fabric.config.schema import (
    AnthropicBackend,
    Backend,
    EmbeddedBackend,
    LLMSettings,
    ModelOptions,
    OllamaBackend,
    OpenAIBackend,
)
from fabric.domain.errors import ConfigError
from fabric.domain.models import ModelInfo
from fabric.domain.secrets import Secrets

from .http import ClientPool, DeadlinedCatalog

if TYPE_CHECKING:
    from .embedded import EmbeddedServer

DEFAULT_NUM_CTX = 8192
MAX_AUTO_NUM_CTX = 32768
"""Ollama's own default window is small and silently cuts long prompts; fabric asks for the
model's full window up to this many tokens (more costs memory most tasks never use)."""


def api_key(backend: OpenAIBackend | AnthropicBackend) -> str | None:
    """The first key set among the backend's ``api_key_env``; never logged or echoed."""
    return next((os.environ[n] for n in backend.api_key_env if os.environ.get(n)), None)


def base_url_of(backend: Backend) -> str | None:
    """Where a backend's server is, for display (the embedded one has none until started)."""
    if isinstance(backend, OllamaBackend):
        from .ollama import ollama_base_url

        return ollama_base_url(str(backend.base_url) if backend.base_url else None)
    if isinstance(backend, EmbeddedBackend):
        return None
    return str(backend.base_url)


class Backends:
    """Catalogs and chat clients for the backends of one config."""

    def __init__(
        self,
        llm: LLMSettings,
        *,
        on_status: Callable[[str], None] | None = None,
        secrets: Secrets | None = None,
    ) -> None:
        self._llm = llm
        self._secrets = secrets
        """What adapters redact from their errors (the runner's, built once); None: each
        adapter builds its own from its key and the environment."""
        self._on_status = on_status
        self._embedded: dict[str, EmbeddedServer] = {}
        self._pool = ClientPool()
        """The HTTP clients of chats and model listings, kept from one run to the next
        (``ClientPool``)."""
        t = llm.timeouts
        self._timeout = httpx.Timeout(t.read, connect=t.connect, write=t.write)
        self._request_timeout = t.request

    def settings(self, name: str) -> Backend:
        backend = self._llm.backends.get(name)
        if backend is None:
            raise ConfigError(
                f"no backend named {name!r}",
                hint=f"use one of: {', '.join(self._llm.backends)}, or 'auto'",
            )
        return backend

    def options(self, model: str) -> ModelOptions:
        return self._llm.model_options.get(model) or ModelOptions()

    def temperature(self, model: str) -> float | None:
        """The sampling temperature for ``model``: its own option, else ``llm.temperature``."""
        own = self.options(model).temperature
        return own if own is not None else self._llm.temperature

    def catalog(self, name: str) -> ModelCatalog:
        """What backend ``name`` offers; asking it has the same overall deadline as a model
        request (``llm.timeouts.request``), so a server that trickles its model list cannot
        hang a run before it starts."""
        catalog, backend = self._catalog(name), self.settings(name)
        if isinstance(backend, EmbeddedBackend):
            return catalog  # a local file, no server to wait for
        return DeadlinedCatalog(catalog, self._request_timeout, base_url_of(backend) or name)

    def _catalog(self, name: str) -> ModelCatalog:
        backend = self.settings(name)
        if isinstance(backend, OllamaBackend):
            from .ollama import OllamaCatalog

            return OllamaCatalog(
                name=name,
                base_url=base_url_of(backend) or "",
                ensure_available=backend.ensure_available,
                timeout=self._timeout,
                on_status=self._on_status,
                pool=self._pool,
            )
        if isinstance(backend, OpenAIBackend):
            from .openai_compat import OpenAICatalog

            return OpenAICatalog(
                name=name,
                base_url=str(backend.base_url),
                api_key=api_key(backend),
                secrets=self._secrets,
                timeout=self._timeout,
                pool=self._pool,
            )
        if isinstance(backend, AnthropicBackend):
            from .anthropic import AnthropicCatalog

            return AnthropicCatalog(
                name=name,
                base_url=str(backend.base_url),
                api_key=api_key(backend),
                secrets=self._secrets,
                timeout=self._timeout,
                pool=self._pool,
            )
        from .embedded import EmbeddedCatalog

        return EmbeddedCatalog(name=name, settings=backend)

    async def client(self, name: str, model: str, info: ModelInfo | None = None) -> ChatClient:
        """A chat client for ``model`` on backend ``name`` (starting the embedded server)."""
        backend = self.settings(name)
        options = self.options(model)
        temperature = self.temperature(model)
        if isinstance(backend, OllamaBackend):
            from .ollama import OllamaChatClient

            window = info.context_length if info and info.context_length else DEFAULT_NUM_CTX
            return OllamaChatClient(
                base_url=base_url_of(backend) or "",
                model=model,
                timeout=self._timeout,
                request_timeout=self._request_timeout,
                num_ctx=options.num_ctx or min(window, MAX_AUTO_NUM_CTX),
                stream=backend.stream,
                temperature=temperature,
                text_tool_calls=options.text_tool_calls,
                max_tokens=options.max_tokens,
                pool=self._pool,
            )
        if isinstance(backend, AnthropicBackend):
            from .anthropic import AnthropicChatClient

            return AnthropicChatClient(
                base_url=str(backend.base_url),
                model=model,
                api_key=api_key(backend),
                secrets=self._secrets,
                max_tokens=backend.max_tokens,
                timeout=self._timeout,
                request_timeout=self._request_timeout,
                stream=backend.stream,
                temperature=temperature,
                text_tool_calls=options.text_tool_calls,
                pool=self._pool,
            )
        from .openai_compat import OpenAIChatClient

        server: EmbeddedServer | None = None
        if isinstance(backend, OpenAIBackend):
            url, key, stream = str(backend.base_url), api_key(backend), backend.stream
        else:
            server = await self._start_embedded(name, backend)
            assert server.url is not None
            url, key, stream = server.url, server.api_key, True
        known = self._secrets is not None and (not key or key in self._secrets.values)
        client = OpenAIChatClient(
            base_url=url,
            model=model,
            api_key=key,
            secrets=self._secrets if known else None,  # the embedded server's key: its own
            timeout=self._timeout,
            request_timeout=self._request_timeout,
            temperature=temperature,
            stream=stream,
            text_tool_calls=options.text_tool_calls,
            constrained_tool_calls=options.constrained_tool_calls,
            max_tokens=options.max_tokens,
            pool=self._pool,
        )
        return client if server is None else server.held(client)  # its use ends on aclose

    async def _start_embedded(self, name: str, backend: EmbeddedBackend) -> EmbeddedServer:
        from .embedded import EmbeddedServer

        server = self._embedded.get(name)
        if server is None:
            server = self._embedded[name] = EmbeddedServer(backend, on_status=self._on_status)
        await server.start()
        return server

    async def aclose(self) -> None:
        await self._pool.aclose()
        for server in self._embedded.values():
            await server.stop()
        self._embedded.clear()


def window_of(info: ModelInfo | None, backend: Backend, options: ModelOptions) -> int | None:
    """The context window a run gets (as ``Backends.client`` sets it up), which is not the
    model's own maximum (``context_length``) where fabric configures one: the model's
    ``context_size`` option when set; the embedded server's ``context_size``; for Ollama the
    model's ``num_ctx`` option, else the model's own window up to a cap. Other servers decide
    for themselves: their model's window (None when they do not say)."""
    if options.context_size is not None:
        return options.context_size
    if isinstance(backend, EmbeddedBackend):
        return backend.context_size
    if isinstance(backend, OllamaBackend):
        window = (info.context_length if info else None) or DEFAULT_NUM_CTX
        return options.num_ctx or min(window, MAX_AUTO_NUM_CTX)
    return info.context_length if info else None
