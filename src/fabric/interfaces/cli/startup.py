"""What every command does first: send its output through redaction, load the configuration
(or say why not and exit 2), and report an error the same way, as text or as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from fabric.domain.errors import FabricError

if TYPE_CHECKING:
    from collections.abc import Callable

    from fabric.config.loader import Flags, LoadedConfig
    from fabric.domain.secrets import Secrets


def settle() -> None:
    """Start-up is over, the work begins: what start-up built is kept out of the cyclic
    collector's scans for good (``gc.freeze``), which collects as usual again (``fabric``
    raised its threshold while it started, ``__main__.py``)."""
    import gc

    gc.freeze()
    gc.set_threshold(*_GC_DEFAULTS)


_GC_DEFAULTS = (700, 10, 10)
"""Python's own thresholds."""


def redact_output(secrets: Secrets) -> None:
    """From now on, stdout and stderr (this module's lines, those of the modules it calls,
    logs) go out through a ``RedactingStream`` with ``secrets``."""
    from .render import RedactingStream

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, RedactingStream):
            stream.secrets = secrets
        else:
            setattr(sys, name, RedactingStream(stream, secrets))


def output_secrets() -> Secrets:
    """The secrets this command's output is redacted of (``redact_output``): what a file it
    writes for people to read (``fabric show --html``) must leave out as well."""
    from fabric.domain.secrets import Secrets

    from .render import RedactingStream

    stream = sys.stdout
    return stream.secrets if isinstance(stream, RedactingStream) else Secrets.from_env(os.environ)


def say(line: str) -> None:
    """A line for the person at the terminal (model start-up, what fabric removed), on stderr."""
    typer.echo(line, err=True)


def fail(exc: FabricError, *, as_json: bool, code: int) -> NoReturn:
    if as_json:
        error = {"code": exc.code, "message": exc.message, "hint": exc.hint}
        typer.echo(json.dumps({"status": "error", "error": error}, indent=2))
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code)


def load(config: Path | None, as_json: bool, flags: Flags | None = None) -> LoadedConfig:
    """The effective configuration (``load_config``: every layer, ``flags`` the command's
    options that set keys), or exit 2 saying why not. A file fabric found rather than was
    given (the user's config, ./fabric.yaml, $FABRIC_CONFIG's) that a run wrote is refused."""
    from fabric.config.loader import load_config
    from fabric.domain.errors import ConfigError
    from fabric.domain.secrets import Secrets
    from fabric.infrastructure.packs.run_ledger import close_dead

    with contextlib.suppress(OSError):  # a ledger fabric cannot write: the run says so
        for line in close_dead():  # what a run whose fabric died left in .git
            say(f"fabric removed {line}")
    try:
        loaded = load_config(config, flags=flags, check_found=_not_planted)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    # the same as compose.known_secrets(loaded), without importing compose (~100 ms)
    redact_output(Secrets.from_env(os.environ, loaded.config.llm.api_key_names))
    return loaded


def _not_planted(path: Path) -> None:
    """Refuse a config file a run may have planted for fabric's next start (ADR 0013)."""
    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.packs.run_ledger import (
        REFUSAL_HINT,
        refusal,
        written_during_a_run,
    )

    window = written_during_a_run(str(path))
    if window is not None:
        raise ConfigError(refusal(str(path), window), hint=REFUSAL_HINT)


def read_run(
    run: str, runs_dir: Callable[[], Path], as_json: bool
) -> tuple[Path, list[dict[str, Any]]]:
    """The runlog a run id, run folder or path names, and its events; unreadable lines are
    warnings, a missing or too new runlog exits 2."""
    from fabric.domain.errors import ConfigError
    from fabric.infrastructure.runlog import read_runlog

    from .show import find_runlog

    try:
        path = find_runlog(run, runs_dir)
        events, problems = read_runlog(path)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    for problem in problems:
        say(f"warning: {problem}")
    return path, events
