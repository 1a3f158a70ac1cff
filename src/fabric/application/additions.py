"""What fabric's own conventions add to a run of any pack (ADR 0025): the workspace's
instructions (``AGENTS.md``), skills, a plan, memory across runs and tool search. Each is set
up for one run by the composition root from the pack's settings and joins the pack's own
prompt and tools; the pack itself is never changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from .pack import AfterCall, Pack
from .ports import Tool


class Addition(Struct, frozen=True):
    """One convention's part in one run."""

    name: str
    """Its key in ``run_started.additions`` (``instructions``, ``skills``, ``plan``, ...)."""
    prompt: str = ""
    """Text added to the system prompt after the pack's own (empty: none)."""
    tools: tuple[Tool, ...] = ()
    """Tools the run gets besides the pack's."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """What ``run_started.additions[name]`` records of it (what was found, where, why not)."""
    after_call: AfterCall | None = None
    """Asked after each tool call that ran: text to append to its output (``Pack.after_calls``,
    recorded in that ``tool_result.additions[name]``)."""
    restore: Callable[[Sequence[Mapping[str, Any]]], Addition] | None = None
    """The addition as the recorded run had it, from its events (``run_started`` first, then
    those of the steps a resume re-drives): a resume or a replay must tell the model what the
    run told it then, whatever the workspace holds now (``restored``). None: as it is now."""


def joined(pack: Pack, additions: Sequence[Addition]) -> Pack:
    """``pack`` with the additions' prompts after its own, their tools after its own and their
    after-call hooks."""
    prompts = [a.prompt for a in additions if a.prompt]
    tools = [t for a in additions for t in a.tools]
    hooks = {a.name: a.after_call for a in additions if a.after_call is not None}
    if not prompts and not tools and not hooks:
        return pack
    prompt = "\n\n".join([pack.system_prompt, *prompts])
    return replace(
        pack,
        system_prompt=prompt,
        tools=(*pack.tools, *tools),
        after_calls={**pack.after_calls, **hooks},
    )


def restored(
    additions: Sequence[Addition], events: Sequence[Mapping[str, Any]]
) -> tuple[Addition, ...]:
    """The additions as the run recorded in ``events`` had them (``Addition.restore``)."""
    return tuple(a.restore(events) if a.restore is not None else a for a in additions)


def as_recorded(
    pack: Pack, additions: Sequence[Addition], events: Sequence[Mapping[str, Any]] | None
) -> Pack:
    """``pack`` joined with ``additions``, as the run recorded in ``events`` had them when they
    are given (a run driven again, resumed or replayed: ``restored``), else as they are now."""
    return joined(pack, additions if events is None else restored(additions, events))


def started_in(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The ``run_started`` among the events a ``restore`` is given ({}: none)."""
    return next((e for e in events if e.get("kind") == "run_started"), {})


def recorded(additions: Sequence[Addition]) -> dict[str, Any]:
    """The additions as ``run_started`` records them: those with something to record (none:
    nothing; skills found nowhere, say, leave no trace)."""
    said = {a.name: dict(a.meta) for a in additions if a.meta}
    return {"additions": said} if said else {}
