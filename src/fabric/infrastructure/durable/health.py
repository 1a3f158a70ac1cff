"""``fabric doctor``'s look at the database of durable runs (ADR 0020), without launching
DBOS: can it be opened, how SQLite journals, which runs are unfinished."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from .where import shown, sqlalchemy_url, sqlite_path

_PENDING = "SELECT workflow_uuid, executor_id FROM {table} WHERE status = 'PENDING'"


def durable_report(url: str) -> dict[str, Any]:
    """``database`` (for people), ``ok``, a ``note`` or an ``error``, and ``unfinished``: the
    runs left pending, each with the process that owns it."""
    path = sqlite_path(url)
    if path is not None:
        report: dict[str, Any] = {"database": shown(url), "ok": True, "unfinished": []}
        if not path.exists():
            return report | {"note": "not made yet: the first durable run makes it"}
        try:
            with contextlib.closing(
                sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            ) as db:
                mode = str(db.execute("PRAGMA journal_mode").fetchone()[0])
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
                rows = (
                    db.execute(_PENDING.format(table="workflow_status")).fetchall()
                    if "workflow_status" in tables
                    else []
                )
        except sqlite3.Error as exc:
            return report | {"ok": False, "error": f"cannot read it: {exc}"}
        report["note"] = f"journal mode {mode}"
        report["unfinished"] = [{"run_id": r[0], "owner": r[1]} for r in rows]
        return report
    return _server_report(url)


def _server_report(url: str) -> dict[str, Any]:
    """Another database (Postgres): connect and list the unfinished runs."""
    import sqlalchemy as sa

    report: dict[str, Any] = {"database": shown(url), "ok": True, "unfinished": []}
    engine = sa.create_engine(sqlalchemy_url(url), connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
            try:
                rows = connection.execute(sa.text(_PENDING.format(table="dbos.workflow_status")))
                report["unfinished"] = [{"run_id": r[0], "owner": r[1]} for r in rows]
            except sa.exc.DBAPIError:
                report["note"] = "no durable run recorded yet"
    except sa.exc.SQLAlchemyError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "does not exist" in first:  # the server answers; DBOS makes the database
            return report | {"note": "not made yet: the first durable run makes it"}
        return report | {"ok": False, "error": f"cannot connect: {first}"}
    finally:
        engine.dispose()
    return report
