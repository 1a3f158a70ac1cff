"""A place commands may not read, in a crowded folder: Landlock grants the folder's other
entries one by one (``profile._read_grants``), so the launcher's spec lists thousands of paths.
Linux refuses any one program argument over 128 KiB; the spec goes in pieces, and the command
runs (seen first in a full test run, when the host's /tmp held several thousand entries)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.infrastructure.sandbox.runner import SPEC_ARG_CHARS

from .lab import cat_launch, lab_folder

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
    readable = [crowded] if backend == "bwrap" else []
    launch = cat_launch(lab, backend, secret, [crowded / "open.txt", secret / "a.txt"], readable)
    argv = launch.argv
    assert all(len(arg.encode()) <= SPEC_ARG_CHARS for arg in argv)
    if backend == "landlock":  # the grants really are that many: one argument would not do
        assert sum(map(len, argv)) > 2 * 128 * 1024
    done = launch.run(timeout=120)
    assert not done.stderr.startswith("fabric-sandbox:"), done.stderr
    assert "OPEN-TO-READ" in done.stdout, done.stdout + done.stderr  # it ran, and read
    assert "THE-SECRET" not in done.stdout
