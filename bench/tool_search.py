"""Tool search (ADR 0028): what a run sends with many tools, with and without search.

For each tool count (default 120 and 200), a run of a pack with that many MCP-like tools is
driven by a scripted model through ``execute_task``: without search it calls the one tool it
needs and finishes (every schema in every request); with search (the default threshold, 30)
it searches, loads two tools, calls one and finishes. Each request's size is measured as
its JSON body (messages and tools, as an OpenAI-compatible server gets them) in bytes, with
an estimate of its tokens (3.5 characters a token, as fabric counts before a server has
counted one; ``window.FIRST_RATIO``). Nothing is timed; nothing leaves the process.

    python bench/tool_search.py                  # the tables
    python bench/tool_search.py --tools 100 300  # other tool counts
    python bench/tool_search.py --json           # the figures as JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fabric.application.context import ToolContext
from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.application.loop.window import FIRST_RATIO, Window
from fabric.application.pack import Pack
from fabric.config.schema import ToolSearchSettings
from fabric.domain.models import ChatResponse, Message, ToolSpec
from fabric.testing import FunctionChatClient, MemoryRunLog, tool_call

SYSTEMS = ("fleet", "drivers", "depots", "customs", "rates", "invoices", "customers", "claims",
           "warehouse", "tracking", "hr", "it", "billing", "crm", "payroll", "storage", "audit",
           "legal", "travel", "security")  # fmt: skip
ACTIONS = {
    "find": "Find {s} records by name, number or a word of their notes.",
    "get": "Everything the {s} system holds about one record, with its links.",
    "list": "List the {s} records changed in a period, newest first, page by page.",
    "create": "Create a {s} record from the given fields; returns its number.",
    "update": "Change fields of one {s} record; fields not given stay as they are.",
    "archive": "Archive a {s} record that is no longer in use (it can be restored).",
    "history": "The change history of a {s} record: who changed which field, and when.",
    "export": "Export {s} records matching a filter as CSV, at most 10,000 rows.",
    "report": "A summary report of the {s} system for a month: counts, totals, changes.",
    "owner": "Who is responsible for a {s} record, with their team and deputy.",
}
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The record's number, e.g. R-2041."},
        "fields": {
            "type": "object",
            "description": "Field names and their new values.",
            "additionalProperties": {"type": "string"},
        },
        "since": {"type": "string", "format": "date", "description": "Only since this day."},
        "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "At most."},
    },
    "required": ["id"],
    "additionalProperties": False,
}
FINISH_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
}
TARGET, SECOND = "rates_get", "rates_history"
EMBEDDED = Window.of(8192, 1536)
"""The embedded default model's window, with the reply's limit of fabric.yaml kept free."""


class Canned:
    """A tool with a realistic schema that answers at once."""

    def __init__(self, name: str, description: str) -> None:
        self._spec = ToolSpec(name, description, SCHEMA)

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        return f"{self._spec.name}: record {arguments.get('id')}: fuel surcharge 17.5 %."


def made_up_tools(count: int) -> list[Canned]:
    """``count`` tools of made-up systems (20 systems of 10 tools, then numbered)."""
    tools = []
    for n in range(count):
        system = SYSTEMS[(n // len(ACTIONS)) % len(SYSTEMS)]
        action, text = list(ACTIONS.items())[n % len(ACTIONS)]
        lap = n // (len(ACTIONS) * len(SYSTEMS))
        name = f"{system}_{action}" + (f"_{lap + 1}" if lap else "")
        tools.append(Canned(f"srv__{name}", text.format(s=system)))
    return tools


def _script(search: bool) -> list[ChatResponse]:
    call = tool_call(f"srv__{TARGET}", {"id": "NO"})
    finish = tool_call("finish_task", {"answer": "17.5 %"})
    if not search:
        return [call, finish]
    return [
        tool_call("search_tools", {"query": "rates record"}),
        tool_call("load_tools", {"names": [f"srv__{TARGET}", f"srv__{SECOND}"]}),
        call,
        finish,
    ]


async def measure(count: int, search: bool) -> dict[str, Any]:
    """One run's requests: their size, and the tools each offered."""
    script, sizes = _script(search), []

    async def answer(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
        body = json.dumps({"messages": list(messages), "tools": list(tools)})
        sizes.append({"tools": len(tools), "bytes": len(body.encode())})
        return script[len(sizes) - 1]

    pack = Pack(
        "bench",
        "answers from many systems",
        "You answer questions about Harrowgate Freight from its systems.",
        made_up_tools(count),
        FINISH_SCHEMA,
    )
    settings = ToolSearchSettings() if search else ToolSearchSettings(threshold=0)
    with tempfile.TemporaryDirectory() as folder:
        task = "What is Norway's fuel surcharge?"
        job = Job(task, pack, "bench", Path(folder), tool_search=settings)
        kit = Kit(FunctionChatClient(answer), MemoryRunLog())
        result = await execute_task(job, kit)
    assert result.status.value == "completed", result.error
    for size in sizes:
        size["tokens"] = round(size["bytes"] * FIRST_RATIO)
    total = sum(s["bytes"] for s in sizes)
    return {
        "tools": count,
        "search": search,
        "requests": sizes,
        "total_bytes": total,
        "total_tokens": round(total * FIRST_RATIO),
        "mean_bytes": round(total / len(sizes)),
        "mean_tokens": round(total * FIRST_RATIO / len(sizes)),
        "first_fits_embedded": sizes[0]["tokens"] <= EMBEDDED.prompt,
    }


def _print(runs: list[dict[str, Any]]) -> None:
    print(
        "Tool search: request sizes through a scripted model (bytes of the JSON body; "
        f"tokens estimated at 3.5 characters a token). The embedded model's window leaves "
        f"{EMBEDDED.prompt:,} tokens for a request.\n"
    )
    for run in runs:
        how = "search on (threshold 30)" if run["search"] else "search off (every schema sent)"
        print(f"{run['tools']} tools, {how}")
        print(f"  {'request':>7}  {'tools':>5}  {'bytes':>9}  {'~tokens':>8}")
        for n, size in enumerate(run["requests"], 1):
            print(f"  {n:>7}  {size['tools']:>5}  {size['bytes']:>9,}  {size['tokens']:>8,}")
        print(
            f"  {'run':>7}  {'':>5}  {run['total_bytes']:>9,}  {run['total_tokens']:>8,}"
            f"   mean {run['mean_bytes']:,} bytes (~{run['mean_tokens']:,} tokens) a request;"
            f" the first {'fits' if run['first_fits_embedded'] else 'does not fit'} the "
            "embedded model's window\n"
        )
    for off, on in zip(runs[::2], runs[1::2], strict=True):
        print(
            f"{off['tools']} tools: a request {off['mean_bytes'] / on['mean_bytes']:.0f}x "
            f"smaller with search (~{off['mean_tokens']:,} to ~{on['mean_tokens']:,} tokens), "
            f"the whole run {off['total_bytes'] / on['total_bytes']:.1f}x "
            f"({len(off['requests'])} requests without, {len(on['requests'])} with)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, nargs="+", default=[120, 200])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if any(n < 31 for n in args.tools):
        parser.error("--tools: give counts above the default threshold, 30")
    runs = [asyncio.run(measure(n, search)) for n in args.tools for search in (False, True)]
    if args.json:
        json.dump(runs, sys.stdout, indent=2)
        print()
    else:
        _print(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
