"""The shared embedded model server's own process (ADR 0008):
``python -m fabric.infrastructure.llm.embedded_supervisor --name N ... -- PROGRAM ...``.

The first fabric process that needs the server starts this in a session of its own (a Ctrl-C
in its terminal does not reach it, and it outlives that process). It runs the model program
given after ``--`` (fabric's llama.cpp server, ``embedded_server``, or a stand-in in tests) as
its child, and:

1. makes the API key and hands it to the model program on its standard input, never in
   arguments or the environment. The program answers one JSON line on its standard output,
   ``{"url": ...}`` once it serves or ``{"error": ...}``; it serves until its standard input
   closes. Meanwhile this process watches its own standard input, whose other end the
   starting fabric process holds: if that process dies or gives up while the model loads, the
   model is killed and this process ends.
2. once the model answers, records url, pid and key in the server's state file (mode 0600) and
   tells the starter ``{"url": ...}`` (or ``{"error": ...}``) on its standard output.
3. checks every few seconds whether a fabric process holds a lease on the server, and stops
   the model and itself once none has for ``--idle-timeout`` seconds (and while stopping holds
   the start lock, so nobody attaches meanwhile); also when the model process ends, and on
   SIGTERM. If this process is killed the kernel kills the model too (the parent-death signal
   the model program asks for), and the next fabric finds the stale state file.

Its standard error, and the model's, is the server log, kept under a bounded size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from .embedded_state import (
    ServerFiles,
    ServerState,
    bound_log,
    open_lock,
    remove_state,
    try_lock,
    unlock,
    write_state,
)

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_STOP_GRACE = 10.0
"""Seconds the model may take to stop after its standard input closes; then it is killed."""


class _Stop(Exception):
    """SIGTERM (or SIGINT, SIGHUP) arrived."""


class _Failed(Exception):
    """The model did not start; the message says why."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fabric's shared embedded model server")
    parser.add_argument("--name", required=True, help="the server's name (its state files)")
    parser.add_argument("--state-dir", required=True, type=Path, help="where its files are")
    parser.add_argument("--model", required=True, help="the model file, for the record")
    parser.add_argument("--log", required=True, type=Path, help="the log, to keep bounded")
    parser.add_argument("--idle-timeout", type=float, default=300.0)
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- the model program")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        parser.error("the model program is missing after --")
    for number in _SIGNALS:
        signal.signal(number, _on_signal)
    os.chdir(args.state_dir)  # a folder of fabric's own, never a workspace
    files = ServerFiles(args.state_dir, args.name)
    key = secrets.token_urlsafe(32)
    try:
        model = subprocess.Popen(program, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    except OSError as exc:
        _answer({"error": f"cannot run the model program {program[0]}: {exc}"})
        return 1
    served = False
    try:
        try:
            url = _load(model, key)
        except _Failed as exc:
            _answer({"error": str(exc)})
            _log(args.name, f"the model did not start: {exc}")
            return 1
        state = ServerState(os.getpid(), url.rstrip("/") + "/v1", key, args.model, args.name)
        write_state(files.state, state)
        served = True
        _answer({"url": state.url})
        _detach_stdio()
        _log(args.name, f"serving {args.model} at {state.url}")
        return _serve(model, files, args.idle_timeout, args.log)
    except _Stop:
        _log(args.name, "stopping on a signal")
        return 0
    finally:
        for number in _SIGNALS:
            signal.signal(number, signal.SIG_IGN)
        remove_state(files.state, os.getpid())
        _stop_model(model, _STOP_GRACE if served else 0.0)


def _on_signal(number: int, frame: FrameType | None) -> None:
    raise _Stop


def _load(model: subprocess.Popen[bytes], key: str) -> str:
    """Hand the key to the model program and wait for its url, while the starter stays."""
    assert model.stdin is not None and model.stdout is not None
    try:
        model.stdin.write(json.dumps({"api_key": key, "parent": os.getpid()}).encode() + b"\n")
        model.stdin.flush()
    except OSError as exc:
        raise _Failed(f"the model program exited at once ({exc})") from None
    pending = b""
    with selectors.DefaultSelector() as watch:
        watch.register(sys.stdin.fileno(), selectors.EVENT_READ, "starter")
        watch.register(model.stdout.fileno(), selectors.EVENT_READ, "model")
        while b"\n" not in pending:
            for ready, _ in watch.select():
                chunk = os.read(ready.fd, 4096)
                if ready.data == "starter" and not chunk:
                    raise _Failed("the fabric process that started it went away")
                if ready.data == "model":
                    if not chunk:
                        raise _Failed(f"it exited before answering (code {model.wait()})")
                    pending += chunk
    model.stdout.close()  # the program says nothing more there
    try:
        answer = json.loads(pending.split(b"\n", 1)[0])
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or not isinstance(answer.get("url"), str):
        problem = answer.get("error") if isinstance(answer, dict) else None
        raise _Failed(str(problem or "it answered something other than its url"))
    return str(answer["url"])


def _serve(model: subprocess.Popen[bytes], files: ServerFiles, idle: float, log: Path) -> int:
    """Until the model ends or nobody has used it for ``idle`` seconds."""
    tick = min(5.0, max(0.1, idle / 4))
    start_fd, lease_fd = open_lock(files.lock), open_lock(files.lease)
    last_used = time.monotonic()
    while True:
        try:
            code = model.wait(timeout=tick)
        except subprocess.TimeoutExpired:
            pass
        else:
            _log(files.name, f"the model process ended (code {code}); stopping")
            return 1
        bound_log(log)
        if not try_lock(start_fd, exclusive=True):  # someone starts or attaches
            last_used = time.monotonic()
            continue
        try:
            if not try_lock(lease_fd, exclusive=True):  # someone holds a lease
                last_used = time.monotonic()
                continue
            try:
                if time.monotonic() - last_used < idle:
                    continue
                remove_state(files.state, os.getpid())
                _log(files.name, f"unused for {idle:g} s; stopping")
                _stop_model(model, _STOP_GRACE)
                return 0
            finally:
                unlock(lease_fd)
        finally:
            unlock(start_fd)


def _stop_model(model: subprocess.Popen[bytes], grace: float) -> None:
    if model.stdin is not None and not model.stdin.closed:
        with contextlib.suppress(OSError):
            model.stdin.close()  # the program's signal to stop
    try:
        model.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        model.kill()
        model.wait()


def _answer(message: dict[str, str]) -> None:
    """One line to the starter, if it is still there to read it."""
    try:
        os.write(sys.stdout.fileno(), json.dumps(message).encode() + b"\n")
    except OSError:
        return


def _detach_stdio() -> None:
    """Let go of the starter's pipes: it may end now, and this process lives on."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _log(name: str, message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    line = f"{stamp} fabric shared server {name[:8]} (pid {os.getpid()}): {message}\n"
    try:
        os.write(2, line.encode())
    except OSError:
        return


if __name__ == "__main__":
    raise SystemExit(main())
