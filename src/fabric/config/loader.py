"""Finding, reading and checking ``fabric.yaml``.

Where the config comes from, first match wins: ``--config FILE``, ``$FABRIC_CONFIG``,
``./fabric.yaml``, the default packaged with fabric. Every mistake becomes one ``ConfigError``
naming the file, the key path and the line (``where.py`` finds it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, HttpUrl, TypeAdapter, ValidationError

from fabric.domain.errors import ConfigError

from .schema import EmbeddedBackend, FabricConfig
from .telemetry import TraceSettings, trace_settings
from .where import error_message, line_of, yaml_error
from .where import validation_error as validation_error  # used from here by other loaders

_line_of = line_of  # the name other loaders (eval suites) use

CONFIG_ENV = "FABRIC_CONFIG"
BASE_URL_ENV = "FABRIC_BASE_URL"
MODEL_ENV = "FABRIC_MODEL"
BACKEND_ENV = "FABRIC_BACKEND"
PACKAGED = "<packaged default>"


@dataclass(frozen=True)
class LoadedConfig:
    """A checked config and where it came from."""

    config: FabricConfig
    source: str
    """The file it was read from, or ``<packaged default>``."""
    base_dir: Path
    """The folder relative paths and pack imports are taken from."""
    text: str
    """The YAML text, kept to point at lines in later error messages."""
    traces: TraceSettings | None = None
    """How runs are traced with OpenTelemetry (``telemetry:`` and the ``OTEL_*`` variables,
    ``config/telemetry.py``); None: they are not."""

    @property
    def runs_dir(self) -> Path:
        return (self.base_dir / self.config.runs_dir).resolve()

    def where(self, *loc: str | int) -> str:
        """``file:line`` of the key at ``loc`` (or just the file when no line is known)."""
        line = line_of(self.text, loc)
        return f"{self.source}:{line}" if line else self.source

    def error(
        self, exc: ValidationError, model: type[BaseModel], prefix: Sequence[str | int]
    ) -> ConfigError:
        """Turn a pydantic error about the part of this file at ``prefix`` into a ConfigError."""
        return validation_error(exc, self.source, self.text, model, prefix)


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to use, or None for the packaged default."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(
                f"config file {path} does not exist",
                hint="check the --config path, or leave it out to use ./fabric.yaml",
            )
        return path
    from_env = os.environ.get(CONFIG_ENV)
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


def load_config(explicit: str | os.PathLike[str] | None = None) -> LoadedConfig:
    """Find, parse, validate and apply environment overrides (the ``OTEL_*`` variables
    included)."""
    path = find_config(explicit)
    if path is None:
        text = packaged_text()
        source, base_dir = PACKAGED, Path.cwd()
    else:
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        source, base_dir = str(path), path.resolve().parent
    data = _parse(text, source)
    try:
        config = FabricConfig.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source, text, FabricConfig, ()) from None
    config = _with_env_overrides(config)
    traces = trace_settings(config.telemetry, os.environ)
    return LoadedConfig(config=config, source=source, base_dir=base_dir, text=text, traces=traces)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (plain
    YAML keeps the last one silently, so a second ``engineering:`` pack would hide the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key_node.value!r} (first given on line "
                    f"{seen[key_node.value]})",
                    key_node.start_mark,
                )
            seen[key_node.value] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source, text) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of keys (llm, packs, runs_dir, ...), "
            f"not {type(data).__name__}"
        )
    return data


def _with_env_overrides(config: FabricConfig) -> FabricConfig:
    """Apply FABRIC_BACKEND, FABRIC_BASE_URL and FABRIC_MODEL to a checked config."""
    llm = config.llm
    backend = os.environ.get(BACKEND_ENV)
    if backend:
        if backend != "auto" and backend not in llm.backends:
            raise ConfigError(
                f"{BACKEND_ENV}={backend!r} is not a backend",
                hint=f"use 'auto' or one of: {', '.join(llm.backends)}; or unset it",
            )
        llm = llm.model_copy(update={"backend": backend})
    base_url = os.environ.get(BASE_URL_ENV)
    if base_url:
        try:
            url = TypeAdapter(HttpUrl).validate_python(base_url)
        except ValidationError as exc:
            problem = error_message(exc.errors(include_url=False)[0])
            raise ConfigError(
                f"{BASE_URL_ENV}={base_url!r} is not a valid URL: {problem}",
                hint=f"set {BASE_URL_ENV} to e.g. http://127.0.0.1:8080/v1, or unset it",
            ) from None
        if url.username or url.password:
            raise ConfigError(
                f"{BASE_URL_ENV} must not hold credentials (user:password@)",
                hint="put the key in FABRIC_API_KEY (or the backend's api_key_env) instead",
            )
        name = "openai" if llm.backend == "auto" else llm.backend
        target = llm.backends.get(name)
        if target is None or isinstance(target, EmbeddedBackend):
            raise ConfigError(
                f"{BASE_URL_ENV} cannot apply to the {name!r} backend, which has no URL",
                hint=f"unset {BASE_URL_ENV}, or pick a server backend with --backend",
            )
        backends = {**llm.backends, name: target.model_copy(update={"base_url": url})}
        llm = llm.model_copy(update={"backends": backends, "backend": name})
    model = os.environ.get(MODEL_ENV)
    if model:
        keys = {"default", *llm.models, *(p.model for p in config.packs.values())}
        backends = {
            name: b.model_copy(update={"models": dict.fromkeys(b.models, model)})
            for name, b in llm.backends.items()
        }
        llm = llm.model_copy(update={"models": dict.fromkeys(keys, model), "backends": backends})
    return config if llm is config.llm else config.model_copy(update={"llm": llm})
