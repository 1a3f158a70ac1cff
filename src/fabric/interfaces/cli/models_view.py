"""``fabric models``: what every backend offers, and which model a run would use and why;
``fabric packs``: each pack, the model it asks for and the one a run would use."""

from __future__ import annotations

from typing import Any, TextIO


def _size(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value * 1000:.0f}M" if value < 1 else f"{value:g}B"


def _context(model: dict[str, Any]) -> str:
    """``8,192 ctx (max 32,768)``: the window a run gets, and the model's own when larger or
    smaller (the configured one is what counts)."""
    used, most = model.get("context_used"), model.get("context_length")
    if not used:
        return f"{most:,} ctx" if most else "ctx ?"
    if most and most != used:
        return f"{used:,} ctx (max {most:,})"
    return f"{used:,} ctx"


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
            verdict = f"  ({m['verdict']})" if m["verdict"] else ""
            out.write(
                f"  {m['name']:<40} {tools:<9} {_context(m):<22} "
                f"{_size(m['parameters_b']):>6}{verdict}\n"
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


def print_packs(rows: list[dict[str, Any]], out: TextIO) -> None:
    """Each pack: name, the model key (and the model it names), description, tools, where it
    comes from, and the model a run would use now, with why when it is not the one asked for;
    an installed pack that cannot be built, with why."""
    for row in rows:
        if "error" in row:
            out.write(f"{row['name']}  ·  CANNOT BE USED\n    from: {row['origin']}\n")
            out.write(f"    {row['error']['message']}\n")
            if row["error"].get("hint"):
                out.write(f"      hint: {row['error']['hint']}\n")
            continue
        out.write(f"{row['name']}  ·  model {row['model']}\n")
        if row["description"]:
            out.write(f"    {row['description']}\n")
        out.write(f"    tools: {', '.join(row['tools'])}\n")
        out.write(f"    from: {row['origin']}\n")
        used = row.get("will_use") or {}
        if used.get("model"):
            out.write(f"    a run now uses: {used['model']} on {used['backend']}\n")
            if used["model"] != row.get("asks") and used.get("reason"):
                out.write(f"      not {row.get('asks')}: {used['reason']}\n")
        elif used.get("error"):
            out.write(f"    a run now finds no usable model: {used['error']['message']}\n")
            if used["error"].get("hint"):
                out.write(f"      hint: {used['error']['hint']}\n")
