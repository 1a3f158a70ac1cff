"""The baseline: a minimal tool-calling loop on raw httpx, nothing but the work itself.

``run_task`` POSTs the history and the tools, appends the assistant message as it came and a
tool result for each call (the tool work done by hand), and stops at ``finish_task``. No
validation, no sandbox, no runlog. It imports only httpx and the standard library, so

    python bench/raw_loop.py SPEC.json

is the raw side of the whole-process figures: one task (SPEC holds url, model, messages,
tools, workspace), the final arguments printed as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx


def _read_file(workspace: Path, path: str, **_: Any) -> str:
    """The file with its lines numbered as fabric's read_file numbers them (``  1| text``):
    the same text goes back to the model on both sides, so the request bytes compare what the
    runner adds, not the tool's output format (``plain_read_file``: the file as it is)."""
    lines = (workspace / path).read_text("utf-8").splitlines()
    width = max(len(str(len(lines))), 3)
    return "".join(f"{n:>{width}}| {line}\n" for n, line in enumerate(lines, 1))


def plain_read_file(workspace: Path, path: str, **_: Any) -> str:
    return (workspace / path).read_text("utf-8")


def _list_files(workspace: Path, path: str = ".", **_: Any) -> str:
    return "\n".join(sorted(os.listdir(workspace / path)))


TOOLS: dict[str, Callable[..., str]] = {"read_file": _read_file, "list_files": _list_files}


# httpx builds a TLS context (loading the CA bundle, ~25 ms here) for every client unless it is
# given one; a script that runs many tasks builds it once.
TLS = ssl.create_default_context()


def new_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=600.0, trust_env=False, verify=TLS)


async def run_task(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    workspace: Path,
    max_steps: int = 1000,
) -> tuple[int, dict[str, Any] | None]:
    """Run one task; return (model calls made, finish_task arguments or None)."""
    history = list(messages)
    for step in range(1, max_steps + 1):
        reply = await client.post(url, json={"model": model, "messages": history, "tools": tools})
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
        history.append(message)
        for call in message.get("tool_calls") or ():
            function = call["function"]
            args = json.loads(function["arguments"] or "{}")
            if function["name"] == "finish_task":
                return step, args
            output = TOOLS[function["name"]](workspace, **args)
            history.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return max_steps, None


async def run_one(spec: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """One task with its own client, as a script or a service would run it."""
    async with new_client() as client:
        return await run_task(
            client,
            spec["url"],
            spec["model"],
            spec["messages"],
            spec["tools"],
            Path(spec["workspace"]),
        )


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text("utf-8"))
    steps, payload = asyncio.run(run_one(spec))
    print(json.dumps({"status": "completed", "steps": steps, "payload": payload}))


if __name__ == "__main__":
    main()
