"""Runlog writers: a JSONL file per run (the product) and an in-memory log (tests); and the
reader that takes a runlog back (show, replay, resume)."""

from .reader import read_runlog
from .writer import FORMAT_VERSION, JsonlRunLog, MemoryRunLog, new_run_id, schema_path

__all__ = [
    "FORMAT_VERSION",
    "JsonlRunLog",
    "MemoryRunLog",
    "new_run_id",
    "read_runlog",
    "schema_path",
]
