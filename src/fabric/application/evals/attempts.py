"""Running an eval's attempts: each one a fresh workspace, an ordinary run through the task
runner, then the checks; ``jobs`` of them at once.

Stopping: ``stop`` (Ctrl-C) cancels the running attempts through their runs' cancel events
and starts no new ones; an attempt cut off this way is not logged, so a rerun does it again.
A run that passes its case's ``timeout_s`` is cancelled the same way and logged as failed
with status ``timeout``. A run that does not end ``GRACE_S`` seconds after its cancel (a tool
call still going) is cancelled outright.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from fabric.application.job import RunRequest
from fabric.config.eval_suite import EvalCase
from fabric.config.eval_suite_settings import substitute
from fabric.domain.errors import ConfigError

from .checks import run_checks
from .ports import EvalPorts, RunOutcome
from .records import ERROR, TIMEOUT, AttemptRecord

GRACE_S = 30.0


class Planned(Struct, frozen=True):
    """An attempt to make: case and number (1-based)."""

    case: EvalCase
    attempt: int

    @property
    def key(self) -> tuple[str, int]:
        return self.case.id, self.attempt


class EvalRun(Struct):
    """What one ``run_eval`` did: the attempts it finished (and logged), those it cut off or
    never started, and the configuration error that stopped it, if one did."""

    finished: list[AttemptRecord] = field(default_factory=list)
    left: list[Planned] = field(default_factory=list)
    error: ConfigError | None = None


def plan(
    cases: Iterable[EvalCase],
    repeats: int,
    done: Collection[tuple[str, int]] = (),
    pack: str | None = None,
) -> list[Planned]:
    """Attempts 1..``repeats`` of every case, without those ``done`` (case id, attempt);
    ``pack`` runs every case with that pack instead of its own."""
    cases = [replace(c, pack=pack) if pack else c for c in cases]
    return [
        Planned(case, n)
        for n in range(1, repeats + 1)
        for case in cases
        if (case.id, n) not in done
    ]


async def run_eval(
    planned: Sequence[Planned],
    ports: EvalPorts,
    *,
    out: Path,
    jobs: int = 1,
    variables: Mapping[str, str] | None = None,
    stop: asyncio.Event | None = None,
    on_start: Callable[[Planned], None] | None = None,
    on_finish: Callable[[AttemptRecord], None] | None = None,
) -> EvalRun:
    """Make the ``planned`` attempts, ``jobs`` at a time (first attempts of every case first),
    logging each as it finishes."""
    stop = stop or asyncio.Event()
    queue = deque(planned)
    outcome = EvalRun()

    async def worker() -> None:
        while queue and not stop.is_set():
            item = queue.popleft()
            if on_start:
                on_start(item)
            try:
                record = await run_attempt(
                    item, ports, out=out, variables=variables or {}, stop=stop
                )
            except ConfigError as exc:  # no attempt can run: stop them all
                outcome.error = outcome.error or exc
                outcome.left.append(item)
                stop.set()
                return
            except BaseException:
                outcome.left.append(item)
                raise
            if record is None:
                outcome.left.append(item)
                continue
            ports.log.append(record)
            outcome.finished.append(record)
            if on_finish:
                on_finish(record)

    try:  # a worker's unexpected failure cancels the others: no attempt outlives the eval
        async with asyncio.TaskGroup() as group:
            for _ in range(max(1, min(jobs, len(queue)))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None  # as itself, the others already cancelled
    finally:
        outcome.left.extend(queue)
    return outcome


async def run_attempt(
    item: Planned,
    ports: EvalPorts,
    *,
    out: Path,
    variables: Mapping[str, str],
    stop: asyncio.Event,
) -> AttemptRecord | None:
    """One attempt, checked; None when ``stop`` cut it off (nothing of it is to be kept)."""
    case = item.case
    started = time.monotonic()
    folder = out / "work" / case.id / str(item.attempt)
    await asyncio.to_thread(ports.workspaces.prepare, case.workspace, folder, case.memory)
    if stop.is_set():
        return None
    run_id = ports.runner.new_run_id()
    request = RunRequest(
        pack=case.pack,
        task=substitute(case.task, variables),
        workspace=folder,
        max_steps=case.max_steps,
        verify=case.verify,
        run_id=run_id,
    )
    ran, timed_out = await _run(ports, request, case.timeout_s, stop)
    if stop.is_set():
        return None
    runlog = ran.result.runlog_path if isinstance(ran, RunOutcome) else None
    base: dict[str, Any] = {
        "case": case.id,
        "attempt": item.attempt,
        "tier": case.tier,
        "pack": case.pack,
        "run_id": run_id,
        "runlog": _relative(Path(runlog) if runlog else ports.runner.runlog_path(run_id), out),
    }
    if timed_out:
        usage = _usage(ran) if isinstance(ran, RunOutcome) else {}
        error = {"code": "timeout", "message": f"the run passed its {case.timeout_s:g} s cap"}
        return _record(base, TIMEOUT, False, (), started, error=error, **usage)
    if not isinstance(ran, RunOutcome):
        error = {"code": "internal_error", "message": f"{type(ran).__name__}: {ran}"}
        return _record(base, ERROR, False, (), started, error=error)
    result, usage = ran.result, _usage(ran)
    checking = asyncio.ensure_future(
        run_checks(
            [substitute_check(c, variables) for c in case.checks],
            folder=folder,
            pack=case.pack,
            payload=result.payload,
            workspaces=ports.workspaces,
            commands=ports.commands,
        )
    )
    if not await _unless_stopped(checking, stop):
        return None
    checks = checking.result()
    passed = all(c.passed for c in checks)
    return _record(base, result.status.value, passed, checks, started, error=result.error, **usage)


async def _run(
    ports: EvalPorts, request: RunRequest, timeout: float, stop: asyncio.Event
) -> tuple[RunOutcome | BaseException | None, bool]:
    """The run, cut off by its cap or by ``stop``; and whether the cap cut it."""
    cancel = asyncio.Event()
    running = asyncio.ensure_future(ports.runner.run(request, cancel))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait(
            {running, stopping}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        timed_out = not running.done() and not stop.is_set()
        if not running.done():
            cancel.set()
            await asyncio.wait({running}, timeout=GRACE_S)
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            return None, timed_out
    except asyncio.CancelledError:  # the eval itself is being cancelled: take the run along
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        raise
    finally:
        stopping.cancel()
    error = running.exception()
    if isinstance(error, ConfigError):
        raise error
    return (error if error is not None else running.result()), timed_out


async def _unless_stopped(task: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Wait for ``task``; cancel it and say False if ``stop`` comes first."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return task.done() and not task.cancelled()


def _usage(ran: RunOutcome) -> dict[str, Any]:
    result = ran.result
    return {
        "steps": result.steps,
        "tokens": result.usage.total_tokens,
        "prompt_tokens": result.usage.prompt_tokens,
        "cost": result.cost_usd,
        "model": ran.model,
        "backend": ran.backend,
    }


def substitute_check(check: Any, variables: Mapping[str, str]) -> Any:
    """A check with ``${name}`` replaced in its strings (a new check of the same kind)."""
    if not variables:
        return check
    given = check.model_dump(include=check.model_fields_set)
    return type(check).model_validate(substitute(given, variables))


def _record(
    base: Mapping[str, Any],
    status: str,
    passed: bool,
    checks: tuple[Any, ...],
    started: float,
    *,
    error: Mapping[str, str] | None = None,
    steps: int = 0,
    tokens: int = 0,
    prompt_tokens: int | None = None,
    cost: float | None = None,
    model: str | None = None,
    backend: str | None = None,
) -> AttemptRecord:
    return AttemptRecord(
        **base,
        status=status,
        passed=passed,
        checks=checks,
        steps=steps,
        tokens=tokens,
        prompt_tokens=prompt_tokens,
        cost_usd=cost,
        wall_s=round(time.monotonic() - started, 3),
        finished=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        model=model,
        backend=backend,
        error=error,
    )


def _relative(path: Path, out: Path) -> str:
    """``path`` relative to the output folder (as it is if it lies elsewhere)."""
    try:
        return path.resolve().relative_to(out.resolve()).as_posix()
    except ValueError:
        return str(path)
