"""Starts the notes app: prints where it will store notes and how it will show them."""

from __future__ import annotations

import sys

from settings import load_settings


def describe(path: str = "settings.json") -> str:
    s = load_settings(path)
    return f"notes stored at {s.database_url}; {s.page_size} per page; {s.theme} theme"


if __name__ == "__main__":
    print(describe(*sys.argv[1:2]))
