"""Items in and out of the API, checked against schema.json (generated from models.py)."""

import json
from dataclasses import asdict
from pathlib import Path

from models import Item

SCHEMA = json.loads((Path(__file__).parent / "schema.json").read_text("utf-8"))
TYPES = {"string": str, "integer": int, "number": float, "boolean": bool}


def parse_item(data: dict) -> Item:
    """An Item from a request body; ValueError naming what is wrong."""
    fields = SCHEMA["properties"]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(unknown)}")
    missing = [name for name in SCHEMA["required"] if name not in data]
    if missing:
        raise ValueError(f"missing fields: {', '.join(missing)}")
    for name, value in data.items():
        if not isinstance(value, TYPES[fields[name]["type"]]):
            raise ValueError(f"{name} must be of type {fields[name]['type']}")
    return Item(**data)


def dump_item(item: Item) -> dict:
    """An Item as a response body."""
    return asdict(item)
