"""One tool call of the model's: logged, checked by the policy, run within its time limit,
its output cut to size (the whole of it kept as an artifact) and logged again."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from fabric.application.context import FileChange, ToolContext
from fabric.application.pack import FINISH_TOOL
from fabric.application.verify import ToolUse
from fabric.config.prompts import REPEATED
from fabric.domain.errors import ToolError
from fabric.domain.models import Message, ToolCall

from .deadline import Expired, within
from .fitting import Fitting
from .search import LOAD_TOOL, OWN, SEARCH_TOOL
from .state import Stop, clip, describe, ms_since
from .window import RECALL_TOOL

_NOTE_START = "\n[fabric: you made this same call "
_NOTE = re.compile(re.escape(_NOTE_START) + r"\d+ times in a row[^\]]*\]\Z")
"""The repeat note (``REPEATED``) at the end of an output."""


def _note_at(output: str) -> int:
    """Where the repeat note at the end of ``output`` starts, or -1 (looked for from the end:
    outputs can be long)."""
    if not output.endswith("]"):
        return -1
    at = output.rfind(_NOTE_START)
    return at if at >= 0 and _NOTE.match(output, at) else -1


_SORTED = msgspec.json.Encoder(order="sorted", enc_hook=str)


def _arguments_key(arguments: Mapping[str, Any]) -> str:
    """The arguments as JSON with sorted keys, to tell the same call made again: msgspec's
    text (a fifth of ``json.dumps``' time), or ``json.dumps``' where msgspec's may not hold
    the value exactly (a ``null``: it writes NaN so) or it refuses one (a lone surrogate).
    Each text reads back as the arguments it was made of, so equal texts are equal calls."""
    try:
        text = _SORTED.encode(arguments)
    except (msgspec.EncodeError, ValueError, TypeError):
        text = b"null"
    if b"null" in text:
        return json.dumps(arguments, sort_keys=True, default=str)
    return text.decode()


class ToolSteps(Fitting):
    """How a run handles the tool calls in a model's reply."""

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
        changes: list[FileChange] = []  # what this call changes in the workspace, if anything
        delegated: list[str] = []  # the sub-runs it started, if it delegates
        added: dict[str, Any] = {}  # what fabric's conventions appended to its output
        try:
            if call.arguments is None:
                if call.name == FINISH_TOOL:
                    self._count_repair(f"- (arguments): not a JSON object: {call.arguments_error}")
                raise ToolError(
                    f"the arguments of {clip(call.name)} are not a JSON object: "
                    f"{call.arguments_error}",
                    hint="send the arguments as one JSON object matching the tool's schema",
                )
            if call.name == FINISH_TOOL:
                output = await self._finish(call.id, call.arguments)
            elif call.name == RECALL_TOOL and self._elided:  # fabric's own: no policy applies
                output = self._recall(call.arguments)
            elif call.name in OWN and self.catalog is not None:  # fabric's own too
                output = self._searched(call.name, call.arguments)
            else:
                self._check_loaded(call.name)
                if self.gate is not None:  # the policy: allow, ask a person, or deny
                    await self.gate.check(self.steps, call.id, call.name, call.arguments)
                ctx = msgspec.structs.replace(
                    self.ctx, changes=changes, step=self.steps, call_id=call.id,
                    delegated=delegated,
                )  # fmt: skip
                output = await self._run_tool(call.name, call.arguments, ctx)
                if self.pack.after_calls:
                    output += await self._after_calls(call, ctx, added)
            ok, error = True, None
        except Stop:
            raise
        except ToolError as exc:
            ok, error = False, describe(exc)
            output = f"error: {exc}"
        except (Exception, SystemExit) as exc:  # a tool's own bug must not end the run
            ok, error = False, {"code": "tool_crashed", "message": f"{type(exc).__name__}: {exc}"}
            output = f"error: the tool {clip(call.name)} failed: {type(exc).__name__}: {exc}"
        if call.arguments is not None:
            if call.name not in (FINISH_TOOL, RECALL_TOOL) and not self._searching(call.name):
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
            "duration_ms": ms_since(started),
        }
        if error:
            result["error"] = error
        if artifact:
            result["artifact"] = artifact
        if changes:  # for people reading the log; the model gets ``output`` alone
            result["changes"] = [change.as_json() for change in changes]
        if delegated:  # the sub-runs' own runlogs
            result["child_run_ids"] = list(delegated)
        if added:
            result["additions"] = added
        self.log.emit("tool_result", result)
        return {"role": "tool", "tool_call_id": call.id, "content": output}

    async def _after_calls(self, call: ToolCall, ctx: ToolContext, added: dict[str, Any]) -> str:
        """What the pack's after-call hooks append to the output of ``call``, which ran with
        ``ctx`` (``Pack.after_calls``); what each says of it goes into ``added``. A hook that
        fails adds nothing, and its error is recorded: the tool's own output stands."""
        assert call.arguments is not None
        text = ""
        for key, after_call in self.pack.after_calls.items():
            try:
                appended = await after_call(call.name, call.arguments, ctx)
            except Exception as exc:  # fabric's own bug: the call's output still goes back
                added[key] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            if appended is not None:
                text += appended.text
                added[key] = dict(appended.meta)
        return text

    def _check_loaded(self, name: str) -> None:
        """In a run that searches its tools, a tool not offered now (not loaded) is refused
        before the policy is asked: nobody is asked to approve a call that cannot run."""
        if self.catalog is not None and name not in self.tools:
            raise self.catalog.refusal(name, [*self.tools, FINISH_TOOL, SEARCH_TOOL, LOAD_TOOL])

    def _searching(self, name: str) -> bool:
        """Whether ``name`` is fabric's tool search in this run."""
        return name in OWN and self.catalog is not None

    def _searched(self, name: str, arguments: Mapping[str, Any]) -> str:
        """``search_tools`` or ``load_tools`` (ADR 0028). Loaded tools can be called at
        once; their schemas are sent from the next request on."""
        assert self.catalog is not None
        if name == SEARCH_TOOL:
            return self.catalog.search(arguments)
        before = len(self.catalog.loaded)
        output = self.catalog.load(arguments)
        if len(self.catalog.loaded) > before:
            self._offer(self.catalog.tools)
        return output

    def _repeated(self, name: str, arguments: Mapping[str, Any], output: str) -> str:
        """A note for the model when it makes the call it just made and gets the same result:
        small models loop on one failing edit until the steps run out. Every repeat gets it:
        with it only on some, the embedded model rewrote one file 29 times in a row. A
        replayed or resumed step's recorded output carries the note it got then: counted
        without it, and not given a second one."""
        noted = _note_at(output)
        base = output[:noted] if noted >= 0 else output
        key = (name, _arguments_key(arguments), base)
        self._repeats = self._repeats + 1 if key == self._last_call else 1
        self._last_call = key
        if noted >= 0 or self._repeats < 2:
            return ""
        return REPEATED.format(times=self._repeats)

    def _outgoing(self) -> list[Message]:
        """The history as the model gets it: the repeat note only on the newest output that
        has one. An older note says nothing the newest does not (its count is higher), and a
        small model's context is short. A function of the history alone, so a resumed or
        replayed run sends what the run sent; the runlog keeps each note where it was made.
        Kept up to date step by step: each call looks only at the messages added since."""
        messages, sent = self.messages, self._wire
        for at in range(self._scanned, len(messages)):
            message = messages[at]
            sent.append(message)
            content = message.get("content")
            if message.get("role") != "tool" or not isinstance(content, str):
                continue
            note = _note_at(content)
            if note < 0:
                continue
            if self._noted:  # the note before this one is sent no more
                older, its_note = self._noted[-1]
                sent[older] = {**sent[older], "content": sent[older]["content"][:its_note]}
            self._noted.append((at, note))
        self._scanned = len(messages)
        return sent

    async def _run_tool(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(
                f"unknown tool {clip(name)!r}",
                hint=f"use one of: {', '.join([*self.tools, FINISH_TOOL])}",
            )
        timeout, left = self.limits.tool_timeout, self._seconds_left()
        seconds = timeout if left is None else min(left, timeout)
        by_budget = seconds < timeout
        try:  # a TimeoutError the tool raises itself is reported as its failure
            return await within(tool(arguments, ctx), seconds)
        except Expired:
            if by_budget:
                raise ToolError(
                    f"{name} was stopped: the run's time budget ran out",
                    hint="raise limits.budget.seconds for the pack (or --max-seconds)",
                ) from None
            raise ToolError(
                f"{name} did not finish within {self.limits.tool_timeout:g} s",
                hint="try a smaller piece of work, or raise limits.tool_timeout for the pack",
            ) from None


def _shorten(text: str, limit: int, artifact: str) -> str:
    note = f"\n[... {len(text) - limit} characters cut; the full output is in {artifact} ...]\n"
    head = limit * 3 // 4
    return text[:head] + note + text[len(text) - (limit - head) :]
