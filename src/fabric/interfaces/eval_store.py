"""An eval's output folder: ``eval.json`` (the manifest), ``attempts.jsonl`` (one line per
finished attempt, flushed as it ends), ``runs/`` (the runlogs), ``work/<case>/<n>/`` (the
workspaces as the attempts left them), ``results.json`` and ``summary.md``.

Opening a folder that holds an eval continues it, if it ran the same suite content with the
same pack, backend and model; otherwise it is refused, unless ``restart`` empties it first.

An attempt sees none of it but its own workspace (``apart``): its runs and checks are told to
hide everything else in the folder. Every place to hide exists before the first attempt starts
(``reserve``) and is never replaced while attempts run: bubblewrap covers what exists when a
command starts, and Landlock grants reading what exists then (ADR 0015).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fabric.application.evals.records import AttemptRecord
from fabric.domain.errors import ConfigError
from fabric.infrastructure.packs import git_files

MANIFEST = "eval.json"
ATTEMPTS = "attempts.jsonl"
RESULTS = "results.json"
SUMMARY = "summary.md"
MATCHED = ("suite_hash", "pack", "backend", "model")
"""What must be the same for a rerun to continue a folder's eval."""
_OURS = (MANIFEST, ATTEMPTS, RESULTS, SUMMARY, "runs", "work")


class EvalFolder:
    """The output folder of one eval, opened (see the module's docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        """Lines of attempts.jsonl that could not be read (skipped; those attempts rerun)."""

    @classmethod
    def open(cls, path: Path, manifest: Mapping[str, Any], *, restart: bool) -> EvalFolder:
        """Open ``path`` for the eval ``manifest`` describes: new, continued or restarted."""
        folder = cls(path)
        old = folder._manifest()
        if old is None and path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise ConfigError(
                f"{path} exists and is not an eval output folder (it has no {MANIFEST})",
                hint="give --out a new or empty folder",
            )
        changed = [k for k in MATCHED if old.get(k) != manifest.get(k)] if old else []
        if old is not None and (restart or (changed and not folder._finished_any())):
            folder._empty()  # asked to, or no attempt finished: nothing to continue
            old = None
        if old is not None and changed:
            said = "; ".join(f"{k}: {old.get(k)!r} then, {manifest.get(k)!r} now" for k in changed)
            raise ConfigError(
                f"{path} holds an eval that cannot be continued with these settings ({said})",
                hint="rerun with the settings it was made with, add --restart to start that "
                "folder over, or give another --out",
            )
        if old is not None:
            manifest = {**old, **manifest, "started": old.get("started")}
        try:
            (path / "runs").mkdir(parents=True, exist_ok=True)
            (path / "work").mkdir(exist_ok=True)
            _write(path / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        except OSError as exc:
            raise ConfigError(
                f"cannot write the eval's output folder {path}: {exc.strerror or exc}",
                hint="give --out a folder you can write to",
            ) from exc
        return folder

    @property
    def runs(self) -> Path:
        return self.path / "runs"

    def workspace(self, case: str, attempt: int) -> Path:
        """Where attempt ``attempt`` of ``case`` works, and its workspace is kept."""
        return self.path / "work" / case / str(attempt)

    def reserve(self, attempts: Iterable[tuple[str, int]]) -> None:
        """Make the workspaces of the ``attempts`` (case, number) about to run, and the
        attempts log, before any of them starts: so each is hidden from the others' commands
        from the first on (``apart``)."""
        try:
            for case, attempt in attempts:
                self.workspace(case, attempt).mkdir(parents=True, exist_ok=True)
            (self.path / ATTEMPTS).touch()
        except OSError as exc:
            raise ConfigError(
                f"cannot make the attempts' folders in {self.path}: {exc.strerror or exc}",
                hint="give --out a folder you can write to",
            ) from exc

    def apart(self, workspace: Path) -> tuple[Path, ...]:
        """Everything in the folder but the way down to ``workspace`` (an attempt's): the
        eval's files, the runlogs and every other attempt's workspace, finished or running."""
        hidden: list[Path] = []
        folder, own = self.path.resolve(), workspace.resolve()
        while folder != own and own.is_relative_to(folder):
            step = folder / own.relative_to(folder).parts[0]
            try:
                hidden += [p for p in folder.iterdir() if p != step]
            except OSError:
                break
            folder = step
        return tuple(hidden)

    def manifest(self) -> dict[str, Any]:
        return self._manifest() or {}

    def records(self) -> list[AttemptRecord]:
        """The finished attempts, the last one of each (case, attempt) if given twice."""
        found: dict[tuple[str, int], AttemptRecord] = {}
        self.problems = []
        try:
            lines = (self.path / ATTEMPTS).read_text("utf-8").splitlines()
        except FileNotFoundError:
            return []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = AttemptRecord.from_json(json.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                self.problems.append(f"{self.path / ATTEMPTS}:{number}: skipped ({exc})")
                continue
            found[(record.case, record.attempt)] = record
        return list(found.values())

    def append(self, record: AttemptRecord) -> None:
        """Keep a finished attempt: one line, flushed to disk before the next starts."""
        with (self.path / ATTEMPTS).open("a", encoding="utf-8") as out:
            out.write(json.dumps(record.as_json(), ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def write_results(self, results: Mapping[str, Any], summary: str) -> None:
        _write(self.path / RESULTS, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
        _write(self.path / SUMMARY, summary)

    def _finished_any(self) -> bool:
        try:
            return (self.path / ATTEMPTS).stat().st_size > 0
        except OSError:
            return False

    def _manifest(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / MANIFEST).read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read {self.path / MANIFEST}: {exc}",
                hint="add --restart to start that folder over, or give another --out",
            ) from exc
        return data if isinstance(data, dict) else {}

    def _empty(self) -> None:
        """Remove what an earlier eval left (only fabric's own files and folders)."""
        for name in _OURS:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                problem = git_files.remove(target)
                if problem:
                    raise ConfigError(f"cannot empty {target}: {problem}", hint="remove it by hand")
            elif target.exists() or target.is_symlink():
                target.unlink()


def _write(path: Path, text: str) -> None:
    """Write a file whole: a reader sees the old content or the new, never half."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text, "utf-8")
    temp.replace(path)


def load_results(path: Path) -> dict[str, Any]:
    """A results.json, or the one in an eval's output folder."""
    file = path / RESULTS if path.is_dir() else path
    try:
        data = json.loads(file.read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{file} does not exist",
            hint="give an eval output folder (with results.json) or a results.json file",
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {file}: {exc}", hint="give a results.json") from exc
    if not isinstance(data, dict) or "cases" not in data:
        raise ConfigError(f"{file} is not an eval's results.json", hint="give a results.json")
    return data
