"""``resolved``: what ``Path.resolve`` answers, faster for paths that exist."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fabric.application.paths import resolved


def test_it_answers_what_resolve_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real" / "deep"
    real.mkdir(parents=True)
    (real / "file.txt").write_text("x")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "to-file").symlink_to(real / "file.txt")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "at-all")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would block: resolved must not
    monkeypatch.chdir(tmp_path)
    cases = [
        tmp_path / "link",
        tmp_path / "link" / "file.txt",
        tmp_path / "to-file",
        tmp_path / "real" / "deep" / ".." / "deep",
        Path("link"),  # relative: from the current folder
        fifo,
        tmp_path / "missing" / "file",  # does not exist: resolve's answer
        tmp_path / "link" / "missing",
        tmp_path / "link" / "missing" / "deeper",
        tmp_path / "dangling",  # a symlink to nothing: resolve follows it
        tmp_path / "dangling" / "below",
        tmp_path / "missing" / ".." / "real",
        tmp_path / "real" / "deep" / "file.txt" / "below",  # below a file
        Path("missing-here"),
        Path("missing-here") / ".." / "link",
    ]
    for path in cases:
        assert resolved(path) == path.resolve(), path
        assert resolved(str(path)) == path.resolve(), path


def test_a_symlink_loop_fails_as_resolve_fails(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises((OSError, RuntimeError)) as expected:
        (tmp_path / "a").resolve(strict=False)
    with pytest.raises(type(expected.value)):
        resolved(tmp_path / "a")
