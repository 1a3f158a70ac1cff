"""The laboratory every escape probe runs in: its folders, its runner under one backend, and the
host-side views a probe is judged by (file state, processes, canaries).

The lab lives outside /tmp, /run, /var/tmp and /dev/shm: bubblewrap gives commands private
copies of those, so a host folder placed there would simply be invisible inside and a probe
against it would prove nothing. The default is ``~/.cache/fabric-sandbox-lab`` (override with
``FABRIC_SANDBOX_LAB``); every lab is removed afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fabric.application.commands import CommandOutcome
from fabric.config.schema import ResourceLimits, SandboxSettings
from fabric.infrastructure.sandbox import SandboxedCommands, command_runner
from fabric.infrastructure.tools.shell import scrubbed_env

from .host import kill_token, new_token, token_pids, wait_gone

Outcome = Literal["blocked", "escaped", "works", "broken", "not run", "error"]

PRELUDE = """\
import os, sys, time
open(".probe-ran", "w").close()
TOKEN, ARGS = sys.argv[1], sys.argv[2:]

def attempt(label, fn):
    try:
        result = fn()
    except Exception as exc:
        print(label, "->", type(exc).__name__, exc, flush=True)
        return None
    print(label, "-> ok", "" if result is None else result, flush=True)
    return result

def hold():
    open("ready", "w").close()
    for _ in range(600):
        if os.path.exists("go"):
            return
        time.sleep(0.05)
"""
"""Every probe program starts with this: it marks that it ran (so a probe that never started
cannot pass as blocked), takes the token and arguments, and can report attempts (for people
reading the output; verdicts never use it) and hold still while the host looks at it."""


def lab_base() -> Path:
    base = os.environ.get("FABRIC_SANDBOX_LAB")
    return Path(base) if base else Path.home() / ".cache" / "fabric-sandbox-lab"


@contextlib.contextmanager
def lab_folder(prefix: str) -> Iterator[Path]:
    """A new folder in the lab's base, outside /tmp (bubblewrap gives commands a /tmp of their
    own); removed afterwards, and the base with it when nothing else is in it."""
    base = lab_base()
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=base)).resolve()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with contextlib.suppress(OSError):
            base.rmdir()


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    detail: str


@dataclass(frozen=True, slots=True)
class Probe:
    """One attempt (``kind`` escape) or one normal task (``kind`` task) and its judge."""

    name: str
    kind: Literal["escape", "task"]
    what: str
    check: Callable[[Lab], Awaitable[Verdict]]
    unconfined: bool = True
    """Whether the matrix runs it unconfined too (False: it would change the host)."""
    required: bool = True
    """Tasks: whether every confining backend must run it."""


def state(folder: Path) -> dict[str, tuple[Any, ...]]:
    """What the host sees of ``folder`` and everything in it: type, mode, owner, links,
    modification time, extended attributes and (regular files) content."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        try:
            info = path.lstat()
        except OSError:
            continue
        content: bytes | None = None
        if stat.S_ISREG(info.st_mode):
            content = path.read_bytes()
        xattrs: list[str] = []
        with contextlib.suppress(OSError):
            xattrs = sorted(os.listxattr(path, follow_symlinks=False))
        key = str(path.relative_to(folder))
        found[key] = (info.st_mode, info.st_uid, info.st_nlink, info.st_mtime_ns, xattrs, content)
    return found


def changes(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    names = ("mode", "owner", "links", "mtime", "xattrs", "content")
    found = [f"{key} appeared" for key in after.keys() - before.keys()]
    found += [f"{key} vanished" for key in before.keys() - after.keys()]
    for key in before.keys() & after.keys():
        diff = [n for n, a, b in zip(names, before[key], after[key], strict=True) if a != b]
        if diff:
            found.append(f"{key}: {', '.join(diff)} changed")
    return sorted(found)


class Lab:
    """A probe's folders: ``ws`` (the workspace), ``outside`` (a host folder the command can
    see but must not change), ``home`` (a fake home) and the runner for ``backend``."""

    def __init__(self, root: Path, backend: str) -> None:
        self.root, self.backend, self.token = root, backend, new_token()
        self.ws, self.outside, self.home = root / "ws", root / "outside", root / "home"
        for folder in (self.ws, self.outside, self.home):
            folder.mkdir()
        (self.outside / "existing.txt").write_text("original\n")

    def settings(self, **limits: int) -> SandboxSettings:
        return SandboxSettings(
            confinement=self.backend,  # type: ignore[arg-type]
            resources=ResourceLimits(**limits),
        )

    def runner(
        self, protected: Sequence[Path] = (), read_only: Sequence[Path] = (), **limits: int
    ) -> SandboxedCommands:
        return command_runner(self.settings(**limits), self.ws, tuple(protected), tuple(read_only))

    async def run(
        self,
        argv: Sequence[str | Path],
        *,
        timeout: float = 30.0,
        protected: Sequence[Path] = (),
        read_only: Sequence[Path] = (),
        **limits: int,
    ) -> CommandOutcome:
        """Run ``argv`` as the shell tool would: through the runner, scrubbed environment;
        ``read_only``: host code in the workspace (probes_planted.py)."""
        runner = self.runner(protected, read_only, **limits)
        env = scrubbed_env(runner.sandbox)
        return await runner.run([str(a) for a in argv], env=env, timeout=timeout)

    def program(self, code: str) -> str:
        return PRELUDE + textwrap.dedent(code)

    async def python(self, code: str, *args: object, **options: Any) -> CommandOutcome:
        """Run ``code`` (after PRELUDE; see ``source``) with python; ``args`` become
        ``ARGS``."""
        argv = [sys.executable, "-c", self.program(code), self.token, *map(str, args)]
        return await self.run(argv, **options)

    async def held(
        self, code: str, *args: object, look: Callable[[int], list[str]], **options: Any
    ) -> tuple[CommandOutcome, list[str]]:
        """Run ``code``, which calls ``hold()``; while it holds, ``look`` at its process
        (the host pid, found by the token) and return what ``look`` found wrong."""
        task = asyncio.ensure_future(self.python(code, *args, **options))
        found: list[str] = []
        while not task.done() and not (self.ws / "ready").exists():
            await asyncio.sleep(0.02)
        if (self.ws / "ready").exists():
            pids = token_pids(self.token, commands_only=True)
            if not pids:
                found.append("the holding process was not found on the host")
            for pid in pids:
                found += look(pid)
        (self.ws / "go").touch()
        return await task, found

    def ran(self) -> bool:
        return (self.ws / ".probe-ran").exists()

    def loot(self) -> bytes:
        """Every byte the command left in the workspace (where it would carry a secret out)."""
        data = b""
        for path in self.ws.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and not path.is_symlink():
                    data += path.read_bytes()[:1_000_000] + b"\n"
        return data

    def judge(self, out: CommandOutcome, escapes: list[str], note: str = "") -> Verdict:
        """Escaped if the host saw any of ``escapes``; ``note`` says what the host measured."""
        if not self.ran():
            return Verdict("error", f"the probe program never ran: {summary(out)}")
        if escapes:
            return Verdict("escaped", "; ".join([*escapes, note] if note else escapes))
        return Verdict("blocked", f"{note} {summary(out)}" if note else summary(out))

    def leftovers(self, heartbeat: Path) -> list[str]:
        """Processes with the lab's token still running, and a heartbeat still growing."""
        found = []
        left = wait_gone(self.token)
        if left:
            found.append(f"{len(left)} processes outlived the command")
        if heartbeat.exists():
            size = heartbeat.stat().st_size
            time.sleep(0.3)
            if heartbeat.stat().st_size != size:
                found.append("a left-behind process still writes its heartbeat")
        return found

    def cleanup(self) -> None:
        kill_token(self.token)
        unmount_under(self.root)
        shutil.rmtree(self.root, ignore_errors=True)


def source(*parts: str) -> str:
    """Python source from parts, each dedented on its own (so a shared helper and an
    indented triple-quoted block can be joined)."""
    return "\n".join(textwrap.dedent(part) for part in parts)


def summary(out: CommandOutcome, limit: int = 300) -> str:
    how = out.stopped or f"exit {out.exit_code}"
    text = " | ".join(line for line in out.output.splitlines() if line.strip())
    return f"[{how}] {text[:limit]}"


def unmount_under(folder: Path) -> None:
    """Detach host mounts below ``folder`` (a probe that escaped may have made some)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        for line in reversed(lines):
            point = line.split()[4]
            if point.startswith(f"{folder}/"):
                libc.umount2(point.encode(), 2)  # MNT_DETACH


@contextlib.contextmanager
def host_env(**values: str) -> Iterator[None]:
    """Set fabric's own environment for a while (the runner reads HOME, the tool the rest)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


PROBES: list[Probe] = []


def probe(
    name: str, kind: Literal["escape", "task"], what: str, **options: bool
) -> Callable[[Callable[[Lab], Awaitable[Verdict]]], Callable[[Lab], Awaitable[Verdict]]]:
    """Register a probe (in definition order, which is the matrix's row order)."""

    def register(check: Callable[[Lab], Awaitable[Verdict]]) -> Callable[[Lab], Awaitable[Verdict]]:
        PROBES.append(Probe(name, kind, what, check, **options))
        return check

    return register


@dataclass(frozen=True)
class CatLaunch:
    """The launcher's own command line for ``cat`` of some files, with a place hidden, as
    ``SandboxedCommands`` would start it: built first (a probe may change the host between
    building and running it), run afterwards."""

    argv: list[str]
    workspace: Path
    env: dict[str, str]

    def run(self, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv, cwd=self.workspace, env=self.env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip


def cat_launch(
    lab: Path,
    backend: str,
    hidden: Path,
    files: Sequence[Path],
    readable: Sequence[Path] = (),
) -> CatLaunch:
    """``cat files`` under ``backend`` with ``hidden`` hidden, from a new workspace (and temp
    folder) in ``lab``; ``readable``: the folders bubblewrap must bind for it."""
    from fabric.infrastructure.sandbox import backend_for
    from fabric.infrastructure.sandbox.profile import hidden_paths
    from fabric.infrastructure.sandbox.runner import launch_argv

    workspace, temp = lab / "ws", lab / "tmp"
    workspace.mkdir()
    temp.mkdir()
    sandbox = SandboxSettings(confinement=backend)  # type: ignore[arg-type]
    argv = launch_argv(
        backend_for(sandbox),
        sandbox,
        workspace=workspace,
        hidden=hidden_paths([hidden], home=""),
        temp=temp,
        command=[shutil.which("cat") or "/bin/cat", *map(str, files)],
        cgroups=[],
        readable=list(readable),
    )
    return CatLaunch(argv, workspace, {**scrubbed_env(sandbox), "TMPDIR": str(temp)})


GUARD = 180.0
"""Seconds after which a probe that should have returned counts as hung."""


def run_probe(item: Probe, backend: str) -> Verdict:
    """Run one probe in a fresh lab under ``backend`` and clean up after it."""
    base = lab_base()
    base.mkdir(parents=True, exist_ok=True)
    # short: a unix socket's path in the lab must stay under 108 bytes, also in a user's lab
    # inside the lab base (bench/escape_matrix.py --user)
    slug = re.sub(r"[^a-z0-9]+", "-", item.name.lower()).strip("-")[:20]
    lab = Lab(Path(tempfile.mkdtemp(prefix=f"{slug}-", dir=base)).resolve(), backend)
    try:
        return asyncio.run(asyncio.wait_for(item.check(lab), GUARD))
    except TimeoutError:
        return Verdict("error", f"the probe did not return within {GUARD:g}s")
    except Exception as exc:  # a probe that cannot run says why, in the matrix too
        hint = getattr(exc, "hint", None)
        return Verdict("error", f"{type(exc).__name__}: {exc}" + (f" ({hint})" if hint else ""))
    finally:
        lab.cleanup()
        with contextlib.suppress(OSError):
            base.rmdir()  # only when no other lab is left in it
