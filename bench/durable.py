"""What a durable run (ADR 0020) adds to a task, against the same task run in process.

    python bench/durable.py                 # SQLite, and PostgreSQL when it is installed
    python bench/durable.py --json

The same 20-step task of the engineering pack (read a small file each step, then finish) runs
against bench/mock_server.py answering every model call after ``--delay-ms`` (default 50 ms),
alternately as a plain ``Runner.run`` and as a durable run (``DurableRuns``: every model reply
and tool result a recorded DBOS step), on a SQLite file in WAL mode and, when Debian's
PostgreSQL is installed, on a throwaway PostgreSQL cluster (tests/postgres.py). It prints the
median seconds a task takes, per step, and the ratio; the target (issue 16) is at most 1.3x for
a 20-step task whose model answers in 50 ms. Workers and throughput come with `fabric worker`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import overhead as o  # noqa: E402

import fabric  # noqa: E402
from fabric.application.job import Control, RunRequest  # noqa: E402
from fabric.infrastructure.durable.runs import DurableRuns  # noqa: E402

TARGET = 1.3


@contextlib.contextmanager
def databases(tmp: Path, postgres: bool) -> Iterator[list[tuple[str, str]]]:
    found = [("SQLite (WAL)", f"sqlite:///{tmp / 'durable.sqlite3'}")]
    with contextlib.ExitStack() as stack:
        if postgres:
            try:
                from postgres import throwaway_postgres

                found.append(("PostgreSQL", stack.enter_context(throwaway_postgres())))
            except (AssertionError, OSError) as exc:
                print(f"(no PostgreSQL: {exc})", file=sys.stderr)
        yield found


async def measure(setup: o.Setup, url: str, steps: int, reps: int) -> dict[str, float]:
    runner = setup.runner
    durable = DurableRuns(url, version=fabric.__version__, run=runner.run)

    def request() -> RunRequest:
        return RunRequest(o.PACK, o.TASK, setup.workspace, model=f"steps-{steps}",
                          run_id=setup.run_id("d"))  # fmt: skip

    async def plain() -> None:
        result = await runner.run(request())
        o._checked(result, steps)

    async def recorded() -> None:
        result = await durable.run(request(), Control())
        o._checked(result, steps)

    async with durable:
        times: dict[str, list[float]] = {"plain": [], "durable": []}
        await plain()
        await recorded()  # warm-up: the first durable run makes the tables
        for rep in range(reps):
            order = [("plain", plain), ("durable", recorded)]
            for name, side in order if rep % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                await side()
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--delay-ms", type=float, default=50.0, help="the model's answer time")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    server = o.MockServer("--delay-ms", str(args.delay_ms))
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            databases(Path(tmp), not args.no_postgres) as dbs,
        ):
            setup = o.make_setup(Path(tmp), server)
            for name, url in dbs:
                got = asyncio.run(measure(setup, url, args.steps, args.reps))
                ratio = got["durable"] / got["plain"]
                added = (got["durable"] - got["plain"]) / args.steps * 1000
                rows.append({
                    "database": name,
                    "plain_s": round(got["plain"], 4),
                    "durable_s": round(got["durable"], 4),
                    "added_ms_per_step": round(added, 2),
                    "ratio": round(ratio, 3),
                    "passed": ratio <= TARGET,
                })  # fmt: skip
    finally:
        server.close()
    if args.json:
        print(json.dumps({"steps": args.steps, "delay_ms": args.delay_ms, "rows": rows}, indent=2))
    else:
        print(f"durable runs vs in process · {args.steps} steps · model answers in "
              f"{args.delay_ms:g} ms · median of {args.reps}")  # fmt: skip
        print(f"{'database':<14} {'plain s':>8} {'durable s':>10} {'+ms/step':>9} "
              f"{'ratio':>6}  target")  # fmt: skip
        for r in rows:
            verdict = "PASS" if r["passed"] else "FAIL"
            figures = f"{r['plain_s']:>8.3f} {r['durable_s']:>10.3f} {r['added_ms_per_step']:>9.2f}"
            print(f"{r['database']:<14} {figures} {r['ratio']:>5.2f}x  <= {TARGET}x {verdict}")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
