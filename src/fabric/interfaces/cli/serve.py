"""``fabric serve``: the HTTP task service under uvicorn, with JSON logs on stderr."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import socket
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import IO, Any

import structlog
import uvicorn

from fabric.application.tasks import TaskService
from fabric.config.loader import LoadedConfig
from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets
from fabric.interfaces.cli.startup import settle


def configure_logging(secrets: Secrets) -> None:
    """structlog JSON lines on stderr; ``secrets`` (the API token and keys) never reach them."""

    def scrub(_: object, __: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        scrubbed: Mapping[str, Any] = secrets.redact_obj(event)
        return scrubbed

    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            scrub,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def run_service(loaded: LoadedConfig, *, host: str | None, port: int | None) -> None:
    from fabric.interfaces.http.app import create_app
    from fabric.interfaces.http.tokens import check_bind, load_or_create_token

    settings = loaded.config.serve
    bind_host = host or settings.host
    bind_port = settings.port if port is None else port
    token, source = load_or_create_token(
        env=os.environ,
        env_name=settings.token_env,
        path=Path(settings.token_file).expanduser(),
    )
    check_bind(bind_host, source)
    lock = _lock((loaded.base_dir / settings.database).resolve())  # held while we serve
    if host and host != settings.host:
        settings = settings.model_copy(
            update={"allowed_hosts": [*settings.allowed_hosts, host], "host": host}
        )
        loaded = _with_serve(loaded, settings)
    app = create_app(loaded, token=token)
    # The secrets the service keeps out of its answers and runlogs (``known_secrets(loaded,
    # token)``, built once by create_app) are kept out of its log lines too.
    configure_logging(app.state.service.runner.secrets)
    url = f"http://{_url_host(bind_host)}:{bind_port}"
    durable = app.state.service.durable
    sys.stderr.write(
        f"fabric serve on {url} (token: {source}); stop with Ctrl-C or SIGTERM\n"
        f"web console: {url}/console (log in there with the token)\n"
        + (
            f"durable tasks: every step recorded in {durable.where()}; "
            f"queue {', '.join(durable.queues())}\n"
            if durable
            else ""
        )
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
    try:
        settle()
        _Server(config, app.state.service, settings.shutdown_grace).run()
    finally:
        lock.close()


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


def _lock(database: Path) -> IO[bytes]:
    """Hold an exclusive lock beside the task database, so a second server on the same
    tasks refuses to start instead of marking the first one's running tasks interrupted."""
    path = database.with_name(database.name + ".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError(
            f"another `fabric serve` is already using the task database {database}",
            hint="stop that one first, or give this one another serve.database",
        ) from None
    return handle


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _with_serve(loaded: LoadedConfig, settings: object) -> LoadedConfig:
    from dataclasses import replace

    config = loaded.config.model_copy(update={"serve": settings})
    return replace(loaded, config=config)
