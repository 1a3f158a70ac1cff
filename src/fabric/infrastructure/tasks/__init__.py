"""Where the HTTP service keeps its task records: an SQLite file (the embedded default)."""

from fabric.domain.tasks import INTERRUPTED_ERROR

from .sqlite_store import SCHEMA_VERSION, SqliteTaskStore

__all__ = ["INTERRUPTED_ERROR", "SCHEMA_VERSION", "SqliteTaskStore"]
