"""Probes against the limits: processes that try to outlive the command, fork and memory bombs,
and a file larger than allowed. Judged by what the host's /proc and the workspace show."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabric.infrastructure.sandbox import host_report

from .host import token_pids
from .lab import Lab, Verdict, probe, summary

ORPHAN = """
import signal
beat = "import time\\nwhile True:\\n    open('heartbeat', 'a').write('.')\\n    time.sleep(0.05)"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        os.execv(sys.executable, [sys.executable, "-c", beat, TOKEN])
    os._exit(0)
while not os.path.exists("heartbeat"):
    time.sleep(0.01)
print("orphan started", flush=True)
if ARGS[0] == "wait":
    time.sleep(300)
"""


async def _orphan(lab: Lab, how: str) -> Verdict:
    if how == "cancel":
        task = asyncio.ensure_future(lab.python(ORPHAN, "wait"))
        while not task.done() and not (lab.ws / "heartbeat").exists():
            await asyncio.sleep(0.02)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        out = None
    else:
        out = await lab.python(ORPHAN, how, timeout=3 if how == "wait" else 30)
    if not (lab.ws / "heartbeat").exists():
        return Verdict("error", "the orphan never started" + (f": {summary(out)}" if out else ""))
    found = lab.leftovers(lab.ws / "heartbeat")
    if found:
        return Verdict("escaped", "; ".join(found))
    return Verdict("blocked", summary(out) if out else "cancelled; nothing left")


@probe(
    "orphan survives a timeout",
    "escape",
    "double fork + setsid, the orphan ignores SIGTERM/SIGHUP and writes a heartbeat into the "
    "workspace; the command runs into its timeout. Judged by the host's /proc (a word in the "
    "command line) and the heartbeat",
)
async def orphan_timeout(lab: Lab) -> Verdict:
    return await _orphan(lab, "wait")


@probe(
    "orphan survives the command's exit",
    "escape",
    "the same orphan, but the command exits at once (exit code 0)",
)
async def orphan_exit(lab: Lab) -> Verdict:
    return await _orphan(lab, "exit")


@probe(
    "orphan survives cancellation",
    "escape",
    "the same orphan, and the tool call is cancelled (as when a run is stopped)",
)
async def orphan_cancel(lab: Lab) -> Verdict:
    return await _orphan(lab, "cancel")


async def _sampled(lab: Lab, task: asyncio.Future[Any], sample: Callable[[], int]) -> int:
    """The highest ``sample()`` seen while ``task`` runs."""
    peak = 0
    while not task.done():
        with contextlib.suppress(OSError, ValueError):
            peak = max(peak, sample())
        await asyncio.sleep(0.02)
    return peak


PROCESSES = 16


@probe(
    "fork bomb",
    "escape",
    f"every process forks without end, with a limit of {PROCESSES} processes and a 2 s "
    "timeout; judged by the most processes the host saw at once, and none left afterwards",
)
async def fork_bomb(lab: Lab) -> Verdict:
    if os.geteuid() == 0 and host_report().cgroup is None:
        return Verdict("escaped", "root without a cgroup: nothing bounds the processes (not run)")
    task = asyncio.ensure_future(
        lab.python(
            """
            while True:
                try:
                    os.fork()
                except OSError:
                    time.sleep(0.005)
            """,
            timeout=2,
            processes=PROCESSES,
        )
    )
    peak = await _sampled(lab, task, lambda: len(token_pids(lab.token)))
    out = await task
    found = [f"{peak} processes ran at once"] if peak > PROCESSES else []
    found += lab.leftovers(lab.ws / "none")
    return lab.judge(out, found, f"(at most {peak} processes at once)")


MEMORY_MB = 96
_MiB = 1024 * 1024


def _memory(pids: list[int]) -> tuple[int, int]:
    """(sum, largest) of the proportional set sizes of ``pids``, in bytes."""
    sizes = []
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    sizes.append(int(line.split()[1]) * 1024)
    return sum(sizes), max(sizes, default=0)


@probe(
    "memory bomb",
    "escape",
    f"with a memory limit of {MEMORY_MB} MiB, one process grabs 4 GiB and four children "
    f"{2 * MEMORY_MB} MiB each (all touched); judged by the memory the host saw them use "
    "(per process: the address-space limit; together: the cgroup, where there is one)",
)
async def memory_bomb(lab: Lab) -> Verdict:
    task = asyncio.ensure_future(
        lab.python(
            """
            def grab(step, total):
                chunks = []
                try:
                    for _ in range(total // step):
                        chunks.append(b"x" * (step << 20))
                except MemoryError:
                    pass
                return chunks
            for _ in range(4):
                if os.fork() == 0:
                    held = grab(8, 2 * int(ARGS[0]))
                    time.sleep(60)
                    os._exit(0)
            held = grab(16, 4096)
            time.sleep(60)
            """,
            MEMORY_MB,
            timeout=4,
            memory_mb=MEMORY_MB,
        )
    )
    totals: list[tuple[int, int]] = []

    def sample() -> int:
        totals.append(_memory(token_pids(lab.token)))
        return totals[-1][0]

    peak = await _sampled(lab, task, sample)
    out = await task
    largest = max((t[1] for t in totals), default=0)
    found = []
    if largest > MEMORY_MB * _MiB:
        found.append(f"one process used {largest // _MiB} MiB")
    report = host_report().cgroup or ""
    if "memory" in report and peak > (MEMORY_MB + 32) * _MiB:
        found.append(f"the command used {peak // _MiB} MiB in all")
    found += lab.leftovers(lab.ws / "none")
    note = f"(at most {peak // _MiB} MiB in all, {largest // _MiB} MiB in one process)"
    return lab.judge(out, found, note)


FILE_MB = 2


@probe(
    "huge file",
    "escape",
    f"write 16 MiB and truncate a file to 1 GiB with a file-size limit of {FILE_MB} MiB; "
    "judged by the sizes on the host",
)
async def huge_file(lab: Lab) -> Verdict:
    out = await lab.python(
        """
        def big():
            with open("big.bin", "wb") as f:
                for _ in range(16):
                    f.write(b"x" * (1 << 20))
                    f.flush()
        attempt("write", big)
        open("sparse.bin", "w").close()
        attempt("truncate", lambda: os.truncate("sparse.bin", 1 << 30))
        """,
        file_size_mb=FILE_MB,
    )
    found = [
        f"{p.name} grew to {p.stat().st_size // _MiB} MiB"
        for p in (lab.ws / "big.bin", lab.ws / "sparse.bin")
        if p.exists() and p.stat().st_size > FILE_MB * _MiB
    ]
    return lab.judge(out, found)
