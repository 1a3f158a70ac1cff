"""The effective configuration for people: YAML in the schema's order, each value with where it
came from when asked (a comment, so the text stays YAML a config file could hold), and the
variables that hold secrets, said to be set or not, never shown."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from msgspec import Struct

from fabric.config.layers import DEFAULT, Key, Origins
from fabric.config.loader import LoadedConfig
from fabric.config.schema import FabricConfig
from fabric.domain.secrets import hide_credentials


class Effective(Struct, frozen=True):
    """What ``fabric config show`` prints."""

    settings: dict[str, Any]
    """Every key, defaults included, with no user or password in a URL."""
    origins: Origins
    secrets: dict[str, bool]
    """The variables the config names for secrets, and whether each is set."""

    def origin_tree(self) -> dict[str, Any]:
        """``settings``' shape with each value replaced by where it came from (a list whole)."""
        return _tree(self.settings, (), self.origins)

    def as_json(self, with_origins: bool) -> dict[str, Any]:
        shown: dict[str, Any] = {"config": self.settings}
        if with_origins:
            shown["origins"] = self.origin_tree()
            shown["layers"] = [layer.name for layer in self.origins.layers]
        shown["secrets"] = {name: "set" if ok else "not set" for name, ok in self.secrets.items()}
        return shown


PACKS_NOTE = "as the layers give them: each pack's builder has its own defaults for the rest"


def effective(loaded: LoadedConfig, env: Mapping[str, str]) -> Effective:
    """The config to show: every key with its value, but a pack's section only with the keys
    the layers give (the defaults of the rest are its builder's, known once it is built)."""
    config = loaded.config
    settings = config.model_dump(mode="json", exclude={"packs"})
    settings["packs"] = {
        name: section.model_dump(mode="json", exclude_unset=True)
        for name, section in config.packs.items()
    }
    settings = _hidden(settings)
    names = secret_variables(loaded.config)
    return Effective(settings, loaded.origins, {name: bool(env.get(name)) for name in names})


def secret_variables(config: FabricConfig) -> list[str]:
    """The environment variables the config reads secrets from: the backends' API keys
    (``api_key_env``), the service's token (``serve.token_env``), MCP servers' headers."""
    names = [*config.llm.api_key_names, config.serve.token_env]
    names += [name for server in config.mcp_servers.values() for name in server.headers.values()]
    return list(dict.fromkeys(names))


def render(view: Effective, *, with_origins: bool) -> str:
    """The YAML text, with ``# origin`` after each value when ``with_origins``."""
    lines = []
    if with_origins:
        layers = " < ".join([DEFAULT, *(layer.name for layer in view.origins.layers)])
        lines += [
            "# fabric's effective configuration; after each value, where it came from",
            f"# layers, lowest first: {layers}",
        ]
    lines += _mapping(view.settings, "", (), view.origins if with_origins else None)
    if view.secrets:
        lines.append("# secrets are read from these variables and never shown:")
        lines += [f"#   {name}: {'set' if ok else 'not set'}" for name, ok in view.secrets.items()]
    return "\n".join(lines)


def _mapping(
    mapping: Mapping[str, Any], pad: str, key: Key, origins: Origins | None
) -> Iterator[str]:
    for name, value in mapping.items():
        here = (*key, str(name))
        if isinstance(value, dict) and value:
            yield f"{pad}{_flow(name)}:" + (f"  # {PACKS_NOTE}" if here == ("packs",) else "")
            yield from _mapping(value, pad + "  ", here, origins)
            continue
        note = f"  # {origins.origin(here)}" if origins is not None else ""
        yield from _entry(f"{pad}{_flow(name)}:", value, pad + "  ", note)


def _entry(head: str, value: Any, pad: str, note: str) -> Iterator[str]:
    """``head`` (``key:`` or ``-``) followed by ``value``, in block style where it takes more
    than one line (``pad``: the indentation of those lines); ``note`` ends the first line."""
    if isinstance(value, list) and not all(map(_one_line, value)):
        yield head + note
        for item in value:
            if isinstance(item, dict) and item:
                first, *rest = _mapping(item, pad + "  ", (), None)
                yield f"{pad}- {first.lstrip()}"
                yield from rest
            else:
                yield from _entry(f"{pad}-", item, pad + "  ", "")
    elif isinstance(value, str) and "\n" in value and _literal(value):
        yield f"{head} |{'' if value.endswith(chr(10)) else '-'}{note}"
        yield from (f"{pad}{line}" if line else "" for line in value.rstrip("\n").split("\n"))
    else:
        yield f"{head} {_flow(value)}{note}"


def _one_line(value: Any) -> bool:
    if isinstance(value, str):
        return "\n" not in value
    if isinstance(value, dict | list):
        return not value  # a list of mappings or lists is written in block style
    return True


def _literal(text: str) -> bool:
    """Whether ``text`` can be written as a literal block (``|``) as it is."""
    if text.startswith((" ", "\n")) or text.endswith("\n\n"):
        return False
    return all(line.isprintable() for line in text.split("\n"))


def _flow(value: Any) -> str:
    """``value`` on one line, quoted only where YAML needs it."""
    if isinstance(value, str) and "\n" in value:
        return json.dumps(value)  # a JSON string is a YAML double-quoted one
    text = yaml.safe_dump(
        value, default_flow_style=True, width=1 << 30, allow_unicode=True, sort_keys=False
    )
    return text.removesuffix("\n").removesuffix("\n...")


def _hidden(value: Any) -> Any:
    """``value`` with the user and password of every URL in its strings hidden."""
    if isinstance(value, str):
        return hide_credentials(value)
    if isinstance(value, dict):
        return {k: _hidden(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hidden(v) for v in value]
    return value


def _tree(settings: Mapping[str, Any], key: Key, origins: Origins) -> dict[str, Any]:
    return {
        name: _tree(value, (*key, name), origins)
        if isinstance(value, dict) and value
        else origins.origin((*key, name))
        for name, value in settings.items()
    }
