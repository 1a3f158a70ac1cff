"""Turning run events into lines a person reads: live progress and ``fabric show``; and the
stream every line goes out through, which keeps secrets out of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from fabric.domain.errors import ConfigError
from fabric.domain.models import ChatDelta, RunResult, RunStatus
from fabric.domain.runlog import check_versions
from fabric.domain.secrets import Secrets

from .policy_lines import POLICY_KINDS, describe_policy

_ARG_CHARS = 70
_FROM_TEXT = "\0from_text"


def short_args(arguments: Any) -> str:
    """``path=src/app.py content="def f()…"``: arguments on one short line."""
    if not isinstance(arguments, Mapping):
        text = str(arguments)
    else:
        parts = []
        for key, value in arguments.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            shown = shown.replace("\n", "⏎")
            if len(shown) > 40:
                shown = shown[:39] + "…"
            parts.append(f"{key}={shown}" if " " not in shown else f'{key}="{shown}"')
        text = " ".join(parts)
    return text if len(text) <= _ARG_CHARS else text[: _ARG_CHARS - 1] + "…"


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _tokens(usage: Mapping[str, Any] | None) -> str:
    usage = usage or {}
    return f"{usage.get('total_tokens', 0):,} tokens"


def _confinement(confinement: Mapping[str, Any] | None) -> str:
    """`` · commands in bwrap, network off`` (nothing for a run that starts no commands)."""
    if not confinement:
        return ""
    network = "network on" if confinement.get("network") else "network off"
    backend = confinement.get("backend")
    where = "unconfined" if backend == "none" else f"in {backend}"
    return f" · commands {where}, {network}"


def _describe_event(event: Mapping[str, Any], pending: dict[str, Mapping[str, Any]]) -> str | None:
    """One line for the events a person follows; None for the rest."""
    kind = event["kind"]
    if kind == "run_started":
        return (
            f"run {event['run_id']} · pack {event.get('pack')} · "
            f"model {event.get('model') or '(none)'}{_confinement(event.get('confinement'))}\n"
            f"task: {_first_line(str(event.get('task', '')), 200)}"
        )
    if kind == "llm_response":
        if event.get("tool_calls_from_text"):
            pending[_FROM_TEXT] = event  # its calls were read from text: say so on each
        content = (event.get("message") or {}).get("content")
        lines = []
        if content and content.strip():
            lines.append(f"  step {event['step']:>2}  model: {_first_line(content)}")

        lines += [f"  step {event['step']:>2}  warning: {w}" for w in event.get("warnings", ())]
        return "\n".join(lines) or None
    if kind == "llm_retry":
        error = event.get("error") or {}
        return (
            f"  retry {event.get('attempt')}/{event.get('of')} in {event.get('wait_s', 0):.1f} s:"
            f" {_first_line(str(error.get('message', '')), 90)}"
        )
    if kind == "llm_fallback":
        to = event.get("to") or {}
        return (
            f"  switching to {to.get('model')} on {to.get('backend')}: "
            f"{_first_line(str(event.get('message', '')), 90)}"
        )
    if kind == "tool_call":
        if event["name"] == "finish_task":
            return f"  step {event['step']:>2}  finish_task"
        pending[event["call_id"]] = event
        return None
    if kind == "tool_result":
        call = pending.pop(event["call_id"], {})
        head = f"  step {event['step']:>2}  {event['name']} {short_args(call.get('arguments', ''))}"
        if pending.get(_FROM_TEXT, {}).get("step") == event["step"]:
            head += " (read from text)"
        if event.get("ok"):
            outcome = f"ok · {event.get('duration_ms', 0):.0f} ms"
            status = _first_line(str(event.get("output", "")))
            if event["name"] == "shell" and status.startswith("[") and status.endswith("]"):
                outcome = f"{status[1:-1]} · {event.get('duration_ms', 0):.0f} ms"
        else:
            outcome = f"error: {_first_line((event.get('error') or {}).get('message', ''), 90)}"
        return f"{head.rstrip()}  → {outcome}"
    if kind == "nudge":
        return f"  step {event['step']:>2}  (no tool called; asked the model to continue)"
    if kind == "verification":
        return _verification(event)
    if kind == "brief":
        lines = str(event.get("text", "")).splitlines()
        tests = next((line for line in lines if line.startswith("The tests")), "")
        head = f"  looked at the workspace first ({len(lines)} lines for the model)"
        return f"{head} {tests}".rstrip()
    if kind in POLICY_KINDS:
        call = pending.get(str(event.get("call_id")), {})
        return describe_policy(event, short_args(call.get("arguments", "")))
    if kind == "run_resumed":
        return f"resumed at step {event.get('from_step')} ({_resumed_after(event)})"
    if kind == "run_finished":
        line = _outcome(event)
        error = event.get("error")
        if error:
            line += f"\n{error.get('message', '')}"
            if error.get("hint"):
                line += f"\n  hint: {error['hint']}"
        return line
    return None


def _verification(event: Mapping[str, Any]) -> str | None:
    """``step 4  verified: `pytest -q` passed``, ``checked:`` for a pass that does not confirm
    the work, or the failure with its evidence indented."""
    if event.get("skipped"):
        return None
    word = "NOT verified"
    if event.get("ok"):
        word = "checked" if event.get("confirms") is False else "verified"
    line = f"  step {event['step']:>2}  {word}: {_first_line(str(event.get('summary', '')), 120)}"
    evidence = str(event.get("evidence", "")).strip()
    if evidence and not event.get("ok"):
        shown = evidence.splitlines()[:12]
        line += "".join(f"\n             {_first_line(s, 110)}" for s in shown)
    return line


def _outcome(end: Mapping[str, Any]) -> str:
    """``max_steps after 2 step(s) · 1,234 tokens · 0.5 s``: how a run ended, on one line."""
    return (
        f"{end.get('status')} after {end.get('steps')} step(s) · {_tokens(end.get('usage'))} · "
        f"{end.get('duration_s', 0):.1f} s{_cost(end.get('cost'))}"
    )


def _resumed_after(event: Mapping[str, Any]) -> str:
    """What a ``run_resumed`` took over from: the end it replaced (``ended``, ADR 0010), a
    run that had no end, or (a log an earlier fabric resumed) the end still just above."""
    ended = event.get("ended")
    if isinstance(ended, Mapping):
        return f"it had ended: {_outcome(ended)}"
    if event.get("reason") == "interrupted":
        return "it had been interrupted"
    return f"after {event.get('reason')}"


def _cost(cost: Mapping[str, Any] | None) -> str:
    """The run's cost when it had one (local models have no price; the runlog lists them)."""
    if not cost or not cost.get("usd"):
        return ""
    unknown = " (some models have no price)" if cost.get("unknown_models") else ""
    return f" · ${cost['usd']:.4f}{unknown}"


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
    """A runlog observer that prints each step as it happens. With ``live`` (a terminal), the
    model's reply is also shown while it streams in; otherwise only whole lines are written.
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

    def __call__(self, event: Mapping[str, Any]) -> None:
        if event["kind"] == "llm_request":
            self._step = int(event.get("step", 0))
        if self._open:
            self._out.write("\r\x1b[K")  # replace the live line with the final one
            self._open = False
        line = _describe_event(event, self._pending)
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
            text = text.replace("\n", " ")[: max(0, 100 - self._chars)]
            self._chars += len(text)
            self._out.write(text)
        elif delta.tool_name or delta.arguments:
            if delta.tool_name:
                self._tool, self._chars = delta.tool_name, 0
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
    from fabric.domain.models import Usage
    from fabric.infrastructure.runlog import read_runlog

    try:
        events, _ = read_runlog(runlog)
    except ConfigError:
        events = []
    last = events[-1] if events else {}
    end: Mapping[str, Any] = last if last.get("kind") == "run_finished" else {}
    usage = end.get("usage") or {}
    try:
        status = RunStatus(end.get("status", RunStatus.CANCELLED))
    except ValueError:
        status = RunStatus.CANCELLED
    return RunResult(
        run_id=str(events[0].get("run_id")) if events else runlog.parent.name,
        status=status,
        payload=end.get("payload"),
        steps=int(end.get("steps") or 0),
        usage=Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))),
        duration_s=float(end.get("duration_s") or 0.0),
        runlog_path=str(runlog) if events else None,
        error=end.get("error"),
    )


def find_runlog(ref: str, runs_dir: Callable[[], Path]) -> Path:
    """A run id, a run folder or a runlog path → the runlog file."""
    from fabric.infrastructure.runlog import RUNLOG_NAME, runlog_path

    path = Path(ref)
    if path.is_file():
        return path
    if path.is_dir() and (path / RUNLOG_NAME).is_file():
        return path / RUNLOG_NAME
    candidate = runlog_path(runs_dir(), ref)
    if candidate.is_file():
        return candidate
    raise ConfigError(
        f"no run {ref!r}: not a runlog file, a run folder, or a run id under {runs_dir()}",
        hint="pass the runlog path printed by `fabric run`, or a folder name under runs/",
    )


def show_events(
    events: list[dict[str, Any]],
    path: Path,
    out: TextIO,
    *,
    step: int | None = None,
    kinds: list[str] | None = None,
    follow: bool = False,
    as_json: bool = False,
) -> None:
    """``fabric show``: the events of one step and/or of some kinds (all by default), as a
    timeline or JSON; with ``follow``, then the lines appended until the run ends."""

    def wanted(event: Mapping[str, Any]) -> bool:
        return (step is None or event.get("step") == step) and (not kinds or event["kind"] in kinds)

    shown = [e for e in events if wanted(e)]
    if as_json and follow:  # a stream: one JSON object a line
        for event in shown:
            out.write(json.dumps(event, ensure_ascii=False) + "\n")
    elif as_json:
        out.write(json.dumps(shown, indent=2, ensure_ascii=False) + "\n")
    else:
        show_timeline(shown, path, out, complete=not (step or kinds or follow))
    if follow and not any(e["kind"] == "run_finished" for e in events):
        after = events[-1]["seq"] if events else -1
        follow_runlog_lines(path, after, wanted, out, as_json=as_json)


def show_timeline(
    events: list[dict[str, Any]], path: Path, out: TextIO, *, complete: bool = True
) -> None:
    """The timeline of ``events``; with ``complete`` (the whole log, unfiltered), also the
    payload, or a note when the run has no end yet."""
    pending: dict[str, Mapping[str, Any]] = {}
    finished = None
    for event in events:
        if event["kind"] == "run_started":
            out.write(f"started {event['ts']}\n")
        line = _describe_event(event, pending)
        if line is not None:
            out.write(line + "\n")
        if event["kind"] == "run_finished":
            finished = event
    if complete and finished is None:
        out.write("(no run_finished: the run is still going, or it was killed)\n")
    elif complete and finished is not None and finished.get("payload") is not None:
        out.write(json.dumps(finished["payload"], indent=2, ensure_ascii=False) + "\n")
    out.write(f"runlog: {path}\n")


def follow_runlog_lines(
    path: Path,
    after: int,
    wanted: Callable[[dict[str, Any]], bool],
    out: TextIO,
    *,
    as_json: bool,
) -> None:
    """Print events appended to a runlog after ``after`` until its run_finished (Ctrl-C
    stops following a run that was killed and will never finish)."""
    import asyncio

    from fabric.infrastructure.runlog.tail import follow_runlog

    pending: dict[str, Mapping[str, Any]] = {}

    async def tail() -> None:
        async for event in follow_runlog(path, after=after, is_over=lambda: False):
            if event is None:
                continue
            check_versions([event], str(path))  # a newer fabric may append (resume)
            if not wanted(event):
                continue
            line = (
                json.dumps(event, ensure_ascii=False)
                if as_json
                else _describe_event(event, pending)
            )
            if line is not None:
                out.write(line + "\n")
                out.flush()

    asyncio.run(tail())
