"""The configuration's layers and how they merge (ADR 0024).

A layer is a plain mapping from one source: the packaged default, the user's config, the
project's ``fabric.yaml``, the environment (``env.py``), the command line. ``merge`` lays them
over each other, lowest first, by these rules:

- mappings merge key by key, at every depth (``packs``, ``llm.models``, ``serve``, ...);
- anything else replaces what is below it whole: a list, a scalar, ``null``;
- a mapping that names another ``kind`` (a backend) or ``builder`` (a pack) than the one below
  it replaces that one whole too: it is another thing, whose keys would not fit together;
- a layer cannot remove a key a lower layer set: it can only set another value.

``Origins`` keeps which layer set each key, for ``fabric config show --origin`` and for error
messages, which name the file and line, the variable or the option a value came from.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import yaml
from msgspec import Struct, field

from fabric.domain.errors import ConfigError
from fabric.domain.secrets import hide_credentials

from .where import YamlPlaces, yaml_error

Key = tuple[str, ...]
DEFAULT = "default"
"""The origin of a value no layer set: the schema's default."""
ENVIRONMENT = "environment"
COMMAND_LINE = "command line"
IDENTITY_KEYS = ("kind", "builder")
"""A mapping that gives another value for one of these replaces the mapping below it."""
FOLDER_RELATIVE: tuple[tuple[str, ...], ...] = (
    ("runs_dir",),
    ("serve", "token_file"),
    ("serve", "workspace_roots", "[]"),
    ("serve", "durable_database"),
    ("mcp_servers", "*", "cwd"),
    ("llm", "backends", "*", "model_path"),
    ("packs", "*", "skills", "folders", "[]"),
)
"""The keys that hold paths (``*``: any key, ``[]``: every item): a relative one in the user's
config is taken from that file's folder (``rebased``)."""


class Setting(NamedTuple):
    """One key set by an environment variable or a command-line option."""

    key: Key
    value: Any
    name: str
    """The variable or option: ``FABRIC_MODEL``, ``--backend``."""
    given: str
    """What it was given, as messages show it."""


class Layer(Struct, frozen=True, dict=True):
    """One source of settings, as a plain mapping."""

    name: str
    """A file's path (or ``<packaged default>``), ``environment`` or ``command line``."""
    data: Mapping[str, Any]
    text: str | None = None
    """A file's YAML, to find each key's line (None for the environment and command line)."""
    settings: Mapping[Key, Setting] = field(default_factory=dict)
    """The environment's and command line's: which variable or option set each key."""

    @functools.cached_property
    def _yaml(self) -> YamlPlaces:
        return YamlPlaces(self.name, self.text or "")

    def where(self, loc: Sequence[str | int]) -> str:
        """For a message: ``file:line``, or the variable or option with what it was given."""
        if self.text is not None:
            return self._yaml.where(loc)
        setting = self._setting(loc)
        return f"{setting.name}={hide_credentials(setting.given)!r}" if setting else self.name

    def origin(self, loc: Sequence[str | int]) -> str:
        """For ``fabric config show --origin``: ``file:line``, ``$VARIABLE`` or ``--option``."""
        if self.text is not None:
            return self._yaml.where(loc)
        setting = self._setting(loc)
        if setting is None:
            return self.name
        return setting.name if setting.name.startswith("-") else f"${setting.name}"

    def fix(self) -> str:
        """What to do about a wrong value from this layer."""
        if self.text is not None:
            return f"fix the key in {self.name} and run again"
        if self.name == ENVIRONMENT:
            return "fix or unset the environment variable"
        return "fix the command-line option"

    def _setting(self, loc: Sequence[str | int]) -> Setting | None:
        """What set the key at ``loc``, a parent of it, or (for a mapping) a key inside it."""
        key = tuple(map(str, loc))
        for size in range(len(key), 0, -1):
            setting = self.settings.get(key[:size])
            if setting is not None:
                return setting
        return next((s for k, s in self.settings.items() if k[: len(key)] == key), None)


class Origins(Struct, frozen=True):
    """Layers merged, lowest first: the merged mapping and the layer that set each key (a
    mapping's: the highest layer that set anything in it). The ``Places`` of error messages."""

    layers: tuple[Layer, ...]
    data: dict[str, Any]
    set_by: Mapping[Key, Layer]

    def layer_at(self, loc: Sequence[str | int]) -> Layer | None:
        """The layer that set the key at ``loc`` or, for a key none set, its nearest parent."""
        for size in range(len(loc), 0, -1):
            layer = self.set_by.get(tuple(map(str, loc[:size])))
            if layer is not None:
                return layer
        return None

    def where(self, loc: Sequence[str | int]) -> str:
        layer = self.layer_at(loc)
        return layer.where(loc) if layer else DEFAULT

    def origin(self, key: Sequence[str]) -> str:
        """Where the value at ``key`` came from, or ``default`` when no layer set it."""
        data: Any = self.data
        for part in key:
            if not isinstance(data, dict) or part not in data:
                return DEFAULT
            data = data[part]
        layer = self.layer_at(key)
        return layer.origin(key) if layer else DEFAULT

    def fix(self, locs: Sequence[Sequence[str | int]]) -> str:
        fixes = [layer.fix() if layer else "fix the key" for layer in map(self.layer_at, locs)]
        return "; ".join(dict.fromkeys(fixes))


def merge(layers: Iterable[Layer]) -> Origins:
    """The layers laid over each other, lowest first (the module's rules)."""
    layers = tuple(layers)
    data: dict[str, Any] = {}
    set_by: dict[Key, Layer] = {}
    for layer in layers:
        data = _merged(data, layer.data, (), layer, set_by)
    return Origins(layers, data, set_by)


def merged(below: Mapping[str, Any], above: Mapping[str, Any]) -> dict[str, Any]:
    """``above`` over ``below`` by the same rules, where nobody asks whence a value came."""
    return merge([Layer("below", below), Layer("above", above)]).data


def _merged(
    below: dict[str, Any],
    above: Mapping[str, Any],
    path: Key,
    layer: Layer,
    set_by: dict[Key, Layer],
) -> dict[str, Any]:
    merged = dict(below)
    for key, value in above.items():
        here = (*path, str(key))
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, dict) and not _another(old, value):
            merged[key] = _merged(old, value, here, layer, set_by)
            set_by[here] = layer  # a mapping's: the highest layer that set anything in it
        else:
            for gone in [k for k in set_by if k[: len(here)] == here]:
                del set_by[gone]  # what the replaced value held
            merged[key] = value
            _mark(value, here, layer, set_by)
    return merged


def _another(below: Mapping[str, Any], above: Mapping[str, Any]) -> bool:
    """Whether ``above`` names another kind or builder than ``below``."""
    return any(k in below and k in above and below[k] != above[k] for k in IDENTITY_KEYS)


def _mark(value: Any, key: Key, layer: Layer, set_by: dict[Key, Layer]) -> None:
    """``layer`` set ``value`` at ``key``, and every key in it."""
    set_by[key] = layer
    if isinstance(value, dict):
        for name, item in value.items():
            _mark(item, (*key, str(name)), layer, set_by)


def file_layer(name: str, text: str, folder: Path | None = None) -> Layer:
    """The layer of one YAML file; with ``folder``, its relative paths are taken from there."""
    data = parse(text, name)
    return Layer(name, data if folder is None else rebased(data, folder), text)


def settings_layer(name: str, settings: Iterable[Setting]) -> Layer | None:
    """The layer of some variables or options (None when none is set). Two that set one key,
    or a key inside the other's, are an error: neither would win by rule."""
    data: dict[str, Any] = {}
    by_key: dict[Key, Setting] = {}
    for setting in settings:
        key = setting.key
        clash = next((k for k in by_key if k[: len(key)] == key or key[: len(k)] == k), None)
        if clash is not None:
            other, shorter = by_key[clash], clash if len(clash) <= len(key) else key
            raise ConfigError(
                f"{other.name} and {setting.name} both set {'.'.join(shorter)}",
                hint=f"unset one of them ({other.name} or {setting.name})",
            )
        by_key[key] = setting
        node = data
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = setting.value
    return Layer(name, data, settings=by_key) if by_key else None


def rebased(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` with the relative paths at ``FOLDER_RELATIVE`` taken from ``folder``."""
    for pattern in FOLDER_RELATIVE:
        data = _rebased(data, pattern, folder)
    return data


def _rebased(value: Any, pattern: Sequence[str], folder: Path) -> Any:
    if not pattern:
        return _from(folder, value)
    head, rest = pattern[0], pattern[1:]
    if head == "[]":
        return [_rebased(v, rest, folder) for v in value] if isinstance(value, list) else value
    if not isinstance(value, dict):
        return value
    keys = list(value) if head == "*" else [head] if head in value else []
    return {**value, **{k: _rebased(value[k], rest, folder) for k in keys}}


def _from(folder: Path, value: Any) -> Any:
    if not isinstance(value, str) or not value or "://" in value or value.startswith("~"):
        return value  # not a relative path: a URL, a home path or no text at all
    return value if Path(value).is_absolute() else str(folder / value)


if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:  # libyaml's parser when PyYAML has it (its wheels do): a tenth of the time per file
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(_SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error (plain
    YAML keeps the last one silently, so a second ``engineering:`` pack would hide the first).
    It parses with libyaml where PyYAML was built with it: the config is read on every
    start, and Python's own parser takes about 10 ms for fabric.yaml."""

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


_BOOL = "tag:yaml.org,2002:bool"
# YAML 1.1 reads yes/no/on/off/y/n as booleans, so `on: [capability]` (a fallback's trigger)
# became the key True. fabric's files follow YAML 1.2 there: only true and false are.
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def parse(text: str, source: str) -> dict[str, Any]:
    """A config file's top-level mapping (``{}`` for an empty file)."""
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source, text) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the top level must be a mapping of keys (llm, packs, runs_dir, ...), "
            f"not {type(data).__name__}",
            hint="write the settings as keys at the top of the file, e.g. 'llm:' or 'packs:'",
        )
    return data
