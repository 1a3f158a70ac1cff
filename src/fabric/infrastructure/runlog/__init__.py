"""Runlog writers: a JSONL file per run (the product) and an in-memory log (tests)."""

from .writer import FORMAT_VERSION, JsonlRunLog, MemoryRunLog, new_run_id, schema_path

__all__ = ["FORMAT_VERSION", "JsonlRunLog", "MemoryRunLog", "new_run_id", "schema_path"]
