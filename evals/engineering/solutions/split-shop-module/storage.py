"""The catalog file: loading and saving books."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from models import Book


def load_catalog(path: str | Path) -> dict[str, Book]:
    """The books of a catalog file, by ISBN."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    return {record["isbn"]: Book(**record) for record in records}


def save_catalog(books: dict[str, Book], path: str | Path) -> None:
    records = [asdict(book) for book in sorted(books.values(), key=lambda b: b.isbn)]
    Path(path).write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
