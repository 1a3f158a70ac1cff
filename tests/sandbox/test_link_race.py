"""A link put in place of a folder after fabric listed what a command may read, before the
launcher confines it: fabric grants Landlock read access child by child around a hidden place
(``profile._read_grants``), and the launcher opens each of those paths again. Had it followed
a link put there since, it would grant what the link leads to: a folder above the hidden place,
or ``/``. Run under every backend (bubblewrap covers the hidden place by a mount instead)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabric.config.schema import SandboxSettings
from fabric.infrastructure.sandbox import backend_for
from fabric.infrastructure.sandbox.profile import hidden_paths
from fabric.infrastructure.sandbox.runner import launch_argv
from fabric.infrastructure.tools.shell import scrubbed_env

from .lab import lab_folder


@pytest.fixture
def lab() -> Iterator[Path]:
    """A folder outside /tmp (bubblewrap gives commands a /tmp of their own)."""
    with lab_folder("link-race-") as root:
        yield root


@pytest.mark.parametrize("leads_to", ["a folder above the hidden one", "/"])
def test_a_link_put_where_a_granted_folder_was_opens_nothing(
    lab: Path, backend: str, leads_to: str
) -> None:
    secret = lab / "real" / "secret"
    secret.mkdir(parents=True)
    (secret / "a.txt").write_text("THE-SECRET\n")
    (lab / "real" / "x").mkdir()  # listed and granted: it sits beside the hidden folder
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
        command=[cat, str(secret / "a.txt")],
        cgroups=[],
    )
    (lab / "real" / "x").rename(lab / "real" / "x-was")  # the swap, after the listing
    (lab / "real" / "x").symlink_to(lab / "real" if leads_to != "/" else "/")
    env = {**scrubbed_env(sandbox), "TMPDIR": str(temp)}
    done = subprocess.run(argv, cwd=workspace, env=env, capture_output=True, text=True, timeout=60)
    assert "THE-SECRET" not in done.stdout, f"read through the link to {leads_to}"
    assert done.returncode != 0 and not done.stderr.startswith("fabric-sandbox:"), done.stderr
    assert os.path.exists(secret / "a.txt")  # the host still has it
