"""From finished attempts to ``results.json``: per case, per tier and overall, the pass rate
with its 95% Wilson interval, pass@k, means of steps, tokens, cost and wall time, false
successes and the counts by run status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from statistics import fmean
from typing import Any

from fabric.config.eval_suite import TIERS, EvalCase

from .records import AttemptRecord
from .stats import pass_at_k, wilson

FORMAT = 1
"""The version of results.json's layout."""


def stats(records: Sequence[AttemptRecord], repeats: int) -> dict[str, Any]:
    """The figures of one case's attempts."""
    figures = _common(records)
    attempts, passed = figures["attempts"], figures["passed"]
    top = min(repeats, attempts)
    figures["pass_at_k"] = {
        str(k): _round(pass_at_k(passed, attempts, k)) for k in range(1, top + 1)
    }
    return figures


def group_stats(by_case: Mapping[str, Sequence[AttemptRecord]], repeats: int) -> dict[str, Any]:
    """The figures of several cases' attempts together. pass@k is the mean of the cases'
    pass@k, over the cases with at least k attempts."""
    records = [r for rs in by_case.values() for r in rs]
    figures = _common(records)
    figures["cases"] = len(by_case)
    figures["pass_at_k"] = {}
    for k in range(1, repeats + 1):
        values = [
            pass_at_k(sum(r.passed for r in rs), len(rs), k)
            for rs in by_case.values()
            if len(rs) >= k
        ]
        if values:
            figures["pass_at_k"][str(k)] = _round(fmean(values))
    return figures


def build_results(
    records: Iterable[AttemptRecord],
    cases: Sequence[EvalCase],
    repeats: int,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """``results.json``: ``meta`` (suite, command, model, ...), then the figures overall, per
    tier and per case, with every attempt and its runlog. Attempts of cases the suite no
    longer has are left out; cases without attempts yet are listed with none."""
    by_case: dict[str, list[AttemptRecord]] = {c.id: [] for c in cases}
    for record in records:
        if record.case in by_case:
            by_case[record.case].append(record)
    for attempts in by_case.values():
        attempts.sort(key=lambda r: r.attempt)
    done = {case: rs for case, rs in by_case.items() if rs}
    tiers = {}
    for tier in TIERS:
        members = {c.id: done[c.id] for c in cases if c.tier == tier and c.id in done}
        if members:
            tiers[tier] = group_stats(members, repeats)
    planned = len(cases) * repeats
    made = sum(min(len(rs), repeats) for rs in by_case.values())
    return {
        "format": FORMAT,
        **meta,
        "repeats": repeats,
        "complete": made >= planned,
        "missing": planned - made,
        "overall": group_stats(done, repeats),
        "tiers": tiers,
        "cases": [
            {
                "id": case.id,
                "tier": case.tier,
                "pack": by_case[case.id][0].pack if by_case[case.id] else case.pack,
                **stats(by_case[case.id], repeats),
                "runs": [_attempt_row(r) for r in by_case[case.id]],
            }
            for case in cases
        ],
    }


def _attempt_row(record: AttemptRecord) -> dict[str, Any]:
    row = record.as_json()
    for key in ("case", "tier", "pack", "run_id"):
        row.pop(key, None)
    return row


def _common(records: Sequence[AttemptRecord]) -> dict[str, Any]:
    attempts = len(records)
    passed = sum(r.passed for r in records)
    low, high = wilson(passed, attempts)
    costs = [r.cost_usd for r in records if r.cost_usd is not None]
    return {
        "attempts": attempts,
        "passed": passed,
        "pass_rate": _round(passed / attempts) if attempts else None,
        "interval": [_round(low), _round(high)],
        "false_successes": sum(r.false_success for r in records),
        "unconfirmed_failures": sum(r.unconfirmed_failure for r in records),
        "check_errors": sum(r.check_error for r in records),
        "mean_steps": _mean(r.steps for r in records),
        "mean_tokens": _mean(r.tokens for r in records),
        "prompt_tokens_per_request": _per_request(records),
        "total_cost_usd": _round(sum(costs), 6) if costs else None,
        "mean_cost_usd": _round(fmean(costs), 6) if costs else None,
        "mean_wall_s": _mean(r.wall_s for r in records),
        "statuses": dict(sorted(Counter(r.status for r in records).items())),
    }


def _per_request(records: Sequence[AttemptRecord]) -> float | None:
    """The prompt tokens of a model request, on average over every request of ``records``
    (those of an older fabric, which did not count them, left out): what tool search saves
    (ADR 0028)."""
    counted = [r for r in records if r.prompt_tokens is not None and r.steps]
    steps = sum(r.steps for r in counted)
    return _round(sum(r.prompt_tokens or 0 for r in counted) / steps, 1) if steps else None


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return _round(fmean(items), 3) if items else None


def _round(value: float, digits: int = 4) -> float:
    return round(value, digits)
