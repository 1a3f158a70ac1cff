"""``fabric models``: what every backend offers, and which model a run would use and why."""

from __future__ import annotations

from typing import Any, TextIO


def _size(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.0f}M" if value < 1 else f"{value:g}B"


def print_models(report: dict[str, Any], out: TextIO) -> None:
    for entry in report["backends"]:
        where = f" at {entry['url']}" if entry.get("url") else ""
        out.write(f"{entry['name']} ({entry['kind']}){where}\n")
        error = entry.get("error")
        if error:
            out.write(f"  not usable: {error['message']}\n")
            if error.get("hint"):
                out.write(f"  hint: {error['hint']}\n")
        for m in entry["models"]:
            tools = {True: "tools", False: "no tools", None: "tools?"}[m["tools"]]
            if m["embedding_only"]:
                tools = "embedding"
            ctx = f"{m['context_length']:,} ctx" if m["context_length"] else "ctx ?"
            verdict = f"  ({m['verdict']})" if m["verdict"] else ""
            out.write(
                f"  {m['name']:<40} {tools:<9} {ctx:<12} {_size(m['parameters_b']):>6}{verdict}\n"
            )
        if entry.get("pick"):
            out.write(f"  pick: {entry['pick']['model']}: {entry['pick']['reason']}\n")
        out.write("\n")
    pick = report["pick"]
    if pick.get("model"):
        out.write(
            f"pack {report['pack']} would run with {pick['model']} on {pick['backend']}: "
            f"{pick['reason']}\n"
        )
    else:
        error = pick.get("error", {})
        out.write(f"no usable model for pack {report['pack']}: {error.get('message', '')}\n")
        if error.get("hint"):
            out.write(f"  hint: {error['hint']}\n")
