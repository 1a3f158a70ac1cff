"""`kill -9` of fabric leaves nothing running: not the command a run started (nor what that
command detached with setsid and a double fork), under every backend, and not the embedded
model server. The kernel tells them (the parent-death signal); nothing of fabric runs to help.
What the killed run's last command planted in a repository's .git, which fabric had no chance
to audit, is removed by the next start of fabric.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support import planted_repository

from fabric.infrastructure.llm.embedded import installed
from fabric.infrastructure.sandbox import cgroup, host_report
from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: {backend}
  backends:
    openai: {{kind: openai, base_url: "http://127.0.0.1:9/v1"}}
    embedded: {{kind: embedded, context_size: 2048}}
  models: {{default: {model}}}
runs_dir: runs
packs:
  engineering:
    builder: packs.engineering:build
    sandbox: {{allowed_commands: [python], command_timeout: 300, confinement: {confinement}}}
"""

HEART = """
import sys, time
while True:
    with open(sys.argv[-1], "a") as f:
        f.write("beat\\n")
    time.sleep(0.05)
"""

SPAWN = f"""
import os, subprocess, sys, time
beat = [sys.executable, "-c", {HEART!r}, sys.argv[1]]
subprocess.Popen([*beat, "child.beat"])
if os.fork() == 0:  # detach: a session of its own, then orphaned by a second fork
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [*beat, "detached.beat"])
    os._exit(0)
time.sleep(3600)
"""
"""The command the model asks for: a child writing a heartbeat, a detached grandchild writing
another, and itself sleeping; every one with the test's token in its command line."""

GRACE = 5.0
"""How long killed processes may take to go (the test waits no longer, and asserts no time)."""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent, start time) of a process, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """Every live process below ``root``: pid -> start time (to tell a reused pid)."""
    stats = {int(e): _stat(int(e)) for e in os.listdir("/proc") if e.isdigit()}
    found: dict[int, int] = {}
    frontier = [root]
    while frontier:
        current = frontier.pop()
        for pid, stat in stats.items():
            if stat is not None and stat[1] == current and pid not in found:
                found[pid] = stat[2]
                frontier.append(pid)
    return found


def _cmd(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def _with_token(token: str) -> dict[int, int]:
    """Every live process with ``token`` in its command line: pid -> start time."""
    found: dict[int, int] = {}
    for pid in (int(e) for e in os.listdir("/proc") if e.isdigit()):
        stat = _stat(pid) if token.encode() in _cmd(pid) and pid != os.getpid() else None
        if stat is not None:
            found[pid] = stat[2]
    return found


def _alive(processes: dict[int, int]) -> list[int]:
    """Those still running (a zombie has ended; a reused pid is another process)."""
    left = []
    for pid, started in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z" and stat[2] == started:
            left.append(pid)
    return left


def _wait_for(predicate: Callable[[], object], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _gone(processes: dict[int, int]) -> list[int]:
    """Wait up to GRACE seconds for ``processes`` to end; those still running then."""
    deadline = time.monotonic() + GRACE
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _alive(processes)


def _describe(pids: list[int]) -> list[str]:
    return [f"{pid}: {_cmd(pid).decode(errors='replace')[:150]}" for pid in pids]


def _kill(processes: dict[int, int]) -> None:
    for pid in _alive(processes):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def fabric_run(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Starts ``fabric run`` in the background (output to files); kills it at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(confinement: str, backend: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        config = tmp_path / "fabric.yaml"
        model = "mock-model" if backend == "openai" else "auto"
        config.write_text(CONFIG.format(backend=backend, model=model, confinement=confinement))
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        (workspace / "spawn.py").write_text(SPAWN)
        argv = [sys.executable, "-m", "fabric", "run", "--pack", "engineering"]
        argv += ["--config", str(config), "--workspace", str(workspace), "go"]
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        with (tmp_path / "fabric.out").open("wb") as out:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **env, "PATH": path},
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        # a killed fabric cannot remove its commands' cgroups (ADR 0012): empty by now
        where = cgroup.layout()
        for parent in (where.pids_parent, where.memory_parent) if where else ():
            for folder in parent.glob(f"fabric-{proc.pid}-*") if parent else ():
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _backends() -> list[str]:
    report = host_report()
    usable = {"bwrap": report.bwrap_error, "landlock": report.landlock_error, "none": None}
    ci = os.environ.get("CI") == "true"
    return [name for name, error in usable.items() if error is None or (ci and name == "bwrap")]


@pytest.mark.parametrize("confinement", _backends())
def test_a_killed_fabric_leaves_no_command_running(
    confinement: str, tmp_path: Path, fabric_run: Callable[..., subprocess.Popen[bytes]]
) -> None:
    token = f"fabric-kill9-{secrets.token_hex(6)}"
    release = threading.Event()
    answers = iter([completion(None, [("shell", {"command": f"python spawn.py {token}"})])])

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        answer = next(answers, None)
        if answer is None:  # the command never ends, so fabric never asks again; just in case
            release.wait(60)
            return 500, {"error": {"message": "the test is over"}}
        return 200, answer

    beats = [tmp_path / "ws" / "child.beat", tmp_path / "ws" / "detached.beat"]
    started: dict[int, int] = {}
    with MockOpenAIServer(model, models=["mock-model"]) as server:
        fabric = fabric_run(confinement, "openai", {"FABRIC_BASE_URL": server.base_url})
        try:
            _wait_for(
                lambda: all(b.exists() for b in beats) or fabric.poll() is not None,
                "the command's heartbeats",
            )
            assert fabric.poll() is None, (tmp_path / "fabric.out").read_text()
            started.update({**_descendants(fabric.pid), **_with_token(token)})
            assert len(_with_token(token)) >= 3, "the command and its two heartbeats"
            fabric.send_signal(signal.SIGKILL)
            fabric.wait()
            left = _describe(_gone({**started, **_with_token(token)}))
            sizes = [b.stat().st_size for b in beats]
            time.sleep(0.3)
            growing = [
                b.name for b, size in zip(beats, sizes, strict=True) if b.stat().st_size > size
            ]
        finally:
            release.set()
            _kill({**started, **_with_token(token)})
    assert not left, f"outlived fabric under {confinement}: {left}"
    assert not growing, f"still beating under {confinement}: {growing}"


def test_a_killed_fabric_leaves_no_embedded_model_server(
    tmp_path: Path, fabric_run: Callable[..., subprocess.Popen[bytes]]
) -> None:
    """Killed while the model loads: the server loads for seconds before it reads anything."""
    assert installed(), "the embedded backend is missing: pip install -e '.[dev,local]'"
    runtime = tmp_path / "runtime"  # a server of the user's own is never reused here
    runtime.mkdir(mode=0o700)
    fabric = fabric_run("none", "embedded", {"XDG_RUNTIME_DIR": str(runtime)})
    servers: dict[int, int] = {}

    def server_started() -> bool:
        servers.update(
            {p: s for p, s in _descendants(fabric.pid).items() if b"embedded_server" in _cmd(p)}
        )
        return bool(servers) or fabric.poll() is not None

    try:
        _wait_for(server_started, "the embedded model server")
        assert servers, (tmp_path / "fabric.out").read_text()
        fabric.send_signal(signal.SIGKILL)
        fabric.wait()
        left = _describe(_gone(servers))
    finally:
        _kill(servers)
    assert not left, f"the embedded model server outlived fabric: {left}"


def test_the_next_start_removes_what_a_killed_run_planted_in_git(
    tmp_path: Path, fabric_run: Callable[..., subprocess.Popen[bytes]]
) -> None:
    workspace, home, mark = tmp_path / "ws", tmp_path / "home", tmp_path / "mark"
    workspace.mkdir()
    planted = planted_repository(workspace)
    release = threading.Event()
    answers = iter([completion(None, [("shell", {"command": f"python plant.py {mark}"})])])

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        answer = next(answers, None)
        if answer is None:
            release.wait(60)
            return 500, {"error": {"message": "the test is over"}}
        return 200, answer

    with MockOpenAIServer(model, models=["mock-model"]) as server:
        env = {"FABRIC_BASE_URL": server.base_url, "HOME": str(home)}
        fabric = fabric_run(_backends()[0], "openai", env)
        try:
            _wait_for(lambda: planted.exists() or fabric.poll() is not None, "the planting")
            assert fabric.poll() is None, (tmp_path / "fabric.out").read_text()
            fabric.send_signal(signal.SIGKILL)
            fabric.wait()
        finally:
            release.set()
    assert planted.exists(), "nothing audited the killed run's last command"

    argv = [sys.executable, "-m", "fabric", "packs", "--config", str(tmp_path / "fabric.yaml")]
    again = subprocess.run(
        argv, env={**os.environ, "HOME": str(home)}, capture_output=True, text=True, check=False
    )
    assert again.returncode == 0, again.stderr
    assert "fabric removed .git/commondir" in again.stderr, again.stderr
    assert not os.path.lexists(planted)
    subprocess.run(["git", "-C", str(workspace), "status"], capture_output=True, check=False)
    assert not mark.exists(), "git on the host ran the program the killed run planted"
