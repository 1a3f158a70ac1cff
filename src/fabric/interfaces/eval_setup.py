"""The adapters an eval runs on, built from the one composition root's ``Runner``: runs through
``Runner.run``, attempt folders copied fresh and read without following links out, and check
commands confined like the pack's own (no network, the command's program allowed). Runs and
checks alike hide from an attempt what ``apart`` names for its workspace: the rest of the
eval's folder, other attempts' workspaces and runlogs included."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from fabric.application.commands import CommandOutcome
from fabric.application.context import ToolContext
from fabric.application.evals.ports import FileRead, RunOutcome
from fabric.application.job import Control, RunRequest
from fabric.config.eval_suite_loader import skipped_names
from fabric.config.schema import SandboxSettings
from fabric.domain.errors import ConfigError, FabricError, ToolError
from fabric.infrastructure.packs import git_files
from fabric.infrastructure.runlog import new_run_id
from fabric.infrastructure.sandbox import command_runner
from fabric.infrastructure.tools.shell import parse_command, scrubbed_env
from fabric.infrastructure.tools.workspace import Workspace
from fabric.interfaces.compose import Runner

Apart = Callable[[Path], Sequence[Path]]
"""What an attempt working in a folder must not see (``EvalFolder.apart``)."""


def _nothing(folder: Path) -> Sequence[Path]:
    """Nothing besides the runner's protected places (a workspace outside any eval's folder)."""
    return ()


TAIL_BYTES = 1024 * 1024
"""How much of a runlog's end is read to find its run_finished line."""
MAX_READ = 16 * 1024 * 1024
"""The most of a file a file check reads (a workspace file may be huge)."""


def hiding(runner: Runner, places: Sequence[Path]) -> Runner:
    """``runner`` for runs whose tools and commands must not see ``places`` either: a copy that
    shares its loaded packs, model answers, started model servers and secrets (close only the
    original)."""
    return msgspec.structs.replace(runner, protected=(*runner.protected, *places))


class RunnerTasks:
    """The TaskRunner port: attempts run as ``fabric run`` runs, with the eval's backend and
    model, each hiding what ``apart`` names for its workspace."""

    def __init__(
        self,
        runner: Runner,
        *,
        backend: str | None,
        model: str | None,
        apart: Apart = _nothing,
    ) -> None:
        self.runner, self.backend, self.model, self.apart = runner, backend, model, apart

    def new_run_id(self) -> str:
        return new_run_id()

    def runlog_path(self, run_id: str) -> Path:
        return self.runner.runlog_path(run_id)

    async def run(self, request: RunRequest, cancel: asyncio.Event) -> RunOutcome:
        folder = request.workspace or Path.cwd()
        others = await asyncio.to_thread(self.apart, folder)
        asked = msgspec.structs.replace(
            request, workspace=folder, model=self.model, backend=self.backend
        )
        result = await hiding(self.runner, others).run(asked, Control(cancel=cancel))
        path = Path(result.runlog_path) if result.runlog_path else self.runlog_path(result.run_id)
        started, finished = await asyncio.to_thread(_ends_of, path)
        backend = started.get("backend")
        name = backend.get("name") if isinstance(backend, dict) else None
        cost = finished.get("cost")
        if result.cost_usd == 0 and isinstance(cost, dict) and cost.get("unknown_models"):
            result = msgspec.structs.replace(result, cost_usd=None)  # no price known: not free
        model = started.get("model")
        return RunOutcome(result, str(model) if model else None, str(name) if name else None)


def _ends_of(runlog: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A runlog's first line (run_started) and last (run_finished), or {} for either that
    cannot be read."""
    first: Any = {}
    last: Any = {}
    try:
        with runlog.open("rb") as lines:
            first = json.loads(lines.readline())
            size = lines.seek(0, os.SEEK_END)
            lines.seek(max(0, size - TAIL_BYTES))
            tail = lines.read().splitlines()
        last = json.loads(tail[-1]) if tail else {}
    except (OSError, ValueError):
        pass
    return (first if isinstance(first, dict) else {}), (last if isinstance(last, dict) else {})


class AttemptFolders:
    """The Workspaces port: ``prepare`` copies a template fresh (symlinks copied as links, caches
    left out) with the case's memories, ``read`` opens beneath the folder like the file tools
    do."""

    def prepare(self, template: Path | None, folder: Path, memory: Sequence[str] = ()) -> None:
        """Empty ``folder`` and copy ``template`` into it. The folder itself stays: other
        attempts' commands that started before hide it, bubblewrap by a mount on this folder,
        which a new one of the same name would not have. Its memories (ADR 0030) are the
        case's ``memory`` only: what an earlier attempt in the folder kept is forgotten."""
        problem = _emptied(folder)
        if problem:
            raise ConfigError(
                f"cannot clear {folder} for a new attempt: {problem}", hint="remove it by hand"
            )
        _remembered(folder, memory)
        if template is None:
            return
        try:
            ignore = shutil.ignore_patterns(*skipped_names())
            shutil.copytree(template, folder, symlinks=True, ignore=ignore, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:
            raise ConfigError(
                f"cannot copy the workspace {template} to {folder}: {exc}",
                hint="check that the template can be read and --out written",
            ) from exc

    def read(self, folder: Path, path: str) -> FileRead:
        ctx = ToolContext("eval-check", folder, SandboxSettings())
        try:
            with Workspace(ctx) as ws, ws.open(path) as opened:
                if not stat.S_ISREG(opened.info.st_mode):
                    return FileRead(None, f"{path} is not a regular file")
                return FileRead(_read_all(opened.fd))
        except FileNotFoundError:
            return FileRead(None)
        except NotADirectoryError:
            return FileRead(None)
        except FabricError as exc:
            return FileRead(None, exc.message)
        except OSError as exc:
            return FileRead(None, f"cannot read {path}: {exc.strerror or exc}")


SEEDED = "eval-seed"
"""The run id a case's own memories are kept under (``fabric memory list`` shows it)."""


def _remembered(folder: Path, memory: Sequence[str]) -> None:
    """``folder``'s memories made the facts ``memory``, cleaned as a run's are (a store that
    does not exist is made only for facts to keep)."""
    from fabric.application.memory import kept_text, workspace_key
    from fabric.config.data import memory_path
    from fabric.domain.secrets import Secrets
    from fabric.infrastructure.additions.memory_store import MemoryStore

    store = MemoryStore(memory_path())
    key = workspace_key(folder)
    try:
        store.forget(key)
        for fact in memory:
            text, _ = kept_text(fact, secrets=Secrets(), most=len(fact))
            store.add(key, text, SEEDED, "eval", most=len(memory))
    except FabricError as exc:
        raise ConfigError(
            f"cannot set the memories of {folder} for a new attempt: {exc.message}",
            hint=exc.hint,
        ) from exc


def _emptied(folder: Path) -> str | None:
    """Make ``folder`` an empty folder, keeping it if it is one; None, or why it cannot be."""
    try:
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            folder.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(stat.S_IMODE(folder.stat().st_mode) | stat.S_IRWXU)  # a command may lock it
        children = list(folder.iterdir())
    except OSError as exc:
        return exc.strerror or str(exc)
    for child in children:
        problem = git_files.remove(child)
        if problem:
            return f"{child}: {problem}"
    return None


def _read_all(fd: int) -> bytes:
    chunks, size = [], 0
    while size < MAX_READ and (chunk := os.read(fd, min(1 << 20, MAX_READ - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


class ConfinedChecks:
    """The CheckCommands port: the pack's sandbox settings with only the check's program
    allowed and the network off, run by the project's confined command runner in the finished
    workspace (its host code read-only; the runs folder, protected places and what ``apart``
    names for the workspace hidden)."""

    def __init__(self, runner: Runner, *, apart: Apart = _nothing) -> None:
        self.runner, self.apart = runner, apart

    async def run(self, folder: Path, pack: str, command: str, timeout: float) -> CommandOutcome:
        try:
            program = shlex.split(command)[0] if command.strip() else ""
        except ValueError as exc:
            raise ToolError(f"cannot parse the command: {exc}", hint="check the quoting") from None
        settings = self.runner.pack(pack).settings.sandbox
        sandbox = settings.model_copy(
            update={"allowed_commands": [program], "network": False, "command_timeout": timeout}
        )
        argv = parse_command(command, sandbox)
        env = scrubbed_env(sandbox)
        executable = shutil.which(argv[0], path=env["PATH"])
        if executable is None:
            raise ToolError(f"program {argv[0]!r} is not installed on this machine")
        protected = (*self.runner.protected_paths, *self.apart(folder))
        commands = await asyncio.to_thread(
            lambda: command_runner(sandbox, folder, protected, self.runner.read_only_in(folder))
        )
        return await commands.run([executable, *argv[1:]], env=env, timeout=timeout)
