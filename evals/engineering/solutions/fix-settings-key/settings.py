"""Loads the app's settings from a JSON file; missing keys fall back to the defaults."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULTS = {"database_url": "sqlite:///notes.db", "page_size": 20, "theme": "light"}
THEMES = ("light", "dark")


@dataclass(frozen=True)
class Settings:
    database_url: str
    page_size: int
    theme: str


def load_settings(path: str | Path = "settings.json") -> Settings:
    file = Path(path)
    data = json.loads(file.read_text(encoding="utf-8")) if file.exists() else {}
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object")
    theme = data.get("theme", DEFAULTS["theme"])
    if theme not in THEMES:
        raise ValueError(f"{file}: theme must be one of {', '.join(THEMES)}, not {theme!r}")
    page_size = int(data.get("page_size", DEFAULTS["page_size"]))
    if page_size < 1:
        raise ValueError(f"{file}: page_size must be at least 1")
    return Settings(
        database_url=data.get("database_url", DEFAULTS["database_url"]),
        page_size=page_size,
        theme=theme,
    )
