"""One shared embedded model server per user and model: real processes, a stand-in model.

Each "run" here is a separate Python process that uses the embedded backend the way `fabric
run` does (``EmbeddedServer``, a chat client held on it, one chat request). The model program
is a stand-in speaking llama.cpp's side of the protocol (key on stdin, its url on stdout, an
OpenAI-compatible API on loopback that requires the key) without loading any model; the
supervisor, the locks, the leases, the state files and the idle stop are fabric's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fabric.config.schema import EmbeddedBackend
from fabric.domain.errors import ModelConnectionError
from fabric.infrastructure.llm.embedded import EmbeddedServer
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient

STANDIN = """
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from fabric.testing import completion, stream_chunks

request = json.loads(sys.stdin.readline() or "{}")
key = request.get("api_key") or ""
print("stand-in model: loading", " ".join(sys.argv[2:]), file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))  # what loading a model would take


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def allowed(self):
        if self.headers.get("Authorization") == "Bearer " + key:
            return True
        print("stand-in model: unauthorized: invalid API key", file=sys.stderr, flush=True)
        self.send(401, {"error": {"message": "Invalid API Key"}})
        return False

    def do_GET(self):
        if self.allowed():
            self.send(200, {"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if not self.allowed():
            return
        print("stand-in model: a chat request", file=sys.stderr, flush=True)
        answer = completion(f"pong from {os.getpid()}", model="stand-in")
        if not body.get("stream"):
            return self.send(200, answer)
        data = b"".join(f"data: {json.dumps(c)}\\n\\n".encode() for c in stream_chunks(answer))
        self.send(200, data + b"data: [DONE]\\n\\n", "text/event-stream")

    def send(self, status, answer, kind="application/json"):
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        return None


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
Thread(target=server.serve_forever, daemon=True).start()
print(json.dumps({"url": "http://127.0.0.1:%d" % server.server_address[1]}), flush=True)
sys.stdin.read()  # serve until the supervisor closes the pipe
"""

RUN = """
import asyncio, json, sys
from fabric.config.schema import EmbeddedBackend
from fabric.domain.models import ChatRequest
from fabric.infrastructure.llm.embedded import EmbeddedServer
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient

model, standin, delay, idle, hold = sys.argv[1:6]


async def main():
    settings = EmbeddedBackend(
        kind="embedded", model_path=model, idle_timeout=float(idle), startup_timeout=60
    )
    server = EmbeddedServer(
        settings,
        program=[sys.executable, standin, delay],
        on_status=lambda line: print(line, file=sys.stderr, flush=True),
    )
    url = await server.start()
    client = server.held(
        OpenAIChatClient(base_url=url, model="stand-in", api_key=server.api_key, stream=True)
    )
    reply = await client.chat(ChatRequest([{"role": "user", "content": "ping"}], []))
    print(json.dumps({"pid": server.pid, "reply": reply.content}), flush=True)
    if hold == "hold":
        await asyncio.sleep(3600)  # a run still going; the test kills it
    await client.aclose()


asyncio.run(main())
"""


class Machine:
    """One user's state folder and log, and a way to start runs that use the stand-in."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "runtime" / "fabric" / "embedded"
        self.log = root / "cache" / "fabric" / "embedded-server.log"
        self.model = root / "model.gguf"
        self.model.write_bytes(b"GGUF stand-in")
        self.standin = root / "standin.py"
        self.standin.write_text(STANDIN)
        self.script = root / "run.py"
        self.script.write_text(RUN)
        self.env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(root / "runtime"),
            "XDG_CACHE_HOME": str(root / "cache"),
        }
        self.started: list[subprocess.Popen[str]] = []

    def start(self, *, idle: float = 60, delay: float = 0, hold: bool = False) -> Any:
        argv = [sys.executable, str(self.script), str(self.model), str(self.standin)]
        argv += [str(delay), str(idle), "hold" if hold else "done"]
        proc = subprocess.Popen(
            argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.started.append(proc)
        return proc

    def run(self, **options: Any) -> tuple[dict[str, Any], str]:
        """A run to its end: what it printed (server pid, model reply) and its stderr."""
        out, err = self.start(**options).communicate(timeout=120)
        assert out, err
        return json.loads(out), err

    def servers(self) -> list[int]:
        """Live supervisors of this machine's servers."""
        return [pid for pid, cmd in _processes(str(self.state)) if b"embedded_supervisor" in cmd]

    def models(self) -> list[int]:
        """Live stand-in model processes."""
        return [
            pid
            for pid, cmd in _processes(str(self.standin))
            if b"embedded_supervisor" not in cmd and b"run.py" not in cmd
        ]

    def state_files(self) -> list[Path]:
        return sorted(self.state.glob("*.json"))


def _processes(marker: str) -> list[tuple[int, bytes]]:
    """Live (not zombie) processes with ``marker`` in their command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append((int(entry), cmd))
    return found


def _wait_for(predicate: Callable[[], object], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def _read_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    answer: dict[str, Any] = json.loads(line)
    return answer


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    machine = Machine(tmp_path)
    yield machine
    for proc in machine.started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    for pid in machine.servers() + machine.models():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_runs_one_after_another_share_one_server(machine: Machine) -> None:
    first, first_err = machine.run()
    second, second_err = machine.run()
    assert first["pid"] == second["pid"]
    assert first["reply"] == second["reply"] and first["reply"].startswith("pong from ")
    assert "started the embedded model" in first_err
    assert "using the running embedded model" in second_err
    assert machine.servers() == [first["pid"]]
    assert len(machine.models()) == 1


def test_runs_starting_at_once_start_one_server(machine: Machine) -> None:
    runs = [machine.start(delay=2), machine.start(delay=2)]
    _wait_for(machine.models, "the model to start loading")
    runs.append(machine.start(delay=2))  # most likely while the model still loads
    answers = [json.loads(run.communicate(timeout=120)[0]) for run in runs]
    assert len({answer["pid"] for answer in answers}) == 1
    assert len({answer["reply"] for answer in answers}) == 1  # one model process answered
    assert machine.servers() == [answers[0]["pid"]]
    assert len(machine.models()) == 1
    assert len(machine.state_files()) == 1


def test_an_idle_server_stops_itself(machine: Machine) -> None:
    answer, _ = machine.run(idle=0.5)
    _wait_for(lambda: not machine.servers() and not machine.models(), "the idle server to stop")
    assert machine.state_files() == []
    assert "unused for 0.5 s; stopping" in machine.log.read_text()
    again, err = machine.run(idle=0.5)  # the next run starts a new one
    assert again["pid"] != answer["pid"] and "started the embedded model" in err


def test_a_run_in_progress_keeps_the_server(machine: Machine) -> None:
    holding = machine.start(idle=0.2, hold=True)
    pid = _read_line(holding)["pid"]
    answer, _ = machine.run(idle=0.2)  # a second run comes and goes meanwhile
    assert answer["pid"] == pid
    time.sleep(1.0)  # several idle periods: the first run's lease keeps it
    assert machine.servers() == [pid]
    again, _ = machine.run(idle=0.2)
    assert again["pid"] == pid


def test_a_killed_run_does_not_keep_the_server_alive(machine: Machine) -> None:
    holding = machine.start(idle=0.5, hold=True)
    pid = _read_line(holding)["pid"]
    holding.send_signal(signal.SIGKILL)
    holding.wait()
    _wait_for(lambda: pid not in machine.servers(), "the server to stop after its user died")
    assert machine.models() == [] and machine.state_files() == []


def test_a_killed_server_is_replaced(machine: Machine) -> None:
    first, _ = machine.run()
    model = machine.models()
    os.kill(first["pid"], signal.SIGKILL)
    _wait_for(lambda: not machine.servers(), "the killed server to go")
    _wait_for(lambda: not set(model) & set(machine.models()), "its model process to go")
    assert len(machine.state_files()) == 1  # stale: nothing ran to remove it
    second, err = machine.run()
    assert second["pid"] != first["pid"] and second["reply"] != first["reply"]
    assert "started the embedded model" in err
    assert machine.servers() == [second["pid"]]


def test_a_run_killed_while_the_model_loads_leaves_nothing(machine: Machine) -> None:
    loading = machine.start(delay=3600)
    _wait_for(lambda: machine.models(), "the model to start loading")
    loading.send_signal(signal.SIGKILL)
    loading.wait()
    _wait_for(lambda: not machine.servers() and not machine.models(), "the server to go")
    assert machine.state_files() == []
    answer, err = machine.run()  # and the next run is not kept waiting
    assert "started the embedded model" in err and answer["reply"].startswith("pong")


def test_the_key_is_private(machine: Machine) -> None:
    holding = machine.start(hold=True)
    pid = _read_line(holding)["pid"]
    [state_file] = machine.state_files()
    key = json.loads(state_file.read_text())["api_key"]
    assert len(key) >= 32
    assert state_file.stat().st_mode & 0o777 == 0o600
    assert machine.state.stat().st_mode & 0o777 == 0o700
    for process in [pid, holding.pid, *machine.models()]:
        assert key.encode() not in Path(f"/proc/{process}/cmdline").read_bytes()
        assert key.encode() not in Path(f"/proc/{process}/environ").read_bytes()
    _, err = machine.run()
    log = machine.log.read_text()
    assert "stand-in model: a chat request" in log and f"(pid {pid})" in log
    assert key not in log and key not in err
    import httpx

    url = json.loads(state_file.read_text())["url"]
    assert httpx.get(url + "/models", timeout=30).status_code == 401  # no key, no model


def test_a_server_that_does_not_answer_is_replaced(machine: Machine) -> None:
    first, _ = machine.run()
    [state_file] = machine.state_files()
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "api_key": "not-its-key"}))  # it answers 401
    second, err = machine.run()
    assert f"the embedded model server (pid {first['pid']}) does not answer" in err
    assert second["pid"] != first["pid"] and "started the embedded model" in err
    assert machine.servers() == [second["pid"]] and len(machine.models()) == 1


def _in_process(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, program: list[str], **settings: Any
) -> EmbeddedServer:
    for name in ("XDG_RUNTIME_DIR", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, machine.env[name])
    backend = EmbeddedBackend(kind="embedded", model_path=str(machine.model), **settings)
    return EmbeddedServer(backend, program=program)


REFUSING = "import json, sys; sys.stdin.readline(); print(json.dumps({'error': 'no memory'}))"


@pytest.mark.parametrize(
    ("program", "why"),
    [
        ([sys.executable, "-c", REFUSING], "no memory"),
        (["/nonexistent/llama"], "cannot run the model program /nonexistent/llama"),
        ([sys.executable, "-c", "raise SystemExit(3)"], "it exited before answering (code 3)"),
    ],
)
def test_a_model_that_cannot_start_says_why(
    machine: Machine, monkeypatch: pytest.MonkeyPatch, program: list[str], why: str
) -> None:
    server = _in_process(machine, monkeypatch, program)
    with pytest.raises(ModelConnectionError) as caught:
        asyncio.run(server.start())
    assert f"the embedded model server did not start: {why}" in caught.value.message
    assert str(machine.log) in (caught.value.hint or "")
    _wait_for(lambda: not machine.servers(), "the supervisor to end")
    assert machine.state_files() == []


def test_a_model_that_loads_too_long_is_stopped(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = [sys.executable, str(machine.standin), "3600"]
    server = _in_process(machine, monkeypatch, program, startup_timeout=0.5)
    with pytest.raises(ModelConnectionError) as caught:
        asyncio.run(server.start())
    assert "did not load within 0.5 s" in caught.value.message
    assert "startup_timeout" in (caught.value.hint or "")
    _wait_for(lambda: not machine.servers() and not machine.models(), "the server to go")
    assert machine.state_files() == []


def test_the_lease_goes_with_the_last_open_client(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `Backends` hands clients out: each open client is a use of the server."""
    program = [sys.executable, str(machine.standin), "0"]
    server = _in_process(machine, monkeypatch, program, idle_timeout=0)

    async def two_clients() -> tuple[int | None, list[int]]:
        clients = []
        for _ in range(2):
            url = await server.start()
            plain = OpenAIChatClient(base_url=url, model="stand-in", api_key=server.api_key)
            clients.append(server.held(plain))
        pid = server.pid
        await clients[0].aclose()
        await asyncio.sleep(1.0)  # several idle checks: the other client still holds it
        still = machine.servers()
        await clients[1].aclose()
        return pid, still

    pid, still = asyncio.run(two_clients())
    assert pid is not None and still == [pid]
    _wait_for(lambda: not machine.servers(), "the server to stop after its last client")
    assert machine.state_files() == []


def test_a_server_in_use_that_is_slow_to_answer_is_never_stopped_by_a_newcomer(
    machine: Machine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy machine: the server holds other runs and does not answer a newcomer in time.
    The newcomer says so and leaves it running, rather than killing every run in flight."""
    from fabric.infrastructure.llm import embedded_shared

    holding = machine.start(hold=True)
    pid = _read_line(holding)["pid"]
    [state_file] = machine.state_files()
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "api_key": "not-its-key"}))  # it answers 401
    monkeypatch.setattr(embedded_shared, "_BUSY_WAIT", 1.0)
    server = _in_process(machine, monkeypatch, [sys.executable, str(machine.standin), "0"])
    with pytest.raises(ModelConnectionError, match="in use by other runs"):
        asyncio.run(server.start())
    assert machine.servers() == [pid]  # still there, still serving the run that holds it
    holding.send_signal(signal.SIGKILL)
    holding.wait()
