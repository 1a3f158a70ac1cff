"""Load figures of the HTTP task service: many tasks submitted at once to `fabric serve`.

    python bench/service_load.py                 # 200 tasks, service concurrency 20
    python bench/service_load.py --json          # the same figures as JSON
    python bench/service_load.py --tasks 1000 --concurrency 50 --clients 100

Three processes on 127.0.0.1: the instant mock model (bench/mock_server.py; every task takes
``--steps`` model calls: read_file, ..., finish_task), `fabric serve` (a temp config, runs
folder and task store) and this script (httpx.AsyncClient).

After one warm-up task: the burst, ``--tasks`` submitted at once with ``--clients`` POSTs in
flight, until every task has ended; then ``--single`` POSTs one at a time (each task runs
while the next POSTs are made). Figures: tasks/s from the burst's first POST to its last
task's end; p50/p99 latency of ``POST /tasks`` in the burst (mostly queueing: the service is
running the tasks it took) and one at a time; the server's RSS when idle after the warm-up
and its peak RSS (VmHWM) after the burst. Exit status 1 unless every task completed exactly
once (``completed_unconfirmed``: nothing in these tasks can confirm the work) with one complete
runlog and the mock model saw exactly tasks x steps calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
TOKEN = "bench-service-load-token-0123456789"
SMALL_FILE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))
CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai:
      kind: openai
      base_url: "{url}"
      api_key_env: [FABRIC_BENCH_UNSET_KEY]
      stream: false  # the mock model does not stream
  models: {{default: steps-{steps}}}
  retry: {{attempts: 1}}
runs_dir: runs
serve:
  workspace_roots: [ws]
  concurrency: {concurrency}
  share_workspaces: true  # every task writes its own file in ws
packs:
  engineering:
    builder: packs.engineering:build
    limits: {{max_steps: {max_steps}}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB (Linux /proc)."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            out[key] = int(value.split()[0]) / 1024
    return out


class Processes:
    """The mock model and `fabric serve`, started in a temp project; stopped on exit."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[Any]] = []

    def start(self, args: argparse.Namespace) -> None:
        tmp = self.tmp
        mock = subprocess.Popen(
            [sys.executable, str(HERE / "mock_server.py")], stdout=subprocess.PIPE, text=True
        )
        self.procs.append(mock)
        assert mock.stdout is not None
        ready = mock.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise RuntimeError(f"the mock model did not start: {ready!r}")
        self.mock_root = f"http://127.0.0.1:{ready[1]}"
        (tmp / "ws").mkdir()
        (tmp / "ws" / "small.txt").write_text(SMALL_FILE)
        config = tmp / "fabric.yaml"
        config.write_text(
            CONFIG.format(
                url=f"{self.mock_root}/v1",
                steps=args.steps,
                concurrency=args.concurrency,
                max_steps=args.steps + 1,
            )
        )
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tmp / "serve.log"
        with self.log.open("wb") as log:
            self.server = subprocess.Popen(
                [sys.executable, "-m", "fabric", "serve",
                 "--config", str(config), "--port", str(self.port)],
                env={**os.environ, "FABRIC_API_TOKEN": TOKEN}, cwd=tmp,
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        self.procs.append(self.server)
        deadline = time.monotonic() + 60
        while True:
            if self.server.poll() is not None:
                raise RuntimeError(f"fabric serve exited:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1, trust_env=False).is_success:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("fabric serve did not answer within 60 s") from None
                time.sleep(0.05)

    def mock_requests(self, reset: bool = False) -> int:
        query = "?reset=1" if reset else ""
        answer = httpx.get(f"{self.mock_root}/stats{query}", trust_env=False)
        return int(answer.json()["requests"])

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


async def _until_idle(client: httpx.AsyncClient) -> None:
    """Wait until no task is queued or running (two cheap queries, asked in that order: a
    task is never queued again once it ran, so two empty answers mean all are over)."""
    while True:
        queued = (await client.get("/tasks", params={"status": "queued", "limit": 1})).json()
        running = (await client.get("/tasks", params={"status": "running", "limit": 1})).json()
        if not queued["tasks"] and not running["tasks"]:
            return
        await asyncio.sleep(0.05)


async def _statuses(client: httpx.AsyncClient) -> dict[str, str]:
    """Every task's status (all pages of GET /tasks)."""
    statuses: dict[str, str] = {}
    params: dict[str, Any] = {"limit": 500}
    while True:
        page = (await client.get("/tasks", params=params)).json()
        statuses.update({t["id"]: t["status"] for t in page["tasks"]})
        if page["next"] is None:
            return statuses
        params = {"limit": 500, "before": page["next"]}


def _centiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000, "max_ms": ordered[-1] * 1000}


async def _measure(procs: Processes, args: argparse.Namespace) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    async with httpx.AsyncClient(
        base_url=procs.url, headers=headers, timeout=120, limits=limits, trust_env=False
    ) as client:

        async def submit(n: int, gate: asyncio.Semaphore, latencies: list[float]) -> str:
            async with gate:
                started = time.perf_counter()
                answer = await client.post(
                    "/tasks", json={"pack": "engineering", "task": f"read small.txt #{n}"}
                )
                latencies.append(time.perf_counter() - started)
            if answer.status_code != 202:
                raise RuntimeError(f"POST /tasks answered {answer.status_code}: {answer.text}")
            task_id: str = answer.json()["id"]
            return task_id

        await submit(-1, asyncio.Semaphore(1), [])  # warm-up: first-use imports, connections
        await _until_idle(client)
        idle = _memory_mib(procs.server.pid)
        before = set(await _statuses(client))
        procs.mock_requests(reset=True)

        # the burst: every task submitted at once, --clients POSTs in flight
        burst: list[float] = []
        gate = asyncio.Semaphore(args.clients)
        started = time.perf_counter()
        ids = await asyncio.gather(*(submit(n, gate, burst) for n in range(args.tasks)))
        submitted = time.perf_counter() - started
        await _until_idle(client)
        wall = time.perf_counter() - started
        peak = _memory_mib(procs.server.pid)["VmHWM"]

        # one POST at a time (each task runs while the next POSTs are made)
        single: list[float] = []
        one = asyncio.Semaphore(1)
        ids += [await submit(args.tasks + n, one, single) for n in range(args.single)]
        await _until_idle(client)
        statuses = {k: v for k, v in (await _statuses(client)).items() if k not in before}
    total = args.tasks + args.single
    requests = procs.mock_requests()
    whole = sum(1 for i in ids if _one_run(procs.tmp / "runs" / i / "runlog.jsonl"))
    problems = []
    if len(set(ids)) != total or set(statuses) != set(ids):
        problems.append(f"{len(set(ids))} distinct ids submitted, {len(statuses)} listed")
    # a task that only reads and writes files proves nothing a check could confirm: the pack's
    # checks all pass without confirming the work (as in tests/e2e/test_service_load.py)
    if set(statuses.values()) != {"completed_unconfirmed"}:
        problems.append(f"statuses: {sorted(set(statuses.values()))}")
    if requests != total * args.steps:
        problems.append(f"the model got {requests} calls, not {total * args.steps}")
    if whole != total:
        problems.append(f"{total - whole} runlogs without exactly one start and one end")
    return {
        "tasks": args.tasks,
        "steps": args.steps,
        "concurrency": args.concurrency,
        "clients": args.clients,
        "wall_s": wall,
        "tasks_per_s": args.tasks / wall,
        "submit_s": submitted,
        "post_burst": _centiles(burst),
        "single": args.single,
        "post_single": _centiles(single) if args.single >= 2 else None,
        "rss_idle_mib": idle["VmRSS"],
        "rss_peak_mib": peak,
        "model_calls": requests,
        "problems": problems,
    }


def _one_run(path: Path) -> bool:
    """The runlog exists, with exactly one run_started and one run_finished, the last line."""
    if not path.is_file():
        return False
    kinds = [json.loads(line)["kind"] for line in path.read_text("utf-8").splitlines() if line]
    return kinds.count("run_started") == kinds.count("run_finished") == 1 and (
        kinds[-1] == "run_finished"
    )


def _table(figures: dict[str, Any]) -> str:
    burst, single = figures["post_burst"], figures["post_single"]
    rows = [
        ("tasks x model calls each", f"{figures['tasks']} x {figures['steps']}", ""),
        ("serve.concurrency", str(figures["concurrency"]), ""),
        ("POSTs in flight (burst)", str(figures["clients"]), ""),
        ("burst: first POST to last task done", f"{figures['wall_s']:.2f}", "s"),
        ("burst: tasks completed per second", f"{figures['tasks_per_s']:.1f}", "tasks/s"),
        ("burst: all POSTs answered after", f"{figures['submit_s']:.2f}", "s"),
        ("burst: POST /tasks latency p50", f"{burst['p50_ms']:.1f}", "ms"),
        ("burst: POST /tasks latency p99", f"{burst['p99_ms']:.1f}", "ms"),
    ]
    if single is not None:
        rows += [
            (f"one at a time ({figures['single']}): POST p50", f"{single['p50_ms']:.1f}", "ms"),
            (f"one at a time ({figures['single']}): POST p99", f"{single['p99_ms']:.1f}", "ms"),
        ]
    rows += [
        ("server RSS, idle after a warm-up task", f"{figures['rss_idle_mib']:.1f}", "MiB"),
        ("server peak RSS (VmHWM) after the burst", f"{figures['rss_peak_mib']:.1f}", "MiB"),
        ("model calls received", str(figures["model_calls"]), ""),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{'figure':<{width}}  {'value':>9}  unit", f"{'-' * width}  {'-' * 9}  -------"]
    lines += [f"{name:<{width}}  {value:>9}  {unit}" for name, value, unit in rows]
    if figures["problems"]:
        lines.append("FAILED: " + "; ".join(figures["problems"]))
    else:
        lines.append("OK: every task completed exactly once, each with one complete runlog")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="tasks to submit (200)")
    parser.add_argument("--concurrency", type=int, default=20, help="serve.concurrency (20)")
    parser.add_argument("--clients", type=int, default=50, help="POSTs in flight at once (50)")
    parser.add_argument("--steps", type=int, default=3, help="model calls per task (3)")
    parser.add_argument(
        "--single", type=int, default=50, help="then POSTs one at a time, for latency (50)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temp project folder")
    args = parser.parse_args(argv)
    if args.tasks < 2 or args.steps < 1 or args.clients < 1 or args.single < 0:
        parser.error("--tasks must be 2 or more; --steps and --clients 1 or more")
    tmp = Path(tempfile.mkdtemp(prefix="fabric-service-load-"))
    procs = Processes(tmp)
    try:
        procs.start(args)
        figures = asyncio.run(_measure(procs, args))
    finally:
        procs.close()
    if args.keep:
        sys.stderr.write(f"kept {tmp}\n")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(figures, indent=2) if args.json else _table(figures))
    return 1 if figures["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
