"""The loop of one run: the pack's brief, then model call after model call, each reply's
tool calls handled in order, until a final answer, the step limit or a cancel ends it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec

from fabric.application.pack import FINISH_TOOL, Brief, Briefing
from fabric.application.ports import ToolChange, tool_diff
from fabric.config.prompts import NUDGE
from fabric.domain.errors import FabricError
from fabric.domain.models import ChatRequest, ChatResponse, RunStatus

from .state import Stop, describe, ms_since, usage_json
from .tools import ToolSteps


class Run(ToolSteps):
    """One run, driven by ``execute_task``."""

    async def loop(self) -> None:
        self._task = asyncio.current_task()
        watcher = asyncio.ensure_future(self._watch())  # one per run, not one per step
        try:
            if self.pack.brief is not None:
                self._check_cancel()
                self.messages[1]["content"] += f"\n\n{await self._brief(self.pack.brief)}"
            await self._steps()
        finally:
            watcher.cancel()

    async def _watch(self) -> None:
        """Wait for the cancel event, or for the budget's time to run out; when either comes
        during a model call, cut the call at once (mid-stream, or in a retry's backoff): the
        loop then ends the run as cancelled, or ``budget_exceeded``."""
        try:
            await asyncio.wait_for(self.cancel.wait(), self._seconds_left())
        except TimeoutError:
            assert self.spending is not None  # only a budget's time runs out
            self._out_of_time = self.spending.time_up()
        if self._chatting is not None:
            self._cut = True
            self._chatting.cancel()

    async def _steps(self) -> None:
        while True:
            self._check_cancel()
            if self.steps >= self.limits.max_steps:
                raise Stop(RunStatus.MAX_STEPS)
            if self.spending is not None:
                self._check_budget(model_calls=1, **self._next_call())
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
                    if self.spending is not None:
                        self._check_budget(tool_calls=1)
                        self.spending.charge_tool()
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
        event: dict[str, Any] = {"text": told.text, "duration_ms": ms_since(started)}
        if self.ctx.brief_chars is not None:
            event["room_chars"] = self.ctx.brief_chars
        if told.ran:
            event["ran"] = dict(told.ran)
        if told.keep:
            event |= {"keep": list(told.keep), "keep_why": told.why}
            root = self.ctx.workspace.resolve()
            kept = tuple(root / p for p in told.keep)
            self.ctx = msgspec.structs.replace(self.ctx, kept=kept, kept_why=told.why)
        self.log.emit("brief", event)
        return told.text

    async def _call_model(self) -> ChatResponse:
        self.steps += 1
        new = self.messages[self._sent :]
        self._sent = len(self.messages)
        request: dict[str, Any] = {"step": self.steps, "messages": new}
        change = await self.updates.changed(self.steps) if self.updates is not None else None
        if change is not None:
            request["tools_changed"] = self._changed(change)
        loaded = self.catalog.fresh() if self.catalog is not None else []
        if loaded:
            request["tools_loaded"] = loaded
        recall = self.window is not None and await self._fit(self._outgoing())
        if self.steps == 1 or change is not None or recall or loaded:
            request["tools"] = self.tool_defs
        self.log.emit("llm_request", request)
        started = time.perf_counter()
        try:
            response = await self._chat_unless_cancelled()
        except FabricError as exc:
            raise Stop(RunStatus.FAILED, error=describe(exc)) from exc
        self._charge(response)
        if self._last_chars:
            self._counted(self._last_chars, response.usage.prompt_tokens)
        event: dict[str, Any] = {
            "step": self.steps,
            "message": response.message,
            "finish_reason": response.finish_reason,
            "usage": usage_json(response.usage),
            "model": response.model,
            "duration_ms": ms_since(started),
        }
        if response.tool_calls_from_text:
            event["tool_calls_from_text"] = True
        if response.warnings:
            event["warnings"] = list(response.warnings)
        if self.spending is not None:
            event["spent"] = self.spending.used_json()
        self.log.emit("llm_response", event)
        return response

    def _changed(self, change: ToolChange) -> dict[str, Any]:
        """Offer the tools of ``change``; what changed, for ``llm_request.tools_changed``.
        A run that searches its tools offers few of them: the note has the definitions of
        the tools that came or changed, so a replay searches the same catalog."""
        before = list(self.catalog.tools) if self.catalog is not None else []
        self._offer(change.tools)
        note = dict(change.note)
        if self.catalog is not None:
            diff = tool_diff(before, self.catalog.tools)
            note["definitions"] = self.catalog.definitions([*diff["added"], *diff["changed"]])
        return note

    def _next_call(self) -> dict[str, Any]:
        """About what the next model call adds to the budget: its request's tokens, at the
        tokens a character the server counted for the run's last request, and their price as
        input."""
        tokens = int(self._size(self._outgoing()) * self._ratio) + 1
        cost = self.cost.prompt_cost(tokens, self.chat.model) if self.cost is not None else 0.0
        return {"tokens": tokens, "cost_usd": cost}

    async def _chat_unless_cancelled(self) -> ChatResponse:
        """The model call; a cancel during it (``_watch``) cuts it and ends the run as
        cancelled. The call runs in the loop's own task: no task of its own per step."""
        self._check_cancel()
        task = self._chatting = self._task
        assert task is not None  # the loop runs in a task
        try:
            wire = self._outgoing()
            if self.window is None and self.spending is not None:  # _fit measured it else
                self._last_chars = self._size(wire)
            compacted = self._compacted()
            request = ChatRequest(
                self._sending(wire) if compacted else wire,
                self.tool_defs,
                self.on_delta,
                history=wire if compacted else None,
            )
            response = await self.chat.chat(request)
        except asyncio.CancelledError:
            if not self._cut:
                raise  # the run itself was cancelled (Ctrl-C, a shutdown): not ours to keep
            task.uncancel()
            self._check_cancel()  # the budget's time, or a cancel
            raise Stop(RunStatus.CANCELLED) from None
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
            raise Stop(RunStatus.COMPLETED_FROM_TEXT, payload={"text": text})
        self.nudged = True
        self.log.emit("nudge", {"step": self.steps, "message": NUDGE})
        self.messages.append({"role": "user", "content": NUDGE})
