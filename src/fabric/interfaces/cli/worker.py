"""``fabric worker``: a process that runs the service's tasks from the queues of the database
(ADR 0020), beside or instead of ``fabric serve``, on this machine or on others sharing a
Postgres database (and the workspaces and runs folder).

It prints the database and the queues it takes tasks from, then runs tasks as DBOS hands them
out, up to ``serve.concurrency`` at once (``--concurrency``); it also takes over the durable
runs of `fabric run --durable` whose process died on this machine. A task or run whose process
died is continued from its last recorded step by whichever process takes it. Nobody is there
to answer a policy's ask: a task's call waits for an answer over the API (from any API node)
until the policy's timeout; a taken-over CLI run's is refused. ``--once``: works until no task
waits and none runs here, then exits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .options import ConfigOpt
from .startup import load, say, settle

if TYPE_CHECKING:
    import asyncio

    from fabric.application.tasks import TaskService
    from fabric.infrastructure.durable.tasks import DbosTasks
    from fabric.interfaces.runner import Runner


def worker(
    config: ConfigOpt = None,
    once: Annotated[
        bool,
        typer.Option("--once", help="Work until no task waits and none runs here, then exit."),
    ] = False,
    every: Annotated[
        float,
        typer.Option("--every", help="Seconds between looks for dead processes' runs.", min=0.1),
    ] = 5.0,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Tasks at once (default: serve.concurrency).", min=1),
    ] = None,
) -> None:
    """Run the service's tasks from the database's queues, and take over durable runs whose
    process died on this machine; stop with Ctrl-C or SIGTERM."""
    import asyncio
    import signal

    from fabric.domain.errors import FabricError
    from fabric.interfaces.compose import build_service

    from .json_logs import configure_logging
    from .startup import fail

    loaded = load(config, False, {"--concurrency": (("serve", "concurrency"), concurrency)})
    settings = loaded.config.serve
    try:
        service = build_service(loaded, token=_token(settings.token_env, settings.token_file))
    except FabricError as exc:
        fail(exc, as_json=False, code=2)
    tasks: DbosTasks = service.durable  # type: ignore[assignment]
    configure_logging(service.runner.secrets)  # what happens to tasks: JSON lines on stderr

    async def work() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await tasks.start()
        try:
            say(
                f"fabric worker: tasks from queue {', '.join(tasks.queues())} in "
                f"{tasks.where()}; up to {settings.concurrency} at once"
            )
            return await _serve(service, tasks, once=once, every=every, stop=stop)
        finally:
            await service.executor.shutdown(settings.shutdown_grace)
            await service.runner.aclose()
            await tasks.stop()

    settle()
    try:
        failed = asyncio.run(work())
    except FabricError as exc:
        fail(exc, as_json=False, code=2)
    except KeyboardInterrupt:
        failed = 0
    say("fabric worker: stopped")
    raise typer.Exit(1 if failed else 0)


def _token(env_name: str, token_file: str) -> str:
    """The service's API token when there is one (a secret, kept out of runlogs); a worker
    never makes one."""
    from fabric.interfaces.tokens import load_or_create_token

    path = Path(token_file).expanduser()
    if os.environ.get(env_name, "").strip() or path.exists():
        return load_or_create_token(env=os.environ, env_name=env_name, path=path)[0]
    return ""


async def _serve(
    service: TaskService[Runner],
    tasks: DbosTasks,
    *,
    once: bool,
    every: float,
    stop: asyncio.Event,
) -> int:
    """Take over dead processes' CLI runs every ``every`` seconds while DBOS hands out tasks;
    the number of runs whose drive failed."""
    import asyncio
    import contextlib

    from fabric.application.job import Control
    from fabric.domain.errors import FabricError

    durable = tasks.durable
    driving: dict[str, asyncio.Task[None]] = {}
    failed = 0
    idle = True

    async def drive(run_id: str) -> None:
        nonlocal failed
        say(f"continuing durable run {run_id} from its last recorded step")
        try:
            result = await durable.continue_run(run_id, Control())
        except FabricError as exc:
            failed += 1
            say(f"durable run {run_id} could not be continued: {exc.message}")
            return
        say(f"durable run {run_id} ended {result.status.value} after {result.steps} step(s)")

    while not stop.is_set():
        for run_id in await durable.orphans():
            if run_id not in driving:
                driving[run_id] = asyncio.create_task(drive(run_id))
        driving = {k: t for k, t in driving.items() if not t.done()}
        busy = bool(driving) or await tasks.busy()
        idle = idle and not busy
        if once and not busy:
            if idle:
                say("nothing to do: no task waits, no unfinished durable run to take over")
            return failed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=min(every, 0.2) if once else every)
    return failed
