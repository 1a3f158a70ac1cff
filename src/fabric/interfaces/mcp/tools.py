"""Packs as MCP tools: the tool a pack becomes (its input and output schema), the arguments a
client sends (hostile: checked strictly), and the result a run becomes."""

from __future__ import annotations

import json
import re
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from fabric.config.where import error_message
from fabric.domain.errors import ConfigError, FabricError
from fabric.domain.models import RunResult
from fabric.interfaces.runner import Runner

MAX_STEPS = 10_000
"""The most model calls a call may ask for (as ``POST /tasks``)."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


class CallIn(BaseModel):
    """What a client sends to run a pack."""

    model_config = ConfigDict(extra="forbid")

    task: StrictStr = Field(min_length=1, description="What the pack should do.")
    workspace: StrictStr | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="The folder to work in: one under the server's workspace roots "
        "(serve.workspace_roots in fabric.yaml; default: the first root). Relative paths are "
        "taken from the first root.",
    )
    max_steps: StrictInt | None = Field(
        None, ge=1, le=MAX_STEPS, description="Model calls at most (default: the pack's)."
    )


def pack_tool(runner: Runner, name: str, max_task_chars: int) -> types.Tool | None:
    """The tool pack ``name`` is offered as, or None when its name is no MCP tool name."""
    if not _TOOL_NAME.fullmatch(name):
        return None
    pack = runner.pack(name).pack
    schema = CallIn.model_json_schema()
    schema["properties"]["task"]["maxLength"] = max_task_chars
    output = dict(pack.finish_schema)
    description = (
        f"{pack.description or 'A fabric pack.'}\n\nRuns the pack '{name}' on the task as one "
        "fabric run (its policy, sandbox and limits), reporting progress per step; the result "
        "is the pack's final answer (structured content) and the run's id and runlog."
    )
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        output_schema=output if output.get("type") == "object" else None,
    )


def parse_call(arguments: Any, max_task_chars: int) -> CallIn:
    """The call's arguments, or a ConfigError saying what is wrong with them."""
    try:
        call = CallIn.model_validate(arguments if arguments is not None else {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e.get('loc', ()))) or 'arguments'}: {error_message(e)}"
            for e in exc.errors(include_url=False)[:5]
        )
        raise ConfigError(
            f"the arguments do not fit this tool: {problems}",
            hint="send {task: text, workspace?: folder, max_steps?: n} (see the tool's "
            "input schema)",
        ) from None
    if len(call.task) > max_task_chars:
        raise ConfigError(
            f"the task has {len(call.task)} characters; at most {max_task_chars} are taken",
            hint="shorten it, or raise serve.max_task_chars in fabric.yaml",
        )
    return call


def error_result(exc: FabricError) -> types.CallToolResult:
    """A call refused before its run started (bad arguments, workspace, pack)."""
    text = f"fabric did not start the run: {exc.message}"
    if exc.hint:
        text += f"\nWhat to do: {exc.hint}"
    return _result(text, error=True)


def run_result(result: RunResult, notes: list[str], secrets: Any) -> types.CallToolResult:
    """A run's end: its payload as structured content when it completed; otherwise a tool
    error with its status and why. The text says the status, run id and runlog path."""
    head = (
        f"status: {result.status.value}; run {result.run_id}, {result.steps} step(s); "
        f"runlog: {result.runlog_path or '(none)'}"
    )
    lines = [head, *notes]
    if result.succeeded and result.payload is not None:
        payload = secrets.redact_obj(result.payload)
        lines.append(json.dumps(payload, ensure_ascii=False, indent=2))
        return _result("\n".join(lines), structured=payload)
    error = result.error or {}
    message = error.get("message") or f"the run ended {result.status.value}"
    lines.insert(0, f"the run did not complete: {message}")
    if error.get("hint"):
        lines.append(f"What to do: {error['hint']}")
    if result.payload is not None:  # e.g. completed_unconfirmed: the answer, not confirmed
        lines.append(json.dumps(secrets.redact_obj(result.payload), ensure_ascii=False))
    return _result(secrets.redact("\n".join(lines)), error=True)


def _result(
    text: str, *, error: bool = False, structured: dict[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=error,
    )
