"""A place commands may not read, in a crowded folder: Landlock grants the folder's other
entries one by one (``profile._read_grants``), so the launcher's spec lists thousands of paths.
Linux refuses any one program argument over 128 KiB; the spec goes in pieces, and the command
runs (seen first in a full test run, when the host's /tmp held several thousand entries)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.config.schema import SandboxSettings
from fabric.infrastructure.sandbox import backend_for
from fabric.infrastructure.sandbox.profile import hidden_paths
from fabric.infrastructure.sandbox.runner import SPEC_ARG_CHARS, launch_argv
from fabric.infrastructure.tools.shell import scrubbed_env

from .lab import lab_folder

CROWD = 4000
"""Entries beside the hidden place: their paths alone come to several times 128 KiB."""


@pytest.fixture
def lab() -> Iterator[Path]:
    """A folder outside /tmp (bubblewrap gives commands a /tmp of their own)."""
    with lab_folder("crowded-") as root:
        yield root


def test_a_command_runs_when_its_hidden_place_sits_among_thousands(lab: Path, backend: str) -> None:
    crowded = lab / "crowded"
    crowded.mkdir()
    for n in range(CROWD):
        (crowded / f"an-entry-with-a-longish-name-like-a-temp-folder-has-{n:05d}").touch()
    secret = crowded / "secret"
    secret.mkdir()
    (secret / "a.txt").write_text("THE-SECRET\n")
    (crowded / "open.txt").write_text("OPEN-TO-READ\n")
    workspace, temp = lab / "ws", lab / "tmp"
    workspace.mkdir()
    temp.mkdir()
    sandbox = SandboxSettings(confinement=backend)  # type: ignore[arg-type]
    cat = shutil.which("cat") or "/bin/cat"
    argv = launch_argv(
        backend_for(sandbox),
        sandbox,
        workspace=workspace,
        hidden=hidden_paths([secret], home=""),
        temp=temp,
        command=[cat, str(crowded / "open.txt"), str(secret / "a.txt")],
        cgroups=[],
        readable=[crowded] if backend == "bwrap" else [],
    )
    assert all(len(arg.encode()) <= SPEC_ARG_CHARS for arg in argv)
    if backend == "landlock":  # the grants really are that many: one argument would not do
        assert sum(map(len, argv)) > 2 * 128 * 1024
    env = {**scrubbed_env(sandbox), "TMPDIR": str(temp)}
    done = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True, timeout=120)
    assert not done.stderr.startswith("fabric-sandbox:"), done.stderr
    assert "OPEN-TO-READ" in done.stdout, done.stdout + done.stderr  # it ran, and read
    assert "THE-SECRET" not in done.stdout
