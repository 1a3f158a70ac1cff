"""Runs and runlogs as MCP resources: ``fabric://runs`` (every run, newest first),
``fabric://runs/{run_id}`` (one run's summary) and ``fabric://runs/{run_id}/runlog`` (its
JSON lines). Secrets are redacted as the HTTP API redacts them; a URI is matched whole and a
run id checked before any path is built from it."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from fabric.domain.secrets import Secrets
from fabric.infrastructure.runlog.facts import RunFacts
from fabric.infrastructure.runlog.index import RunIndex

RUNS = "fabric://runs"
LISTED = 100
"""Runs listed one by one by ``resources/list``; ``fabric://runs`` lists up to ``MAX_RUNS``."""
MAX_RUNS = 1000
MAX_RUNLOG_BYTES = 8 << 20
"""A runlog is sent up to this size (cut at a line's end); the file has the rest."""
_URI = re.compile(r"fabric://runs(?:/([^/]{1,200})(/runlog)?)?")
JSON = "application/json"


class RunResources:
    """The runs of one runs folder, read for MCP clients."""

    def __init__(self, index: RunIndex, secrets: Secrets) -> None:
        self.index, self.secrets = index, secrets

    def templates(self) -> list[types.ResourceTemplate]:
        return [
            types.ResourceTemplate(
                uri_template=RUNS + "/{run_id}",
                name="run",
                description="One run: pack, task, status, steps, tokens, error (JSON).",
                mime_type=JSON,
            ),
            types.ResourceTemplate(
                uri_template=RUNS + "/{run_id}/runlog",
                name="runlog",
                description="One run's runlog, every event as a JSON line.",
                mime_type="application/x-ndjson",
            ),
        ]

    async def listing(self) -> list[types.Resource]:
        rows = await asyncio.to_thread(self.index.scan)
        found = [
            types.Resource(
                uri=RUNS,
                name="runs",
                description=f"Every run of the runs folder, newest first (at most {MAX_RUNS}).",
                mime_type=JSON,
            )
        ]
        for facts, status in rows[:LISTED]:
            task = self.secrets.redact((facts.task or "")[:120])
            found.append(
                types.Resource(
                    uri=f"{RUNS}/{facts.run_id}",
                    name=facts.run_id,
                    description=f"{facts.pack or '?'} ({status}): {task}",
                    mime_type=JSON,
                )
            )
        return found

    async def read(self, uri: str) -> types.ReadResourceResult:
        match = _URI.fullmatch(uri)
        if match is None:
            raise _unknown(uri)
        run_id, runlog = match.group(1), match.group(2)
        if run_id is None:
            rows = await asyncio.to_thread(self.index.scan)
            body = {"runs": [summary(f, s) for f, s in rows[:MAX_RUNS]], "total": len(rows)}
            return _text(uri, json.dumps(self.secrets.redact_obj(body)), JSON)
        found = await asyncio.to_thread(self.index.get, run_id)
        if found is None:
            raise _unknown(uri)
        if runlog is None:
            text = json.dumps(self.secrets.redact_obj(summary(*found)))
            return _text(uri, text, JSON)
        path = self.index.runlog(run_id)
        if path is None:
            raise _unknown(uri)
        data = await asyncio.to_thread(self._runlog, path)
        return _text(uri, data, "application/x-ndjson")

    def _runlog(self, path: Path) -> str:
        with path.open("rb") as file:
            data = file.read(MAX_RUNLOG_BYTES + 1)
        cut = len(data) > MAX_RUNLOG_BYTES
        if cut:
            data = data[: data.rfind(b"\n", 0, MAX_RUNLOG_BYTES) + 1]
        elif not data.endswith(b"\n"):  # a line being written: not yet a line
            data = data[: data.rfind(b"\n") + 1]
        text = b"".join(self.secrets.redact_lines([data])).decode("utf-8", "replace")
        if cut:
            note = {"kind": "cut", "note": f"the runlog is longer than {MAX_RUNLOG_BYTES} bytes: "
                    f"read the rest from {path}"}  # fmt: skip
            text += json.dumps(note) + "\n"
        return text


def summary(facts: RunFacts, status: str) -> dict[str, Any]:
    """One run as the resources show it."""
    end = facts.end or {}
    return {
        "run_id": facts.run_id,
        "uri": f"{RUNS}/{facts.run_id}",
        "status": status,
        "pack": facts.pack,
        "model": facts.model,
        "task": facts.task,
        "workspace": facts.workspace,
        "steps": end.get("steps", facts.steps),
        "started_at": facts.started_at,
        "ended_at": end.get("ended_at"),
        "error": end.get("error") or ({"message": facts.problem} if facts.problem else None),
        "replay_of": facts.replay_of,
        "resumed": facts.resumed,
    }


def _text(uri: str, text: str, mime: str) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
    )


def _unknown(uri: str) -> MCPError:
    shown = uri[:200]
    return MCPError(
        INVALID_PARAMS,
        f"no such resource: {shown!r}. Runs are {RUNS}, {RUNS}/<run_id> and "
        f"{RUNS}/<run_id>/runlog; list them with resources/list or read {RUNS}.",
    )
