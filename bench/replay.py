"""Replay speed and runlog size: `fabric replay` on a ~1,000-event runlog, and bytes per step.

    python bench/replay.py                  # the figures
    python bench/replay.py --json           # the same as JSON
    python bench/replay.py --events 200 --repeats 5 --sizes 2,4   # a quick look

The runlogs are real: ``Runner.run`` (the path `fabric run` takes) of a declarative pack with
the library's ``read_file`` on a 25-line file, in a temp workspace, with a scripted chat client
(``fabric.testing.ScriptedChatClient``: one ``read_file`` call a step, then ``finish_task``),
written by the real ``JsonlRunLog``. No network, no model server.

Timed, in this process after a warm-up (so interpreter start-up and imports are excluded):

- ``fabric replay``: the command's own work, ``run_replay`` of the CLI: build the runner, load
  the pack, read and check the runlog, re-drive the loop with recorded answers and results
  (every history compared with the recorded one), write the replay's own runlog, print the
  report (to a buffer); with the collector as a ``fabric`` process has it (``__main__.py``
  raises its threshold while the command starts, ``run_replay`` settles it before the loop);
- two parts of it: reading and checking the runlog (``read_runlog``), and ``replay()``, the
  application function, on the events read (writing the replay's JSONL runlog), with what was
  read kept out of the collector's scans as the command keeps it;
- beside it, in turn with each command, a raw replay: the least any replay of the log does,
  every line read with ``json`` and each event written again as a line of a new file. Its
  time is this machine's yardstick at that moment (the same command swings by half between
  minutes on a shared VM); the ratio says what fabric's replay costs beyond it.

Median and p95 over ``--repeats``; target: ``fabric replay`` <= 50 ms for 1,000 events (issue 6).
Then the runlog bytes per step of runs of ``--sizes`` steps: linear growth keeps it about
constant (a log that repeated the history each step would grow with the step count).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fabric.__main__ import STARTUP_GC_THRESHOLD
from fabric.application.job import Kit, RunRequest
from fabric.application.replay import replay
from fabric.config.loader import LoadedConfig, load_config
from fabric.infrastructure.runlog import JsonlRunLog, read_runlog
from fabric.interfaces.cli.replay_cmd import run_replay
from fabric.interfaces.compose import build_runner
from fabric.testing import ScriptedChatClient, tool_call

TARGET_MS = 50.0
SMALL_FILE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(8))
CONFIG = """\
version: 1
runs_dir: runs
packs:
  reader:
    builder: declarative
    system_prompt: You read files and report what they hold.
    tools: [read_file]
    finish_schema:
      type: object
      properties: {summary: {type: string}}
      required: [summary]
"""


def record(root: Path, steps: int) -> Path:
    """A real run of ``steps`` model calls (``steps - 1`` read_file calls, then finish_task);
    returns its runlog."""
    script = [tool_call("read_file", path="small.py") for _ in range(steps - 1)]
    script.append(tool_call("finish_task", summary="read small.py many times"))
    loaded = load_config(root / "fabric.yaml")
    runner = build_runner(loaded, chat_factory=lambda model: ScriptedChatClient(script))

    async def go() -> str | None:
        try:
            result = await runner.run(
                RunRequest("reader", "Read small.py again and again.", root / "ws", max_steps=steps)
            )
        finally:
            await runner.aclose()
        if result.status.value != "completed":
            raise SystemExit(f"the recorded run ended {result.status.value}: {result.error}")
        return result.runlog_path

    return Path(str(asyncio.run(go())))


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered), "p95_ms": p95, "runs": len(ordered)}


def raw_replay(runlog: Path, out: Path) -> None:
    """The least a replay of ``runlog`` does: read every line as JSON, and write every event
    again as a line of a new log."""
    events = [json.loads(line) for line in runlog.read_text("utf-8").splitlines()]
    with out.open("w", encoding="utf-8") as log:
        for event in events:
            log.write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")


def time_cli(loaded: LoadedConfig, runlog: Path, repeats: int) -> dict[str, Any]:
    """``fabric replay RUNLOG --json`` in process, each run in turn with a raw replay; checks
    that every replay was identical."""
    samples, raw = [], []
    for number in range(repeats):
        started = time.perf_counter()
        raw_replay(runlog, runlog.parent / f"raw-{number}.jsonl")
        raw.append((time.perf_counter() - started) * 1000)
        out = io.StringIO()
        gc.set_threshold(STARTUP_GC_THRESHOLD)  # as `fabric` starts; run_replay settles it
        started = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = run_replay(loaded, runlog, live=False, as_json=True)
        samples.append((time.perf_counter() - started) * 1000)
        if code != 0:
            raise SystemExit(f"the replay was not identical: {out.getvalue()}")
    figures: dict[str, Any] = _quantiles(samples)
    figures["raw_median_ms"] = statistics.median(raw)
    figures["ratio"] = round(figures["median_ms"] / figures["raw_median_ms"], 2)
    return figures


def time_parts(loaded: LoadedConfig, root: Path, runlog: Path, repeats: int) -> dict[str, Any]:
    """Two parts of the command: reading and checking the runlog, and ``replay()`` (the loop
    re-driven, writing the replay's JSONL runlog) on the events read."""
    runner = build_runner(loaded)
    pack = runner.pack("reader").pack
    reading, driving = [], []
    events: list[dict[str, Any]] = []
    for number in range(repeats):
        del events  # the last replay's events are freed before the clock starts, not timed
        started = time.perf_counter()
        events, _ = read_runlog(runlog)
        reading.append((time.perf_counter() - started) * 1000)
        gc.freeze()  # as `fabric replay` settles once the log is read (startup.settle)
        run_id = f"part-{number}"
        log = JsonlRunLog(root / "runs", run_id)
        started = time.perf_counter()
        report = asyncio.run(
            replay(events, pack=pack, run_id=run_id, workspace=root / "ws", kit=Kit(None, log))
        )
        driving.append((time.perf_counter() - started) * 1000)
        if not report.identical:
            raise SystemExit(f"the replay diverged: {report.divergence}")
    return {"read_runlog": _quantiles(reading), "replay_function": _quantiles(driving)}


def measure(events_wanted: int, repeats: int, sizes: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fabric-bench-replay-") as tmp:
        root = Path(tmp)
        (root / "fabric.yaml").write_text(CONFIG, "utf-8")
        (root / "ws").mkdir()
        (root / "ws" / "small.py").write_text(SMALL_FILE, "utf-8")
        probe = record(root, 10)  # events per step, to size the big run
        per_step = (len(probe.read_text("utf-8").splitlines()) - 2) / 10
        steps = max(2, round((events_wanted - 2) / per_step))
        runlog = record(root, steps)
        lines = runlog.read_text("utf-8").splitlines()
        loaded = load_config(root / "fabric.yaml")
        time_cli(loaded, runlog, 2)  # warm-up: imports and first-use caches
        figures: dict[str, Any] = {
            "events": len(lines),
            "steps": steps,
            "runlog_bytes": runlog.stat().st_size,
            "fabric_replay": time_cli(loaded, runlog, repeats),
            **time_parts(loaded, root, runlog, repeats),
            "bytes_per_step": {},
        }
        for size in sizes:
            log = record(root, size)
            figures["bytes_per_step"][size] = round(log.stat().st_size / size, 1)
    per = list(figures["bytes_per_step"].values())
    figures["growth"] = round(per[-1] / per[0], 3) if per and per[0] else None
    return figures


def show(figures: dict[str, Any]) -> None:
    cli, read, core = (figures[k] for k in ("fabric_replay", "read_runlog", "replay_function"))
    verdict = "PASS" if cli["median_ms"] <= TARGET_MS else "FAIL"
    print(
        f"runlog: {figures['events']} events, {figures['steps']} steps, "
        f"{figures['runlog_bytes']:,} bytes"
    )
    print(f"{'figure':<34} {'median':>9} {'p95':>9}  target")
    print(
        f"{'fabric replay (command work)':<34} {cli['median_ms']:>6.1f} ms {cli['p95_ms']:>6.1f} ms"
        f"  <= {TARGET_MS:g} ms  {verdict}"
    )
    for name, part in (("  of it: reading the runlog", read), ("  of it: replay()", core)):
        print(f"{name:<34} {part['median_ms']:>6.1f} ms {part['p95_ms']:>6.1f} ms")
    print(
        f"{'raw replay (read, write each line)':<34} {cli['raw_median_ms']:>6.1f} ms"
        f"  fabric replay / raw: {cli['ratio']:.2f}x"
    )
    print(f"({cli['runs']} runs each)")
    print("runlog bytes per step:")
    sizes = list(figures["bytes_per_step"])
    for size, per in figures["bytes_per_step"].items():
        print(f"  {size:>5} steps  {per:>8,.1f} B")
    if sizes:
        first, last = sizes[0], sizes[-1]
        print(f"  growth, {last} vs {first} steps: {figures['growth']}x (about 1: linear)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="Events in the timed runlog.")
    parser.add_argument("--repeats", type=int, default=30, help="Timed replays of each kind.")
    parser.add_argument("--sizes", default="10,100,500", help="Step counts for bytes per step.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    figures = measure(args.events, args.repeats, sizes)
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        print()
    else:
        show(figures)


if __name__ == "__main__":
    main()
