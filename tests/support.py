"""Helpers shared by the tests (importable because tests/conftest.py's folder is on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from fabric.domain.models import ChatDelta
from fabric.domain.runlog import READABLE_VERSIONS
from fabric.infrastructure.runlog import schema_path

VALIDATORS = {
    version: Draft202012Validator(
        json.loads(schema_path(version).read_text("utf-8")), format_checker=FormatChecker()
    )
    for version in READABLE_VERSIONS
}
"""A validator per runlog format version, for the schema of that version."""


class OnDelta:
    """A run observer (``RunObserver``) that watches only the model's reply as it streams in:
    each piece goes to ``sink`` (what ``on_delta=sink`` did before observers)."""

    def __init__(self, sink: Callable[[ChatDelta], None]) -> None:
        self.sink = sink

    def event(self, event: Mapping[str, Any]) -> None:
        pass

    def delta(self, delta: ChatDelta) -> None:
        self.sink(delta)


def read_events(path: Path | str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text("utf-8").splitlines() if line]


def assert_valid_runlog(
    source: Path | str | list[dict[str, Any]], *, finished: bool = True
) -> list[dict[str, Any]]:
    """Every line validates against the published schema of its format version (``v``); seq
    runs 0..n-1 with one run_id; the log opens with run_started and (unless ``finished`` is
    False: a killed run) closes with run_finished. A resumed run may hold an earlier
    run_finished, each one then followed by run_resumed. Returns the events."""
    events = source if isinstance(source, list) else read_events(source)
    assert events, "the runlog is empty"
    for event in events:
        validator = VALIDATORS.get(event.get("v"))  # type: ignore[arg-type]
        assert validator, f"line {event.get('seq')}: unknown format version {event.get('v')}"
        errors = [e.message for e in validator.iter_errors(event)]
        assert not errors, f"line {event.get('seq')} ({event.get('kind')}) invalid: {errors}"
    versions = [e["v"] for e in events]
    assert versions == sorted(versions), "a later line has an older format version"
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert len({e["run_id"] for e in events}) == 1
    kinds_ = kinds(events)
    assert kinds_[0] == "run_started" and kinds_.count("run_started") == 1
    ends = [i for i, kind in enumerate(kinds_) if kind == "run_finished"]
    if finished:
        assert ends and ends[-1] == len(events) - 1, "the runlog does not end with run_finished"
        ends = ends[:-1]
    for end in ends:  # an earlier end was continued by `fabric resume`
        assert kinds_[end + 1 : end + 2] == ["run_resumed"], f"line {end} ends the run early"
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"] for e in events]


def mock_llm(base_url: str) -> dict[str, Any]:
    """A test config's ``llm`` section: one OpenAI-compatible backend at ``base_url`` (a
    loopback mock server), model "m", no retries."""
    return {
        "backend": "openai",
        "backends": {"openai": {"kind": "openai", "base_url": base_url}},
        "models": {"default": "m"},
        "retry": {"attempts": 1},
    }


def write(folder: Path, text: str, name: str = "fabric.yaml") -> Path:
    """Write a (dedented) config or source file; returns its path."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), "utf-8")
    return path


def line_of(path: Path, needle: str) -> int:
    """1-based number of the first line of ``path`` containing ``needle``."""
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def run_fabric(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    python: Sequence[str] = (sys.executable,),
) -> subprocess.CompletedProcess[str]:
    """The real ``fabric`` command in a child process (``env`` defaults to this process's;
    ``python``: the interpreter and its own options, e.g. another virtualenv's)."""
    return subprocess.run(
        [*python, "-P", "-m", "fabric", *args],
        env=dict(os.environ if env is None else env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


PLANT_COMMONDIR = """
import os, sys, time
os.makedirs("evil", exist_ok=True)
with open("evil/config", "w") as config:
    config.write('[core]\\n\\tfsmonitor = "touch ' + sys.argv[1] + '; false"\\n')
with open(".git/commondir", "w") as pointer:
    pointer.write("../evil\\n")
time.sleep(3600)
"""
"""A command's program (``python plant.py MARK``, in a repository's work tree): points the
repository at a folder whose config has ``git status`` run a program that leaves ``MARK``,
then waits until fabric is stopped."""


def planted_repository(folder: Path) -> Path:
    """``folder`` as a repository with one commit and ``plant.py`` (``PLANT_COMMONDIR``) in its
    work tree; returns the ``.git/commondir`` the program will plant."""
    identity = ["-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(
        ["git", "-C", str(folder), *identity, "commit", "-q", "--allow-empty", "-m", "a"],
        check=True,
    )
    (folder / "plant.py").write_text(PLANT_COMMONDIR)
    return folder / ".git" / "commondir"


def free_port() -> int:
    """A loopback port nothing listens on right now (a server the test starts takes it)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
