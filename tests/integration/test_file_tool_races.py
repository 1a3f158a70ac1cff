"""The file tools against a command that swaps a workspace folder for a symlink to a folder
outside while the tools run (the shell tool runs such commands in the same workspace).
Resolving a path first and opening it later leaves a gap the swap can land in; the tools must
open without one, and check what they opened, not what a path meant a moment before."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from fabric.application.context import ToolContext
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ToolError
from fabric.infrastructure.tools.files import list_files, read_file, search_files, write_file

SECRET = "TOP-SECRET-OUTSIDE-CONTENT"
ROUNDS = 1500
"""Rounds of read, read, write, write, list and search: 9,000 tool calls."""

FLIPPER = """
import ctypes, os, sys
os.chdir(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
open("flipper-ready", "w").close()
while True:  # swap the folder 'd' and the symlink 'swap' (to outside) atomically, for ever
    if libc.renameat2(-100, b"d", -100, b"swap", 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
        raise SystemExit(os.strerror(ctypes.get_errno()))
"""


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Paths opened by openat2(2), and by the walk that stands in where the kernel has none."""
    if request.param == "walk":
        from fabric.infrastructure.tools import beneath  # here: the test also runs on old code

        monkeypatch.setattr(beneath, "_syscall", lambda: None)
    return str(request.param)


def _lines(folder: Path) -> dict[str, int]:
    """Each file below ``folder`` (no symlinks followed) and how many lines it has."""
    return {
        str(p.relative_to(folder)): len(p.read_text().splitlines())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture(params=["absolute", "relative"])
def flipped(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose folder 'd' a racing process keeps swapping with a symlink (absolute
    or relative) to a folder outside that holds the same names with secret content."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    for root, text in ((workspace / "d", "inside\n"), (outside, SECRET + "\n")):
        (root / "sub").mkdir(parents=True)
        (root / "f.txt").write_text(text)
        (root / "sub" / "g.txt").write_text(text)
    (outside / "outside-only.txt").write_text(SECRET + "\n")
    link = outside if request.param == "absolute" else Path("..", "outside")
    (workspace / "swap").symlink_to(link)
    return workspace, outside


async def _hammer(ctx: ToolContext, counts: dict[str, int]) -> None:
    async def attempt(kind: str, call: Awaitable[str], leak: str) -> None:
        try:
            result = await call
        except ToolError:
            counts["refused"] += 1
        except OSError:  # a tool must answer with a ToolError, never crash
            counts["crashed"] += 1
        else:
            counts[kind] += leak in result
            counts["inside reads"] += kind == "read" and result.startswith("  1| inside")

    async def run(fn: Callable[..., str], *args: object, **options: object) -> str:
        return fn(ctx, *args, **options)

    for _ in range(ROUNDS):
        for path in ("d/f.txt", "d/sub/g.txt"):
            await attempt("read", read_file(ctx, path), SECRET)
        for path in ("d/log.out", "d/made/x.out"):  # append to one file; create a folder
            await attempt("wrote", run(write_file, path, "W\n", append=True), "")  # all
        await attempt("list", run(list_files, "d", recursive=True), "outside-only")
        await attempt("search", run(search_files, "SECRET", path="d", glob="*.txt"), SECRET)


def test_a_folder_swapped_for_an_outside_symlink_never_leaks_or_takes_a_write(
    flipped: tuple[Path, Path],
) -> None:
    workspace, outside = flipped
    before = _lines(outside)
    ctx = ToolContext("race", workspace, SandboxSettings())
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(workspace)])
    try:
        deadline = time.monotonic() + 30
        while not (workspace / "flipper-ready").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert flipper.poll() is None, "the flipping process did not start"
        counts = dict.fromkeys(("read", "wrote", "list", "search", "refused", "crashed"), 0)
        counts["inside reads"] = 0
        open_fds = len(os.listdir("/proc/self/fd"))
        asyncio.run(_hammer(ctx, counts))
        assert len(os.listdir("/proc/self/fd")) == open_fds, "the tools left files open"
        assert flipper.poll() is None, "the flipping process stopped"
    finally:
        flipper.kill()
        flipper.wait()
    after = _lines(outside)
    writes = sum(n - before.get(name, 0) for name, n in after.items())
    escapes = {"outside content read": counts["read"], "writes outside": writes}
    escapes |= {"outside names listed": counts["list"], "outside lines found": counts["search"]}
    assert escapes == dict.fromkeys(escapes, 0), f"{escapes}; {counts}; outside now: {after}"
    assert after == before
    assert counts["crashed"] == 0, f"tools raised errors other than ToolError: {counts}"
    assert counts["inside reads"] > 0, f"the tools never got through: {counts}"
    assert counts["refused"] > 0, f"the tools never met the swapped-in symlink: {counts}"
