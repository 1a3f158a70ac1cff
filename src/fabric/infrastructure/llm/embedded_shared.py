"""Attaching to this user's shared embedded model server, starting one when none answers.

The steps (ADR 0008; the files are described in ``embedded_state``):

1. take the server's start lock (waiting while another fabric process starts it);
2. read its state file; a server that is running and answers ``GET /v1/models`` with its key
   is reused. A stale record (the server was killed, or it no longer answers) is cleared, and
   a server that is still there but does not answer is stopped;
3. otherwise start the supervisor (``embedded_supervisor``) in a session of its own and wait
   for it to answer; it writes the state file;
4. take a shared lease on the server, then let go of the start lock.

The lease is what keeps the server from stopping; the caller holds it while it uses the
server and closes it after. The API key is read from the state file, never printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

import httpx
from msgspec import Struct

from fabric.domain.errors import ModelConnectionError
from fabric.domain.secrets import looks_secret

from .embedded_state import (
    ServerFiles,
    ServerState,
    bound_log,
    is_server,
    open_lock,
    read_state,
    remove_state,
    try_lock,
)

_HAS_PROC = Path("/proc/self/cmdline").exists()
_HEALTH_TIMEOUT = 15.0
_STOP_WAIT = 15.0
_BUSY_WAIT = 120.0
"""How long a server that other runs hold is given to answer before a newcomer gives up (a
busy two-core machine can be slow to answer; it is never stopped while in use)."""


class Launch(Struct, frozen=True):
    """How to find or start one shared server."""

    files: ServerFiles
    model: Path
    argv: Sequence[str]
    """The supervisor's command line (no secret in it)."""
    startup_timeout: float
    log_path: Path


class Attached(Struct, frozen=True):
    state: ServerState
    lease: int
    """The descriptor holding this process's shared lease: close it to let go."""
    started: bool
    """Whether this process started the server (else it was running already)."""


def running(state: ServerState) -> bool:
    """Whether the server ``state`` describes is still there (its supervisor's process)."""
    if _HAS_PROC:
        return is_server(state.pid, state.name)
    try:
        os.kill(state.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process took the pid over
    return True


async def attach(launch: Launch, on_status: Callable[[str], None] | None = None) -> Attached:
    """Reuse the running server or start one; return it with a lease held."""
    lock = open_lock(launch.files.lock)
    try:
        await _wait_for_start_lock(lock, launch, on_status)
        state = read_state(launch.files.state)
        started = False
        if state is not None and running(state) and in_use(launch.files.lease):
            # others are using it: slow to answer means busy, not broken; never stop it here
            if not await answers(state, patience=_BUSY_WAIT):
                raise ModelConnectionError(
                    f"the embedded model server (pid {state.pid}) is in use by other runs "
                    f"and did not answer within {_BUSY_WAIT:g} s",
                    hint=f"run the task again when the machine is less busy; see {launch.log_path}",
                )
        elif state is None or not (running(state) and await answers(state)):
            if state is not None:
                await _retire(state, launch.files, on_status)
            state = await _start(launch)
            started = True
            if not await answers(state):
                await _end(state)
                raise ModelConnectionError(
                    "the embedded model server started but does not answer",
                    hint=f"see its log, {launch.log_path}",
                )
        lease = open_lock(launch.files.lease)
        if not try_lock(lease, exclusive=False):  # only a stopping server holds it, and
            os.close(lease)  # a stopping server holds the start lock too: not reachable
            raise ModelConnectionError(
                "the embedded model server is stopping", hint="run the task again"
            )
        return Attached(state, lease, started)
    finally:
        os.close(lock)


async def answers(state: ServerState, patience: float = 0.0) -> bool:
    """Whether the server answers its model list, with its key (asking again for up to
    ``patience`` seconds)."""
    headers = {"Authorization": f"Bearer {state.api_key}"}
    deadline = time.monotonic() + patience
    while True:
        try:
            async with httpx.AsyncClient(timeout=_HEALTH_TIMEOUT, trust_env=False) as client:
                response = await client.get(state.url + "/models", headers=headers)
            if response.status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(1.0)


def in_use(lease_path: Path) -> bool:
    """Whether another process holds a lease on the server (a run is using it)."""
    fd = open_lock(lease_path)
    try:
        return not try_lock(fd, exclusive=True)
    finally:
        os.close(fd)  # closing drops the lock, if it was taken


async def _wait_for_start_lock(
    lock: int, launch: Launch, on_status: Callable[[str], None] | None
) -> None:
    """Take the start lock. A running server holds it for a moment every few seconds (its
    idle check); a fabric process starting the server holds it while the model loads."""
    began = time.monotonic()
    told = False
    while not try_lock(lock, exclusive=True):
        waited = time.monotonic() - began
        if not told and waited > 1.0 and on_status is not None:
            on_status("waiting for another fabric process that is starting the embedded model")
            told = True
        if waited > launch.startup_timeout + _STOP_WAIT * 2:
            raise ModelConnectionError(
                "another fabric process has been starting the embedded model for "
                f"{launch.startup_timeout:g} s and more",
                hint="raise backends.embedded.startup_timeout, or see the server log, "
                f"{launch.log_path}",
            )
        await asyncio.sleep(0.05)


async def _retire(
    state: ServerState, files: ServerFiles, on_status: Callable[[str], None] | None
) -> None:
    """Clear a stale record; stop its server if it is still there but does not answer."""
    if running(state):
        if on_status is not None:
            on_status(f"the embedded model server (pid {state.pid}) does not answer; replacing it")
        await _end(state)
    remove_state(files.state, state.pid)


async def _end(state: ServerState) -> None:
    """SIGTERM (the server then stops its model); SIGKILL if it is still there later (its
    model goes with it, by its parent-death signal)."""
    for number in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(state.pid, number)
        except (ProcessLookupError, PermissionError):  # gone, or the pid is another's now
            return
        deadline = time.monotonic() + _STOP_WAIT
        while running(state) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if not running(state):
            return


async def _start(launch: Launch) -> ServerState:
    """Start the supervisor and wait for its answer (it writes the state file)."""
    bound_log(launch.log_path)
    log = os.open(launch.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        proc = subprocess.Popen(
            list(launch.argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=launch.files.folder,
            env={k: v for k, v in os.environ.items() if not looks_secret(k)},
            start_new_session=True,  # Ctrl-C in this terminal does not reach it
        )
    finally:
        os.close(log)
    # The supervisor outlives this process, or ends before it (idle); reap it then.
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()
    assert proc.stdin is not None and proc.stdout is not None
    try:
        line = await _first_line(proc.stdout, launch)
    except BaseException:
        proc.terminate()  # it kills the loading model and ends
        raise
    finally:
        proc.stdin.close()  # after an answer, unused; before one: "the starter gave up"
    try:
        answer = json.loads(line or b"{}")
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        answer = {}
    state = read_state(launch.files.state) if "url" in answer else None
    if state is None or state.pid != proc.pid:
        problem = answer.get("error") or "it exited before answering"
        raise ModelConnectionError(
            f"the embedded model server did not start: {problem}",
            hint=f"see its log, {launch.log_path}; check free memory and the model file",
        )
    return state


async def _first_line(pipe: IO[bytes], launch: Launch) -> bytes:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        async with asyncio.timeout(launch.startup_timeout):
            return await reader.readline()
    except TimeoutError:
        raise ModelConnectionError(
            f"the embedded model did not load within {launch.startup_timeout:g} s",
            hint=f"raise backends.embedded.startup_timeout; its log is {launch.log_path}",
        ) from None
    finally:
        transport.close()
