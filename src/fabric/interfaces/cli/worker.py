"""``fabric worker``: the process that takes over durable runs (ADR 0020) whose process died on
this machine, and drives each to its end from its last recorded step.

It prints the database it works on, then looks for such runs every ``--every`` seconds (with
``--once``: looks once, finishes what it found and exits). Nobody is there to answer a
policy's ask or a cut-off call of a tool that is not safe to repeat: those are refused, and
the run goes on without them. Queued tasks of many API nodes come with the service's move to
DBOS (issue 16)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .options import ConfigOpt
from .startup import load, say, settle

if TYPE_CHECKING:
    from fabric.infrastructure.durable.engine import DurableRuns


def worker(
    config: ConfigOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Look once, finish what was found, and exit.")
    ] = False,
    every: Annotated[
        float, typer.Option("--every", help="Seconds between looks for unfinished runs.", min=0.1)
    ] = 5.0,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", help="Runs at once (default: serve.concurrency).", min=1),
    ] = None,
) -> None:
    """Take over durable runs whose process died on this machine and drive them to their end
    (`fabric run --durable`, `serve.durable`); stop with Ctrl-C or SIGTERM."""
    import asyncio

    from fabric.domain.errors import FabricError
    from fabric.interfaces.compose import build_runner, durable_runs

    from .startup import fail

    loaded = load(config, False)
    runner = build_runner(loaded, on_status=say)
    durable = durable_runs(loaded, runner)
    limit = concurrency or loaded.config.serve.concurrency

    async def work() -> int:
        async with durable, _one_worker(durable.url):
            say(f"fabric worker: durable runs in {durable.where()}; up to {limit} at once")
            try:
                return await _serve(durable, once=once, every=every, limit=limit)
            finally:
                await runner.aclose()

    settle()
    try:
        failed = asyncio.run(work())
    except FabricError as exc:
        fail(exc, as_json=False, code=2)
    except KeyboardInterrupt:
        say("fabric worker: stopped")
        failed = 0
    raise typer.Exit(1 if failed else 0)


@contextlib.asynccontextmanager
async def _one_worker(url: str) -> AsyncIterator[None]:
    """One worker per database on a machine: two would both take over the same run."""
    import fcntl
    import hashlib
    import tempfile

    from fabric.domain.errors import ConfigError

    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"fabric-worker-{os.getuid()}-{digest}.lock"
    with path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                "another fabric worker already works on this database on this machine",
                hint="one worker per machine takes over every unfinished run; stop the other "
                "one first",
            ) from None
        yield


async def _serve(durable: DurableRuns, *, once: bool, every: float, limit: int) -> int:
    """Continue unfinished runs as they are found; the number whose drive failed."""
    import asyncio

    from fabric.application.job import Control
    from fabric.domain.errors import FabricError

    gate = asyncio.Semaphore(limit)
    driving: dict[str, asyncio.Task[None]] = {}
    failed = 0

    async def drive(run_id: str) -> None:
        nonlocal failed
        async with gate:
            say(f"continuing durable run {run_id} from its last recorded step")
            try:
                result = await durable.continue_run(run_id, Control())
            except FabricError as exc:
                failed += 1
                say(f"durable run {run_id} could not be continued: {exc.message}")
                return
            say(f"durable run {run_id} ended {result.status.value} after {result.steps} step(s)")

    while True:
        for run_id in await durable.orphans():
            if run_id not in driving:
                driving[run_id] = asyncio.create_task(drive(run_id))
        if once:
            await asyncio.gather(*driving.values())
            if not driving:
                say("no unfinished durable run to take over")
            return failed
        await asyncio.sleep(every)
        driving = {k: t for k, t in driving.items() if not t.done()}
