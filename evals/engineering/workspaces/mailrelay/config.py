"""The relay settings: defaults, overridden by a JSON file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULTS: dict[str, Any] = {"smtp_host": "localhost", "port": 25, "sender": "noreply@localhost"}


def load_config(path: str | Path | None = None) -> dict[str, Any]:
    config = dict(DEFAULTS)
    if path is not None:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        unknown = set(data) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"{path}: unknown settings {', '.join(sorted(unknown))}")
        config.update(data)
    if not isinstance(config["port"], int) or not 0 < config["port"] < 65536:
        raise ValueError(f"port must be a port number, not {config['port']!r}")
    return config
