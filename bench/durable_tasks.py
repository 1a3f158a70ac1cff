"""Durable tasks of the HTTP service (ADR 0020) with 1, 2 and 4 processes, against the same
tasks run in process: tasks per second and time per step (issue 16).

    python bench/durable_tasks.py                    # SQLite, and PostgreSQL when installed
    python bench/durable_tasks.py --no-postgres --json
    python bench/durable_tasks.py --tasks 4 --steps 3 --workers 1 2     # a quick look

Every task is the engineering pack's ``--steps``-step task (read a small file each step, then
finish) against bench/mock_server.py, which answers every model call after ``--delay-ms``
(default 50 ms). For each database (a SQLite file; a throwaway PostgreSQL cluster when
Debian's PostgreSQL is installed, a new database on it for each configuration) and each
number of processes W in ``--workers``: a new project folder, one `fabric serve` (it runs tasks
too, so it counts as one of the W) and W-1 `fabric worker`, each taking up to
``--concurrency`` tasks at once from the database's queue. After one warm-up task, ``--tasks``
tasks are POSTed at once; the bench polls ``GET /tasks`` until every one has ended. Figures:
tasks/s from the first POST to the last ``finished_at``; the median task's time from
``started_at`` to ``finished_at`` divided by the steps (ms per step); the CPU time serve and
the workers used meanwhile, per step (Linux: /proc). ``--keep`` keeps the project folders
with the processes' logs, runlogs and SQLite files; the table shows log lines that look like
errors or warnings.

The baseline runs the same tasks with ``Runner.run`` in this process, under a semaphore of
the per-process concurrency and of each total concurrency (W x ``--concurrency``). The ratio
compares the durable time per step with the baseline's at the same total concurrency; the
target is at most 1.3x, and tasks/s should grow with the processes. The exit status is 0
(a measurement) unless a task did not complete with all its steps: then 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import overhead as o  # noqa: E402
from durable import databases  # noqa: E402
from support import free_port  # noqa: E402

from fabric.application.job import RunRequest  # noqa: E402

TARGET = 1.3
TOKEN = "bench-durable-tasks-token-7a41c9e0"
SERVE = """\
serve:
  workspace_roots: [ws]
  concurrency: {concurrency}
  share_workspaces: true  # every task reads the one small.txt
"""
NOTEWORTHY = re.compile(r"traceback|error|exception|warn|critical|fatal", re.IGNORECASE)
"""Log lines of serve and the workers worth showing."""


@dataclass
class Figures:
    """One configuration's outcome: durable (``database``, ``workers``) or in process."""

    database: str
    workers: int
    """Processes taking tasks (serve + workers); 0 for the in-process baseline."""
    concurrency: int
    """Tasks at once, in all."""
    tasks: int
    wall_s: float = 0.0
    tasks_per_s: float = 0.0
    median_task_s: float = 0.0
    per_step_ms: float = 0.0
    cpu_ms_per_step: float | None = None
    """CPU time of the processes running the tasks (serve and workers, or this one) over the
    timed tasks, per step of them: what the steps cost a machine's cores."""
    median_wait_s: float | None = None
    """Durable only: the median time from a task's creation to its start (queueing)."""
    problems: list[str] = field(default_factory=list)
    log_notes: list[str] = field(default_factory=list)
    """Noteworthy lines of the processes' logs (errors, warnings, tracebacks)."""


def _summed(figures: Figures, wall: float, durations: list[float], steps: int) -> Figures:
    figures.wall_s = wall
    if durations and wall > 0:
        figures.tasks_per_s = len(durations) / wall
        figures.median_task_s = statistics.median(durations)
        figures.per_step_ms = figures.median_task_s / steps * 1000
    return figures


# ----------------------------------------------------------------------------- in process


async def in_process(setup: o.Setup, tasks: int, steps: int, concurrency: int) -> Figures:
    """``tasks`` tasks through ``Runner.run`` in this process, ``concurrency`` at once."""
    figures = Figures("in process", 0, concurrency, tasks)
    gate = asyncio.Semaphore(concurrency)
    durations: list[float] = []

    async def one(timed: bool) -> None:
        request = RunRequest(o.PACK, o.TASK, setup.workspace, model=f"steps-{steps}",
                             run_id=setup.run_id(f"c{concurrency}"))  # fmt: skip
        async with gate:
            started = time.perf_counter()
            result = await setup.runner.run(request)
            if timed:
                durations.append(time.perf_counter() - started)
        if result.status.value not in o.DONE or result.steps != steps:
            figures.problems.append(f"{request.run_id}: {result.status.value}, {result.steps}")

    await one(timed=False)  # warm-up
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(timed=True) for _ in range(tasks)))
    wall = time.perf_counter() - started
    figures.cpu_ms_per_step = (time.process_time() - cpu) / (tasks * steps) * 1000
    return _summed(figures, wall, durations, steps)


# ----------------------------------------------------------------------------- the service


class Processes:
    """`fabric serve` and ``workers - 1`` `fabric worker` on one project folder, each with its
    log file there; ``close`` stops them (SIGTERM, then a kill) and keeps their exit codes."""

    def __init__(self, project: Path, env: dict[str, str], workers: int) -> None:
        self.project = project
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.workers = workers
        self.exits: dict[str, int | None] = {}

    def _start(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.project / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*o.fabric_command(), *args, "--config", str(self.project / "fabric.yaml")],
                env=self.env, cwd=self.project, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append((name, proc, log))
        return proc, log

    async def start(self, timeout: float = 60.0) -> None:
        """serve first (it makes the database's tables), then the workers; returns once the
        API answers and every worker said it listens to the queue."""
        serve, log = self._start("serve", "serve", "--port", str(self.port))
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
            while True:
                if serve.poll() is not None:
                    raise RuntimeError(f"fabric serve exited:\n{log.read_text()[-3000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"{self.url}/healthz")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fabric serve never answered:\n{log.read_text()[-3000:]}")
                await asyncio.sleep(0.05)
        started = [self._start(f"worker{n}", "worker") for n in range(1, self.workers)]
        for proc, log in started:
            while "fabric worker: tasks from queue" not in log.read_text("utf-8", "replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"fabric worker did not start:\n{log.read_text()[-3000:]}")
                await asyncio.sleep(0.05)

    def cpu_seconds(self) -> float | None:
        """User and system CPU time the processes used so far (Linux; None elsewhere)."""
        total = 0.0
        try:
            for _, proc, _ in self.procs:
                stat = Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()
                total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None
        return total

    def close(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name, proc, _ in self.procs:
            try:
                self.exits[name] = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.exits[name] = None  # killed: it did not stop on SIGTERM

    def noteworthy(self, limit: int = 20) -> list[str]:
        """The log lines that look like trouble, each with its process's name."""
        found = []
        for name, _, log in self.procs:
            if log.exists():
                lines = log.read_text("utf-8", "replace").splitlines()
                found += [f"{name}: {line}" for line in lines if NOTEWORTHY.search(line)]
        for name, code in self.exits.items():  # serve ends by its SIGTERM once it stopped
            if code not in (0, -signal.SIGTERM):
                found.append(f"{name}: " + ("killed" if code is None else f"exit status {code}"))
        more = [f"... and {len(found) - limit} more"] if len(found) > limit else []
        return found[:limit] + more


def _moment(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


async def _all_tasks(client: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """Every task the service lists (all pages of ``GET /tasks``)."""
    found: dict[str, dict[str, Any]] = {}
    params: dict[str, Any] = {"limit": 500}
    while True:
        answer = await client.get("/tasks", params=params)
        answer.raise_for_status()
        page = answer.json()
        found.update({t["id"]: t for t in page["tasks"]})
        if page["next"] is None:
            return found
        params = {"limit": 500, "before": page["next"]}


async def _until_final(
    client: httpx.AsyncClient, ids: list[str], deadline: float
) -> dict[str, dict[str, Any]]:
    """The records of ``ids`` once every one has ended (or what they are at the deadline)."""
    while True:
        listed = await _all_tasks(client)
        records = {i: listed.get(i, {"status": "missing"}) for i in ids}
        if all(r.get("finished_at") for r in records.values()) or time.monotonic() > deadline:
            return records
        await asyncio.sleep(0.5)  # the wall time comes from finished_at, not from this poll


async def durable(
    project: Path, env: dict[str, str], name: str, workers: int, args: argparse.Namespace
) -> Figures:
    """One configuration: start the processes, POST the tasks, wait for them, stop."""
    figures = Figures(name, workers, workers * args.concurrency, args.tasks)
    procs = Processes(project, env, workers)
    body = {"pack": o.PACK, "task": o.TASK, "model": f"steps-{args.steps}"}
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=100)
    try:
        await procs.start()
        async with httpx.AsyncClient(
            base_url=procs.url, headers=headers, timeout=120, limits=limits, trust_env=False
        ) as client:

            async def submit(task: dict[str, Any]) -> str:
                answer = await client.post("/tasks", json=task)
                if answer.status_code != 202:
                    raise RuntimeError(f"POST /tasks: {answer.status_code} {answer.text}")
                return str(answer.json()["id"])

            deadline = time.monotonic() + args.timeout
            warm = await submit({**body, "model": "steps-1"})
            await _until_final(client, [warm], deadline)
            cpu, first_post = procs.cpu_seconds(), time.time()
            ids = await asyncio.gather(*(submit(body) for _ in range(args.tasks)))
            records = await _until_final(client, ids, deadline)
            used = procs.cpu_seconds()
            if cpu is not None and used is not None:
                figures.cpu_ms_per_step = (used - cpu) / (args.tasks * args.steps) * 1000
    except Exception as exc:
        figures.problems.append(f"{type(exc).__name__}: {exc}")
        return figures
    finally:
        procs.close()
        figures.log_notes = procs.noteworthy()
    durations, waits, ends = [], [], []
    for task_id, r in records.items():
        if r["status"] not in o.DONE or r.get("steps") != args.steps:
            figures.problems.append(f"{task_id}: {r['status']} after {r.get('steps')} steps")
        if r.get("started_at") and r.get("finished_at"):
            durations.append(_moment(r["finished_at"]) - _moment(r["started_at"]))
            waits.append(_moment(r["started_at"]) - _moment(r["created_at"]))
            ends.append(_moment(r["finished_at"]))
    figures.median_wait_s = statistics.median(waits) if waits else None
    wall = (max(ends) - first_post) if ends else 0.0
    return _summed(figures, wall, durations, args.steps)


def make_project(folder: Path, server: o.MockServer, concurrency: int, sqlite: bool) -> Path:
    """A project folder: fabric.yaml (the mock model, the engineering pack, serve), a runs
    folder and the workspace ``ws`` with small.txt."""
    (folder / "ws").mkdir(parents=True)
    (folder / "runs").mkdir()
    (folder / "ws" / "small.txt").write_text(o.SMALL_FILE, "utf-8")
    config = o.CONFIG.format(url=server.base_url, runs=folder / "runs", pack=o.PACK)
    config += SERVE.format(concurrency=concurrency)
    if sqlite:
        config += "  durable_database: durable.sqlite3\n"
    (folder / "fabric.yaml").write_text(config, "utf-8")
    return folder


def fresh_database(url: str, label: str) -> str:
    """The URL of a new database ``label`` on the same PostgreSQL server (DBOS makes it)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{label}"))


def child_env(database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_")}
    env["FABRIC_API_TOKEN"] = TOKEN
    if database_url is not None:
        env["FABRIC_DATABASE_URL"] = database_url
    return env


# ----------------------------------------------------------------------------- the run


def collect(args: argparse.Namespace, tmp: Path, server: o.MockServer) -> dict[str, Any]:
    """The in-process baselines, then every database x processes configuration."""
    totals = sorted({args.concurrency, *(w * args.concurrency for w in args.workers)})
    (tmp / "in-process").mkdir()
    setup = o.make_setup(tmp / "in-process", server)

    async def baselines() -> list[Figures]:
        return [await in_process(setup, args.tasks, args.steps, c) for c in totals]

    baseline = {f.concurrency: f for f in asyncio.run(baselines())}
    rows: list[Figures] = []
    with databases(tmp, not args.no_postgres) as dbs:
        for name, url in dbs:
            sqlite = url.startswith("sqlite")
            for workers in args.workers:
                label = f"bench_{'sqlite' if sqlite else 'pg'}_{workers}w"
                project = make_project(tmp / label, server, args.concurrency, sqlite)
                env = child_env(None if sqlite else fresh_database(url, label))
                got = asyncio.run(durable(project, env, name, workers, args))
                rows.append(got)
                if not args.json:
                    print(f"  ({name}, {workers} process(es): {got.wall_s:.1f} s)", file=sys.stderr)
    return {"baseline": baseline, "rows": rows}


def verdicts(got: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Each durable row's ratio and PASS/FAIL; per database, whether tasks/s grows."""
    baseline: dict[int, Figures] = got["baseline"]
    rows: list[Figures] = got["rows"]
    out: list[dict[str, Any]] = []
    for f in rows:
        same = baseline[f.concurrency]
        per_process = baseline[args.concurrency]
        ratio = f.per_step_ms / same.per_step_ms if f.per_step_ms and same.per_step_ms else None
        load = per_process.per_step_ms
        out.append({
            **asdict(f),
            "in_process_per_step_ms": same.per_step_ms,
            "in_process_tasks_per_s": same.tasks_per_s,
            "ratio": ratio,
            "ratio_vs_per_process_load": f.per_step_ms / load if f.per_step_ms and load else None,
            "passed": ratio is not None and ratio <= TARGET and not f.problems,
        })  # fmt: skip
    growth: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(f.database for f in rows):
        mine = sorted((f for f in rows if f.database == name), key=lambda f: f.workers)
        rates = [f.tasks_per_s for f in mine]
        grows = all(b > a for a, b in itertools.pairwise(rates)) if len(rates) > 1 else None
        growth[name] = {"workers": [f.workers for f in mine], "tasks_per_s": rates, "grows": grows}
    return {
        "tasks": args.tasks,
        "steps": args.steps,
        "delay_ms": args.delay_ms,
        "concurrency_per_process": args.concurrency,
        "target_ratio": TARGET,
        "in_process": [asdict(b) for b in baseline.values()],
        "rows": out,
        "throughput": growth,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(report: dict[str, Any]) -> str:
    lines = [
        f"durable tasks vs in process · {report['tasks']} tasks x {report['steps']} steps · "
        f"model answers in {report['delay_ms']:g} ms · {report['concurrency_per_process']} "
        "tasks at once per process",
        f"{'database':<14} {'procs':>5} {'at once':>7} {'tasks/s':>8} {'ms/step':>8} "
        f"{'cpu ms/step':>11} {'in-proc ms/step':>15} {'ratio':>6}  target",
    ]
    for b in report["in_process"]:
        lines.append(f"{'in process':<14} {'-':>5} {b['concurrency']:>7} "
                     f"{b['tasks_per_s']:>8.2f} {b['per_step_ms']:>8.1f} "
                     f"{_ms(b['cpu_ms_per_step']):>11}")  # fmt: skip
    for r in report["rows"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        verdict = "PASS" if r["passed"] else "FAIL"
        lines.append(
            f"{r['database']:<14} {r['workers']:>5} {r['concurrency']:>7} "
            f"{r['tasks_per_s']:>8.2f} {r['per_step_ms']:>8.1f} {_ms(r['cpu_ms_per_step']):>11} "
            f"{r['in_process_per_step_ms']:>15.1f} {ratio:>6}  <= {TARGET}x {verdict}"
        )
    for name, g in report["throughput"].items():
        rates = " -> ".join(f"{rate:.2f}" for rate in g["tasks_per_s"])
        procs = "/".join(str(w) for w in g["workers"])
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[g["grows"]]
        lines.append(f"tasks/s with {procs} process(es), {name}: {rates} (grows: {verdict})")
    for r in report["rows"]:
        for problem in r["problems"][:5]:
            lines.append(f"PROBLEM {r['database']}, {r['workers']} process(es): {problem}")
        for note in r["log_notes"]:
            lines.append(f"log {r['database']}, {r['workers']} process(es): {note}")
    for b in report["in_process"]:
        for problem in b["problems"][:5]:
            lines.append(f"PROBLEM in process, {b['concurrency']} at once: {problem}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=50, help="tasks per configuration (50)")
    parser.add_argument("--steps", type=int, default=20, help="model calls per task (20)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="the model's answer time")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4],
        help="processes taking tasks: serve + (W-1) workers (1 2 4)",
    )  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=4, help="tasks at once per process")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (logs, runs)")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.steps < 1 or args.concurrency < 1 or min(args.workers) < 1:
        parser.error("--tasks, --steps, --concurrency and --workers must be 1 or more")
    args.workers = sorted(set(args.workers))
    for name in ("FABRIC_BASE_URL", "FABRIC_MODEL", "FABRIC_CONFIG", "FABRIC_DATABASE_URL"):
        os.environ.pop(name, None)
    tmp = Path(tempfile.mkdtemp(prefix="fabric-durable-tasks-"))
    server = o.MockServer("--delay-ms", str(args.delay_ms))
    started = time.perf_counter()
    try:
        report = verdicts(collect(args, tmp, server), args)
    finally:
        server.close()
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    report["elapsed_s"] = time.perf_counter() - started
    print(json.dumps(report, indent=2) if args.json else table(report))
    failed = any(r["problems"] for r in report["rows"] + report["in_process"])
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
