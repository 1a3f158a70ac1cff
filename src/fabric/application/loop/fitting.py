"""A run's requests kept inside its model's context window (see ``window.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fabric.domain.errors import FabricError, ModelContextLengthError, ToolError
from fabric.domain.models import Message, RunStatus

from .finish import Finishing
from .state import Stop, describe, usage_json
from .window import (
    KEEP_TURNS,
    RECALL,
    RECALL_TOOL,
    SHORTEST,
    TARGET,
    TRIGGER,
    elided_note,
    summary_block,
    summary_request,
)
from .window import message_chars as _chars


class Fitting(Finishing):
    """The run's requests kept inside its model's window (``window``; None: unknown)."""

    def _sending(self, wire: Sequence[Message]) -> list[Message]:
        """``wire`` (the history as sent, ``_outgoing``) with the elided outputs replaced and,
        once older turns were summarised, the summary in their place."""
        sent = [
            {**m, "content": self._elided[at]} if at in self._elided else m
            for at, m in enumerate(wire)
        ]
        if self._summary is not None:
            end, summary = self._summary
            task = {**sent[1], "content": f"{sent[1].get('content') or ''}{summary}"}
            sent = [sent[0], task, *sent[end:]]
        return sent

    def _compacted(self) -> bool:
        return bool(self._elided) or self._summary is not None

    def _size(self, wire: Sequence[Message]) -> int:
        """The characters of the next request as it would be sent now: the history (the
        elided outputs replaced, older turns summarised) and the tool schemas."""
        sent = self._sending(wire) if self._compacted() else wire
        if self._tool_chars[0] is not self.tool_defs:  # a new list since: measured again
            self._tool_chars = (self.tool_defs, len(json.dumps(self.tool_defs)))
        return self._tool_chars[1] + sum(_chars(m) for m in sent)

    async def _fit(self, wire: Sequence[Message]) -> bool:
        """Make the next request fit the window: when it comes near, elide old outputs, then
        summarise older turns; fail the run when it cannot fit. True when the tools offered
        changed (``recall_output`` offered from the first elision on)."""
        window = self.window
        assert window is not None
        chars = self._size(wire)
        before = int(chars * self._ratio)
        offered = False
        if before > TRIGGER * window.prompt:
            elided = self._elide(wire, chars - int(TARGET * window.prompt / self._ratio))
            chars = self._size(wire)
            summary = None
            if int(chars * self._ratio) > TRIGGER * window.prompt:  # eliding was not enough
                summary = await self._summarise(wire)
                chars = self._size(wire)
            if elided or summary:
                event: dict[str, Any] = {
                    "step": self.steps,
                    "window": window.size,
                    "prompt_tokens_max": window.prompt,
                    "tokens_before": before,
                    "tokens_after": int(chars * self._ratio),
                    "elided": elided,
                }
                if summary:
                    event["summary"] = summary
                self.log.emit("context_compacted", event)
            if elided and not any(d["function"]["name"] == RECALL_TOOL for d in self.tool_defs):
                self.tool_defs = [*self.tool_defs, RECALL.as_openai()]
                offered = True
                chars = self._size(wire)
        self._last_chars = chars  # what is sent now: the server's count calibrates with it
        need = int(chars * self._ratio)
        if need > window.prompt:
            too_big = ModelContextLengthError(
                f"the next request needs about {need:,} tokens, but the model's context window "
                f"of {window.size:,} holds {window.prompt:,} besides the reply, even with "
                "older tool outputs elided and older turns summarised",
                hint="use a model with a larger window (llm.model_options.<model>.context_size, "
                "or the embedded backend's context_size), or give the run a smaller task",
            )
            raise Stop(RunStatus.FAILED, error=describe(too_big))
        return offered

    async def _summarise(self, wire: Sequence[Message]) -> dict[str, Any] | None:
        """Replace the turns before the latest ones (with any earlier summary) by a summary
        the model writes; what was summarised, for the runlog (None: nothing to do)."""
        turns = [at for at, m in enumerate(wire) if m.get("role") == "assistant"]
        if self.summarize is None or len(turns) <= KEEP_TURNS:
            return None
        start = self._summary[0] if self._summary is not None else 2
        end = turns[-KEEP_TURNS]
        if end <= start:
            return None
        self._check_budget(model_calls=1)
        sent = self._sending(wire)  # the turns as they are sent: outputs elided
        offset = len(wire) - len(sent)  # the turns the current summary stands for
        earlier = self._summary[1] if self._summary is not None else ""
        asked = summary_request(
            str(wire[1].get("content") or ""), earlier, sent[start - offset : end - offset]
        )
        try:
            response = await self.summarize(asked)
        except FabricError as exc:
            raise Stop(RunStatus.FAILED, error=describe(exc)) from exc
        self._charge(response)
        through = sum(1 for at in turns if at < end)
        text = (response.content or "").strip() or "(the model wrote no summary)"
        self._summary = (end, summary_block(through, text))
        return {"through_step": through, "text": text, "usage": usage_json(response.usage)}

    def _elide(self, wire: Sequence[Message], chars: int) -> list[dict[str, Any]]:
        """Elide the oldest outputs outside the latest turns until about ``chars``
        characters are saved; what was elided, for the runlog."""
        turns = [at for at, m in enumerate(wire) if m.get("role") == "assistant"]
        if len(turns) < KEEP_TURNS:
            return []
        done: list[dict[str, Any]] = []
        step, names = 0, {}
        for at in range(turns[-KEEP_TURNS]):
            message = wire[at]
            if message.get("role") == "assistant":  # a new turn: its calls' names
                step += 1
                names = {str(c.get("id")): str((c.get("function") or {}).get("name"))
                         for c in message.get("tool_calls") or ()}  # fmt: skip
            content = str(message.get("content") or "")
            summarised = self._summary is not None and at < self._summary[0]  # not sent
            if message.get("role") != "tool" or at in self._elided or summarised:
                continue
            if len(content) < SHORTEST:
                continue
            call_id = str(message.get("tool_call_id"))
            ref = f"{step}:{call_id}"  # a call id alone may come back in a later turn
            self._elided[at] = note = elided_note(len(content), ref)
            self._refs[ref] = at
            done.append({"ref": ref, "call_id": call_id, "tool": names.get(call_id),
                         "chars": len(content)})  # fmt: skip
            chars -= len(content) - len(note)
            if chars <= 0:
                break
        return done

    def _counted(self, chars: int, prompt_tokens: int) -> None:
        """The server counted ``prompt_tokens`` for a request of ``chars`` characters: the
        tokens a character from now on."""
        if prompt_tokens > 0 and chars > 0:
            self._ratio = prompt_tokens / chars

    def _recall(self, arguments: Mapping[str, Any]) -> str:
        """``recall_output``: an elided output, whole, from the run's history."""
        ref = str(arguments.get("ref"))
        if ref not in self._refs:
            known = ", ".join(self._refs)
            raise ToolError(f"no elided output has ref {ref!r}", hint=f"the elided ones: {known}")
        return str(self.messages[self._refs[ref]].get("content") or "")
