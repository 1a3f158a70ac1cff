"""Probes against fabric's own file tools, which run on the host, unconfined, in the same
workspace as the confined commands: a command swaps a folder for a symlink out of the
workspace while the tools read and write through it. A tool that resolves a path first and
opens it afterwards can be redirected in between; judged by what the tools returned and by
the outside folder's state on the host."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from fabric.application.context import ToolContext
from fabric.domain.errors import SandboxError, ToolError
from fabric.infrastructure.tools.files import list_files, read_file, search_files, write_file

from .lab import Lab, Verdict, changes, probe, state

SECRET = "fabric-probe-outside-secret"
ROUNDS = 600
"""Rounds of two reads, two writes, a listing and a search while the command swaps."""

SWAPPER = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
open("ready", "w").close()
flips, deadline = 0, time.monotonic() + 120
while not os.path.exists("go") and time.monotonic() < deadline:
    for _ in range(500):  # swap the folder 'd' and the symlink 'swap' (to outside) atomically
        if libc.renameat2(-100, b"d", -100, b"swap", 2) != 0:  # AT_FDCWD, RENAME_EXCHANGE
            raise OSError(ctypes.get_errno(), "renameat2")
        flips += 1
print("flipped", flips, "times")
"""


def _hammer(ctx: ToolContext) -> dict[str, int]:
    """The file tools through 'd' for ``ROUNDS`` rounds: how often outside content came
    back, and how often a tool refused (the sign that it met the swapped-in symlink)."""
    seen = dict.fromkeys(("outside content", "refused", "done"), 0)

    def call(result: str | None) -> None:
        seen["done"] += 1
        seen["outside content"] += result is not None and (
            SECRET in result or "existing.txt" in result
        )

    for _ in range(ROUNDS):
        attempts: list[Callable[[], str]] = [
            lambda: asyncio.run(read_file(ctx, "d/f.txt")),
            lambda: asyncio.run(read_file(ctx, "d/sub/g.txt")),
            lambda: write_file(ctx, "d/log.out", "W\n", append=True),
            lambda: write_file(ctx, "d/made/x.out", "W\n", append=True),
            lambda: list_files(ctx, "d", recursive=True),
            lambda: search_files(ctx, "outside-secret", path="d", glob="*.txt"),
        ]
        for attempt in attempts:
            try:
                result: str | None = attempt()
            except SandboxError:
                seen["refused"] += 1
                result = None
            except (ToolError, OSError):
                result = None
            call(result)
    return seen


@probe(
    "file tools vs symlink swap",
    "escape",
    "a command swaps a workspace folder for a symlink to a host folder outside (renameat2 "
    "RENAME_EXCHANGE, as fast as it can) while fabric's file tools read, write, list and search "
    "through it thousands of times; judged by outside content in the tools' results and the "
    "outside folder's state on the host",
)
async def file_tools_vs_symlink_swap(lab: Lab) -> Verdict:
    for root, text in ((lab.ws / "d", "inside\n"), (lab.outside, SECRET + "\n")):
        (root / "sub").mkdir(parents=True, exist_ok=True)
        (root / "f.txt").write_text(text)
        (root / "sub" / "g.txt").write_text(text)
    (lab.ws / "swap").symlink_to(lab.outside)
    before = state(lab.outside)
    task = asyncio.ensure_future(lab.python(SWAPPER, timeout=150))
    while not task.done() and not (lab.ws / "ready").exists():
        await asyncio.sleep(0.02)
    ctx = ToolContext("probe", lab.ws, lab.settings())
    seen = await asyncio.to_thread(_hammer, ctx) if not task.done() else None
    (lab.ws / "go").touch()
    out = await task
    if seen is None:
        return Verdict("error", "the swapping command ended before the tools ran")
    note = f"({seen['done']} tool calls, {seen['refused']} refused a symlink swapped in)"
    if not seen["refused"]:
        return Verdict("error", f"the tools never met the swapped-in symlink {note}")
    escapes = changes(before, state(lab.outside))
    if seen["outside content"]:
        escapes.append(f"{seen['outside content']} tool results showed outside content")
    return lab.judge(out, escapes, note)
