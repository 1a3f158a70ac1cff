"""Packs by dotted path.

A pack section's ``builder`` is ``module:callable`` (or a built-in short name). The callable's
first parameter is annotated with its settings model, a subclass of ``PackSettings``; the pack's
YAML section is validated with that model and passed in, and the callable returns a ``Pack``.
The config file's folder goes first on the import path, so ``packs.mine:build`` finds the
user's own ``packs/mine.py``; it is guarded (``import_guard.py``): it provides only the modules
builders name, from source.

Installed distributions may declare packs too (entry points ``fabric.packs``,
``entry_points.py``): a run may name one the config does not declare, and a section's
``builder`` may name one by its short name to give it settings. They are looked up only then,
and when the packs are listed.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_type_hints

from msgspec import Struct
from msgspec.structs import replace
from pydantic import BaseModel, ValidationError

from fabric.application.pack import Pack
from fabric.config.loader import PACKAGED, LoadedConfig
from fabric.config.schema import PackSettings, RawPackSection, SandboxSettings
from fabric.domain.errors import ConfigError, FabricError, PackError
from fabric.infrastructure.tools.verifiers import CommandVerifier

from .import_guard import guard
from .pack_checks import Place, model_key_problem, one_error, pack_problems

if TYPE_CHECKING:
    from .entry_points import InstalledPack

BUILT_IN = "built-in"
"""The origin of the packs of fabric's packaged default config."""
BUILTIN_BUILDERS = {
    "engineering": "packs.engineering:build",
    "research": "packs.research:build",
    "declarative": "fabric.infrastructure.packs.declarative:build",
}


class LoadedPack(Struct, frozen=True):
    """A built pack with the settings it was built from (limits, model key, sandbox)."""

    pack: Pack
    settings: PackSettings
    origin: str = ""
    """Where the pack is declared: the config file, ``built-in`` (fabric's packaged
    default) or the installed distribution (``fabric-lintpack 1.0``)."""

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
        return replace(self, pack=replace(self.pack, verifiers=kept))

    def within(self, outer: SandboxSettings) -> LoadedPack:
        """This pack for a run delegated by one whose sandbox is ``outer``: never more than
        that allows (``SandboxSettings.within``)."""
        sandbox = self.settings.sandbox.within(outer)
        settings = self.settings.model_copy(update={"sandbox": sandbox})
        return replace(self, pack=replace(self.pack, sandbox=sandbox), settings=settings)

    @property
    def starts_commands(self) -> bool:
        """Whether a run of this pack starts processes (its shell tool, or a verification
        command), so it needs a confined command runner."""
        shell = "shell" in self.pack.tool_names() and bool(self.settings.sandbox.allowed_commands)
        return shell or any(isinstance(v, CommandVerifier) for v in self.pack.verifiers)


def pack_names(loaded: LoadedConfig) -> list[str]:
    return list(loaded.config.packs)


def available_packs(loaded: LoadedConfig) -> dict[str, str]:
    """Every pack a run may name, and where it comes from: the config's packs (its file, or
    ``built-in`` for fabric's packaged default), then the packs installed distributions
    declare that the config does not (``fabric-lintpack 1.0``). Looks at the installed
    distributions: for listings, not for a run."""
    from .entry_points import installed_packs

    found = dict.fromkeys(loaded.config.packs, _origin(loaded))
    for name, installed in installed_packs().items():
        found.setdefault(name, installed.origin)
    return found


def load_pack(loaded: LoadedConfig, name: str) -> LoadedPack:
    """Import, validate and build the pack called ``name``: the config's, else one an
    installed distribution declares (looked up only then)."""
    section = loaded.config.packs.get(name)
    if section is not None:
        place = Place(loaded, name)
        return _build(place, section, resolve_builder(loaded, name, section.builder))
    installed = _installed(name)
    if installed is None:
        raise PackError(
            f"no pack named {name!r} in {loaded.source} or installed",
            hint=f"known packs: {', '.join(available_packs(loaded)) or 'none'}; add one "
            "under 'packs:' to declare it",
        )
    place = Place(loaded, name, installed)
    section = RawPackSection(builder=installed.target)
    return _build(place, section, _installed_builder(installed, lambda: place.label))


def check_pack(loaded: LoadedConfig, name: str) -> list[FabricError]:
    """What is wrong with pack ``name``: why it cannot be loaded, else the settings that leave
    part of it unable to work (``PackSettings.unusable``), each at its key. Empty: good."""
    try:
        loaded_pack = load_pack(loaded, name)
    except FabricError as exc:
        return [exc]
    installed = None if name in loaded.config.packs else _installed(name)
    place = Place(loaded, name, installed)
    return [
        PackError(f"{place.at(*problem.loc)}: {problem}", hint=problem.hint)
        for problem in loaded_pack.settings.unusable()
    ]


def _build(place: Place, section: RawPackSection, builder: Callable[..., Any]) -> LoadedPack:
    settings_model = _settings_model(builder)
    try:
        settings = settings_model.model_validate(
            _over_defaults(settings_model, section.model_dump(exclude_unset=True))
        )
    except ValidationError as exc:
        raise place.error(exc, settings_model) from None
    problem = model_key_problem(place, settings)
    if problem is not None:
        raise problem
    pack = _built(place, section.builder, builder, settings)
    pack = replace(
        pack,
        name=place.name,
        model=settings.model,
        description=settings.description or pack.description,
        verifiers=(*pack.verifiers, *_command_check(place, settings)),
    )
    problems = pack_problems(place, pack, settings)
    if problems:
        raise one_error(problems)
    origin = place.installed.origin if place.installed else _origin(place.loaded)
    return LoadedPack(pack, settings, origin)


def _built(place: Place, target: str, builder: Callable[..., Any], settings: PackSettings) -> Pack:
    """What the builder returns for ``settings``, which must be a Pack."""
    try:
        pack = builder(settings)
    except Exception as exc:
        raise PackError(
            f"{place.at('builder')}: the builder of pack {place.name!r} ({target}) failed: "
            f"{type(exc).__name__}: {exc}",
            hint="fix the pack's settings or its builder code",
        ) from exc
    if not isinstance(pack, Pack):
        raise PackError(
            f"{place.at('builder')}: the builder {target} returned {type(pack).__name__}, "
            "not a Pack",
            hint="a builder must return fabric.application.pack.Pack",
        )
    return pack


def _origin(loaded: LoadedConfig) -> str:
    return BUILT_IN if loaded.source == PACKAGED else loaded.source


def _command_check(place: Place, settings: PackSettings) -> tuple[CommandVerifier, ...]:
    """The pack's ``verify.command`` as a check, if it has one."""
    verify = settings.verify
    if verify.command is None:
        return ()
    try:
        return (CommandVerifier(verify.command, when=verify.when, timeout=verify.timeout),)
    except ConfigError as exc:
        raise PackError(f"{place.at('verify', 'command')}: {exc.message}", hint=exc.hint) from None


def resolve_builder(loaded: LoadedConfig, name: str, path: str) -> Callable[..., Any]:
    """Import ``module:callable`` with the config's folder first on the import path; a short
    name is a built-in builder, else a pack an installed distribution declares."""

    def where() -> str:  # only for an error: finding the line parses the whole file again
        return Place(loaded, name).at("builder")

    target = BUILTIN_BUILDERS.get(path, path)
    module_name, sep, attr = target.partition(":")
    if not sep and path and ":" not in path:
        installed = _installed(path)
        if installed is not None:
            return _installed_builder(installed, where)
    if not sep or not module_name or not attr:
        raise PackError(
            f"{where()}: {path!r} is neither 'module:callable', a built-in builder nor an "
            "installed pack",
            hint=f"built-in builders: {', '.join(BUILTIN_BUILDERS)}; "
            "or e.g. 'packs.mine:build' for packs/mine.py beside fabric.yaml; `fabric packs` "
            "lists the installed packs",
        )
    base = str(loaded.base_dir)
    if base not in sys.path:
        sys.path.insert(0, base)
    # The config folder is often the workspace: it may give only this module, from source.
    guard([base], [module_name.split(".")[0]])
    importlib.invalidate_caches()  # see pack files created since the last import
    hint = f"check that {module_name.replace('.', '/')}.py exists under {base} or is installed"
    return _import_builder(target, where, hint)


def _installed(name: str) -> InstalledPack | None:
    """The pack ``name`` an installed distribution declares (the distributions are looked
    at only now)."""
    from .entry_points import installed_packs

    return installed_packs().get(name)


def _installed_builder(installed: InstalledPack, where: Callable[[], str]) -> Callable[..., Any]:
    """The builder of an installed pack, imported from the interpreter's folders: its module
    is not added to what the config folder may provide (``entry_points.py``)."""
    from .entry_points import untrusted_source

    if installed.problem:
        raise PackError(
            f"{where()}: {installed.name!r} of {installed.origin} cannot be used: "
            f"{installed.problem}",
            hint=f"tell its authors; or uninstall it (pip uninstall {installed.distribution})",
        )
    editable = (
        f"if it is installed with pip install -e, install it without -e, or name its builder "
        f"in fabric.yaml while you work on it (builder: {installed.target})"
    )
    elsewhere = untrusted_source(installed.target.partition(":")[0])
    if elsewhere is not None:
        raise PackError(
            f"{where()}: its code would be imported from {elsewhere}, outside this Python's "
            "site-packages; fabric imports installed packs only from there, where no run can "
            "write",
            hint=editable,
        )
    hint = (
        f"{installed.origin} (installed in {installed.folder}) may be broken: reinstall or "
        f"uninstall it (pip uninstall {installed.distribution}); {editable}"
    )
    return _import_builder(installed.target, where, hint)


def _import_builder(target: str, where: Callable[[], str], hint: str) -> Callable[..., Any]:
    """Import ``module:callable`` as the import path stands; ``hint`` when it cannot be."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
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
