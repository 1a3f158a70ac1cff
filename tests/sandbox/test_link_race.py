"""A link put in place of a folder after fabric listed what a command may read, before the
launcher confines it: fabric grants Landlock read access child by child around a hidden place
(``profile._read_grants``), and the launcher opens each of those paths again. Had it followed
a link put there since, it would grant what the link leads to: a folder above the hidden place,
or ``/``. Run under every backend (bubblewrap covers the hidden place by a mount instead)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .lab import cat_launch, lab_folder


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
    launch = cat_launch(lab, backend, secret, [secret / "a.txt"])
    (lab / "real" / "x").rename(lab / "real" / "x-was")  # the swap, after the listing
    (lab / "real" / "x").symlink_to(lab / "real" if leads_to != "/" else "/")
    done = launch.run(timeout=60)
    assert "THE-SECRET" not in done.stdout, f"read through the link to {leads_to}"
    assert done.returncode != 0 and not done.stderr.startswith("fabric-sandbox:"), done.stderr
    assert os.path.exists(secret / "a.txt")  # the host still has it
