"""Runlog writers: a JSONL file per run (the product) and an in-memory log (tests); and the
reader that takes a runlog back (show, replay, resume)."""

from .reader import call_logged, read_runlog
from .writer import (
    FORMAT_VERSION,
    RUNLOG_NAME,
    JsonlRunLog,
    MemoryRunLog,
    new_run_id,
    runlog_path,
    schema_path,
)

__all__ = [
    "FORMAT_VERSION",
    "RUNLOG_NAME",
    "JsonlRunLog",
    "MemoryRunLog",
    "call_logged",
    "new_run_id",
    "read_runlog",
    "runlog_path",
    "schema_path",
]
