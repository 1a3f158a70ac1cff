"""The model/tool loop.

One run: the pack's system prompt and the task go to the model with the pack's tools and
``finish_task``; each tool call the model makes is run and its result goes back; the run ends on
a valid ``finish_task``, the step limit, cancellation or a fatal model error. Whatever happens,
``run_finished`` is the last event in the runlog and a ``RunResult`` comes back: nothing the
model sends can make this function raise. The loop itself is in ``loop/``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fabric.config.prompts import TOOL_SEARCH
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunResult, RunStatus

from .approvals import PolicyGate
from .budget import Spending
from .context import ToolContext
from .cost import RunCost
from .job import LEFT_FOR_RECOVERY, Control, Job, Kit
from .loop.run import Run
from .loop.search import Catalog
from .loop.state import Stop, describe, usage_json
from .loop.window import Window, asked_of
from .paths import resolved
from .verify import describe as describe_checks

_UNWATCHED = Control()


async def execute_task(job: Job, kit: Kit, control: Control = _UNWATCHED) -> RunResult:
    """Run ``job`` with ``kit`` until it finishes, and return how it ended.

    With ``kit.start_error`` (no model or confinement could be set up) the run is recorded as
    started and failed with that error, so it has a runlog like every other run. The policy
    (``sandbox.policy``) decides each tool call, ``control.approver`` answers its asks (none:
    denied); ``control.cancel`` ends the run at its next safe point.
    """
    pack, runlog = job.pack, kit.runlog
    sandbox = job.sandbox or pack.sandbox
    cancel = control.cancel or asyncio.Event()
    spending = _spending(job, control)
    window = None if kit.context_size is None else Window.of(kit.context_size, kit.reply_tokens)
    ctx = ToolContext(
        job.run_id,
        job.workspace,
        sandbox,
        tuple(map(resolved, kit.protected)),
        kit.commands,
        tuple(map(resolved, kit.read_only)),
        runlog.save_artifact,
        cancel=cancel,
        spending=spending,
        brief_chars=None if window is None else window.brief_chars(),
        emit=runlog.emit,
    )
    if kit.chat is None and kit.start_error is None:
        raise ValueError("execute_task needs a chat client or the error that prevented one")
    gate = PolicyGate(
        sandbox.policy,
        approver=control.approver,
        log=runlog,
        run_id=job.run_id,
        cancel=cancel,
        outer=job.outer_policies,
    )
    run = Run(
        job.run_id,
        pack,
        kit.chat,  # type: ignore[arg-type]  # None only with start_error: the loop never runs
        runlog,
        job.limits,
        ctx,
        cancel,
        gate,
        on_delta=control.on_delta(),
        cost=RunCost(kit.prices) if kit.prices is not None else None,
        updates=kit.tool_updates,
        spending=spending,
        window=window,
        summarize=kit.summarize or asked_of(kit.chat),
        catalog=Catalog.for_run(job.tool_search, pack.tools),
    )
    run.record.task = job.task
    system_prompt = pack.system_prompt + (TOOL_SEARCH if run.catalog is not None else "")
    started = time.perf_counter()
    runlog.emit(
        "run_started",
        {
            **job.meta,
            "pack": pack.name,
            "task": job.task,
            "model": kit.chat.model if kit.chat is not None else None,
            "workspace": str(job.workspace),
            "limits": job.limits.model_dump(),
            "sandbox": sandbox.model_dump(),
            "confinement": dict(kit.commands.confinement) if kit.commands is not None else None,
            "system_prompt": system_prompt,
            "finish_schema": pack.finish_schema,
            "verify": describe_checks(pack.verifiers),
            **_context(kit),
            **({"tool_search": run.catalog.meta()} if run.catalog is not None else {}),
        },
    )
    run.messages += [
        {"role": "system", "content": system_prompt},
        {"role": "user", "content": job.task},
    ]
    start_error = kit.start_error or _uncounted(job, kit)
    if start_error is not None:
        return _finish_log(run, Stop(RunStatus.FAILED, error=describe(start_error)), started)
    stop: Stop
    try:
        await run.loop()
    except Stop as signal:
        stop = _untied(signal)
    except asyncio.CancelledError as cut:
        if cut.args[:1] != (LEFT_FOR_RECOVERY,):
            _finish_log(run, Stop(RunStatus.CANCELLED), started)
        raise
    except KeyboardInterrupt:
        _finish_log(run, Stop(RunStatus.CANCELLED), started)
        raise
    except Exception as exc:  # a bug in fabric or an adapter: record it, never lose the log
        stop = Stop(RunStatus.FAILED, error=describe(exc))
    except BaseException as exc:  # SystemExit and the like: log the end, then let it go on
        _finish_log(run, Stop(RunStatus.FAILED, error=describe(exc)), started)
        raise
    return _finish_log(run, stop, started)


def _context(kit: Kit) -> dict[str, Any]:
    """The model's window as the run counts with it (``run_started.context``; none: unknown)."""
    if kit.context_size is None:
        return {}
    return {"context": {"window": kit.context_size, "reply_tokens": kit.reply_tokens}}


def _spending(job: Job, control: Control) -> Spending | None:
    """The run's budget and use, linked to the delegating run's (None: no budget anywhere
    in its tree, so nothing is counted)."""
    if not job.limits.budget.set() and control.spending is None:
        return None
    return Spending(job.limits.budget, job.run_id, parent=control.spending)


def _uncounted(job: Job, kit: Kit) -> ConfigError | None:
    """Why the run's cost limit cannot hold: its model has no price to count with."""
    if job.limits.budget.cost_usd is None or kit.chat is None:
        return None
    model = kit.chat.model
    if None not in (kit.prices or {}).get(model, (None, None)):
        return None
    return ConfigError(
        f"limits.budget.cost_usd is set, but the model {model} has no price: its cost cannot "
        "be counted",
        hint=f"set input_price and output_price under llm.model_options.{model} in fabric.yaml, "
        "or drop the cost limit",
    )


def _untied(stop: Stop) -> Stop:
    """``stop`` without the tracebacks it and what caused it carry. They hold the loop's frames,
    which hold the run (its history, its recording in a replay): a cycle that kept all of it
    alive until the collector's next full pass, which a process of many runs (the service, a
    bench) then paid for in the middle of another run. Nothing reads them: the runlog has
    the error as ``describe`` gives it."""
    seen: set[int] = set()
    exc: BaseException | None = stop
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__
    return stop


def _finish_log(run: Run, stop: Stop, started: float) -> RunResult:
    duration = time.perf_counter() - started
    result = RunResult(
        run_id=run.run_id,
        status=stop.status,
        payload=stop.payload,
        steps=run.steps,
        usage=run.usage,
        duration_s=round(duration, 6),
        runlog_path=run.log.location,
        error=stop.error,
        cost_usd=run.cost.usd if run.cost is not None else None,
    )
    event: dict[str, Any] = {
        "status": stop.status.value,
        "payload": stop.payload,
        "steps": run.steps,
        "usage": usage_json(run.usage),
        "duration_s": result.duration_s,
    }
    if stop.error:
        event["error"] = stop.error
    if run.cost is not None:
        event["cost"] = {"usd": run.cost.usd, "unknown_models": sorted(run.cost.unknown)}
    if run.spending is not None:
        event["budget"] = run.spending.as_json()
    run.log.emit("run_finished", event)
    run.log.close()
    return result
