"""What a run shows at the terminal: live progress, the result and exit code, and the stream
every line goes out through, which keeps secrets out of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from fabric.domain.errors import ConfigError
from fabric.domain.models import ChatDelta, RunResult, RunStatus
from fabric.domain.secrets import Secrets

from .event_lines import describe_event, for_terminal


class RedactingStream:
    """A text stream (stdout, stderr) that writes to ``stream`` without ``secrets``. Each
    write is redacted on its own: callers write whole lines (a secret split across two writes
    is the caller's to hold back, as ``Progress.delta`` does). It has no ``buffer``, so
    nothing (click's echo included) writes around it."""

    def __init__(self, stream: TextIO, secrets: Secrets) -> None:
        self.stream = stream
        self.secrets = secrets

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click tells text streams from binary ones by this
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.stream.write(self.secrets.redact(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        return self.stream.closed

    @property
    def encoding(self) -> str:
        return self.stream.encoding or "utf-8"

    @property
    def errors(self) -> str:
        return self.stream.errors or "strict"


class Progress:
    """A run's observer (``RunObserver``) that prints each step as it happens. With ``live``
    (a terminal), the model's reply is also shown while it streams in; otherwise only whole
    lines are written.
    A streamed piece that may be the start of one of ``secrets`` waits for the next one."""

    def __init__(self, out: TextIO, *, live: bool = False, secrets: Secrets | None = None) -> None:
        self._out = out
        self._live = live
        self._secrets = secrets or Secrets()
        self._held = ""  # streamed text that may begin a secret, not shown yet
        self._pending: dict[str, Mapping[str, Any]] = {}
        self._step = 0
        self._open = False  # a streamed line is on screen, not yet ended
        self._chars = 0
        self._tool = "tool call"

    def event(self, event: Mapping[str, Any]) -> None:
        """A runlog event: its line, once the log holds it."""
        if event["kind"] == "llm_request":
            self._step = int(event.get("step", 0))
        if self._open:
            self._out.write("\r\x1b[K")  # replace the live line with the final one
            self._open = False
        line = describe_event(event, self._pending)
        if line is not None:
            self._out.write(line + "\n")
        self._out.flush()

    def pause(self) -> None:
        """End a live line still on screen, so a prompt can be written below it."""
        if self._open:
            self._out.write("\r\x1b[K")
            self._open = False
            self._out.flush()

    def delta(self, delta: ChatDelta) -> None:
        """A piece of the reply as it streams in (shown only on a terminal)."""
        if not self._live:
            return
        if delta.text:
            if not self._open:
                self._out.write(f"  step {self._step:>2}  model: ")
                self._open, self._chars, self._held = True, 0, ""
            text = self._secrets.redact(self._held + delta.text)
            cut = len(text) - self._secrets.held_back(text)
            text, self._held = text[:cut], text[cut:]
            text = for_terminal(text.replace("\n", " "))[: max(0, 100 - self._chars)]
            self._chars += len(text)
            self._out.write(text)
        elif delta.tool_name or delta.arguments:
            if delta.tool_name:
                self._tool, self._chars = for_terminal(delta.tool_name), 0
            self._chars += len(delta.arguments)
            self._out.write(
                f"\r\x1b[K  step {self._step:>2}  {self._tool} ... "
                f"{self._chars} characters of arguments"
            )
            self._open = True
        self._out.flush()


def print_result(result: RunResult, *, as_json: bool) -> None:
    if as_json:
        out = {
            "run_id": result.run_id,
            "status": result.status.value,
            "payload": result.payload,
            "runlog": result.runlog_path,
            "steps": result.steps,
            "usage": {
                "prompt_tokens": result.usage.prompt_tokens,
                "completion_tokens": result.usage.completion_tokens,
            },
        }
        if result.error:
            out["error"] = result.error
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return
    if result.payload is not None:
        print(json.dumps(result.payload, indent=2, ensure_ascii=False))
    print(f"runlog: {result.runlog_path}")


UNCONFIRMED_EXIT = 3
"""The exit code of a run that ended ``completed_unconfirmed``: done as the model says and
every check passed, but none could confirm it (0 is for work fabric confirmed, 1 for work
not done): a script that only trusts 0 does not take an unconfirmed claim as done."""


def exit_code(result: RunResult) -> int:
    """How ``fabric run`` and ``fabric resume`` exit on a run's end (2, usage, is decided
    before a run starts)."""
    if result.status is RunStatus.COMPLETED_UNCONFIRMED:
        return UNCONFIRMED_EXIT
    return 0 if result.succeeded else 1


def describe_failure(result: RunResult) -> str:
    """Why a run did not finish, or could not be confirmed, with what to do next, for a person
    reading stderr."""
    text = f"the task did not finish: {result.status.value} after {result.steps} step(s)"
    if result.status is RunStatus.COMPLETED_UNCONFIRMED:
        text = f"done, but not confirmed: {result.status.value} after {result.steps} step(s)"
    if result.error:
        text += f"\n{result.error.get('message', '')}"
        if result.error.get("hint"):
            text += f"\n  hint: {result.error['hint']}"
    return text


def cancelled_result(runlog: Path) -> RunResult:
    """How a run stopped by Ctrl-C ended, from the ``run_finished`` its runlog ends with (the
    loop logs the end, then the interrupt goes on, so no ``RunResult`` comes back); without
    one (cut off before its runlog began, or before its end was logged) it is ``cancelled``."""
    from fabric.application.resume import logged_result
    from fabric.infrastructure.runlog import read_runlog

    try:
        events, _ = read_runlog(runlog)
    except ConfigError:
        events = []
    last = events[-1] if events else {}
    end: Mapping[str, Any] = last if last.get("kind") == "run_finished" else {}
    run_id = str(events[0].get("run_id")) if events else runlog.parent.name
    path = str(runlog) if events else None
    return logged_result(end, run_id, path, default=RunStatus.CANCELLED)
