"""``fabric eval compare A B``: how B's pass rates differ from A's, case by case, per tier and
overall, and which differences are larger than the noise (Newcombe's hybrid score interval
for a difference of two proportions, 95%: it leaves out 0)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .stats import newcombe, within_noise
from .summary import percent

WITHIN_NOISE = "within noise"


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison of two results.json documents (B minus A)."""
    cases_a = {c["id"]: c for c in a.get("cases", [])}
    cases_b = {c["id"]: c for c in b.get("cases", [])}
    rows = []
    for case_id in [*cases_a, *(i for i in cases_b if i not in cases_a)]:
        one, two = cases_a.get(case_id), cases_b.get(case_id)
        tier = (one or two or {}).get("tier")
        rows.append({"case": case_id, "tier": tier, **difference(one, two)})
    tiers = {
        tier: difference((a.get("tiers") or {}).get(tier), (b.get("tiers") or {}).get(tier))
        for tier in dict.fromkeys([*(a.get("tiers") or {}), *(b.get("tiers") or {})])
    }
    about_a, about_b = _about(a), _about(b)
    return {
        "a": about_a,
        "b": about_b,
        "same_suite": about_a["suite_hash"] == about_b["suite_hash"],
        "overall": difference(a.get("overall"), b.get("overall")),
        "tiers": tiers,
        "cases": rows,
    }


def difference(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any]:
    """B's pass rate minus A's, its interval and the verdict."""
    row: dict[str, Any] = {"a": _counts(a), "b": _counts(b)}
    if not (a and a.get("attempts")) or not (b and b.get("attempts")):
        row["verdict"] = "only in B" if not (a and a.get("attempts")) else "only in A"
        if not (b and b.get("attempts")) and not (a and a.get("attempts")):
            row["verdict"] = "no attempts"
        return row
    diff, low, high = newcombe(a["passed"], a["attempts"], b["passed"], b["attempts"])
    row["difference"] = round(diff, 4)
    row["interval"] = [round(low, 4), round(high, 4)]
    if within_noise(low, high):
        row["verdict"] = WITHIN_NOISE
    else:
        row["verdict"] = "B better" if diff > 0 else "B worse"
    return row


def render_compare(result: Mapping[str, Any]) -> str:
    """The comparison as a markdown table: per case, then per tier and overall."""
    a, b = result["a"], result["b"]
    lines = [f"A: {a['label']}", f"B: {b['label']}"]
    if not result.get("same_suite", True):
        lines.append(
            "note: A and B ran different suite contents; a difference may come from the cases, "
            "not from what was compared"
        )
    lines.append("")
    head = ["", "tier", "A passed", "B passed", "B - A (95% CI)", "verdict"]
    rows = [  # a case neither side ran says nothing: left out of the table (kept in JSON)
        [c["case"], c["tier"] or "", *_cells(c)]
        for c in result["cases"]
        if c["verdict"] != "no attempts"
    ]
    rows += [[f"tier {t}", t, *_cells(r)] for t, r in result["tiers"].items()]
    rows.append(["overall", "", *_cells(result["overall"])])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(" --- " for _ in head) + "|")
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    better = sum(c["verdict"] == "B better" for c in result["cases"])
    worse = sum(c["verdict"] == "B worse" for c in result["cases"])
    lines += ["", f"{better} case(s) better in B, {worse} worse, beyond the noise (95%)."]
    compared = sum("difference" in c for c in result["cases"])
    if compared > 1:  # each case is its own 95% test: some look different by chance alone
        lines.append(
            f"{compared} cases compared, each at 95%: about {0.05 * compared:.1f} would look "
            "different by chance alone. Trust a case's difference when it holds in a rerun "
            "(or with more --repeats); the tier and overall rows pool the attempts."
        )
    return "\n".join(lines) + "\n"


def _cells(row: Mapping[str, Any]) -> list[str]:
    def share(counts: Mapping[str, Any] | None) -> str:
        if not counts:
            return "-"
        return f"{counts['passed']}/{counts['attempts']} ({percent(counts['pass_rate'])})"

    if "difference" not in row:
        return [share(row["a"]), share(row["b"]), "-", row["verdict"]]
    low, high = row["interval"]
    diff = f"{_signed(row['difference'])} ({_signed(low)} to {_signed(high)})"
    return [share(row["a"]), share(row["b"]), diff, row["verdict"]]


def _signed(value: float) -> str:
    return f"{100 * value:+.0f} pp"


def _counts(figures: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not figures or not figures.get("attempts"):
        return None
    return {
        "passed": figures["passed"],
        "attempts": figures["attempts"],
        "pass_rate": figures["pass_rate"],
    }


def _about(results: Mapping[str, Any]) -> dict[str, Any]:
    suite = results.get("suite") or {}
    models = sorted(
        {
            str(r["model"])
            for c in results.get("cases", [])
            for r in c.get("runs", [])
            if r.get("model")
        }
    )
    label = f"{suite.get('name', '?')} · {', '.join(models) or results.get('model') or '?'}"
    label += f" · {results.get('date', '')}"
    return {
        "label": label,
        "suite_hash": suite.get("hash"),
        "models": models,
        "date": results.get("date"),
    }
