"""What fabric checks of a pack besides its settings model, and where it says a problem is:
the pack's section of the config file (key path and line), or the installed distribution it
comes from (no file of the user's to point into)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from msgspec import Struct
from pydantic import BaseModel, ValidationError

from fabric.application.delegation import PREFIX
from fabric.application.pack import Pack
from fabric.config.loader import LoadedConfig, validation_error
from fabric.config.schema import PackSettings
from fabric.domain.errors import ConfigError, FabricError, PackError
from fabric.infrastructure.additions import added_tools

if TYPE_CHECKING:
    from .entry_points import InstalledPack


class Place(Struct, frozen=True):
    """Where the settings of pack ``name`` come from: its section in ``loaded``, or, for a
    pack the config does not declare, the ``installed`` distribution's entry point."""

    loaded: LoadedConfig
    name: str
    installed: InstalledPack | None = None

    def at(self, *keys: str | int) -> str:
        """``fabric.yaml:12: packs.p.sandbox.policy.rules[1].tool``, or for an installed pack
        ``pack 'lint' (installed by fabric-lintpack 1.0): model``."""
        path = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys)
        if self.installed is None:
            return f"{self.loaded.where('packs', self.name, *keys)}: packs.{self.name}{path}"
        return f"{self.label}{': ' + path[1:] if path else ''}"

    @property
    def label(self) -> str:
        if self.installed is None:
            return f"pack {self.name!r} of {self.loaded.source}"
        return f"pack {self.name!r} (installed by {self.installed.origin})"

    def error(self, exc: ValidationError, model: type[BaseModel]) -> ConfigError:
        """The settings model refused the section: each problem with its key (and line)."""
        if self.installed is None:
            return self.loaded.error(exc, model, ("packs", self.name))
        found = validation_error(exc, self.label, "", model, ())
        return ConfigError(
            found.message,
            hint=f"the pack needs settings of yours: declare it under packs: in "
            f"{self.loaded.source} with builder: {self.name} and those keys",
        )


def model_key_problem(place: Place, settings: PackSettings) -> PackError | None:
    """The pack's model key names no model of the config."""
    llm = place.loaded.config.llm
    keys = dict.fromkeys(
        ["default", *llm.models, *(k for b in llm.backends.values() for k in b.models)]
    )
    if settings.model in keys:
        return None
    return PackError(
        f"{place.at('model')}: {settings.model!r} is not a model key in llm.models or a "
        "backend's models",
        hint=f"use one of: {', '.join(keys)}, or add it to llm.models",
    )


def pack_problems(place: Place, pack: Pack, settings: PackSettings) -> list[PackError]:
    """What is wrong with a built pack's wiring: MCP servers the config does not declare,
    policy rules for tools the pack does not have."""
    return [
        *_mcp_problems(place, settings),
        *_clashes(place, pack, settings),
        *_policy_problems(place, pack, settings),
    ]


def _mcp_problems(place: Place, settings: PackSettings) -> Iterator[PackError]:
    """Every server the pack's ``mcp:`` names is declared under ``mcp_servers``."""
    known = place.loaded.config.mcp_servers
    for index, use in enumerate(settings.mcp):
        if use.server not in known:
            yield PackError(
                f"{place.at('mcp', index, 'server')}: no MCP server {use.server!r}",
                hint=f"declared servers: {', '.join(known) or 'none'}; add it under "
                "mcp_servers: in fabric.yaml",
            )


def _clashes(place: Place, pack: Pack, settings: PackSettings) -> Iterator[PackError]:
    """A tool of the pack's own named like one a convention it has on adds (ADR 0025)."""
    added = added_tools(settings)
    for name in pack.tool_names():
        key = added.get(name)
        if key is not None:
            yield PackError(
                f"{place.at(key)}: pack {place.name!r} has a tool of its own named {name!r}, "
                f"which {key} adds to every run too",
                hint=f"rename the pack's tool, or set {key}.enabled: false for the pack",
            )


def _policy_problems(place: Place, pack: Pack, settings: PackSettings) -> Iterator[PackError]:
    """A policy rule for a tool the pack does not have would never match: a misspelt name
    must not silently turn an intended ``deny`` into the default."""
    tools = [*pack.tool_names(), *(f"{PREFIX}{d}" for d in settings.delegates)]
    tools += added_tools(settings)  # fabric's conventions' tools (ADR 0025)
    servers = tuple(f"{use.server}__" for use in settings.mcp)  # their tools: known per run
    for index, rule in enumerate(settings.sandbox.policy.rules):
        if rule.tool not in tools and not rule.tool.startswith(servers or ("\0",)):
            where = place.at("sandbox", "policy", "rules", index, "tool")
            also = f"; and its MCP servers' tools ({', '.join(s + '*' for s in servers)})"
            yield PackError(
                f"{where}: pack {place.name!r} has no tool {rule.tool!r}",
                hint=f"its tools: {', '.join(tools)}{also if servers else ''}",
            )


def one_error(problems: Sequence[FabricError]) -> FabricError:
    """One error for a pack's problems (each on its own line, with what to do)."""
    if len(problems) == 1:
        return problems[0]
    lines = [f"  {p.message} ({p.hint})" if p.hint else f"  {p.message}" for p in problems]
    return PackError(
        f"{len(problems)} problems:\n" + "\n".join(lines), hint="fix each and run again"
    )
