"""One line (or a few) a person reads for each runlog event: the same in live progress and in
``fabric show``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .policy_lines import POLICY_KINDS, describe_policy

_ARG_CHARS = 70
_LINE_CHARS = 120
"""A line that would be longer is written as several (a plan: one step a line)."""
_INDENT = "\n             "
_BUDGET = "\0budget"
"""Where ``pending`` keeps the run's budget (from ``run_started``)."""
_FROM_TEXT = "\0from_text"
_PLAN = "\0plan"
"""Where ``pending`` keeps the last plan shown, and (``_PLAN`` + call id) each call's plan."""


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


def tools_changed_line(step: int, changed: Mapping[str, Any]) -> str:
    """``  step  3  tools changed: + shop__added · - shop__old``."""
    added = [str(a.get("name")) for a in changed.get("added") or () if isinstance(a, Mapping)]
    parts = [f"+ {', '.join(added)}"] if added else []
    for sign, key in (("-", "removed"), ("~", "changed")):
        if changed.get(key):
            parts.append(f"{sign} {', '.join(map(str, changed[key]))}")
    why = " (resumed)" if changed.get("resumed") else ""
    return f"  step {step:>2}  tools changed{why}: {' · '.join(parts) or 'the same names'}"


def describe_event(event: Mapping[str, Any], pending: dict[str, Mapping[str, Any]]) -> str | None:
    """One line for the events a person follows (or a few); None for the rest. What a run
    recorded is hostile text (a model's reply, its plan, a workspace's file names): nothing
    of it may drive the terminal (``for_terminal``)."""
    line = _described(event, pending)
    return None if line is None else for_terminal(line)


def for_terminal(text: str) -> str:
    """``text`` with every character a terminal would act on or hide (escape sequences,
    other control characters, bidirectional and zero-width ones) written as '?', line breaks
    kept and tabs made spaces."""
    if text.replace("\n", "").isprintable():
        return text
    text = text.replace("\t", " ")
    return "".join(c if c.isprintable() or c == "\n" else "?" for c in text)


def _described(event: Mapping[str, Any], pending: dict[str, Mapping[str, Any]]) -> str | None:
    kind = event["kind"]
    if kind == "run_started":
        pending[_BUDGET] = (event.get("limits") or {}).get("budget") or {}
        return (
            f"run {event['run_id']} · pack {event.get('pack')} · "
            f"model {event.get('model') or '(none)'}{_confinement(event.get('confinement'))}"
            f"{' · durable' if event.get('durable') else ''}{_delegated_by(event)}\n"
            f"task: {_first_line(str(event.get('task', '')), 200)}"
            f"{_instructions(event, chr(10))}{_skills(event)}"
        )
    if kind == "llm_request":
        changed = event.get("tools_changed")
        return tools_changed_line(event["step"], changed) if changed else None
    if kind == "llm_response":
        if event.get("tool_calls_from_text"):
            pending[_FROM_TEXT] = event  # its calls were read from text: say so on each
        content = (event.get("message") or {}).get("content")
        lines = []
        if content and content.strip():
            lines.append(f"  step {event['step']:>2}  model: {_first_line(content)}")

        lines += [f"  step {event['step']:>2}  warning: {w}" for w in event.get("warnings", ())]
        if isinstance(event.get("spent"), Mapping):
            spent = spent_line(event["spent"], pending.get(_BUDGET) or {})
            lines.append(f"  step {event['step']:>2}  spent: {spent}")
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
        if pending.pop(_PLAN + str(event["call_id"]), None) is not None and event.get("ok"):
            return None  # an update_plan whose plan line said it
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
        runs = ", ".join(str(r) for r in event.get("child_run_ids") or ())
        if runs:  # a delegation: where its own log is
            outcome += f" · run {runs}"
        outcome += _instructions(event, " · ")
        return f"{head.rstrip()}  → {outcome}"
    if kind == "context_compacted":
        elided = event.get("elided") or ()
        chars = sum(int(e.get("chars", 0)) for e in elided)
        done = [f"elided {len(elided)} old output(s), {chars:,} characters"] if elided else []
        summary = event.get("summary") or {}
        if summary:
            done.append(f"summarised steps 1-{summary.get('through_step')}")
        return (
            f"  step {event['step']:>2}  context: {' and '.join(done)} to stay inside the "
            f"{event.get('window', 0):,}-token window (about {event.get('tokens_before', 0):,}"
            f" → {event.get('tokens_after', 0):,} tokens)"
        )
    if kind == "plan":
        return _plan(event, pending)
    if kind == "nudge":
        return f"  step {event['step']:>2}  (no tool called; asked the model to continue)"
    if kind == "verification":
        return _verification(event)
    if kind == "brief":
        lines = str(event.get("text", "")).splitlines()
        tests = next((line for line in lines if line.startswith("The tests")), "")
        head = f"  looked at the workspace first ({len(lines)} lines for the model)"
        return f"{head} {tests}".rstrip()
    if kind == "memory":
        where = f"step {event['step']:>2}" if "step" in event else "       "
        return (
            f"  {where}  kept memory {event.get('id')}: {_first_line(str(event.get('fact')), 80)}"
        )
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


def _instructions(event: Mapping[str, Any], before: str) -> str:
    """``instructions: AGENTS.md (812 chars)``: the workspace's instructions a run or a tool
    call's output was given, and those skipped (ADR 0026); nothing when there are none."""
    meta = (event.get("additions") or {}).get("instructions")
    if not isinstance(meta, Mapping):
        return ""
    parts = [
        f"{_plain(g.get('path'))} ({g.get('chars', 0):,} chars{', cut' if g.get('cut') else ''})"
        for g in meta.get("given") or ()
        if isinstance(g, Mapping)
    ]
    parts += [
        f"{_plain(s.get('path'))} skipped: {_plain(s.get('why'))}"
        for s in meta.get("skipped") or ()
        if isinstance(s, Mapping)
    ]
    return f"{before}instructions: {'; '.join(parts)}" if parts else ""


def _skills(event: Mapping[str, Any]) -> str:
    """``skills: house-style, regen-table (workspace) · skipped: .agents/skills/broken``: the
    skills a run was offered and the folders skipped (ADR 0027); nothing when there are none."""
    meta = (event.get("additions") or {}).get("skills")
    if not isinstance(meta, Mapping):
        return ""
    offered = [o for o in meta.get("offered") or () if isinstance(o, Mapping)]
    skipped = [_plain(s.get("folder")) for s in meta.get("skipped") or () if isinstance(s, Mapping)]
    names = [
        f"{_plain(o.get('name'))}{' (workspace)' if o.get('source') == 'workspace' else ''}"
        for o in offered
    ]
    parts = [", ".join(names)] if names else []
    if skipped:
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        parts.append(f"skipped: {', '.join(skipped[:3])}{more}")
    return f"\nskills: {' · '.join(parts)}" if parts else ""


def _plain(value: Any) -> str:
    """A name from the workspace on one line (``describe_event`` keeps it from driving the
    terminal)."""
    return _first_line(str(value), 80) if value is not None else "?"


def _plan(event: Mapping[str, Any], pending: dict[str, Mapping[str, Any]]) -> str:
    """``  step  3  plan (1/3 done): [x] read the test  [>] fix parse()  [ ] run tests``, one
    step a line when that is too long; ``unchanged`` when it is the plan shown before."""
    from fabric.application.plan import MARKS  # only for a run that keeps a plan

    items = [i for i in event.get("items") or () if isinstance(i, Mapping)]
    done = sum(1 for i in items if i.get("status") == "done")
    head = f"  step {event.get('step', 0):>2}  plan ({done}/{len(items)} done):"
    before = pending.get(_PLAN)
    pending[_PLAN] = pending[_PLAN + str(event.get("call_id"))] = event
    if before is not None and before.get("items") == event.get("items"):
        return f"{head} unchanged"
    steps = [
        f"{MARKS.get(str(i.get('status')), '[?]')} {_first_line(str(i.get('step', '')), 100)}"
        for i in items
    ]
    line = f"{head} {'  '.join(steps)}"
    if len(line) > _LINE_CHARS:
        line = head + "".join(_INDENT + s for s in steps)
    if event.get("explanation"):
        line += f"{_INDENT}why: {_first_line(str(event['explanation']), 100)}"
    return line


def _delegated_by(started: Mapping[str, Any]) -> str:
    parent = started.get("parent")
    if not isinstance(parent, Mapping):
        return ""
    return f" · delegated by run {parent.get('run_id')} (call {parent.get('call_id')})"


def spent_line(used: Mapping[str, Any], limits: Mapping[str, Any]) -> str:
    """``1,240/5,000 tokens · 2 tool calls · 4.1/60 s``: what a run spent so far, against the
    limits of its budget where it has them."""
    parts = []
    for name, unit in (("tokens", "tokens"), ("tool_calls", "tool calls"),
                       ("model_calls", "model calls")):  # fmt: skip
        limit = limits.get(name)
        parts.append(f"{used.get(name, 0):,}{f'/{limit:,}' if limit else ''} {unit}")
    seconds = limits.get("seconds")
    parts.append(f"{used.get('seconds', 0):.1f}{f'/{seconds:g}' if seconds else ''} s")
    if used.get("cost_usd") or limits.get("cost_usd"):
        cost = limits.get("cost_usd")
        parts.append(f"${used.get('cost_usd', 0):.4f}{f'/${cost:g}' if cost else ''}")
    return " · ".join(parts)


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
    if event.get("reason") == "recovered":
        return "a durable run recovered: its process had died"
    return f"after {event.get('reason')}"


def _cost(cost: Mapping[str, Any] | None) -> str:
    """The run's cost when it had one (local models have no price; the runlog lists them)."""
    if not cost or not cost.get("usd"):
        return ""
    unknown = " (some models have no price)" if cost.get("unknown_models") else ""
    return f" · ${cost['usd']:.4f}{unknown}"
