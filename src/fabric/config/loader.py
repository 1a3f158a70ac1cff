"""Finding, reading and checking ``fabric.yaml``.

Where the config comes from, first match wins: ``--config FILE``, ``$FABRIC_CONFIG``,
``./fabric.yaml``, the default packaged with fabric. Every mistake becomes one ``ConfigError``
naming the file, the key path and the line.
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

    @property
    def runs_dir(self) -> Path:
        return (self.base_dir / self.config.runs_dir).resolve()

    def where(self, *loc: str | int) -> str:
        """``file:line`` of the key at ``loc`` (or just the file when no line is known)."""
        line = _line_of(self.text, loc)
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


def load_config(explicit: str | os.PathLike[str] | None = None) -> LoadedConfig:
    """Find, parse, validate and apply environment overrides."""
    path = find_config(explicit)
    if path is None:
        text = resources.files("fabric.config").joinpath("default.yaml").read_text("utf-8")
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
    return LoadedConfig(config=config, source=source, base_dir=base_dir, text=text)


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
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"{where}: not valid YAML: {problem}",
            hint="check indentation and quoting around that line",
        ) from None
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
            problem = exc.errors(include_url=False)[0]["msg"]
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


def validation_error(
    exc: ValidationError,
    source: str,
    text: str,
    model: type[BaseModel],
    prefix: Sequence[str | int],
) -> ConfigError:
    """One message for all of a validation error's problems, each with key path and line."""
    lines = []
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    for err in exc.errors(include_url=False):
        loc = _without_tags(data, [*prefix, *err["loc"]])
        line = _line_of(text, loc)
        where = f"{source}:{line}" if line else source
        key = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _valid_keys_hint(model, loc[len(prefix) :])
        lines.append(f"{where}: {key}: {msg}")
    head = "invalid configuration" if len(lines) > 1 else lines[0]
    body = "\n".join(f"  {ln}" for ln in lines) if len(lines) > 1 else ""
    return ConfigError(head + ("\n" + body if body else ""), hint="fix the key and run again")


def _without_tags(data: Any, loc: list[str | int]) -> list[str | int]:
    """The key path without the union tags pydantic puts in it: ``backends.mine.openai.x``
    is ``backends.mine.x`` in the file (``openai`` being that entry's ``kind``)."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(data, dict) and part not in data and data.get("kind") == part:
            continue
        out.append(part)
        data = data.get(part) if isinstance(data, dict) else None
    return out


def _valid_keys_hint(root: type[BaseModel], loc: Sequence[str | int]) -> str:
    """For an unknown key, list the keys that the enclosing model accepts."""
    model: type[BaseModel] | None = root
    for part in list(loc)[:-1]:
        if model is None:
            return ""
        field = model.model_fields.get(str(part))
        if field is None:
            continue  # a dict key such as a pack name: stay on the value's model
        model = _model_of(field.annotation)
    return f" (valid keys: {', '.join(model.model_fields)})" if model else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _line_of(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML key at ``loc``, or of its nearest parent key that exists
    (so a missing ``packs.p.system_prompt`` points at ``p:``)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    best = None if node is None else node.start_mark.line + 1
    for part in loc:
        if node is None:
            break
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == str(part):
                    best, child = key.start_mark.line + 1, value
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
            best = child.start_mark.line + 1
        node = child
    return best
