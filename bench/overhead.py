"""fabric's framework overhead against a minimal raw-httpx loop, measured in the same run.

    python bench/overhead.py            # table (exit status 1 if a target fails)
    python bench/overhead.py --json     # the same figures as JSON

Both sides talk to the same instant mock model (bench/mock_server.py, its own process, on
127.0.0.1) with the same messages and the same tools list (the engineering pack's tool
definitions plus finish_task), and do the same tool work on every step (read a small file).

- fabric, ``execute_task``: the loop with the real ``OpenAIChatClient`` and a real
  ``JsonlRunLog`` in a temp runs folder, the pack's real ``read_file`` tool.
- fabric, ``Runner.run``: the same through the composition root, as ``fabric run`` and the HTTP
  service run a task (it also builds the pack's chat client for each run, whose connection
  is the runner's, kept from one run to the next).
- fabric, whole process: ``fabric run --config ... --json`` in a subprocess.
- raw: bench/raw_loop.py; POST, append the assistant message and the tool result, repeat; no
  validation, no sandbox, no runlog.

Each figure is printed beside the raw figure with the ratio, the target (DESIGN.md,
"Performance stance") and PASS/FAIL. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import raw_loop  # noqa: E402

from fabric.application.execute_task import execute_task  # noqa: E402
from fabric.application.job import Job, Kit, RunRequest  # noqa: E402
from fabric.application.pack import FINISH_TOOL  # noqa: E402
from fabric.config.loader import load_config  # noqa: E402
from fabric.domain.models import RunResult, ToolSpec  # noqa: E402
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient  # noqa: E402
from fabric.infrastructure.runlog import JsonlRunLog  # noqa: E402
from fabric.interfaces.compose import Runner, build_runner  # noqa: E402

PACK = "engineering"
TASK = "Read small.txt again and again, then finish."
DONE = {"completed": 0, "completed_unconfirmed": 3}
"""How a bench task may end, with ``fabric run``'s exit status for it. Reading a file proves
nothing a check could confirm, so the engineering pack's checks all pass without confirming the
work: ``completed_unconfirmed`` (exit 3) is this task's normal end; the raw loop says
``completed``."""
SMALL_FILE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))
NON_ASCII_LINE = "# Grüße — naïve café, “quoted”, 日本語のコメント ✓\n"

CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai:
      kind: openai
      base_url: "{url}"
      api_key_env: [FABRIC_BENCH_UNSET_KEY]
      stream: false  # the raw loop does not stream either
  models: {{default: steps-1}}
runs_dir: {runs}
default_pack: {pack}
packs:
  {pack}:
    builder: packs.engineering:build
    model: default
    limits: {{max_steps: 1000}}
"""


# ----------------------------------------------------------------------------- plumbing


@dataclass
class Figure:
    """One row of the table."""

    key: str
    label: str
    unit: str
    fabric: float
    raw: float | None
    target: str
    limit: float | None
    """PASS when ``measured <= limit``; None: shown for information."""
    measured: str = "ratio"
    """What the limit applies to: 'ratio' (fabric/raw) or 'fabric' (absolute)."""
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.raw in (None, 0):
            return None
        return self.fabric / self.raw

    @property
    def passed(self) -> bool | None:
        if self.limit is None:
            return None
        value = self.ratio if self.measured == "ratio" else self.fabric
        return value is not None and value <= self.limit

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "unit": self.unit,
            "fabric": round(self.fabric, 4),
            "raw": None if self.raw is None else round(self.raw, 4),
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "target": self.target,
            "pass": self.passed,
            **self.notes,
        }


class MockServer:
    """bench/mock_server.py in a child process (``options``: its command-line options)."""

    def __init__(self, *options: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "mock_server.py"), *options],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "READY":
            self.close()
            raise RuntimeError(f"the mock server did not start: {line!r}")
        self.port = int(line[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"

    def stats(self, reset: bool = False) -> dict[str, int]:
        query = "?reset=1" if reset else ""
        reply = httpx.get(f"{self.root}/stats{query}", trust_env=False)
        return reply.json()  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(5)


@dataclass
class Setup:
    tmp: Path
    workspace: Path
    runs: Path
    config: Path
    server: MockServer
    runner: Runner
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    counter: int = 0

    def run_id(self, tag: str) -> str:
        self.counter += 1
        return f"bench-{tag}-{self.counter:05d}"

    def spec(self, model: str) -> dict[str, Any]:
        return {
            "url": self.server.base_url + "/chat/completions",
            "model": model,
            "messages": self.messages,
            "tools": self.tools,
            "workspace": str(self.workspace),
        }


def make_setup(tmp: Path, server: MockServer, non_ascii: bool = False) -> Setup:
    workspace, runs = tmp / "workspace", tmp / "runs"
    workspace.mkdir()
    runs.mkdir()
    text = NON_ASCII_LINE + SMALL_FILE if non_ascii else SMALL_FILE
    (workspace / "small.txt").write_text(text, "utf-8")
    config = tmp / "fabric.yaml"
    config.write_text(CONFIG.format(url=server.base_url, runs=runs, pack=PACK), "utf-8")
    for name in ("FABRIC_BASE_URL", "FABRIC_MODEL", "FABRIC_CONFIG"):
        os.environ.pop(name, None)
    runner = build_runner(load_config(config))
    pack = runner.pack(PACK).pack
    # Exactly what execute_task sends: the pack's tools, then finish_task.
    finish = ToolSpec(FINISH_TOOL, pack.finish_description, pack.finish_schema)
    tools = [t.spec.as_openai() for t in pack.tools] + [finish.as_openai()]
    messages = [
        {"role": "system", "content": pack.system_prompt},
        {"role": "user", "content": TASK},
    ]
    return Setup(tmp, workspace, runs, config, server, runner, messages, tools)


# ----------------------------------------------------------------------------- in process

Side = Callable[[int], Awaitable[int]]
"""Runs one task of N steps; returns the runlog bytes (0 for raw)."""


class Sides:
    """The three ways a task is run in process (loop and raw make an HTTP client per task).

    - ``loop``: ``execute_task`` with a new ``OpenAIChatClient`` and a new ``JsonlRunLog`` per
      run; the client makes its own HTTP client as fabric does for a chat client without a
      runner (its TLS contexts are made once per process, as raw's is).
    - ``runner``: ``Runner.run`` as shipped, exactly what ``fabric run`` and the HTTP service
      call (a chat client for every run, on the runner's kept connection).
    - ``raw``: bench/raw_loop.py, a new httpx.AsyncClient per task on one shared TLS context.
    """

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.loaded = setup.runner.pack(PACK)
        self.url = setup.server.base_url + "/chat/completions"

    async def loop(self, steps: int) -> int:
        setup, run_id = self.setup, self.setup.run_id("loop")
        chat = OpenAIChatClient(
            base_url=setup.server.base_url,
            model=f"steps-{steps}",
            timeout=httpx.Timeout(600.0, connect=10.0, write=60.0),
        )
        try:
            job = Job(
                TASK,
                self.loaded.pack,
                run_id,
                setup.workspace,
                self.loaded.settings.limits,
                self.loaded.settings.sandbox,
            )
            kit = Kit(chat, JsonlRunLog(setup.runs, run_id), protected=(setup.runs,))
            result = await execute_task(job, kit)
        finally:
            await chat.aclose()
        return _checked(result, steps)

    async def runner(self, steps: int) -> int:
        setup = self.setup
        request = RunRequest(
            PACK, TASK, setup.workspace, model=f"steps-{steps}", run_id=setup.run_id("r")
        )
        result = await setup.runner.run(request)
        return _checked(result, steps)

    async def raw(self, steps: int) -> int:
        setup = self.setup
        async with raw_loop.new_client() as client:
            done, payload = await raw_loop.run_task(
                client, self.url, f"steps-{steps}", setup.messages, setup.tools, setup.workspace
            )
        if done != steps or payload is None:
            raise RuntimeError(f"raw loop ended after {done} steps with {payload}")
        return 0


def _checked(result: RunResult, steps: int) -> int:
    if result.status.value not in DONE or result.steps != steps:
        raise RuntimeError(f"fabric run ended {result.status} after {result.steps}: {result}")
    assert result.runlog_path is not None
    return Path(result.runlog_path).stat().st_size


async def timed(make: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    gc.collect()
    started = time.perf_counter()
    value = await make()
    return time.perf_counter() - started, value


async def compare(
    sides: dict[str, Callable[[], Awaitable[Any]]], reps: int, warmup: int
) -> dict[str, tuple[float, Any]]:
    """Median wall seconds of each side (and its last value); the order rotates per rep."""
    for _ in range(warmup):
        for make in sides.values():
            await make()
    names = list(sides)
    times: dict[str, list[float]] = {n: [] for n in names}
    last: dict[str, Any] = {}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            seconds, last[name] = await timed(sides[name])
            times[name].append(seconds)
    return {n: (statistics.median(times[n]), last[n]) for n in names}


async def per_step(sides: Sides, steps: int, reps: int, warmup: int) -> dict[str, Any]:
    got = await compare(
        {
            "loop": lambda: sides.loop(steps),
            "runner": lambda: sides.runner(steps),
            "raw": lambda: sides.raw(steps),
        },
        reps,
        warmup,
    )
    return {name: (seconds / steps, value) for name, (seconds, value) in got.items()}


async def request_bytes(sides: Sides, steps: int) -> tuple[int, int, int]:
    """Request body bytes of one task: fabric, raw (the same tool text), raw with the file
    sent as it is (no line numbers)."""
    server = sides.setup.server
    server.stats(reset=True)
    await sides.loop(steps)
    fab = server.stats(reset=True)
    await sides.raw(steps)
    raw = server.stats(reset=True)
    numbered = raw_loop.TOOLS["read_file"]
    raw_loop.TOOLS["read_file"] = raw_loop.plain_read_file
    try:
        await sides.raw(steps)
    finally:
        raw_loop.TOOLS["read_file"] = numbered
    plain = server.stats(reset=True)
    for counted in (fab, raw, plain):
        if counted["requests"] != steps:
            raise RuntimeError(f"unexpected request counts: fabric {fab}, raw {raw}, {plain}")
    return fab["body_bytes"], raw["body_bytes"], plain["body_bytes"]


async def concurrent(sides: Sides, tasks: int, steps: int, reps: int) -> dict[str, float]:
    def many(side: Side) -> Callable[[], Awaitable[Any]]:
        return lambda: asyncio.gather(*(side(steps) for _ in range(tasks)))

    got = await compare(
        {"loop": many(sides.loop), "runner": many(sides.runner), "raw": many(sides.raw)},
        reps,
        warmup=1,
    )
    return {name: seconds for name, (seconds, _) in got.items()}


# ----------------------------------------------------------------------------- processes

# Runs a command from a small, fresh interpreter: the command's peak RSS (ru_maxrss of the
# children) then starts from this helper's few MiB, not from the bench process's, and the
# wall time excludes the helper's own start-up.
_MEASURE = """\
import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
w = time.perf_counter() - t
print(r.returncode, w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def run_process(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of one run of ``cmd``."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    code, seconds, peak = out.stdout.split()
    if int(code) not in DONE.values():
        raise RuntimeError(f"{cmd} exited {code}")
    return float(seconds), int(peak)


def fabric_command() -> list[str]:
    script = Path(sys.executable).with_name("fabric")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "fabric"]


def process_env(setup: Setup, bytecode_cache: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRIC_")}
    env["FABRIC_BASE_URL"] = setup.server.base_url
    if bytecode_cache:
        # As an installed fabric runs: its modules byte-compiled once, not on every start
        # (an editable install under PYTHONDONTWRITEBYTECODE=1 compiles src/ each time).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(setup.tmp / "pycache")
    return env


def processes(setup: Setup, reps: int, help_reps: int, bytecode_cache: bool) -> dict[str, Any]:
    env = process_env(setup, bytecode_cache)
    spec = setup.tmp / "raw_spec.json"
    spec.write_text(json.dumps(setup.spec("steps-1")), "utf-8")
    fabric_run = [
        *fabric_command(),
        "run",
        "--config",
        str(setup.config),
        "--pack",
        PACK,
        "--model",
        "steps-1",
        "--json",
        TASK,
    ]
    raw_run = [sys.executable, str(HERE / "raw_loop.py"), str(spec)]
    for cmd in (fabric_run, raw_run):
        check = subprocess.run(
            cmd, env=env, cwd=setup.workspace, capture_output=True, text=True, check=False
        )
        status = json.loads(check.stdout).get("status") if check.stdout else None
        if status not in DONE or check.returncode != DONE[status]:
            raise RuntimeError(f"{cmd} failed: {check.stdout}\n{check.stderr}")
    fab_t, fab_rss, raw_t, raw_rss = [], [], [], []
    for rep in range(reps):
        sides = [(fabric_run, fab_t, fab_rss), (raw_run, raw_t, raw_rss)]
        for cmd, times, rss in sides if rep % 2 == 0 else sides[::-1]:
            seconds, peak = run_process(cmd, env, setup.workspace)
            times.append(seconds)
            rss.append(peak)
    imports: tuple[list[float], list[float]] = ([], [])
    for _ in range(max(3, reps // 3)):
        for cmd, took in ((fabric_run, imports[0]), (raw_run, imports[1])):
            took.append(import_ms(cmd, env, setup.workspace))
    help_cmd = [*fabric_command(), "--help"]
    bare = [sys.executable, "-c", "pass"]
    run_process(help_cmd, env, setup.workspace)  # warm-up
    help_t, bare_t = [], []
    for _ in range(help_reps):
        help_t.append(run_process(help_cmd, env, setup.workspace)[0])
        bare_t.append(run_process(bare, env, setup.workspace)[0])
    return {
        "run": (statistics.median(fab_t), statistics.median(raw_t)),
        "rss": (statistics.median(fab_rss), statistics.median(raw_rss)),
        "help": (statistics.median(help_t), statistics.median(bare_t)),
        "imports": (statistics.median(imports[0]), statistics.median(imports[1])),
    }


def import_ms(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Milliseconds the process spends importing: the cumulative times of its top-level
    imports as ``python -X importtime`` reports them (the rest is the work)."""
    done = subprocess.run(
        cmd, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, cwd=cwd, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    total = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        _own, cumulative, name = line.removeprefix("import time:").split("|", 2)
        top = name.startswith(" ") and not name.startswith("  ")  # nested ones are indented
        if top and cumulative.strip().isdigit():
            total += int(cumulative)
    return total / 1000


# ----------------------------------------------------------------------------- main


async def in_process(setup: Setup, args: argparse.Namespace) -> dict[str, Any]:
    sides = Sides(setup)
    short = await per_step(sides, args.short_steps, args.short_reps, warmup=2)
    long = await per_step(sides, args.long_steps, args.long_reps, warmup=1)
    sent = await request_bytes(sides, args.short_steps)
    conc = await concurrent(sides, args.tasks, args.short_steps, args.concurrent_reps)
    return {"short": short, "long": long, "sent": sent, "concurrent": conc}


def collect(setup: Setup, args: argparse.Namespace) -> list[Figure]:
    got = asyncio.run(in_process(setup, args))
    procs = processes(setup, args.process_reps, args.help_reps, not args.no_bytecode_cache)
    s, ln, n = args.short_steps, args.long_steps, args.tasks
    short, long, conc = got["short"], got["long"], got["concurrent"]
    per_short = short["loop"][1] / s
    per_long = long["loop"][1] / ln
    ms = 1e3
    return [
        Figure("per_step_20", f"per step, {s} steps: execute_task", "ms",
               short["loop"][0] * ms, short["raw"][0] * ms, "<= 1.3x", 1.3),
        Figure("per_step_20_runner", f"per step, {s} steps: Runner.run", "ms",
               short["runner"][0] * ms, short["raw"][0] * ms, "<= 1.3x", 1.3),
        Figure("per_step_200", f"per step, {ln} steps: execute_task", "ms",
               long["loop"][0] * ms, long["raw"][0] * ms, "<= 2x", 2.0),
        Figure("per_step_200_runner", f"per step, {ln} steps: Runner.run", "ms",
               long["runner"][0] * ms, long["raw"][0] * ms, "<= 2x", 2.0),
        Figure("process_1_step", "1-step `fabric run`, whole process", "s", procs["run"][0],
               procs["run"][1], "<= 1.5x", 1.5),
        Figure("imports", "1-step run process: time importing (-X importtime)", "ms",
               procs["imports"][0], procs["imports"][1], "<= 2x", 2.0),
        Figure("help", "`fabric --help` (raw: python -c pass)", "s", procs["help"][0],
               procs["help"][1], "<= 0.15 s", 0.15, measured="fabric"),
        Figure("peak_rss", "peak RSS, 1-step run process", "MiB", procs["rss"][0] / 1024,
               procs["rss"][1] / 1024, "<= 1.5x", 1.5),
        Figure("request_bytes", f"request body bytes, {s}-step task", "B", got["sent"][0],
               got["sent"][1], "<= 1.05x", 1.05),
        Figure("request_bytes_plain", "the same, raw reading files without line numbers", "B",
               got["sent"][0], got["sent"][2], "info", None),
        Figure("runlog_per_step_20", f"runlog bytes/step, {s} steps", "B", per_short, None,
               "info", None),
        Figure("runlog_per_step_200", f"runlog bytes/step, {ln} steps", "B", per_long, None,
               "info", None),
        Figure("runlog_growth", f"runlog bytes/step, {ln} vs {s} steps", "x",
               per_long / per_short, None, "<= 1.1 (linear)", 1.1, measured="fabric"),
        Figure("concurrent", f"{n} x {s}-step tasks at once: execute_task", "s",
               conc["loop"], conc["raw"], "<= 2x (bench's)", 2.0,
               notes={"tasks_per_s": n / conc["loop"], "raw_tasks_per_s": n / conc["raw"]}),
        Figure("concurrent_runner", f"{n} x {s}-step tasks at once: Runner.run", "s",
               conc["runner"], conc["raw"], "<= 2x (bench's)", 2.0,
               notes={"tasks_per_s": n / conc["runner"], "raw_tasks_per_s": n / conc["raw"]}),
        Figure("concurrent_rate", f"{n} x {s}-step tasks at once: execute_task", "tasks/s",
               n / conc["loop"], n / conc["raw"], "info", None),
    ]  # fmt: skip


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("B",):
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.3f}"
    return f"{value:.2f}" if value < 100 else f"{value:,.0f}"


def table(figures: list[Figure], meta: dict[str, Any]) -> str:
    head = ("figure", "unit", "fabric", "raw", "ratio", "target", "result")
    rows = [head]
    for f in figures:
        ratio = "-" if f.ratio is None else f"{f.ratio:.2f}x"
        result = {True: "PASS", False: "FAIL", None: ""}[f.passed]
        rows.append(
            (f.label, f.unit, _num(f.fabric, f.unit), _num(f.raw, f.unit), ratio, f.target, result)
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        f"fabric overhead vs a raw httpx loop · {meta['python']} · {meta['cpus']} CPUs · "
        f"mock server on 127.0.0.1 (own process)"
    ]
    for i, row in enumerate(rows):
        cells = [
            row[0].ljust(widths[0]),
            row[1].ljust(widths[1]),
            *(c.rjust(w) for c, w in zip(row[2:5], widths[2:5], strict=True)),
            row[5].ljust(widths[5]),
            row[6],
        ]
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    failed = [f.key for f in figures if f.passed is False]
    lines.append(f"{len(failed)} target(s) failed" + (f": {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


def file_system_us(folder: Path, count: int = 200) -> float:
    """Median microseconds to make a folder with a file in it, as each run does for its
    runlog: on this kind of machine it ranges from about 40 µs to over 1 ms from one minute to
    the next (the page cache is reclaimed), which moves fabric's figures and not raw's."""
    took = []
    for i in range(count):
        started = time.perf_counter()
        (folder / f"fs-{i}").mkdir()
        (folder / f"fs-{i}" / "file").write_bytes(b"x\n")
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Measure fabric's overhead against a minimal raw-httpx loop."
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--short-steps", type=int, default=20, help="steps of the short task")
    parser.add_argument("--long-steps", type=int, default=200, help="steps of the long task")
    parser.add_argument("--short-reps", type=int, default=30, help="repetitions, short task")
    parser.add_argument("--long-reps", type=int, default=5, help="repetitions, long task")
    parser.add_argument("--tasks", type=int, default=50, help="concurrent tasks")
    parser.add_argument("--concurrent-reps", type=int, default=3)
    parser.add_argument("--process-reps", type=int, default=11, help="whole-process runs a side")
    parser.add_argument("--help-reps", type=int, default=11, help="`fabric --help` runs")
    parser.add_argument(
        "--non-ascii",
        action="store_true",
        help="put a line of non-ASCII text in the file the tool reads (shows how each side "
        "encodes it on the wire)",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run the processes with the environment as it is (by default they get a fresh "
        "PYTHONPYCACHEPREFIX, so fabric's modules are compiled once, as when installed)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp folder (runlogs)")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="fabric-bench-"))
    server = MockServer()
    try:
        setup = make_setup(tmp, server, args.non_ascii)
        (tmp / "fs").mkdir()
        fs_before = file_system_us(tmp / "fs")
        started = time.perf_counter()
        figures = collect(setup, args)
        elapsed = time.perf_counter() - started
        shutil.rmtree(tmp / "fs")
        (tmp / "fs").mkdir()
        fs_after = file_system_us(tmp / "fs")
    finally:
        server.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    warnings = []
    if importlib.util.find_spec("sniffio") is None:
        warnings.append(
            "sniffio is not installed: httpcore retries `import sniffio` (a failing path "
            "search) several times per request, which slows every request of both sides "
            "(about 0.7 ms a step here) and hides fabric's share; `pip install sniffio`"
        )
    meta = {
        "python": f"Python {sys.version.split()[0]}",
        "warnings": warnings,
        "cpus": os.cpu_count(),
        "httpx": httpx.__version__,
        "bench_seconds": round(elapsed, 1),
        "new_folder_and_file_us": [round(fs_before), round(fs_after)],
        "settings": vars(args),
    }
    if args.json:
        data = {"meta": meta, "figures": {f.key: f.as_json() for f in figures}}
        print(json.dumps(data, indent=2))
    else:
        print(table(figures, meta))
        for warning in warnings:
            print(f"warning: {warning}")
        print(
            f"a new folder with a file took {fs_before:,.0f} µs before and {fs_after:,.0f} µs "
            "after (median; a run makes one for its runlog)"
        )
        print(f"(took {elapsed:.1f} s{'; runlogs kept in ' + str(tmp) if args.keep else ''})")
    return 1 if any(f.passed is False for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
