"""``summary.md``: results.json as markdown a person reads (and the table ``fabric eval``
prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_FIGURE_HEAD = [
    "attempts",
    "pass rate (95% CI)",
    "pass@k",
    "false successes",
    "unconfirmed, failed",
    "mean steps",
    "mean tokens",
    "prompt tokens / request",
    "cost (total / mean)",
    "mean wall",
    "statuses",
]


def render_summary(results: Mapping[str, Any]) -> str:
    """The whole summary: how it was made, the tables, and every attempt with its runlog."""
    suite = results.get("suite") or {}
    lines = [f"# Eval: {suite.get('name', '?')}", ""]
    lines += [
        f"- command: `{results.get('command', '')}`",
        f"- date: {results.get('date', '')}; fabric {results.get('fabric_version', '')}",
        f"- suite: `{suite.get('path', '')}` (content hash {str(suite.get('hash', ''))[:12]})",
        f"- pack: {results.get('pack') or 'each case its own'}; "
        f"backend: {_used(results, 'backend')}; model: {_used(results, 'model')}",
        *_mixed(results),
        f"- repeats: {results.get('repeats')}"
        + (f"; jobs: {results['jobs']}" if results.get("jobs") else "")
        + (
            ""
            if results.get("complete")
            else f"; **{results.get('missing')} attempt(s) "
            "not made yet** (rerun with the same --out to continue)"
        ),
        "",
        render_tables(results),
        "",
        "A false success ended `completed`, which fabric only says when one of the pack's own "
        'checks confirmed the work, and failed the case\'s checks. "Unconfirmed, failed" '
        "ended `completed_unconfirmed` (the pack's checks passed but none could confirm the "
        "work, so the run asked to be read) and failed them.",
        "",
    ]
    failed = [
        (c, r) for c in results.get("cases", []) for r in c.get("runs", []) if not r["passed"]
    ]
    if failed:
        lines += ["## Failed attempts", ""]
        lines += _table(
            ["case", "#", "status", "why", "runlog"],
            [[c["id"], r["attempt"], _status(r), _why(r), _link(r)] for c, r in failed],
        )
        lines.append("")
    lines += ["## Attempts", ""]
    rows = [
        [
            c["id"],
            r["attempt"],
            _status(r),
            "yes" if r["passed"] else "no",
            r["steps"],
            r["tokens"],
            f"{r['wall_s']:.1f} s",
            _link(r),
        ]
        for c in results.get("cases", [])
        for r in c.get("runs", [])
    ]
    lines += _table(["case", "#", "status", "passed", "steps", "tokens", "wall", "runlog"], rows)
    return "\n".join(lines) + "\n"


def render_tables(results: Mapping[str, Any], *, only_made: bool = False) -> str:
    """Overall, per tier and per case, as markdown tables (``only_made``: without the cases
    that have no attempt yet, which are then counted under the table)."""
    lines = ["## Overall", ""]
    lines += _table(_FIGURE_HEAD, [_figures(results.get("overall") or {})])
    tiers = results.get("tiers") or {}
    if tiers:
        lines += ["", "## By tier", ""]
        lines += _table(["tier", *_FIGURE_HEAD], [[t, *_figures(f)] for t, f in tiers.items()])
    lines += ["", "## By case", ""]
    cases = results.get("cases", [])
    shown = [c for c in cases if c.get("attempts") or not only_made]
    lines += _table(
        ["case", "tier", *_FIGURE_HEAD], [[c["id"], c["tier"], *_figures(c)] for c in shown]
    )
    if len(shown) < len(cases):
        lines += ["", f"{len(cases) - len(shown)} other case(s) of the suite have no attempts yet."]
    return "\n".join(lines)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _figures(f: Mapping[str, Any]) -> list[str]:
    if not f.get("attempts"):
        return ["0", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
    low, high = f["interval"]
    rate = f"{percent(f['pass_rate'])} ({percent(low)} to {percent(high)})"
    at_k = ", ".join(f"@{k} {percent(v)}" for k, v in (f.get("pass_at_k") or {}).items())
    cost = "-"
    if f.get("total_cost_usd") is not None:
        cost = f"${f['total_cost_usd']:.4f} / ${f['mean_cost_usd']:.4f}"
    statuses = ", ".join(f"{s} {n}" for s, n in (f.get("statuses") or {}).items())
    if f.get("check_errors"):
        statuses += f"; {f['check_errors']} with a check that could not run"
    return [
        f"{f['passed']}/{f['attempts']}",
        rate,
        at_k or "-",
        str(f["false_successes"]),
        str(f.get("unconfirmed_failures", 0)),  # results.json of older fabric: not counted
        _num(f.get("mean_steps")),
        _num(f.get("mean_tokens"), 0),
        _num(f.get("prompt_tokens_per_request"), 0),
        cost,
        f"{_num(f.get('mean_wall_s'))} s",
        statuses,
    ]


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return out


def _cell(value: Any) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _status(row: Mapping[str, Any]) -> str:
    status = str(row.get("status"))
    return f"{status} (false success)" if row.get("false_success") else status


def _why(row: Mapping[str, Any]) -> str:
    failed = [c for c in row.get("checks", []) if not c.get("passed")]
    if failed:
        first = failed[0]
        text = f"{first['check']}: {first['evidence']}"
    else:
        text = str((row.get("error") or {}).get("message", ""))
    return clip_middle(text, 200)


def clip_middle(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: its start and its end (where a
    command's verdict is) with '…' between."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    head = limit * 2 // 5
    return line[:head] + " … " + line[len(line) - (limit - head - 3) :]


def _link(row: Mapping[str, Any]) -> str:
    path = str(row.get("runlog", ""))
    return f"[{path.split('/')[-2] if path.count('/') >= 1 else path}]({path})" if path else "-"


def _mixed(results: Mapping[str, Any]) -> list[str]:
    """A warning when the attempts did not all run on one model (a continued eval whose model
    changed meanwhile, say): the figures then mix them."""
    models = {
        r["model"] for c in results.get("cases", []) for r in c.get("runs", []) if r.get("model")
    }
    if len(models) < 2:
        return []
    return [f"- **the attempts ran on {len(models)} models**: every figure below mixes them"]


def _used(results: Mapping[str, Any], key: str) -> str:
    """What the attempts really used (from their runlogs), else what was asked for."""
    seen = sorted(
        {str(r[key]) for c in results.get("cases", []) for r in c.get("runs", []) if r.get(key)}
    )
    asked = results.get(key)
    return ", ".join(seen) or (str(asked) if asked else "from the config")
