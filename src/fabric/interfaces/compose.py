"""The one composition root: config in, a ``Runner`` out. The CLI, the HTTP service and the
tests all build runs here, so they behave the same."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import fabric
from fabric.application.execute_task import execute_task
from fabric.application.ports import ChatClient
from fabric.config.loader import LoadedConfig
from fabric.config.schema import LLMSettings
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult
from fabric.infrastructure.packs.registry import LoadedPack, load_pack
from fabric.infrastructure.runlog import JsonlRunLog, new_run_id
from fabric.infrastructure.runlog.writer import Observer

ChatFactory = Callable[[str], ChatClient]
"""Builds a chat client for a model name."""


def api_key(llm: LLMSettings) -> str | None:
    """The first API key set among ``llm.api_key_env``; never logged or echoed."""
    return next((os.environ[n] for n in llm.api_key_env if os.environ.get(n)), None)


def redact_url(url: str) -> str:
    """A URL without user:password, safe for logs."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _openai_factory(llm: LLMSettings) -> ChatFactory:
    def make(model: str) -> ChatClient:
        import httpx

        from fabric.infrastructure.llm.openai_compat import OpenAIChatClient

        t = llm.timeouts
        return OpenAIChatClient(
            base_url=str(llm.base_url),
            model=model,
            api_key=api_key(llm),
            timeout=httpx.Timeout(t.read, connect=t.connect, write=t.write),
            temperature=llm.temperature,
        )

    return make


@dataclass
class Runner:
    """Runs tasks with the packs of one config."""

    loaded: LoadedConfig
    chat_factory: ChatFactory
    runs_dir: Path
    _packs: dict[str, LoadedPack] = field(default_factory=dict)

    def pack(self, name: str) -> LoadedPack:
        if name not in self._packs:
            self._packs[name] = load_pack(self.loaded, name)
        return self._packs[name]

    def model_for(self, loaded_pack: LoadedPack, override: str | None = None) -> str:
        """``--model`` may be a key of llm.models or a model name; else the pack's key."""
        models = self.loaded.config.llm.models
        if override:
            return models.get(override, override)
        return models[loaded_pack.settings.model]

    async def run(
        self,
        pack_name: str,
        task: str,
        *,
        model: str | None = None,
        workspace: Path | None = None,
        max_steps: int | None = None,
        run_id: str | None = None,
        observers: Sequence[Observer] = (),
        cancel: asyncio.Event | None = None,
    ) -> RunResult:
        """Run one task to its end and return the result; the runlog is on disk."""
        if not task.strip():
            raise ConfigError("the task is empty", hint="say what the pack should do")
        loaded_pack = self.pack(pack_name)
        folder = (workspace or Path.cwd()).resolve()
        if not folder.is_dir():
            raise ConfigError(
                f"workspace {folder} is not a folder", hint="pass an existing --workspace"
            )
        limits = loaded_pack.settings.limits
        if max_steps is not None:
            if max_steps < 1:
                raise ConfigError("--max-steps must be at least 1")
            limits = limits.model_copy(update={"max_steps": max_steps})
        model_name = self.model_for(loaded_pack, model)
        run_id = run_id or new_run_id()
        try:
            runlog = JsonlRunLog(self.runs_dir, run_id, *observers)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the runlog folder in {self.runs_dir}: {exc}",
                hint="make runs_dir writable, or point runs_dir in fabric.yaml elsewhere",
            ) from exc
        chat = self.chat_factory(model_name)
        try:
            return await execute_task(
                task,
                pack=loaded_pack.pack,
                chat=chat,
                runlog=runlog,
                run_id=run_id,
                workspace=folder,
                sandbox=loaded_pack.settings.sandbox,
                limits=limits,
                cancel=cancel,
                protected=(self.runs_dir,),
                meta={
                    "fabric_version": fabric.__version__,
                    "config": self.loaded.source,
                    "backend": {
                        "kind": self.loaded.config.llm.kind,
                        "base_url": redact_url(str(self.loaded.config.llm.base_url)),
                    },
                },
            )
        finally:
            runlog.close()
            await chat.aclose()


def build_runner(
    loaded: LoadedConfig,
    *,
    chat_factory: ChatFactory | None = None,
    runs_dir: Path | None = None,
) -> Runner:
    """Compose a runner; every default is built here, none at import time."""
    return Runner(
        loaded=loaded,
        chat_factory=chat_factory or _openai_factory(loaded.config.llm),
        runs_dir=runs_dir or loaded.runs_dir,
    )
