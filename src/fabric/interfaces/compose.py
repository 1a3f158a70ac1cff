"""The composition root: config in, a ``Runner`` (or the task service around one) out. Every
way in (the CLI, the HTTP service, the eval), the tests and the benches build here, with
keyword overrides for what they replace, so they behave the same; nothing is patched after."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fabric.application.ports import RunObserver
from fabric.config.data import memory_path
from fabric.config.loader import LoadedConfig, settings_folders
from fabric.domain.clock import Clock, utc_now
from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets
from fabric.infrastructure.durable.where import database_url, shown, sqlite_path
from fabric.infrastructure.llm.backends import Backends
from fabric.infrastructure.sandbox import command_runner
from fabric.interfaces.model_resolver import ChatFactory
from fabric.interfaces.run_setup import CommandFactory
from fabric.interfaces.runner import Runner

if TYPE_CHECKING:  # the task service (and structlog) load only for fabric serve
    from fabric.application.tasks import TaskService
    from fabric.infrastructure.durable.runs import DurableRuns
    from fabric.infrastructure.durable.tasks import DbosTasks

__all__ = [
    "Runner",
    "build_runner",
    "build_service",
    "durable_runs",
    "durable_tasks",
    "embedded_files",
    "known_secrets",
    "service_files",
    "traced",
]


def build_runner(
    loaded: LoadedConfig,
    *,
    chat_factory: ChatFactory | None = None,
    commands: CommandFactory | None = None,
    clock: Clock | None = None,
    observers: Sequence[RunObserver] = (),
    runs_dir: Path | None = None,
    on_status: Callable[[str], None] | None = None,
    secrets: Secrets | None = None,
    protected: Sequence[Path] = (),
) -> Runner:
    """Compose a runner; every default is built here, none at import time.

    Overrides: ``chat_factory`` opens each run's model client (default: the configured
    backends, with retries and fallback); ``commands`` makes each pack's command runner
    (default: the OS sandbox); ``clock`` stamps runlog events; ``observers`` watch every run
    (with the tracing observer of ``traced`` when tracing is on).
    Tools never read or write the runs folder, the service's files (``service_files``),
    fabric's settings (``loader.settings_folders``: not even from a workspace that holds them),
    the memory store's folder (``data.memory_path``) or ``protected``."""
    secrets = known_secrets(loaded) if secrets is None else secrets
    runs_dir = runs_dir or loaded.runs_dir
    return Runner(
        loaded=loaded,
        runs_dir=runs_dir,
        backends=Backends(loaded.config.llm, on_status=on_status, secrets=secrets),
        chat_factory=chat_factory,
        protected=(
            *service_files(loaded),
            *embedded_files(loaded),
            *(folder.resolve() for folder in settings_folders()),
            memory_path().parent.resolve(),
            *protected,
        ),
        secrets=secrets,
        observers=(*observers, *traced(loaded, secrets, runs_dir)),
        make_commands=commands or command_runner,
        clock=clock or utc_now,
    )


def traced(loaded: LoadedConfig, secrets: Secrets, runs_dir: Path) -> tuple[RunObserver, ...]:
    """The observer that traces every run with OpenTelemetry when the config or the
    ``OTEL_*`` variables turn tracing on (ADR 0022); none otherwise, and then nothing of
    OpenTelemetry is imported."""
    if loaded.traces is None:
        return ()
    from fabric.infrastructure.telemetry.observer import trace_observer

    try:
        return (trace_observer(loaded.traces, secrets, runs_dir),)
    except Exception as exc:  # telemetry never stops a run; the config said what it could
        sys.stderr.write(
            f"fabric: traces: tracing could not be set up ({exc}); runs go on without it. "
            "Check the OTEL_* variables, or turn tracing off with OTEL_SDK_DISABLED=true\n"
        )
        return ()


def build_service(
    loaded: LoadedConfig,
    *,
    token: str,
    clock: Clock | None = None,
    runs_tasks: bool = True,
    **overrides: Any,
) -> TaskService[Runner]:
    """Compose the task service of ``fabric serve`` and ``fabric worker`` around a runner
    built as ``build_runner`` builds it (``overrides`` are its keywords): every task a DBOS
    workflow on the queues of ``serve.durable_database`` (ADR 0020). ``clock`` stamps the
    records and the runlogs; ``runs_tasks``: whether this process takes tasks from the queues
    (False: an API node only). The service's ``token`` is a secret like the API keys; tasks'
    file tools may not read the config the server runs with."""
    from fabric.application.tasks import TaskService

    settings = loaded.config.serve
    refuse_old_tasks(loaded)
    config = Path(loaded.source)
    runner = build_runner(
        loaded,
        secrets=known_secrets(loaded, token),
        protected=(config.resolve(),) if config.is_file() else (),
        clock=clock,
        **overrides,
    )
    roots = [(loaded.base_dir / Path(r).expanduser()).resolve() for r in settings.workspace_roots]
    tasks = durable_tasks(loaded, runner, runs_tasks=runs_tasks)
    return TaskService(
        runner,
        tasks.store,
        workspace_roots=roots,
        max_task_chars=settings.max_task_chars,
        executor=tasks.executor,
        clock=clock or utc_now,
        durable=tasks,
    )


def durable_tasks(loaded: LoadedConfig, runner: Runner, *, runs_tasks: bool = True) -> DbosTasks:
    """The service's tasks as DBOS workflows on queues (ADR 0020): what ``fabric
    serve`` and ``fabric worker`` take tasks from."""
    from fabric.infrastructure.durable.tasks import DbosTasks

    settings = loaded.config.serve
    return DbosTasks(
        durable_runs(loaded, runner),
        concurrency=settings.concurrency,
        per_pack=settings.pack_concurrency,
        share_workspaces=settings.share_workspaces,
        runs_tasks=runs_tasks,
    )


def durable_runs(loaded: LoadedConfig, runner: Runner) -> DurableRuns:
    """``runner``'s runs as durable runs on the config's database (ADR 0020), for `fabric run
    --durable`, `fabric worker` and a durable service; DBOS loads only here."""
    import fabric
    from fabric.infrastructure.durable.runs import DurableRuns

    url = database_url(loaded.config.serve.durable_database, loaded.base_dir)
    return DurableRuns(url, version=fabric.__version__, run=runner.run, secrets=runner.secrets)


def embedded_files(loaded: LoadedConfig) -> tuple[Path, ...]:
    """The shared embedded model servers' folder (their keys and the locks that keep them
    alive), when the config has an embedded backend: no run's command may read it or hold
    its locks. Made now (private), so it is hidden from the first run on."""
    if not any(b.kind == "embedded" for b in loaded.config.llm.backends.values()):
        return ()
    from fabric.infrastructure.llm.embedded_state import ensure_private_dir, state_dir

    try:
        return (ensure_private_dir(state_dir()),)
    except OSError:
        return (state_dir(),)  # the server cannot start there either; it will say why


def service_files(loaded: LoadedConfig) -> tuple[Path, ...]:
    """The database of tasks and durable runs (when a SQLite file: first, with its WAL files),
    the task database of an earlier fabric, and the token file: kept from every run's tools,
    also a CLI run whose workspace holds them."""
    serve = loaded.config.serve
    files = []
    # the recorded steps: a run that wrote them could forge a person's answer
    durable = sqlite_path(database_url(serve.durable_database, loaded.base_dir))
    if durable is not None:
        files.append(durable)
    files.append(old_task_database(loaded))
    return (
        *(f.with_name(f.name + end) for f in files for end in ("", "-wal", "-shm")),
        Path(serve.token_file).expanduser().resolve(),
    )


def old_task_database(loaded: LoadedConfig) -> Path:
    """Where fabric before ADR 0020's queues kept the service's tasks (``tasks.sqlite3``)."""
    return (loaded.base_dir / "tasks.sqlite3").resolve()


def refuse_old_tasks(loaded: LoadedConfig) -> None:
    """A ConfigError when the task database of an earlier fabric is there: its tasks are not
    moved to the queues (their runlogs stay in the runs folder, where `fabric show` and the
    console find them), and a service must not start as if it had none."""
    old = old_task_database(loaded)
    if not old.exists():
        return
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(f"file:{old}?mode=ro", uri=True)) as db:
            counts = dict(db.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status"))
        held = sum(n for s, n in counts.items() if s in ("queued", "running"))
        what = f"holds {sum(counts.values())} task(s), {held} of them queued or running"
    except sqlite3.Error as exc:
        what = f"cannot be read ({exc})"
    url = database_url(loaded.config.serve.durable_database, loaded.base_dir)
    raise ConfigError(
        f"{old} is the task database of an earlier fabric and {what}; tasks now live in the "
        f"durable database ({shown(url)}) and are not moved there",
        hint=f"move it away (mv {old} {old}.old) and start again: every task's runlog stays "
        "in the runs folder; submit again what was still queued or running",
    )


def known_secrets(loaded: LoadedConfig, *also: str) -> Secrets:
    """What fabric never writes out: every backend's API key (whatever its ``api_key_env``
    variables are called), the environment's secret-looking variables, and ``also`` (e.g.
    the HTTP service's token)."""
    return Secrets.from_env(os.environ, loaded.config.llm.api_key_names, also=also)
