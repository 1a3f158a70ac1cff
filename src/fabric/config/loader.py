"""The effective configuration: ``load_config`` finds the layers, merges and checks them.

Layers, lowest first (ADR 0024; the merge rules are in ``layers.py``):

1. built-in defaults: the schema's own, and the packaged ``fabric.yaml`` when no project file
   is found;
2. the user's config, ``$XDG_CONFIG_HOME/fabric/config.yaml`` (else
   ``~/.config/fabric/config.yaml``), when it exists;
3. the project's file, the first of ``--config FILE``, ``$FABRIC_CONFIG``, ``./fabric.yaml``;
4. ``FABRIC_*`` environment variables (``env.py``);
5. command-line options that set a key (``--backend``, ``--host``, ...).

The files are checked first, together: a mistake in one is reported at its line even where a
variable or option replaces the value. Every mistake becomes one ``ConfigError`` naming where
the value came from (file and line, variable or option) and the key path (``where.py``).
Every way in (CLI, HTTP service, eval, workers, MCP) loads its configuration here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from msgspec import Struct
from pydantic import BaseModel, ValidationError

from fabric.domain.errors import ConfigError

from .env import env_layer
from .layers import COMMAND_LINE, Key, Layer, Origins, Setting, file_layer, merge, settings_layer
from .schema import FabricConfig
from .telemetry import TraceSettings, trace_settings
from .where import line_of, located_error
from .where import validation_error as validation_error  # used from here by other loaders

_line_of = line_of  # the name other loaders (eval suites) use

CONFIG_ENV = "FABRIC_CONFIG"
PACKAGED = "<packaged default>"
Flags = Mapping[str, tuple[Key, Any]]
"""Command-line options that set a key: ``{"--backend": (("llm", "backend"), "ollama")}``;
an option given as None was not given."""


class LoadedConfig(Struct, frozen=True):
    """A checked config and where it came from."""

    config: FabricConfig
    source: str
    """The project's file it was read from, or ``<packaged default>``."""
    base_dir: Path
    """The folder relative paths and pack imports are taken from: the project file's (the
    current folder for the packaged default)."""
    origins: Origins
    """The layers, and which of them set each key."""
    traces: TraceSettings | None = None
    """How runs are traced with OpenTelemetry (``telemetry:`` and the ``OTEL_*`` variables,
    ``config/telemetry.py``); None: they are not."""

    @property
    def runs_dir(self) -> Path:
        return (self.base_dir / self.config.runs_dir).resolve()

    @property
    def text(self) -> str:
        """The project file's YAML as read (the packaged default's when there is none)."""
        layer = next((la for la in self.origins.layers if la.name == self.source), None)
        return "" if layer is None or layer.text is None else layer.text

    def pack_name(self, pack: str | None = None) -> str:
        """``pack``, else the config's ``default_pack``, else its first pack: the pack a
        command that takes one works with. ConfigError when the config declares none."""
        name = pack or self.config.default_pack or next(iter(self.config.packs), None)
        if name is None:
            raise ConfigError("the config declares no packs", hint="add one under 'packs:'")
        return name

    def where(self, *loc: str | int) -> str:
        """``file:line`` of the key at ``loc`` (or the variable or option that set it; just
        the file when no line is known)."""
        return self.origins.where(loc)

    def error(
        self, exc: ValidationError, model: type[BaseModel], prefix: Sequence[str | int]
    ) -> ConfigError:
        """Turn a pydantic error about the part of the config at ``prefix`` into a ConfigError."""
        return located_error(exc, self.origins, model, prefix)


def user_config_path(env: Mapping[str, str] | None = None) -> Path | None:
    """Where the user's config is (whether or not it exists): ``$XDG_CONFIG_HOME/fabric/
    config.yaml``, else ``~/.config/fabric/config.yaml``; None without a home folder."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():  # a relative one is to be ignored (XDG's rule)
        return Path(xdg) / "fabric" / "config.yaml"
    home = _home(env)
    return None if home is None else home / ".config" / "fabric" / "config.yaml"


def settings_folders(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """fabric's own folders of settings: ``~/.config/fabric`` (the run ledger; the API token
    by default) and the user's config folder, when ``$XDG_CONFIG_HOME`` puts it elsewhere.
    What is there is loaded at fabric's next start: no run may write it (ADR 0024)."""
    env = os.environ if env is None else env
    home, user = _home(env), user_config_path(env)
    folders = [] if home is None else [home / ".config" / "fabric"]
    return tuple(dict.fromkeys([*folders, *([] if user is None else [user.parent])]))


def _home(env: Mapping[str, str]) -> Path | None:
    if env.get("HOME"):
        return Path(env["HOME"])
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def find_config(
    explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The project's config file, or None for the packaged default."""
    env = os.environ if env is None else env
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist",
                hint="check the --config path, or leave it out to use ./fabric.yaml",
            )
        return path
    from_env = env.get(CONFIG_ENV)
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise ConfigError(
                f"{CONFIG_ENV} points at {path}, which does not exist",
                hint=f"fix or unset {CONFIG_ENV}",
            )
        return path
    local = Path("fabric.yaml")
    return local if local.is_file() else None


def packaged_text() -> str:
    """The YAML of the default config packaged with fabric (what ``fabric init`` starts from)."""
    return resources.files("fabric.config").joinpath("default.yaml").read_text("utf-8")


def load_config(
    explicit: str | os.PathLike[str] | None = None,
    *,
    flags: Flags | None = None,
    env: Mapping[str, str] | None = None,
    check_found: Callable[[Path], None] | None = None,
) -> LoadedConfig:
    """The effective configuration from every layer (the module's docstring). ``explicit``:
    the project file given by ``--config``; ``flags``: the options that set keys; ``env``:
    the environment (default: this process's). ``check_found`` is called with each file
    fabric found rather than was given, before it is read: it raises to refuse one (the CLI
    refuses files a run wrote, ADR 0013)."""
    env = os.environ if env is None else env
    project, user = find_config(explicit, env), _existing(user_config_path(env))
    for found in (user, None if explicit is not None else project):
        if found is not None and check_found is not None:
            check_found(found)
    files = _file_layers(user, project)
    origins = merge(files)
    config = _checked(origins)
    over = [layer for layer in (env_layer(env, config), _flags_layer(flags)) if layer]
    if over:  # the files were checked alone first: their mistakes are theirs
        origins = merge([*files, *over])
        config = _checked(origins)
    traces = trace_settings(config.telemetry, env)
    if project is None:
        return LoadedConfig(config, PACKAGED, Path.cwd(), origins, traces)
    return LoadedConfig(config, str(project), project.resolve().parent, origins, traces)


def _existing(path: Path | None) -> Path | None:
    return path if path is not None and path.is_file() else None


def _file_layers(user: Path | None, project: Path | None) -> list[Layer]:
    """The user's config and the project's file, lowest first; the packaged default, when no
    project file is found, goes below the user's config instead."""
    mine = [] if user is None else [file_layer(str(user), _read(user), user.resolve().parent)]
    if project is None:
        return [file_layer(PACKAGED, packaged_text()), *mine]
    return [*mine, file_layer(str(project), _read(project))]


def _checked(origins: Origins) -> FabricConfig:
    try:
        return FabricConfig.model_validate(origins.data)
    except ValidationError as exc:
        raise located_error(exc, origins, FabricConfig, ()) from None


def _read(path: Path) -> str:
    try:
        return path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read config file {path}: {exc}", hint="make it a readable UTF-8 text file"
        ) from exc


def _flags_layer(flags: Flags | None) -> Layer | None:
    given = [
        Setting(key, value, option, str(value))
        for option, (key, value) in (flags or {}).items()
        if value is not None
    ]
    return settings_layer(COMMAND_LINE, given)
