"""Runlog writers: a JSONL file per run (the product) and an in-memory log (tests); and the
reader that takes a runlog back (show, replay, resume)."""

from .names import FORMAT_VERSION, RUNLOG_NAME, new_run_id, runlog_path, schema_path
from .reader import call_logged, read_runlog
from .writer import JsonlRunLog, MemoryRunLog

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
