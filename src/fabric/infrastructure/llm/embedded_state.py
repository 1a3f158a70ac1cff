"""What fabric processes and the shared embedded model servers of one user agree on (ADR 0008).

Everything lives in one folder per user, mode 0700: ``$XDG_RUNTIME_DIR/fabric/embedded``
when that variable is set, else ``~/.cache/fabric/embedded``. A server is known by its *name*,
a digest of what it serves: the model file's identity (path, device, inode, size, mtime), the
context size, the threads and the program that loads the model; a replaced model file or a
changed setting therefore gets a server of its own. Per name:

- ``<name>.json``, mode 0600: the server's url, its pid (the supervisor's) and its API key.
  The server writes it once it answers and removes it when it stops.
- ``<name>.lock``: an exclusive flock held by a fabric process while it starts a server or
  attaches to one, and by the server while it decides to stop; so a server never stops
  between a client's health check and that client's lease.
- ``<name>.lease``: each process using the server holds a shared flock on it. The kernel drops
  the lock of a process that dies, however it dies.

Only the standard library: the supervisor imports this and stays small.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from msgspec import Struct
from msgspec.structs import asdict

LOG_LIMIT = 4 << 20
"""Bytes the server log may reach before it is moved to ``.1`` and started afresh."""


def state_dir() -> Path:
    """The folder of this user's shared servers (not created here)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "fabric" / "embedded"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "fabric" / "embedded"


def ensure_private_dir(folder: Path) -> Path:
    """Create ``folder`` (mode 0700) or check an existing one: a real folder of this user,
    which is made private again if its mode was loosened. Raises PermissionError when the
    folder is not one fabric may trust."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{folder} is not a folder of this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        folder.chmod(0o700)
    return folder


def server_name(model: Path, context_size: int, threads: int, program: Sequence[str]) -> str:
    """The name of the server for this model file, these settings and this loader. The
    loader's program is named by its real path: ``.venv/bin/python`` and ``.venv/bin/python3``
    are one interpreter, and must find one server, not start a second copy of the model."""
    info = model.stat()
    if program:
        program = [os.path.realpath(program[0]), *program[1:]]
    identity = [
        str(model.resolve()),
        info.st_dev,
        info.st_ino,
        info.st_size,
        info.st_mtime_ns,
        context_size,
        threads,
        list(program),
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:20]


class ServerFiles(Struct, frozen=True):
    """The three files of one server name."""

    folder: Path
    name: str

    @property
    def state(self) -> Path:
        return self.folder / f"{self.name}.json"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.name}.lock"

    @property
    def lease(self) -> Path:
        return self.folder / f"{self.name}.lease"


class ServerState(Struct, frozen=True):
    """What a running server records about itself. ``api_key`` is a secret: never log it."""

    pid: int
    url: str
    """Where llama.cpp's OpenAI-compatible API answers, ending in /v1."""
    api_key: str
    model: str
    name: str

    def __repr__(self) -> str:  # never the key
        return f"ServerState(pid={self.pid}, url={self.url!r}, model={self.model!r})"


def write_state(path: Path, state: ServerState) -> None:
    """Replace the state file at once (readers never see half of it); mode 0600."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(asdict(state), out)
    partial.replace(path)


def read_state(path: Path) -> ServerState | None:
    """The recorded state, or None: no file, a damaged one, or one this user did not write
    privately (then it is not trusted)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(source.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        try:
            data = json.loads(source.read(65536))
            return ServerState(
                pid=int(data["pid"]),
                url=str(data["url"]),
                api_key=str(data["api_key"]),
                model=str(data["model"]),
                name=str(data["name"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


def remove_state(path: Path, pid: int) -> None:
    """Remove the state file if it still describes the server with ``pid``."""
    state = read_state(path)
    if state is not None and state.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def open_lock(path: Path) -> int:
    """A descriptor to flock ``path`` with (created 0600; not inherited by children)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def try_lock(fd: int, *, exclusive: bool) -> bool:
    """Take the lock without waiting; False when another process holds it against us."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)


def is_server(pid: int, name: str) -> bool:
    """Whether ``pid`` is, as far as /proc tells, the live supervisor of server ``name`` (a
    zombie or another program that took the pid over is not)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"embedded_supervisor" in part for part in command) and name.encode() in command


def bound_log(path: Path, limit: int = LOG_LIMIT) -> None:
    """Keep the server log under ``limit`` bytes: past it, its content moves to ``<log>.1``
    (replacing the older one) and the log starts empty. Every writer appends (O_APPEND), so
    servers still writing to it carry on at its new end."""
    try:
        if path.stat().st_size <= limit:
            return
        older = path.with_name(path.name + ".1")
        copy = older.with_name(f".{older.name}.{os.getpid()}")
        with path.open("rb") as source, copy.open("wb") as target:
            while chunk := source.read(1 << 20):
                target.write(chunk)
        copy.replace(older)
        os.truncate(path, 0)
    except OSError:
        return  # a log that cannot be trimmed must not stop the model
