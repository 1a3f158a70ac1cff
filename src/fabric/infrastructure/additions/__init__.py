"""fabric's conventions for any pack, set up for one run (``application/additions.py``,
ADR 0025). ``additions_for`` is the one place that knows them all; each lives in a module of
its own here and is imported only when the pack's settings turn it on."""

from __future__ import annotations

from pathlib import Path

from msgspec import Struct, field

from fabric.application.additions import Addition
from fabric.config.loader import LoadedConfig
from fabric.config.schema import PackSettings
from fabric.domain.secrets import Secrets


class Where(Struct, frozen=True):
    """What a convention may look at when it is set up for a run."""

    workspace: Path
    """The run's workspace, resolved."""
    settings: PackSettings
    """The pack's settings: each convention's own key in them turns it on and shapes it."""
    loaded: LoadedConfig
    """The config the run was loaded with (its folder, its top-level settings)."""
    pack: str = ""
    """The pack's name."""
    secrets: Secrets = field(default_factory=Secrets)
    """What fabric never writes out (``compose.known_secrets``): a convention that keeps text
    beyond the run (memory) takes them out of it first."""
    protected: tuple[Path, ...] = ()
    """What the run's tools may neither read nor write (``Runner.protected_paths``: the runs
    folder, fabric's own files): a convention reads none of it either."""
    replay: bool = False
    """Set up for a replay (``fabric replay``): its tools work on a copy of the workspace, or
    not at all, so a convention's tools must change nothing outside it (memory keeps
    nothing)."""


def additions_for(where: Where) -> list[Addition]:
    """What the pack's settings turn on for a run in ``where.workspace``, in the order the
    model is told of them. Called in a worker thread: a convention may read files."""
    found: list[Addition] = []
    if where.settings.instructions.enabled:  # the workspace's AGENTS.md (ADR 0026)
        from .instructions import instructions

        found.append(instructions(where))
    if where.settings.skills.enabled:  # SKILL.md folders offered by name (ADR 0027)
        from .skills import skills

        found.append(skills(where))
    if where.settings.plan.enabled:  # a checklist the model keeps (ADR 0029)
        from fabric.application.plan import plan_addition

        found.append(plan_addition(where.settings.plan))
    if where.settings.memory.enabled:
        from .memory import memory_addition

        found.append(memory_addition(where))
    return found


def added_tools(settings: PackSettings) -> dict[str, str]:
    """The tools the pack's settings turn conventions on for, known without setting them up,
    each with the key of ``PackSettings`` that adds it: a policy rule may name them, and a
    pack's own tool must not have their names (``pack_checks``). ``load_skill`` comes only
    when a run finds a skill, but its name is kept for it whenever skills are on."""
    names: dict[str, str] = {}
    if settings.skills.enabled:
        names["load_skill"] = "skills"
    if settings.plan.enabled:
        names["update_plan"] = "plan"
    if settings.memory.enabled:
        names |= {"remember": "memory", "search_memory": "memory"}
    return names
