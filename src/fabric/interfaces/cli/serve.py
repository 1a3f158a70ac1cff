"""``fabric serve``: the HTTP task service under uvicorn, with JSON logs on stderr."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn

from fabric.application.tasks import TaskService
from fabric.config.loader import LoadedConfig
from fabric.interfaces.cli.json_logs import configure_logging
from fabric.interfaces.cli.startup import settle


def run_service(loaded: LoadedConfig, *, runs_tasks: bool = True) -> None:
    """Serve on ``serve.host`` and ``serve.port`` (``--host`` and ``--port`` set them; the
    Host header may always name the bound address)."""
    from fabric.interfaces.http.app import create_app
    from fabric.interfaces.tokens import check_bind, load_or_create_token

    settings = loaded.config.serve
    bind_host, bind_port = settings.host, settings.port
    token, source = load_or_create_token(
        env=os.environ,
        env_name=settings.token_env,
        path=Path(settings.token_file).expanduser(),
    )
    check_bind(bind_host, source)
    app = create_app(loaded, token=token, runs_tasks=runs_tasks)
    # The secrets the service keeps out of its answers and runlogs (``known_secrets(loaded,
    # token)``, built once by create_app) are kept out of its log lines too.
    configure_logging(app.state.service.runner.secrets)
    url = f"http://{_url_host(bind_host)}:{bind_port}"
    tasks = app.state.service.durable
    sys.stderr.write(
        f"fabric serve on {url} (token: {source}); stop with Ctrl-C or SIGTERM\n"
        f"web console: {url}/console (log in there with the token)\n"
        f"durable tasks: every step recorded in {tasks.where()}; "
        f"queue {', '.join(tasks.queues())}"
        + ("" if runs_tasks else " (API only: the workers run the tasks)")
        + "\n"
    )
    sys.stderr.flush()
    config = uvicorn.Config(
        app,
        host=bind_host,
        port=bind_port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace) + 5,
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    settle()
    _Server(config, app.state.service, settings.shutdown_grace).run()


class _Server(uvicorn.Server):
    """uvicorn's server, but on shutdown (SIGTERM, Ctrl-C) the running tasks start winding
    down at once, while uvicorn waits for open connections: a client following a task's
    events sees the run end and the stream close, instead of uvicorn cutting the connection
    when its own timeout expires (with the tasks only stopping after that)."""

    def __init__(self, config: uvicorn.Config, service: TaskService[Any], grace: float) -> None:
        super().__init__(config)
        self._service, self._grace = service, grace

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        executor = self._service.executor
        winding_down = asyncio.ensure_future(executor.shutdown(self._grace)) if executor else None
        await super().shutdown(sockets)  # the app's lifespan awaits the same shutdown
        if winding_down is not None:
            await winding_down


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
