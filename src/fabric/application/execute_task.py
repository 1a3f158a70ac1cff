"""The model/tool loop.

One run: the pack's system prompt and the task go to the model with the pack's tools and
``finish_task``; each tool call the model makes is run and its result goes back; the run ends on
a valid ``finish_task``, the step limit, cancellation or a fatal model error. Whatever happens,
``run_finished`` is the last event in the runlog and a ``RunResult`` comes back: nothing the
model sends can make this function raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabric.config.prompts import FINISH_INVALID, NUDGE, REPEATED, VERIFY_FAILED
from fabric.config.schema import Limits, SandboxSettings
from fabric.domain.errors import FabricError, ToolError
from fabric.domain.models import (
    ChatRequest,
    ChatResponse,
    Message,
    RunResult,
    RunStatus,
    ToolCall,
    ToolSpec,
    Usage,
)

from .approvals import PolicyGate
from .commands import CommandRunner
from .context import ToolContext
from .cost import Prices, RunCost
from .pack import FINISH_TOOL, Brief, Briefing, Pack
from .ports import Approver, ChatClient, DeltaSink, RunLog, Tool
from .verify import RunRecord, ToolUse, Verdict, describe

_SKIPPED = {"skipped": True}
_UNCHECKED = {
    "code": "cancelled",
    "message": "the run was cancelled as its final answer came, before the work was checked: "
    "the payload is the model's claim, unverified",
    "hint": "resume the run (fabric resume) to have the claim checked, or check it yourself",
}


def _unconfirmed(passes: list[str]) -> dict[str, str]:
    """Why a run whose checks all passed is not ``completed``: the passes, none a proof."""
    lines = "\n".join(f"- {p}" for p in passes)
    return {
        "code": "unconfirmed",
        "message": "the work passed every check, but none of them confirms it was done:\n" + lines,
        "hint": "read the result before you rely on it; a check that fails without the work "
        "(a test of the change, or verify.command / --verify naming one) lets fabric confirm "
        "it",
    }


class _Stop(Exception):
    """Ends the loop with a status; raised by helpers, caught once in ``execute_task``."""

    def __init__(
        self,
        status: RunStatus,
        payload: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status.value)
        self.status, self.payload, self.error = status, payload, error


@dataclass
class _Run:
    """The state of one run. ``messages`` is the history in wire form, only ever appended."""

    run_id: str
    pack: Pack
    chat: ChatClient
    log: RunLog
    limits: Limits
    ctx: ToolContext
    cancel: asyncio.Event
    messages: list[Message] = field(default_factory=list)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    repairs: int = 0
    nudged: bool = False
    on_delta: DeltaSink | None = None
    cost: RunCost | None = None
    gate: PolicyGate | None = None
    record: RunRecord = field(default_factory=RunRecord)
    """The tool calls so far, uncut, for the pack's verifiers."""
    _sent: int = 0
    _chatting: asyncio.Task[Any] | None = None
    """The task waiting for the model right now, which a cancel cuts (``_watch``)."""
    _cut: bool = False
    _last_call: tuple[str, str, str] | None = None
    _repeats: int = 0

    def __post_init__(self) -> None:
        self.tools: dict[str, Tool] = {t.spec.name: t for t in self.pack.tools}
        finish = ToolSpec(FINISH_TOOL, self.pack.finish_description, self.pack.finish_schema)
        self.tool_defs = [t.spec.as_openai() for t in self.pack.tools] + [finish.as_openai()]
        self.finish_check = self.pack.finish_check()

    async def loop(self) -> None:
        watcher = asyncio.ensure_future(self._watch())  # one per run, not one per step
        try:
            if self.pack.brief is not None:
                self._check_cancel()
                self.messages[1]["content"] += f"\n\n{await self._brief(self.pack.brief)}"
            await self._steps()
        finally:
            watcher.cancel()

    async def _watch(self) -> None:
        """Wait for the cancel event; when it comes during a model call, cut the call at once
        (mid-stream, or in a retry's backoff): the loop then ends the run as cancelled."""
        await self.cancel.wait()
        if self._chatting is not None:
            self._cut = True
            self._chatting.cancel()

    async def _steps(self) -> None:
        while True:
            self._check_cancel()
            if self.steps >= self.limits.max_steps:
                raise _Stop(RunStatus.MAX_STEPS)
            response = await self._call_model()
            self.messages.append(response.message)
            self._sent = len(self.messages)  # the reply is logged in llm_response, not again
            if not response.tool_calls:
                self._check_cancel()
                self._no_tool_calls(response)
                continue
            for call in response.tool_calls:
                if call.name != FINISH_TOOL:  # a final answer that came with a cancel is kept
                    self._check_cancel()
                self.messages.append(await self._handle(call))

    async def _brief(self, brief: Brief) -> str:
        """The pack's look at the workspace, recorded as the ``brief`` event with the files it
        keeps; its failure is said in the text instead (a run never fails for want of a
        brief)."""
        started = time.perf_counter()
        try:
            found = await brief(self.ctx)
        except Exception as exc:  # a pack's own bug: the run goes on without the look
            found = f"(fabric could not look at the workspace first: {type(exc).__name__}: {exc})"
        told = found if isinstance(found, Briefing) else Briefing(str(found))
        self.record.brief, self.record.before = told.text, told.ran
        event: dict[str, Any] = {"text": told.text, "duration_ms": _ms(started)}
        if told.ran:
            event["ran"] = dict(told.ran)
        if told.keep:
            event |= {"keep": list(told.keep), "keep_why": told.why}
            root = self.ctx.workspace.resolve()
            kept = tuple(root / p for p in told.keep)
            self.ctx = dataclasses.replace(self.ctx, kept=kept, kept_why=told.why)
        self.log.emit("brief", event)
        return told.text

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise _Stop(RunStatus.CANCELLED)

    async def _call_model(self) -> ChatResponse:
        self.steps += 1
        new = self.messages[self._sent :]
        self._sent = len(self.messages)
        request: dict[str, Any] = {"step": self.steps, "messages": new}
        if self.steps == 1:
            request["tools"] = self.tool_defs
        self.log.emit("llm_request", request)
        started = time.perf_counter()
        try:
            response = await self._chat_unless_cancelled()
        except FabricError as exc:
            raise _Stop(RunStatus.FAILED, error=_describe(exc)) from exc
        self.usage += response.usage
        if self.cost is not None:
            self.cost.add(response, self.chat.model)
        event: dict[str, Any] = {
            "step": self.steps,
            "message": response.message,
            "finish_reason": response.finish_reason,
            "usage": _usage(response.usage),
            "model": response.model,
            "duration_ms": _ms(started),
        }
        if response.tool_calls_from_text:
            event["tool_calls_from_text"] = True
        if response.warnings:
            event["warnings"] = list(response.warnings)
        self.log.emit("llm_response", event)
        return response

    async def _chat_unless_cancelled(self) -> ChatResponse:
        """The model call; a cancel during it (``_watch``) cuts it and ends the run as
        cancelled. The call runs in the loop's own task: no task of its own per step."""
        self._check_cancel()
        task = self._chatting = asyncio.current_task()
        assert task is not None  # the loop runs in a task
        try:
            request = ChatRequest(self.messages, self.tool_defs, self.on_delta)
            response = await self.chat.chat(request)
        except asyncio.CancelledError:
            if not self._cut:
                raise  # the run itself was cancelled (Ctrl-C, a shutdown): not ours to keep
            task.uncancel()
            raise _Stop(RunStatus.CANCELLED) from None
        finally:
            self._chatting = None
        if self._cut:  # the cancel came as the reply did: take the cut still pending here
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            task.uncancel()
        return response  # the reply counts: a finish_task in it is kept, the rest not acted on

    def _no_tool_calls(self, response: ChatResponse) -> None:
        text = response.content or ""
        if self.nudged:
            raise _Stop(RunStatus.COMPLETED_FROM_TEXT, payload={"text": text})
        self.nudged = True
        self.log.emit("nudge", {"step": self.steps, "message": NUDGE})
        self.messages.append({"role": "user", "content": NUDGE})

    async def _handle(self, call: ToolCall) -> Message:
        """Run one tool call and return the tool message for the history."""
        self.log.emit(
            "tool_call",
            {
                "step": self.steps,
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments if call.arguments is not None else call.raw_arguments,
            },
        )
        started = time.perf_counter()
        artifact = None
        try:
            if call.arguments is None:
                if call.name == FINISH_TOOL:
                    self._count_repair(f"- (arguments): not a JSON object: {call.arguments_error}")
                raise ToolError(
                    f"the arguments of {_clip(call.name)} are not a JSON object: "
                    f"{call.arguments_error}",
                    hint="send the arguments as one JSON object matching the tool's schema",
                )
            if call.name == FINISH_TOOL:
                output = await self._finish(call.id, call.arguments)
            else:
                if self.gate is not None:  # the policy: allow, ask a person, or deny
                    await self.gate.check(self.steps, call.id, call.name, call.arguments)
                output = await self._run_tool(call.name, call.arguments)
            ok, error = True, None
        except _Stop:
            raise
        except ToolError as exc:
            ok, error = False, _describe(exc)
            output = f"error: {exc}"
        except (Exception, SystemExit) as exc:  # a tool's own bug must not end the run
            ok, error = False, {"code": "tool_crashed", "message": f"{type(exc).__name__}: {exc}"}
            output = f"error: the tool {_clip(call.name)} failed: {type(exc).__name__}: {exc}"
        if call.arguments is not None:
            if call.name != FINISH_TOOL:
                self.record.uses.append(ToolUse(call.name, call.arguments, ok, output))
            output += self._repeated(call.name, call.arguments, output)
        if len(output) > self.limits.tool_output_chars:
            name = f"step{self.steps}-{call.name[:40]}-{call.id[:40]}.txt"
            artifact = self.log.save_artifact(name, output)
            output = _shorten(output, self.limits.tool_output_chars, artifact)
        result: dict[str, Any] = {
            "step": self.steps,
            "call_id": call.id,
            "name": call.name,
            "ok": ok,
            "output": output,
            "duration_ms": _ms(started),
        }
        if error:
            result["error"] = error
        if artifact:
            result["artifact"] = artifact
        self.log.emit("tool_result", result)
        return {"role": "tool", "tool_call_id": call.id, "content": output}

    def _repeated(self, name: str, arguments: Mapping[str, Any], output: str) -> str:
        """A note for the model when it makes the call it just made and gets the same result:
        small models loop on one failing edit until the steps run out."""
        key = (name, json.dumps(arguments, sort_keys=True, default=str), output)
        self._repeats = self._repeats + 1 if key == self._last_call else 1
        self._last_call = key
        return REPEATED.format(times=self._repeats) if self._repeats > 1 else ""

    async def _run_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(
                f"unknown tool {_clip(name)!r}",
                hint=f"use one of: {', '.join(self.pack.tool_names())}",
            )
        try:
            async with asyncio.timeout(self.limits.tool_timeout) as deadline:
                return await tool(arguments, self.ctx)
        except TimeoutError:
            if not deadline.expired():
                raise  # the tool's own timeout, reported as its failure
            raise ToolError(
                f"{name} did not finish within {self.limits.tool_timeout:g} s",
                hint="try a smaller piece of work, or raise limits.tool_timeout for the pack",
            ) from None

    async def _finish(self, call_id: str, arguments: dict[str, Any]) -> str:
        errors = self.finish_check(arguments)
        if errors:
            problems = "\n".join(f"- {e}" for e in errors)
            self._count_repair(problems)
            raise ToolError(FINISH_INVALID.format(problems=problems))
        unconfirmed = await self._verify(call_id, arguments)
        if unconfirmed:
            raise _Stop(RunStatus.COMPLETED_UNCONFIRMED, arguments, _unconfirmed(unconfirmed))
        raise _Stop(RunStatus.COMPLETED, payload=arguments)

    async def _verify(self, call_id: str, payload: dict[str, Any]) -> list[str]:
        """Run the pack's checks of the work, each recorded as a ``verification`` event; a
        failed one goes back to the model as this finish_task's result (a repair round). A
        check that cannot run at all ends the run ``unverified``. A cancel ends the run
        before the next check, ``cancelled`` with the claim kept as its payload: unchecked,
        it is not ``completed``, and it is not thrown away either.

        When all pass, the passes that do not confirm the work (each ``check: summary``);
        empty when one of them confirms it, or when the pack has no checks."""
        unconfirmed: list[str] = []
        confirmed = not self.pack.verifiers
        for verifier in self.pack.verifiers:
            if self.cancel.is_set():
                raise _Stop(RunStatus.CANCELLED, payload, _UNCHECKED)
            started = time.perf_counter()
            event = {"step": self.steps, "call_id": call_id, "check": verifier.name}
            try:
                verdict = await verifier.verify(payload, self.ctx, self.record)
            except FabricError as exc:
                error = _describe(exc)
                self.log.emit(
                    "verification",
                    {
                        **event,
                        "ok": False,
                        "summary": f"the check could not run: {exc.message}",
                        "error": error,
                        "duration_ms": _ms(started),
                    },
                )
                message = f"the work could not be verified ({verifier.name}): {exc.message}"
                raise _Stop(RunStatus.UNVERIFIED, payload, {**error, "message": message}) from exc
            if verdict is None:
                verdict = Verdict(
                    True, "nothing to check in this run", detail=_SKIPPED, confirms=False
                )
            self.log.emit(
                "verification", {**event, **verdict.as_event(), "duration_ms": _ms(started)}
            )
            if verdict.ok:
                confirmed = confirmed or verdict.confirms is not False
                unconfirmed.append(f"{verifier.name}: {verdict.summary}")
                continue
            self._count_repair(
                f"{verdict.summary}\n{verdict.evidence}".strip(),
                status=RunStatus.UNVERIFIED,
                payload=payload,
            )
            left = self.limits.finish_repairs - self.repairs + 1
            raise ToolError(
                VERIFY_FAILED.format(
                    summary=verdict.summary,
                    evidence=verdict.evidence,
                    left=left,
                )
            )
        return [] if confirmed else unconfirmed

    def _count_repair(
        self,
        problems: str,
        *,
        status: RunStatus = RunStatus.INVALID_OUTPUT,
        payload: dict[str, Any] | None = None,
    ) -> None:
        """One more rejected finish_task; end the run once the repair rounds are used up:
        ``invalid_output`` for arguments that never fit the schema, ``unverified`` (keeping
        the last claim as the payload) for work that never passed verification."""
        self.repairs += 1
        if self.repairs <= self.limits.finish_repairs:
            return
        rounds = f"{self.limits.finish_repairs} repair round(s)"
        if status is RunStatus.UNVERIFIED:
            error = {
                "code": "unverified",
                "message": f"the work still failed verification after {rounds}:\n{problems}",
                "hint": "see the verification events in the runlog (fabric show); try a "
                "stronger model, more steps, or a smaller task",
            }
        else:
            error = {
                "code": "invalid_output",
                "message": f"finish_task arguments were still invalid after {rounds}:\n{problems}",
                "hint": "use a stronger model or relax the pack's finish schema",
            }
        raise _Stop(status, payload=payload, error=error)


async def execute_task(
    task: str,
    *,
    pack: Pack,
    chat: ChatClient | None,
    runlog: RunLog,
    run_id: str,
    workspace: Path,
    sandbox: SandboxSettings | None = None,
    limits: Limits | None = None,
    cancel: asyncio.Event | None = None,
    protected: tuple[Path, ...] = (),
    read_only: tuple[Path, ...] = (),
    meta: Mapping[str, Any] | None = None,
    on_delta: DeltaSink | None = None,
    prices: Prices | None = None,
    start_error: FabricError | None = None,
    commands: CommandRunner | None = None,
    approver: Approver | None = None,
) -> RunResult:
    """Run ``task`` with ``pack`` until it finishes, and return how it ended.

    With ``start_error`` (no model could be set up; ``chat`` is then None) the run is recorded
    as started and failed with that error, so it has a runlog like every other run.

    ``sandbox`` defaults to the pack's own; ``protected`` places file tools neither read
    nor write; ``read_only`` ones (host code, ADR 0013) they only read.
    ``commands`` starts the processes tools ask for (the shell tool), confined by the OS.
    ``sandbox.policy`` decides each tool call; ``approver`` answers its asks (none: denied).
    ``on_delta`` gets the model's reply as it streams in; with ``prices`` the run's cost is
    counted (a model without a price counts as 0 and is listed in ``run_finished.cost``).
    """
    limits = limits or Limits()
    sandbox = sandbox or pack.sandbox
    ctx = ToolContext(
        run_id,
        workspace,
        sandbox,
        tuple(p.resolve() for p in protected),
        commands,
        tuple(p.resolve() for p in read_only),
        runlog.save_artifact,
    )
    if chat is None and start_error is None:
        raise ValueError("execute_task needs a chat client or the error that prevented one")
    run = _Run(run_id, pack, chat, runlog, limits, ctx, cancel or asyncio.Event())  # type: ignore[arg-type]
    run.record.task = task
    run.on_delta = on_delta
    run.gate = PolicyGate(
        sandbox.policy, approver=approver, log=runlog, run_id=run_id, cancel=run.cancel
    )
    run.cost = RunCost(prices) if prices is not None else None
    started = time.perf_counter()
    runlog.emit(
        "run_started",
        {
            **(meta or {}),
            "pack": pack.name,
            "task": task,
            "model": chat.model if chat is not None else None,
            "workspace": str(workspace),
            "limits": limits.model_dump(),
            "sandbox": sandbox.model_dump(),
            "confinement": dict(commands.confinement) if commands is not None else None,
            "system_prompt": pack.system_prompt,
            "finish_schema": pack.finish_schema,
            "verify": describe(pack.verifiers),
        },
    )
    run.messages += [
        {"role": "system", "content": pack.system_prompt},
        {"role": "user", "content": task},
    ]
    if start_error is not None:
        return _finish_log(run, _Stop(RunStatus.FAILED, error=_describe(start_error)), started)
    stop: _Stop
    try:
        await run.loop()
    except _Stop as signal:
        stop = signal
    except (asyncio.CancelledError, KeyboardInterrupt):
        _finish_log(run, _Stop(RunStatus.CANCELLED), started)
        raise
    except Exception as exc:  # a bug in fabric or an adapter: record it, never lose the log
        stop = _Stop(RunStatus.FAILED, error=_describe(exc))
    except BaseException as exc:  # SystemExit and the like: log the end, then let it go on
        _finish_log(run, _Stop(RunStatus.FAILED, error=_describe(exc)), started)
        raise
    return _finish_log(run, stop, started)


def _finish_log(run: _Run, stop: _Stop, started: float) -> RunResult:
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
        "usage": _usage(run.usage),
        "duration_s": result.duration_s,
    }
    if stop.error:
        event["error"] = stop.error
    if run.cost is not None:
        event["cost"] = {"usd": run.cost.usd, "unknown_models": sorted(run.cost.unknown)}
    run.log.emit("run_finished", event)
    run.log.close()
    return result


def _describe(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, FabricError):
        out = {"code": exc.code, "message": exc.message}
        if exc.hint:
            out["hint"] = exc.hint
        status = getattr(exc, "status_code", None)
        if status is not None:
            out["status_code"] = str(status)
        return out
    return {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}


def _usage(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _clip(text: str, limit: int = 80) -> str:
    """A model-chosen name, short enough to quote back in a message."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shorten(text: str, limit: int, artifact: str) -> str:
    note = f"\n[... {len(text) - limit} characters cut; the full output is in {artifact} ...]\n"
    head = limit * 3 // 4
    return text[:head] + note + text[len(text) - (limit - head) :]
