"""DBOS launched for one process on one database (ADR 0020): values stored as JSON, SQLite in
WAL mode, and an executor id of the process's own, by which any process can tell whether the
owner of a run is alive."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from typing import TYPE_CHECKING, Any

from dbos import DBOS, DBOSConfig, Serializer

from fabric.domain.errors import ConfigError

from .where import ENV_URL, shown, sqlite_path

if TYPE_CHECKING:
    import sqlalchemy as sa


class JsonSerializer(Serializer):
    """DBOS's values as JSON: its default, pickle, would make a shared database a way to run
    code in every process that reads it."""

    def serialize(self, data: Any) -> str:
        return json.dumps(data, ensure_ascii=False, default=str)

    def deserialize(self, serialized_data: str) -> Any:
        return json.loads(serialized_data)

    def name(self) -> str:
        return "fabric_json"


def _sqlite_engine(url: str) -> sa.Engine | None:
    """For SQLite: an engine whose connections use WAL and ``synchronous=NORMAL`` (DBOS sets
    neither; each recorded step commits, ~3x faster so) and wait for a busy database."""
    path = sqlite_path(url)
    if path is None:
        return None
    import sqlalchemy as sa

    path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(url, connect_args={"timeout": 30})

    @sa.event.listens_for(engine, "connect")
    def _pragmas(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


def executor_id() -> str:
    """This process: host, process id and a random part (a reused pid is another process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the process that owns a run is alive: True or False on this host, None when
    it is another host's (or unknown)."""
    host, _, rest = (owner or "").partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def launch(url: str, *, executor: str, version: str, queues: bool) -> None:
    """Launch DBOS for this process on the database ``url``, as ``executor`` of the
    application ``version``; ``queues``: whether this process takes tasks from the task
    queues. A ConfigError when the database cannot be opened."""
    config: DBOSConfig = {
        "name": "fabric",
        "system_database_url": url,
        "executor_id": executor,
        "application_version": version,
        "serializer": JsonSerializer(),
        "log_level": "WARNING",
    }
    engine = _sqlite_engine(url)
    if engine is not None:
        config["system_database_engine"] = engine
    try:
        DBOS(config=config)
        if not queues:
            DBOS.listen_queues([])
        DBOS.launch()
    except Exception as exc:
        with contextlib.suppress(Exception):
            DBOS.destroy()
        raise ConfigError(
            f"cannot open the database of durable runs ({shown(url)}): {exc}",
            hint=f"check serve.durable_database in fabric.yaml or ${ENV_URL}",
        ) from exc
