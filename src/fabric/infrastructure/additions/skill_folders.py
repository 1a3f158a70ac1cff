"""Finding skills (ADR 0027): the configured skill folders, then the workspace's, each holding
``<skill>/SKILL.md``; the front matter read with PyYAML's safe loader.

Every SKILL.md is opened beneath its skill folder in one step (``beneath.open_beneath``): a
symlink that leads out of the folder is refused by the call that opens, and a workspace folder
is itself opened beneath the workspace. What is read is capped (``skills.max_bytes``), and so
is how many folders are looked at. A folder that looks like a skill but is not one is recorded
as skipped, with the reason ``fabric skills`` shows."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from msgspec import Struct

from fabric.application.skills import Found, Skill, Skipped, Source, front_matter_problem, offered
from fabric.config.data import memory_path
from fabric.config.loader import settings_folders
from fabric.config.schema import SkillSettings
from fabric.infrastructure.packs.git_repos import inside
from fabric.infrastructure.sandbox.profile import hidden_paths
from fabric.infrastructure.tools.beneath import LeadsOutside, open_beneath, real_path

FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO opens at once, then is refused
ENTRIES = 4096
"""Entries of one folder listed at most (a skills folder, or a folder of a skill's files)."""
SKILL_FILE = "SKILL.md"


class Place(Struct, frozen=True):
    """One skill folder, open."""

    fd: int
    shown: str
    """As the run's tools reach it: relative to the workspace, or absolute."""
    source: Source


def find_skills(settings: SkillSettings, workspace: Path, base_dir: Path, runs_dir: Path) -> Found:
    """The skills a run in ``workspace`` is offered, and what was skipped: the configured
    folders (relative to ``base_dir``, the config file's folder) first, then the workspace's."""
    guard = _Guard(runs_dir, workspace)
    candidates: list[Skill | Skipped] = []
    for place in _places(settings, workspace, base_dir, guard):
        if isinstance(place, Skipped):
            candidates.append(place)
            continue
        try:
            candidates += _skills_in(place, settings)
        finally:
            os.close(place.fd)
    return offered(candidates, settings.max_skills)


def readable_folders(
    settings: SkillSettings, base_dir: Path, runs_dir: Path, workspace: Path
) -> tuple[Path, ...]:
    """The configured skill folders a run in ``workspace`` is offered skills from (they
    exist, and ``find_skills`` does not refuse them): what its commands may read, to run a
    skill's scripts (the sandbox binds them read-only)."""
    guard = _Guard(runs_dir, Path(os.path.realpath(workspace)))
    return tuple(
        p for p in settings.configured(base_dir) if p.is_dir() and guard.problem(p) is None
    )


class _Guard:
    """What may not be a skill folder: fabric's own folders (runs, settings, memory), the
    credential stores commands never see, and, for a configured folder, the workspace or a
    folder that holds it (whose files a run may change). Looked up on first use only: a run
    without skill folders spends nothing on it."""

    def __init__(self, runs_dir: Path, workspace: Path | None) -> None:
        self.runs_dir, self.workspace = runs_dir, workspace
        self._places: list[Path] | None = None

    def problem(self, real: Path, *, configured: bool = True) -> str | None:
        if self._places is None:
            fabric = [self.runs_dir, *settings_folders(), memory_path().parent]
            self._places = hidden_paths(fabric)
        for place in self._places:
            if inside(real, place) or inside(place, real):
                return f"it is or holds {place}, a folder of fabric's own or of credentials"
        if configured and self.workspace is not None and inside(self.workspace, real):
            return "it is or holds the run's workspace, whose files a run may change"
        return None


def _places(
    settings: SkillSettings, workspace: Path, base_dir: Path, guard: _Guard
) -> Iterator[Place | Skipped]:
    """Each skill folder that exists, open, in the order its skills are taken; or why not."""
    for folder in settings.configured(base_dir):
        problem = guard.problem(folder)
        if problem is not None:
            yield Skipped(str(folder), f"not a skill folder: {problem}")
            continue
        try:
            fd = os.open(folder, FOLDER)
        except (FileNotFoundError, NotADirectoryError):
            continue  # nothing configured there (yet)
        except OSError as exc:
            yield Skipped(str(folder), f"cannot be read: {exc.strerror or exc}")
            continue
        yield Place(fd, str(folder), "configured")
    with _opened(workspace) as root:
        for rel in dict.fromkeys(PurePosixPath(f).as_posix() for f in settings.workspace_folders):
            try:
                fd = open_beneath(root, rel, FOLDER)
            except LeadsOutside:
                yield Skipped(rel, "a symlink on the way leads out of the workspace")
                continue
            except (FileNotFoundError, NotADirectoryError):
                continue  # the usual case: this workspace has no skills
            except OSError as exc:
                yield Skipped(rel, f"cannot be read: {exc.strerror or exc}")
                continue
            problem = guard.problem(Path(real_path(fd)), configured=False)
            if problem is not None:
                os.close(fd)
                yield Skipped(rel, f"not a skill folder: {problem}")
                continue
            yield Place(fd, rel, "workspace")


@contextlib.contextmanager
def _opened(folder: Path) -> Iterator[int]:
    fd = os.open(folder, FOLDER)
    try:
        yield fd
    finally:
        os.close(fd)


def _skills_in(place: Place, settings: SkillSettings) -> list[Skill | Skipped]:
    """The skills of one open folder, by name, or why each folder in it is none. Files and
    hidden entries beside the skill folders are left alone."""
    try:
        with os.scandir(place.fd) as listing:
            entries = [
                e.name
                for e in itertools.islice(listing, ENTRIES)
                if not e.name.startswith(".") and _folder_or_link(e)
            ]
    except OSError as exc:
        return [Skipped(place.shown, f"cannot be listed: {exc.strerror or exc}")]
    entries.sort()
    most = 2 * settings.max_skills  # duplicates aside, more are never offered
    found = [_skill(place, name, settings.max_bytes) for name in entries[:most]]
    if len(entries) > most:
        more = f"{len(entries) - most} more folders not looked at"
        found.append(Skipped(place.shown, f"{more} (max_skills is {settings.max_skills})"))
    return found


def _folder_or_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() or entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _skill(place: Place, name: str, max_bytes: int) -> Skill | Skipped:
    """The skill in ``place``'s folder ``name``, or why it is none."""
    shown = name if place.shown == "." else f"{place.shown.rstrip('/')}/{name}"
    try:
        fd = open_beneath(place.fd, f"{name}/{SKILL_FILE}", FILE)
    except LeadsOutside:
        return Skipped(shown, f"a symlink leads out of {place.shown}")
    except FileNotFoundError:
        return Skipped(shown, f"it has no {SKILL_FILE}")
    except NotADirectoryError:
        return Skipped(shown, "it is not a folder")
    except OSError as exc:
        return Skipped(shown, f"its {SKILL_FILE} cannot be read: {exc.strerror or exc}")
    try:
        data = _read(fd, max_bytes)
    except OSError as exc:
        return Skipped(shown, f"its {SKILL_FILE} cannot be read: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if isinstance(data, str):
        return Skipped(shown, data)
    return _parsed(data, name, shown, place.source)


def _read(fd: int, max_bytes: int) -> bytes | str:
    """The file's bytes, or why they are not read (not a regular file, too large)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return f"its {SKILL_FILE} is not a regular file"
    if info.st_size > max_bytes:
        return f"its {SKILL_FILE} is too large ({info.st_size} bytes; max_bytes is {max_bytes})"
    data = os.read(fd, max_bytes + 1)
    if len(data) > max_bytes:  # it grew meanwhile
        return f"its {SKILL_FILE} is too large (over {max_bytes} bytes, max_bytes)"
    return data


def _parsed(data: bytes, name: str, shown: str, source: Source) -> Skill | Skipped:
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        return Skipped(shown, f"its {SKILL_FILE} is not UTF-8 text")
    split = split_front_matter(text)
    if split is None:
        return Skipped(
            shown,
            f"its {SKILL_FILE} has no front matter: a block between '---' lines at the top, "
            "with name and description",
        )
    head, body = split
    meta = _yaml(head)
    if isinstance(meta, str):
        return Skipped(shown, meta)
    problem = front_matter_problem(meta, name)
    if problem is not None:
        return Skipped(shown, problem)
    digest = hashlib.sha256(data).hexdigest()
    return Skill(name, str(meta["description"]).strip(), source, shown, digest, body)


def split_front_matter(text: str) -> tuple[str, str] | None:
    """The front matter (between a first line ``---`` and the next ``---`` or ``...``) and
    the text below it; None when the text does not start with one."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        return None
    for index, line in enumerate(lines[1:], start=1):
        if line.rstrip() in ("---", "..."):
            return "".join(lines[1:index]), "".join(lines[index + 1 :])
    return None


def _yaml(text: str) -> dict[str, Any] | str:
    """The front matter's keys, or why it cannot be read (YAML's own words, with the line)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2} of {SKILL_FILE})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "cannot be parsed"
        return f"its front matter is not valid YAML: {problem}{where}"
    except RecursionError:
        return "its front matter is not valid YAML: nested too deeply"
    except (ValueError, TypeError, OverflowError) as exc:  # a tag or date that cannot be made
        return f"its front matter is not valid YAML: {exc}"
    if not isinstance(data, dict):
        return "its front matter is not a mapping of keys (name: ..., description: ...)"
    return data
