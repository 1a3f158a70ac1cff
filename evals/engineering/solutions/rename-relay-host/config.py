"""The relay settings: defaults, overridden by a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {"relay_host": "localhost", "port": 25, "sender": "noreply@localhost"}
RENAMED = {"smtp_host": "relay_host"}
"""Old setting names still read from files written before the rename."""


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    config = dict(DEFAULTS)
    if path is not None:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for old, new in RENAMED.items():
            if old in data:
                if new in data:
                    raise ValueError(f"{path}: set {new} only ({old} is its old name)")
                data[new] = data.pop(old)
        unknown = set(data) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"{path}: unknown settings {', '.join(sorted(unknown))}")
        config.update(data)
    if not isinstance(config["port"], int) or not 0 < config["port"] < 65536:
        raise ValueError(f"port must be a port number, not {config['port']!r}")
    return config
