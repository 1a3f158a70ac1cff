"""Where the HTTP service keeps its task records: an SQLite file (the embedded default)."""

from .sqlite_store import INTERRUPTED_ERROR, SCHEMA_VERSION, SqliteTaskStore

__all__ = ["INTERRUPTED_ERROR", "SCHEMA_VERSION", "SqliteTaskStore"]
