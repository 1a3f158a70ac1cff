"""Durable runs (ADR 0020), for real: `fabric run --durable` killed with SIGKILL in the middle
of a step's command, then `fabric resume`: the model is not asked again for a step whose
reply was recorded, a command that finished does not run twice, the command cut off runs
again once a person says so (a command is not safe to repeat), and the runlog stays one
valid log that says where the run was recovered."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres import throwaway_postgres
from support import assert_valid_runlog, read_events

from fabric.infrastructure.sandbox import cgroup
from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: openai
  backends:
    openai: {{kind: openai, base_url: "{url}"}}
  models: {{default: mock}}
runs_dir: runs
packs:
  counter:
    builder: declarative
    system_prompt: You count.
    tools: [shell]
    finish_schema: {{type: object, properties: {{answer: {{type: string}}}}, required: [answer]}}
    sandbox: {{allowed_commands: [python], command_timeout: 300}}
"""
SECRET = "s3cret-value-for-durable-runs"
ONCE = "python -c \"open('once.txt', 'a').write('1')\""
"""Step 1's command: appends a 1 each time it runs."""
CUT = (
    "python -c \"import pathlib, time; p = pathlib.Path('cut.txt'); "
    "n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); "
    'time.sleep(120 if n == 0 else 0)"'
)
"""Step 2's command: the first time it runs it marks the file and sleeps (fabric is killed
then); the second time it marks it again and ends."""


def _wait_for(predicate: Callable[[], object], what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


class Model:
    """Answers by how many assistant replies the history holds: step 1, 2, 3."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        step = 1 + sum(1 for m in body["messages"] if m.get("role") == "assistant")
        with self.lock:
            self.asked.append(step)
        if step == 1:
            return 200, completion(None, [("shell", {"command": ONCE})])
        if step == 2:
            return 200, completion(None, [("shell", {"command": CUT})])
        return 200, completion(None, [("finish_task", {"answer": "counted"})])


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    # a killed fabric cannot remove its commands' cgroups (ADR 0012): empty by now
    where = cgroup.layout()
    for parent in (where.pids_parent, where.memory_parent) if where else ():
        for left in parent.glob("fabric-*") if parent else ():
            with contextlib.suppress(OSError):
                left.rmdir()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """Where durable runs are recorded: the default SQLite file beside fabric.yaml (None), or
    a real PostgreSQL server ($FABRIC_DATABASE_URL)."""
    if request.param == "sqlite":
        yield None
        return
    with throwaway_postgres() as url:
        yield url


def _fabric(folder: Path, *argv: str, database: str | None = None) -> subprocess.Popen[bytes]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
    env = {k: v for k, v in os.environ.items() if k != "FABRIC_DATABASE_URL"}
    env["DURABLE_TEST_TOKEN"] = SECRET  # a secret by its name: kept out of the database
    if database is not None:
        env["FABRIC_DATABASE_URL"] = database
    with (folder / "fabric.out").open("ab") as out:  # the child has its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "fabric", *argv, "--config", str(folder / "fabric.yaml")],
            env={**env, "PATH": path},
            cwd=folder / "ws",
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


Fabric = Callable[..., subprocess.Popen[bytes]]
"""Starts a fabric command in the test's folder, on its database."""


@pytest.fixture
def fabric(folder: Path, database: str | None) -> Fabric:
    def start(*argv: str) -> subprocess.Popen[bytes]:
        return _fabric(folder, *argv, database=database)

    return start


def _killed_in_step_2(
    folder: Path, url: str, fabric: Callable[..., subprocess.Popen[bytes]]
) -> Path:
    """A durable run killed with SIGKILL during step 2's command; its runlog."""
    (folder / "fabric.yaml").write_text(CONFIG.format(url=url))
    workspace = folder / "ws"
    workspace.mkdir()
    proc = fabric("run", "--durable", "--pack", "counter", "--json", f"count {SECRET}")
    try:
        _wait_for(
            lambda: (workspace / "cut.txt").exists() or proc.poll() is not None,
            "step 2's command to start",
        )
        assert proc.poll() is None, (folder / "fabric.out").read_text()
        # while its process lives, the run is not taken over
        [runlog] = (folder / "runs").glob("*/runlog.jsonl")
        early = fabric("resume", runlog.parent.name)
        assert early.wait(120) == 2
        assert "is still running in process" in (folder / "fabric.out").read_text()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    return runlog


def test_a_killed_durable_run_goes_on_from_its_last_recorded_step(
    folder: Path, database: str | None, fabric: Fabric
) -> None:
    model = Model()
    with MockOpenAIServer(model) as server:
        workspace = folder / "ws"
        runlog = _killed_in_step_2(folder, server.base_url, fabric)
        assert model.asked == [1, 2]
        run_id = runlog.parent.name
        # fabric doctor names it, and how to continue it
        doctor = fabric("doctor", "--json")
        assert doctor.wait(120) in (0, 1)
        out = (folder / "fabric.out").read_text()
        report = json.loads(out[out.rindex('{\n  "fabric"') :])["durable"]
        assert report["ok"], report
        if database is None:
            assert report["note"] == "journal mode wal"
            assert report["database"] == f"SQLite {(folder / 'durable.sqlite3').resolve()}"
        else:
            assert report["database"].startswith("postgresql://127.0.0.1:")
        assert [u["run_id"] for u in report["unfinished"]] == [run_id]

        # --yes: the command cut off (shell is not safe to repeat) may run again
        resumed = fabric("resume", run_id, "--json", "--yes")
        assert resumed.wait(300) == 0, (folder / "fabric.out").read_text()
        output = (folder / "fabric.out").read_text()
        result = json.loads(output[output.rindex('{\n  "run_id"') :])
        assert result["status"] == "completed" and result["steps"] == 3
        # steps 1 and 2 had their replies recorded: only step 3 was asked for
        assert model.asked == [1, 2, 3]
        assert (workspace / "once.txt").read_text() == "1"  # finished: not run again
        assert (workspace / "cut.txt").read_text() == "xx"  # cut off: run again, to its end
        events = assert_valid_runlog(read_events(runlog))
        kinds = [e["kind"] for e in events]
        assert kinds.count("run_started") == 1 and kinds[-1] == "run_finished"
        [again] = [e for e in events if e["kind"] == "run_resumed"]
        assert again["reason"] == "recovered" and again["from_step"] == 2
        after = events[kinds.index("run_resumed") :]
        assert [e["step"] for e in after if e["kind"] == "tool_result"] == [2]
        [asked] = [e for e in after if e["kind"] == "approval_requested"]
        assert asked["step"] == 2 and "cut off" in asked["reason"]
        [answer] = [e for e in after if e["kind"] == "approval"]
        assert answer["approved"] and answer["by"] == "cli --yes"
        kind = "SQLite" if database is None else "postgresql://127.0.0.1:"
        assert f"durable run: every step is recorded in {kind}" in output
        assert "resumed at step 2 (a durable run recovered: its process had died)" in output

        if database is None:  # what the database holds is redacted, like the runlog
            stored = b"".join(p.read_bytes() for p in folder.glob("durable.sqlite3*"))
            assert b"count [redacted]" in stored and SECRET.encode() not in stored
        # it ended: a second resume says so, and nothing is asked
        again_proc = fabric("resume", run_id)
        assert again_proc.wait(120) == 2
        assert model.asked == [1, 2, 3]


def test_fabric_worker_takes_over_a_run_whose_process_died(
    folder: Path, database: str | None, fabric: Fabric
) -> None:
    model = Model()
    with MockOpenAIServer(model) as server:
        runlog = _killed_in_step_2(folder, server.base_url, fabric)
        worker = fabric("worker", "--once")
        assert worker.wait(300) == 0, (folder / "fabric.out").read_text()
    output = (folder / "fabric.out").read_text()
    run_id = runlog.parent.name
    assert "fabric worker: tasks from queue fabric.tasks in " in output
    assert f"continuing durable run {run_id} from its last recorded step" in output
    assert f"durable run {run_id} ended completed after 3 step(s)" in output
    assert model.asked == [1, 2, 3]  # step 2's reply was recorded: not asked again
    # no one to ask whether the cut-off command may run again: it is not
    assert (folder / "ws" / "cut.txt").read_text() == "x"
    events = assert_valid_runlog(read_events(runlog))
    [cut] = [e for e in events if e["kind"] == "tool_result" and e["step"] == 2]
    assert not cut["ok"] and "cut off" in cut["output"] and "not run again" in cut["output"]
    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "completed"
    # nothing left: a second look finds nothing
    again = fabric("worker", "--once")
    assert again.wait(120) == 0
    assert "no unfinished durable run to take over" in (folder / "fabric.out").read_text()


def test_dbos_stays_off_the_path_of_runs_that_are_not_durable() -> None:
    code = (
        "import sys; import fabric.interfaces.cli.app, fabric.interfaces.cli.run_cmd; "
        "from fabric.interfaces.compose import build_runner, service_files; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dbos', 'sqlalchemy')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_tools_never_touch_the_database_of_durable_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fabric.config.loader import load_config
    from fabric.interfaces.compose import service_files

    (tmp_path / "fabric.yaml").write_text(CONFIG.format(url="http://127.0.0.1:9/v1"))
    protected = service_files(load_config(tmp_path / "fabric.yaml"))
    database = (tmp_path / "durable.sqlite3").resolve()
    for end in ("", "-wal", "-shm"):
        assert database.with_name(database.name + end) in protected
    elsewhere = tmp_path / "elsewhere" / "steps.db"
    monkeypatch.setenv("FABRIC_DATABASE_URL", f"sqlite:///{elsewhere}")
    assert elsewhere.resolve() in service_files(load_config(tmp_path / "fabric.yaml"))
    monkeypatch.setenv("FABRIC_DATABASE_URL", "postgresql://db.example/fabric")
    assert database not in service_files(load_config(tmp_path / "fabric.yaml"))


LOOKING = CONFIG.replace("counter:", "looker:").replace(
    "tools: [shell]", "tools: [read_file, shell]"
)
REWRITE = "python -c \"open('notes.txt', 'w').write('second')\""


class Looking:
    """Step 1 reads notes.txt (it says "first") and rewrites it to "second"; step 2 reads it
    again; the first request for step 3 is held until ``hold`` is set (fabric is killed
    meanwhile); then it finishes. Keeps every request body."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.bodies: list[dict[str, Any]] = []
        self.holding, self.hold = threading.Event(), threading.Event()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        step = 1 + sum(1 for m in body["messages"] if m.get("role") == "assistant")
        self.asked.append(step)
        self.bodies.append(body)
        if step == 1:
            read = ("read_file", {"path": "notes.txt"})
            return 200, completion(None, [read, ("shell", {"command": REWRITE})])
        if step == 2:
            return 200, completion(None, [("read_file", {"path": "notes.txt"})])
        if self.asked.count(3) == 1:
            self.holding.set()
            self.hold.wait(120)
            return 500, {"error": {"message": "gone"}}
        return 200, completion(None, [("finish_task", {"answer": "read"})])


def test_a_recovered_run_reads_again_only_what_was_not_recorded_yet(
    folder: Path, database: str | None, fabric: Fabric
) -> None:
    """A read is recorded with the next model reply, not in a step of its own: the read of
    step 1 (recorded with step 1's command) comes back from the record after a crash; the
    read of step 2, whose next reply never came, is made again, and the log holds what the
    model was told."""
    model = Looking()
    with MockOpenAIServer(model) as server:
        (folder / "fabric.yaml").write_text(LOOKING.format(url=server.base_url))
        workspace = folder / "ws"
        workspace.mkdir()
        (workspace / "notes.txt").write_text("first")
        proc = fabric("run", "--durable", "--pack", "looker", "--json", "read the notes")
        try:
            _wait_for(lambda: model.holding.is_set() or proc.poll() is not None, "step 3")
            assert proc.poll() is None, (folder / "fabric.out").read_text()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
            model.hold.set()
        (workspace / "notes.txt").write_text("third")
        [runlog] = (folder / "runs").glob("*/runlog.jsonl")
        resumed = fabric("resume", runlog.parent.name, "--json")
        assert resumed.wait(300) == 0, (folder / "fabric.out").read_text()
    assert model.asked == [1, 2, 3, 3]
    told = [m["content"] for m in model.bodies[-1]["messages"] if m.get("role") == "tool"]
    assert len(told) == 3
    assert "first" in told[0]  # recorded: not read again, though the file changed since
    assert "third" in told[2] and "second" not in told[2]  # not recorded yet: read again
    events = assert_valid_runlog(read_events(runlog))
    [again] = [e for e in events if e["kind"] == "run_resumed"]
    assert again["reason"] == "recovered" and again["from_step"] == 2
    after = events[events.index(again) :]
    [read] = [e for e in after if e["kind"] == "tool_result" and e["step"] == 2]
    assert "third" in read["output"]  # the log holds what the model was told
    assert (workspace / "notes.txt").read_text() == "third"  # step 1's command ran once
    assert events[-1]["kind"] == "run_finished" and events[-1]["status"] == "completed"
