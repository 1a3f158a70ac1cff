"""A suite's ``pack_settings`` applied to a loaded config, for one eval only, and the
``${name}`` substitution of a suite's values (``${web_url}``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from pydantic import ValidationError

from fabric.domain.errors import ConfigError

from .eval_suite import LoadedSuite
from .layers import merged
from .loader import LoadedConfig
from .schema import RawPackSection


def substitute(value: Any, variables: Mapping[str, str]) -> Any:
    """``value`` with every ``${name}`` of ``variables`` replaced, in strings nested in lists
    and mappings (other ``${...}`` stay as they are)."""
    if isinstance(value, str):
        for name, text in variables.items():
            value = value.replace("${" + name + "}", text)
        return value
    if isinstance(value, Mapping):
        return {key: substitute(item, variables) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [substitute(item, variables) for item in value]
    return value


def with_pack_settings(
    loaded: LoadedConfig, suite: LoadedSuite, variables: Mapping[str, str]
) -> LoadedConfig:
    """A new config whose pack sections have the suite's ``pack_settings`` merged over them, as
    a layer over the config's (``layers.merged``; ``loaded`` itself is not changed), with the
    suite's ``mcp_servers`` besides the config's. A pack the config does not declare, or a
    server name it declares already, is an error."""
    if not suite.pack_settings and not suite.mcp_servers:
        return loaded
    servers = dict(loaded.config.mcp_servers)
    for name, server in suite.mcp_servers.items():
        if name in servers:
            raise ConfigError(
                f"{suite.where('mcp_servers', name)}: mcp_servers.{name}: {loaded.source} "
                f"declares an MCP server {name!r} already",
                hint="give the suite's server another name",
            )
        servers[name] = server
    packs = dict(loaded.config.packs)
    for name, settings in suite.pack_settings.items():
        where = suite.where("pack_settings", name)
        section = packs.get(name)
        if section is None:
            raise ConfigError(
                f"{where}: pack_settings.{name}: {loaded.source} declares no pack {name!r}",
                hint=f"its packs: {', '.join(packs) or 'none'}; run with --config pointing at "
                "a config that declares it",
            )
        given = merged(section.model_dump(exclude_unset=True), substitute(settings, variables))
        try:
            packs[name] = RawPackSection.model_validate(given)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
            )
            raise ConfigError(
                f"{where}: pack_settings.{name}: {problems}", hint="fix the suite's pack_settings"
            ) from None
    config = loaded.config.model_copy(update={"packs": packs, "mcp_servers": servers})
    return msgspec.structs.replace(loaded, config=config)
