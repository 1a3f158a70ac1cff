"""Runlogs the console's tests (and ``bench/console_render.py``) show: a long run of any
number of events, and a run whose every text a page shows holds script and HTML payloads.
Each line is a valid runlog line of the current format (the tests check it with the
published schema), as ``JsonlRunLog`` writes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string"}, "files": {"type": "array"}},
    "required": ["summary"],
}


class Log:
    """Events with the envelope ``JsonlRunLog`` gives them (v, seq, ts, run_id, kind)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.events: list[dict[str, Any]] = []
        self._t0 = datetime(2026, 11, 25, 1, 0, 0, tzinfo=UTC)

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        ts = self._t0 + timedelta(milliseconds=7 * len(self.events))
        event = {
            "v": 3,
            "seq": len(self.events),
            "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "run_id": self.run_id,
            "kind": kind,
            **fields,
        }
        self.events.append(event)
        return event

    def started(self, *, pack: str = "notes", task: str = "tidy up the notes", **more: Any) -> None:
        policy = {
            "default": "allow",
            "approval_timeout": 300.0,
            "rules": [{"tool": "shell", "command": "rm *", "path": None, "verdict": "deny"}],
        }
        fields = {
            "pack": pack,
            "task": task,
            "model": "m",
            "workspace": "/tmp/ws",
            "limits": {"max_steps": 30, "tool_output_chars": 4000},
            "sandbox": {"policy": policy},
            "system_prompt": "You tidy up notes.",
            "finish_schema": SCHEMA,
            "confinement": None,
            "verify": [],
        }
        self.emit("run_started", **{**fields, **more})

    def step(self, step: int, *, content: str | None = None, output: str = "ok") -> None:
        """One model call that asks for one read_file, which succeeds."""
        call = {"id": f"call_{step}", "type": "function"}
        function = {"name": "read_file", "arguments": json.dumps({"path": f"notes/{step}.txt"})}
        message = {
            "role": "assistant",
            "content": content,
            "tool_calls": [{**call, "function": function}],
        }
        user = {"role": "tool", "tool_call_id": f"call_{step - 1}", "content": output}
        self.emit("llm_request", step=step, messages=[user])
        self.emit(
            "llm_response", step=step, message=message, finish_reason="tool_calls",
            usage=USAGE, model="m", duration_ms=812.5,
        )  # fmt: skip
        ids = {"step": step, "call_id": f"call_{step}"}
        self.emit("tool_call", **ids, name="read_file", arguments={"path": f"notes/{step}.txt"})
        self.emit(
            "policy_decision", **ids, tool="read_file", verdict="allow", rule=None,
            reason="no rule matches; the policy default is allow",
        )  # fmt: skip
        self.emit("tool_result", **ids, name="read_file", ok=True, output=output, duration_ms=0.4)

    def finished(self, status: str = "completed", payload: Any = None, **more: Any) -> None:
        steps = max((e.get("step", 0) for e in self.events), default=0)
        if payload is None and status == "completed":
            payload = {"summary": "tidied the notes", "files": ["notes/1.txt"]}
        self.emit(
            "run_finished", status=status, payload=payload, steps=steps, usage=USAGE,
            duration_s=12.5, **more,
        )  # fmt: skip


def long_run(events: int, run_id: str = "20261125T010000.000Z-long01") -> list[dict[str, Any]]:
    """A finished run of ``events`` events (run_started, steps of five events, run_finished)."""
    log = Log(run_id)
    log.started(task=f"read {events} notes")
    step = 0
    while len(log.events) + 5 + 1 <= events:
        step += 1
        log.step(
            step,
            content=f"Reading note {step}." if step % 3 == 0 else None,
            output=f"  1| note {step}\n",
        )
    while len(log.events) < events - 1:  # the rest: nudges, one event each
        log.emit("nudge", step=max(step, 1), message="Call a tool.")
    log.finished()
    return log.events


def write_runlog(folder: Path, events: list[dict[str, Any]]) -> Path:
    """``<folder>/runlog.jsonl`` with one event a line; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "runlog.jsonl"
    lines = (json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events)
    path.write_text("".join(line + "\n" for line in lines), "utf-8")
    return path


PAYLOADS = (
    '<img src=x onerror="window.__pwned=1;alert(1)">',
    "<script>window.__pwned=2;alert(2)</script>",
    "</script><script>window.__pwned=3;alert(3)</script>",
    "javascript:window.__pwned=4;alert(4)",
    "<svg/onload=window.__pwned=5;alert(5)>",
    "<!-- <script>window.__pwned=6</script> -->",
    '<iframe srcdoc="<script>parent.__pwned=7</script>"></iframe>',
    "line\u2028separator\u2029paragraph",
)
HOSTILE = " ".join(PAYLOADS)
"""Every payload at once: what each hostile text in ``hostile_run`` is made of."""
HOSTILE_URL = "javascript:window.__pwned=8;alert(8)"


def hostile(where: str) -> str:
    """The payloads, tagged with where they were put (to find each one on the page)."""
    return f"[{where}] {HOSTILE}"


def hostile_run(run_id: str = "r-<img src=x onerror=alert(9)>/../..") -> list[dict[str, Any]]:
    """A finished run with the payloads in every text a page shows: pack, task, model output,
    tool names, arguments and file names, tool output, error messages and hints, changes
    (paths and diff lines), policy rules, verification evidence, retries, a plan's steps and
    why, the final payload (keys and values) and its schema, and ``javascript:`` URLs where ids
    and artifacts go."""
    log = Log(run_id)
    schema = {
        "type": "object",
        "properties": {hostile("schema key"): {"type": "string"}, "summary": {"type": "string"}},
        "required": ["summary", hostile("required key")],
    }
    log.started(
        pack=hostile("pack"), task=hostile("task"), finish_schema=schema,
        system_prompt=hostile("system prompt"), parent_run_id=HOSTILE_URL, replay_of=HOSTILE_URL,
    )  # fmt: skip
    log.emit("brief", text=hostile("brief"), duration_ms=3.0)
    log.emit("llm_request", step=1, messages=[{"role": "user", "content": hostile("request")}])
    call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
    log.emit(
        "llm_response", step=1, finish_reason="tool_calls", usage=USAGE, model=hostile("model"),
        duration_ms=5.0, message={"role": "assistant", "content": hostile("model output"),
                                  "tool_calls": [call]},
        warnings=[hostile("warning")],
    )  # fmt: skip
    path = hostile("file name")
    ids = {"step": 1, "call_id": "c1"}
    log.emit(
        "tool_call",
        **ids,
        name="write_file",
        arguments={"path": path, "content": hostile("content")},
    )
    log.emit(
        "policy_decision", **ids, tool="write_file", verdict="ask", rule=hostile("rule"),
        reason=hostile("reason"),
    )  # fmt: skip
    log.emit(
        "approval_requested", **ids, tool="write_file", arguments={"path": path},
        rule=hostile("rule"), timeout_s=300.0,
    )  # fmt: skip
    log.emit("approval", **ids, tool="write_file", approved=True, by="http", scope="once")
    lines = [f"--- a/{path}", f"+++ b/{path}", "@@ -1 +1 @@"]
    diff = "\n".join([*lines, f"-{hostile('removed line')}", f"+{hostile('added line')}", ""])
    log.emit(
        "tool_result", **ids, name="write_file", ok=True, output=hostile("tool output"),
        duration_ms=1.0, artifact=HOSTILE_URL, child_run_id=HOSTILE_URL,
        changes=[{"path": path, "diff": diff, "created": False, "deleted": False}],
    )  # fmt: skip
    log.emit("llm_retry", attempt=2, of=3, wait_s=0.5,
             error={"code": "server_error", "message": hostile("retry error")})  # fmt: skip
    log.emit(
        "llm_fallback", **{"from": {"model": "m", "backend": "b"}},
        to={"model": "m2", "backend": "b"}, reason="server_error", message=hostile("fallback"),
    )  # fmt: skip
    ids2 = {"step": 2, "call_id": "c2"}
    log.emit(
        "llm_request", step=2, messages=[{"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    )
    log.emit(
        "llm_response", step=2, finish_reason="tool_calls", usage=USAGE, model="m2",
        duration_ms=5.0, message={"role": "assistant", "content": None, "tool_calls": [call]},
    )  # fmt: skip
    log.emit("tool_call", **ids2, name=hostile("tool name"), arguments=hostile("raw arguments"))
    log.emit(
        "tool_result", **ids2, name=hostile("tool name"), ok=False, output="error: see below",
        duration_ms=0.1, error={"code": "tool_error", "message": hostile("tool error"),
                                "hint": hostile("tool hint")},
    )  # fmt: skip
    ids3 = {"step": 2, "call_id": "c3"}
    plan = [
        {"step": hostile("plan step"), "status": "in_progress"},
        {"step": "x", "status": "done"},
    ]
    log.emit("tool_call", **ids3, name="update_plan", arguments={"items": plan})
    log.emit(
        "plan", **ids3, items=plan, counts={"pending": 0, "in_progress": 1, "done": 1},
        explanation=hostile("plan why"),
    )  # fmt: skip
    log.emit("tool_result", **ids3, name="update_plan", ok=True, output="Plan saved.",
             duration_ms=0.1)  # fmt: skip
    log.emit("nudge", step=2, message=hostile("nudge"))
    log.emit(
        "verification", step=2, call_id="c2", check=hostile("check"), ok=False,
        summary=hostile("verification"), evidence=hostile("evidence"), duration_ms=1.0,
    )  # fmt: skip
    log.finished(
        "unverified",
        payload={"summary": hostile("payload value"), hostile("payload key"): [HOSTILE]},
        error={"code": "unverified", "message": hostile("run error"), "hint": hostile("run hint")},
    )
    return log.events


def show_html(runlog: Path, out: Path) -> Path:
    """``fabric show <runlog> --html --out <out>`` (the real command, in process); the file."""
    from typer.testing import CliRunner

    from fabric.interfaces.cli.app import app

    result = CliRunner().invoke(app, ["show", str(runlog), "--html", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    return out


# Where each hostile text of hostile_run() must read on the timeline, whole: the selector of
# the element that shows it.
PLACES = {
    "pack": ".item.started .pack",
    "task": ".tl-summary .task dd",
    "model": ".item.step .model",
    "model output": ".model-text",
    "warning": ".warning",
    "file name": ".change-path",
    "content": ".arg-value",
    "rule": ".policy .rule",
    "reason": ".policy",
    "tool output": "pre.output",
    "tool name": ".tool",
    "raw arguments": ".args.raw .arg-value",
    "tool error": ".error-message",
    "tool hint": ".hint-text",
    "retry error": ".retry .error-message",
    "fallback": ".fallback .note-text",
    "verification": ".check",
    "evidence": ".evidence",
    "removed line": ".d-del",
    "added line": ".d-add",
    "payload value": ".payload td.value",
    "payload key": ".payload td.field",
    "schema key": ".payload td.field",
    "required key": ".payload td.field",
    "run error": ".run-error .error-message",
    "run hint": ".run-error .hint-text",
    "plan step": ".item.call .plan-step",
    "plan why": ".tl-summary .plan-why-text",
}
# Shown only once their <details> is opened.
FOLDED = {"system prompt": ".item.started details", "request": ".item.step details",
          "brief": ".item.brief details", "nudge": ".item.nudge details"}  # fmt: skip

ELEMENTS_FROM_PAYLOADS = """() => {  // what a payload would have made of the page
  const tags = 'img, svg, iframe, object, embed, frame, base, form';
  const bad = [...document.querySelectorAll(tags)].filter(  // the console's own two forms
    (el) => el.id !== 'login-form' && el.id !== 'new-task-form');
  const handlers = [...document.querySelectorAll('*')].filter(
    (el) => [...el.attributes].some((a) => a.name.toLowerCase().startsWith('on')));
  const links = [...document.querySelectorAll('[href], [src], [action], [formaction]')].filter(
    (el) => el.tagName !== 'LINK');
  return {bad: bad.map((e) => e.outerHTML), handlers: handlers.map((e) => e.tagName),
          links: links.map((e) => e.outerHTML),
          scripts: [...document.scripts].map((s) => s.type)};
}"""
