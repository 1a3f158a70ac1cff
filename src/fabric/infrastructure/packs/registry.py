"""Packs by dotted path.

A pack section's ``builder`` is ``module:callable`` (or a built-in short name). The callable's
first parameter is annotated with its settings model, a subclass of ``PackSettings``; the pack's
YAML section is validated with that model and passed in, and the callable returns a ``Pack``.
The config file's folder goes first on the import path, so ``packs.mine:build`` finds the
user's own ``packs/mine.py``; it is guarded (``import_guard.py``): it provides only the modules
builders name, from source.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from fabric.application.delegation import PREFIX
from fabric.application.pack import Pack
from fabric.config.loader import LoadedConfig
from fabric.config.schema import PackSettings, SandboxSettings
from fabric.domain.errors import ConfigError, PackError
from fabric.infrastructure.tools.verifiers import CommandVerifier

from .import_guard import guard

BUILTIN_BUILDERS = {
    "engineering": "packs.engineering:build",
    "research": "packs.research:build",
    "declarative": "fabric.infrastructure.packs.declarative:build",
}


@dataclass(frozen=True)
class LoadedPack:
    """A built pack with the settings it was built from (limits, model key, sandbox)."""

    pack: Pack
    settings: PackSettings

    def for_run(self, verify: str | None = None) -> LoadedPack:
        """This pack with a task's own verification: None keeps the pack's
        (``verify.command``), 'off' drops the command check, any other text is the command
        to check this task with, after every finish_task. The pack's own checks (e.g. the
        research pack's citations) stay."""
        if verify is None:
            return self
        kept = tuple(v for v in self.pack.verifiers if not isinstance(v, CommandVerifier))
        if verify.strip() != "off":
            kept += (CommandVerifier(verify, when="always", timeout=self.settings.verify.timeout),)
        return dataclasses.replace(self, pack=dataclasses.replace(self.pack, verifiers=kept))

    def within(self, outer: SandboxSettings) -> LoadedPack:
        """This pack for a run delegated by one whose sandbox is ``outer``: never more than
        that allows (``SandboxSettings.within``)."""
        sandbox = self.settings.sandbox.within(outer)
        settings = self.settings.model_copy(update={"sandbox": sandbox})
        return dataclasses.replace(
            self, pack=dataclasses.replace(self.pack, sandbox=sandbox), settings=settings
        )

    @property
    def starts_commands(self) -> bool:
        """Whether a run of this pack starts processes (its shell tool, or a verification
        command), so it needs a confined command runner."""
        shell = "shell" in self.pack.tool_names() and bool(self.settings.sandbox.allowed_commands)
        return shell or any(isinstance(v, CommandVerifier) for v in self.pack.verifiers)


def pack_names(loaded: LoadedConfig) -> list[str]:
    return list(loaded.config.packs)


def load_pack(loaded: LoadedConfig, name: str) -> LoadedPack:
    """Import, validate and build the pack called ``name``."""
    section = loaded.config.packs.get(name)
    if section is None:
        known = ", ".join(pack_names(loaded)) or "none"
        raise PackError(
            f"no pack named {name!r} in {loaded.source}",
            hint=f"known packs: {known}; add one under 'packs:' to declare it",
        )
    builder = resolve_builder(loaded, name, section.builder)
    settings_model = _settings_model(builder)
    try:
        settings = settings_model.model_validate(
            _over_defaults(settings_model, section.model_dump(exclude_unset=True))
        )
    except ValidationError as exc:
        raise loaded.error(exc, settings_model, ("packs", name)) from None
    llm = loaded.config.llm
    keys = dict.fromkeys(
        ["default", *llm.models, *(k for b in llm.backends.values() for k in b.models)]
    )
    if settings.model not in keys:
        raise PackError(
            f"{loaded.where('packs', name, 'model')}: packs.{name}.model: "
            f"{settings.model!r} is not a model key in llm.models or a backend's models",
            hint=f"use one of: {', '.join(keys)}, or add it to llm.models",
        )
    try:
        pack = builder(settings)
    except Exception as exc:
        raise PackError(
            f"{loaded.where('packs', name, 'builder')}: the builder of pack {name!r} "
            f"({section.builder}) failed: {type(exc).__name__}: {exc}",
            hint="fix the pack's settings or its builder code",
        ) from exc
    if not isinstance(pack, Pack):
        raise PackError(
            f"{loaded.where('packs', name, 'builder')}: the builder {section.builder} returned "
            f"{type(pack).__name__}, not a Pack",
            hint="a builder must return fabric.application.pack.Pack",
        )
    pack = dataclasses.replace(
        pack,
        name=name,
        model=settings.model,
        description=settings.description or pack.description,
        verifiers=(*pack.verifiers, *_command_check(loaded, name, settings)),
    )
    _check_mcp(loaded, name, settings)
    _check_policy_tools(loaded, name, pack, settings)
    return LoadedPack(pack, settings)


def _check_mcp(loaded: LoadedConfig, name: str, settings: PackSettings) -> None:
    """Every server the pack's ``mcp:`` names is declared under ``mcp_servers``."""
    known = loaded.config.mcp_servers
    for index, use in enumerate(settings.mcp):
        if use.server not in known:
            where = loaded.where("packs", name, "mcp", index, "server")
            raise PackError(
                f"{where}: packs.{name}.mcp[{index}].server: no MCP server {use.server!r}",
                hint=f"declared servers: {', '.join(known) or 'none'}; add it under "
                "mcp_servers: in fabric.yaml",
            )


def _command_check(
    loaded: LoadedConfig, name: str, settings: PackSettings
) -> tuple[CommandVerifier, ...]:
    """The pack's ``verify.command`` as a check, if it has one."""
    verify = settings.verify
    if verify.command is None:
        return ()
    try:
        return (CommandVerifier(verify.command, when=verify.when, timeout=verify.timeout),)
    except ConfigError as exc:
        where = loaded.where("packs", name, "verify", "command")
        message = f"{where}: packs.{name}.verify.command: {exc.message}"
        raise PackError(message, hint=exc.hint) from None


def _check_policy_tools(
    loaded: LoadedConfig, name: str, pack: Pack, settings: PackSettings
) -> None:
    """A policy rule for a tool the pack does not have would never match: a misspelt name
    must not silently turn an intended ``deny`` into the default."""
    tools = [*pack.tool_names(), *(f"{PREFIX}{d}" for d in settings.delegates)]
    servers = tuple(f"{use.server}__" for use in settings.mcp)  # their tools: known per run
    for index, rule in enumerate(settings.sandbox.policy.rules):
        if rule.tool not in tools and not rule.tool.startswith(servers or ("\0",)):
            where = loaded.where("packs", name, "sandbox", "policy", "rules", index, "tool")
            raise PackError(
                f"{where}: packs.{name}.sandbox.policy.rules[{index}].tool: pack {name!r} has "
                f"no tool {rule.tool!r}",
                hint=f"its tools: {', '.join(tools)}"
                + (
                    f"; and its MCP servers' tools ({', '.join(s + '*' for s in servers)})"
                    if servers
                    else ""
                ),
            )


def resolve_builder(loaded: LoadedConfig, name: str, path: str) -> Callable[..., Any]:
    """Import ``module:callable`` with the config's folder first on the import path."""

    def where() -> str:  # only for an error: finding the line parses the whole file again
        return f"{loaded.where('packs', name, 'builder')}: packs.{name}.builder"

    target = BUILTIN_BUILDERS.get(path, path)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise PackError(
            f"{where()}: {path!r} is neither 'module:callable' nor a built-in builder",
            hint=f"built-in builders: {', '.join(BUILTIN_BUILDERS)}; "
            "or e.g. 'packs.mine:build' for packs/mine.py beside fabric.yaml",
        )
    base = str(loaded.base_dir)
    if base not in sys.path:
        sys.path.insert(0, base)
    # The config folder is often the workspace: it may give only this module, from source.
    guard([base], [module_name.split(".")[0]])
    importlib.invalidate_caches()  # see pack files created since the last import
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        hint = f"check that {module_name.replace('.', '/')}.py exists under {base} or is installed"
        packs = sys.modules.get("packs")
        if module_name.startswith("packs.") and getattr(packs, "__file__", None):
            hint = (
                f"{getattr(packs, '__file__', '')} makes 'packs' a regular package, which hides "
                "fabric's built-in packs/ and any other packs/ folder; delete that __init__.py "
                "so the folders merge"
            )
        raise PackError(
            f"{where()}: cannot import {module_name!r}: {type(exc).__name__}: {exc}", hint=hint
        ) from exc
    builder = getattr(module, attr, None)
    if not callable(builder):
        found = [
            n
            for n, v in vars(module).items()
            if inspect.isfunction(v) and n[0] != "_" and v.__module__ == module.__name__
        ]
        raise PackError(
            f"{where()}: module {module_name!r} has no callable {attr!r}",
            hint=f"callables there: {', '.join(found) or 'none'}",
        )
    return builder  # type: ignore[no-any-return]


def _over_defaults(model: type[PackSettings], data: dict[str, Any]) -> dict[str, Any]:
    """Nested settings given in part (``sandbox: {command_timeout: 300}``) change only the keys
    they name; the rest keep the builder's defaults (e.g. the engineering pack's allowlist)."""
    merged = dict(data)
    for name, field in model.model_fields.items():
        given = data.get(name)
        if not isinstance(given, dict) or field.default_factory is None:
            continue
        default = field.default_factory()  # type: ignore[call-arg]
        if isinstance(default, BaseModel):
            merged[name] = {**default.model_dump(exclude_unset=True), **given}
    return merged


def _settings_model(builder: Callable[..., Any]) -> type[PackSettings]:
    """The settings model a builder declares on its first parameter (PackSettings if none)."""
    try:
        params = list(inspect.signature(builder).parameters.values())
        hints = get_type_hints(builder)
    except (TypeError, ValueError, NameError):
        return PackSettings
    if params:
        annotation = hints.get(params[0].name)
        if isinstance(annotation, type) and issubclass(annotation, PackSettings):
            return annotation
    return PackSettings
