"""What fabric's own conventions add to a run of any pack (ADR 0025): the workspace's
instructions (``AGENTS.md``), skills, a plan, memory across runs and tool search. Each is set
up for one run by the composition root from the pack's settings and joins the pack's own
prompt and tools; the pack itself is never changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .pack import Pack
from .ports import Tool


@dataclass(frozen=True, slots=True)
class Addition:
    """One convention's part in one run."""

    name: str
    """Its key in ``run_started.additions`` (``instructions``, ``skills``, ``plan``, ...)."""
    prompt: str = ""
    """Text added to the system prompt after the pack's own (empty: none)."""
    tools: tuple[Tool, ...] = ()
    """Tools the run gets besides the pack's."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """What ``run_started.additions[name]`` records of it (what was found, where, why not)."""


def joined(pack: Pack, additions: Sequence[Addition]) -> Pack:
    """``pack`` with the additions' prompts after its own and their tools after its own."""
    prompts = [a.prompt for a in additions if a.prompt]
    tools = [t for a in additions for t in a.tools]
    if not prompts and not tools:
        return pack
    prompt = "\n\n".join([pack.system_prompt, *prompts])
    return dataclasses.replace(pack, system_prompt=prompt, tools=(*pack.tools, *tools))


def recorded(additions: Sequence[Addition]) -> dict[str, Any]:
    """The additions as ``run_started`` records them (none: nothing)."""
    if not additions:
        return {}
    return {"additions": {a.name: dict(a.meta) for a in additions}}
