"""Where durable runs are recorded (ADR 0020), without loading DBOS: the service's protected
files need to know."""

from __future__ import annotations

from pathlib import Path

ENV_URL = "FABRIC_DATABASE_URL"
"""A database URL that overrides the config's (e.g. Postgres for many machines): read with the
other variables, as the environment's layer of the config (``fabric.config.env``)."""


def database_url(configured: str, base_dir: Path) -> str:
    """The database of durable runs: ``serve.durable_database`` (which
    ``$FABRIC_DATABASE_URL`` sets), a URL or a SQLite file relative to the config's folder."""
    if "://" in configured:
        return configured
    return f"sqlite:///{(base_dir / configured).resolve()}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database)."""
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def shown(url: str) -> str:
    """The database for people: a SQLite file, or a URL without user and password."""
    path = sqlite_path(url)
    if path is not None:
        return f"SQLite {path}"
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{parts.scheme}://{netloc}{parts.path}"


def sqlalchemy_url(url: str) -> str:
    """``url`` with the driver fabric installs (psycopg 3) for a plain ``postgresql://``."""
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+psycopg://" + url.removeprefix(plain)
    return url
