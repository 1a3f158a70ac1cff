"""What tool probes found, kept between runs so a model is probed once per server.

A small JSON file, by default ``$XDG_CACHE_HOME/fabric/tool_probes.json`` (or
``~/.cache/fabric/tool_probes.json``)::

    {"version": 1,
     "probes": {"ollama": {"http://127.0.0.1:11434": {
         "llama3.1:8b": {"tools": true, "checked_at": "2026-01-02T03:04:05Z"}}}}}

It is rewritten whole and atomically (a temporary file, then ``os.replace``), so a reader never
sees half a file. A file that cannot be read or parsed counts as empty: it is only a cache.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1


def default_path(env: Mapping[str, str] | None = None, name: str = "tool_probes.json") -> Path:
    """``$XDG_CACHE_HOME/fabric/<name>``, else ``~/.cache/fabric/<name>``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or ""
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / "fabric" / name


def write_json_atomic(path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all (a temporary file, then a
    rename), so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.write("\n")
        Path(tmp).replace(path)  # atomic, like os.replace
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ProbeCache:
    """Tool-probe answers by backend name, server URL and model name."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_path()

    def get(self, backend: str, base_url: str, model: str) -> bool | None:
        """The cached answer, or None when this model on this server was never probed."""
        entry = self._read().get(backend, {}).get(base_url, {}).get(model)
        value = entry.get("tools") if isinstance(entry, dict) else None
        return value if isinstance(value, bool) else None

    def set(self, backend: str, base_url: str, model: str, tools: bool) -> bool:
        """Remember an answer. Returns False when the file could not be written (the run goes
        on; the model is probed again next time)."""
        probes = self._read()
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        servers = probes.setdefault(backend, {})
        servers.setdefault(base_url, {})[model] = {"tools": tools, "checked_at": stamp}
        try:
            self._write({"version": FORMAT_VERSION, "probes": probes})
        except OSError:
            return False
        return True

    def _read(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        probes = data.get("probes") if isinstance(data, dict) else None
        if not isinstance(probes, dict):
            return {}
        return {
            backend: {url: models for url, models in servers.items() if isinstance(models, dict)}
            for backend, servers in probes.items()
            if isinstance(servers, dict)
        }

    def _write(self, data: Mapping[str, Any]) -> None:
        write_json_atomic(self.path, data)
