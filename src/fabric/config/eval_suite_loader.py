"""Reading and checking an eval suite: ``load_suite(path)``.

Every mistake becomes one ``ConfigError`` naming the file, the key path and the line, with the
same machinery as ``fabric.yaml`` (``loader.validation_error``). Each check is validated with
the model of its kind first, so an unknown key lists the keys that kind accepts.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from fabric.domain.errors import ConfigError

from .eval_suite import (
    CHECK_KINDS,
    Case,
    CheckSpec,
    EvalCase,
    FileCheck,
    LoadedSuite,
    PayloadCheck,
    RunCheck,
    Suite,
    check_kind,
)
from .layers import UniqueKeyLoader
from .loader import _line_of, validation_error
from .schema import McpServerSettings
from .schema.mcp import check_server_name

SUITE_FILE = "suite.yaml"
CASES_FOLDER = "cases"
DEFAULT_TIMEOUT_S = 900.0
WEB_URL = "${web_url}"
_CHECK_MODELS: dict[str, type[BaseModel]] = {
    "run": RunCheck,
    "file": FileCheck,
    "payload": PayloadCheck,
}
_SKIPPED = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
"""Caches a template may have picked up: neither hashed nor copied into attempts."""
_FIX = "fix the suite and run again"


class _Source:
    """One YAML file of the suite: its path, text and parsed data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = str(path)
        try:
            self.text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}", hint=_FIX) from exc
        try:
            self.data: Any = yaml.load(self.text, Loader=UniqueKeyLoader)  # noqa: S506 (safe)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(
                f"{where}: not valid YAML: {problem}",
                hint="check indentation and quoting around that line",
            ) from None

    def where(self, *loc: str | int) -> str:
        line = _line_of(self.text, loc)
        return f"{self.name}:{line}" if line else self.name

    def mapping(self, what: str) -> dict[str, Any]:
        if not isinstance(self.data, dict):
            raise ConfigError(
                f"{self.name}: the top level must be a mapping ({what}), "
                f"not {type(self.data).__name__}",
                hint=_FIX,
            )
        return self.data


def load_suite(path: str | os.PathLike[str]) -> LoadedSuite:
    """Find, parse and check the suite at ``path`` (a folder with suite.yaml, or a file)."""
    given = Path(path)
    if given.is_dir():
        suite_file = given / SUITE_FILE
        if not suite_file.is_file():
            raise ConfigError(
                f"{given} holds no {SUITE_FILE}",
                hint="give a suite folder (with suite.yaml) or a suite YAML file",
            )
    elif given.is_file():
        suite_file = given
    else:
        raise ConfigError(
            f"suite {given} does not exist",
            hint="give a suite folder (with suite.yaml) or a suite YAML file, "
            "e.g. fabric eval evals/engineering",
        )
    source = _Source(suite_file)
    data = dict(source.mapping("version, name, defaults, cases, ..."))
    raw_cases = data.pop("cases", None)
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source.name, source.text, Suite, ()) from None
    cases: list[tuple[Case, _Source, tuple[str | int, ...]]] = []
    if raw_cases is not None:
        if not isinstance(raw_cases, list):
            raise ConfigError(f"{source.where('cases')}: cases: must be a list", hint=_FIX)
        for index, raw in enumerate(raw_cases):
            prefix = ("cases", index)
            cases.append((_case(raw, source, prefix), source, prefix))
    if given.is_dir() and (given / CASES_FOLDER).is_dir():
        for case_file in sorted((given / CASES_FOLDER).glob("*.y*ml")):
            case_source = _Source(case_file)
            cases.append((_case(case_source.data, case_source, ()), case_source, ()))
    if not cases:
        raise ConfigError(
            f"{source.name}: the suite has no cases",
            hint=f"list them under 'cases:' or put one per file in {CASES_FOLDER}/",
        )
    resolved = [_resolve(suite, case, src, prefix) for case, src, prefix in cases]
    _check_unique(resolved)
    pages = None
    if suite.services.web is not None:
        pages = _folder(suite_file.parent, suite.services.web.pages, source, "services", "web")
    _check_web_url(suite, resolved, source)
    root = suite_file.parent.resolve()
    for case in resolved:
        if case.workspace is not None:
            _check_within(root, case.workspace, f"{case.where}: case {case.id!r}: workspace")
    if pages is not None:
        _check_within(root, pages, f"{source.where('services', 'web')}: services.web.pages")
    servers = _servers(suite, suite_file.parent, source)
    for name, settings in suite.pack_settings.items():
        if "builder" in settings:
            raise ConfigError(
                f"{source.where('pack_settings', name)}: pack_settings.{name}.builder: a suite "
                "may not change the code that builds a pack (it would run in fabric's own "
                "process)",
                hint="declare the pack in fabric.yaml and pass --config",
            )
    files = [src.path for _, src, _ in cases]
    folders = [c.workspace for c in resolved if c.workspace] + ([pages] if pages else [])
    folders += [Path(str(s.cwd)) for s in servers.values() if s.cwd]  # what they answer from
    return LoadedSuite(
        name=suite.name or (given.name if given.is_dir() else given.stem),
        description=suite.description,
        path=given,
        source=source.name,
        text=source.text,
        content_hash=_content_hash([suite_file, *files], folders),
        cases=tuple(resolved),
        pages=pages,
        pack_settings=suite.pack_settings,
        mcp_servers=servers,
    )


def _servers(suite: Suite, base: Path, source: _Source) -> dict[str, McpServerSettings]:
    """The suite's MCP servers as ``mcp_servers`` of fabric.yaml: confined, no network, no
    variables passed on, ``cwd`` absolute (relative paths are from the suite file's folder,
    not the config's). A folder inside the suite's is refused: runs cannot read it."""
    root = base.resolve()
    servers = {}
    for name, server in suite.mcp_servers.items():
        where = source.where("mcp_servers", name)
        try:
            check_server_name(name)
        except ValueError as exc:
            raise ConfigError(f"{where}: mcp_servers: {exc}", hint=_FIX) from None
        given = server.model_dump(exclude={"cwd"})
        if server.cwd is not None:
            cwd = _folder(base, server.cwd, source, "mcp_servers", name, "cwd")
            if cwd == root or root in cwd.parents:
                raise ConfigError(
                    f"{source.where('mcp_servers', name, 'cwd')}: mcp_servers.{name}.cwd: {cwd} "
                    "is inside the suite's folder, which runs (and their servers) cannot read",
                    hint="put the server's files beside the suite folder, e.g. ../servers",
                )
            given["cwd"] = str(cwd)
        servers[name] = McpServerSettings.model_validate(given)
    return servers


def _case(raw: Any, source: _Source, prefix: tuple[str | int, ...]) -> Case:
    """One case, checked: each check by its kind's model, then the case."""
    where = source.where(*prefix)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a case must be a mapping (id, task, checks, ...)", hint=_FIX)
    checks = raw.get("checks")
    for index, check in enumerate(checks if isinstance(checks, list) else ()):
        loc = (*prefix, "checks", index)
        kind = check_kind(check)
        if kind is None:
            key = ".".join(str(p) for p in loc)
            raise ConfigError(
                f"{source.where(*loc)}: {key}: a check needs exactly one of "
                f"{', '.join(CHECK_KINDS)}",
                hint="run: a command; file: a workspace file; payload: the finish_task payload",
            )
        model = _CHECK_MODELS[kind]
        try:
            model.model_validate(check)
        except ValidationError as exc:
            raise validation_error(exc, source.name, source.text, model, loc) from None
    try:
        return Case.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, source.name, source.text, Case, prefix) from None


def _resolve(suite: Suite, case: Case, source: _Source, prefix: Sequence[str | int]) -> EvalCase:
    """The case with the suite's defaults under it (the case's own keys win)."""
    defaults = suite.defaults
    where = source.where(*prefix, "id")
    pack = case.pack or defaults.pack
    if pack is None:
        raise ConfigError(
            f"{where}: case {case.id!r} names no pack",
            hint="set pack: in the case, or in the suite's defaults",
        )
    limits = {
        **defaults.limits.model_dump(exclude_none=True),
        **(case.limits.model_dump(exclude_none=True) if case.limits else {}),
    }
    workspace = None
    if case.workspace is not None:
        workspace = _folder(source.path.parent, case.workspace, source, *prefix, "workspace")
    return EvalCase(
        id=case.id,
        tier=case.tier or defaults.tier,
        pack=pack,
        task=case.task,
        workspace=workspace,
        max_steps=limits.get("max_steps"),
        timeout_s=float(limits.get("timeout_s", DEFAULT_TIMEOUT_S)),
        verify=case.verify if "verify" in case.model_fields_set else defaults.verify,
        tags=tuple(case.tags),
        checks=tuple(case.checks),
        where=where,
    )


def _folder(base: Path, name: str, source: _Source, *loc: str | int) -> Path:
    folder = (base / name).resolve()
    if not folder.is_dir():
        raise ConfigError(
            f"{source.where(*loc)}: {'.'.join(map(str, loc))}: {folder} is not a folder",
            hint="paths are relative to the file that names them",
        )
    return folder


def _check_within(root: Path, folder: Path, what: str) -> None:
    """Attempts copy a suite's own files only: a workspace or pages folder that leads out of
    the suite's folder (``../../home``, or a link out) could hand the model files the user
    never meant to share."""
    if folder != root and root not in folder.parents:
        raise ConfigError(
            f"{what}: {folder} is outside the suite's folder {root}",
            hint="keep workspace templates and pages inside the suite's folder",
        )


def _check_unique(cases: Sequence[EvalCase]) -> None:
    seen: dict[str, str] = {}
    for case in cases:
        if case.id in seen:
            raise ConfigError(
                f"{case.where}: case id {case.id!r} is used twice (first at {seen[case.id]})",
                hint="give every case an id of its own",
            )
        seen[case.id] = case.where


def _check_web_url(suite: Suite, cases: Sequence[EvalCase], source: _Source) -> None:
    """``${web_url}`` only where the suite starts the web service that gives it a value."""
    if suite.services.web is not None:
        return
    if WEB_URL in repr(suite.pack_settings):
        where = source.where("pack_settings")
        raise ConfigError(f"{where}: pack_settings use {WEB_URL}, {_NO_WEB}", hint=_WEB_HINT)
    for case in cases:
        if WEB_URL in case.task or any(WEB_URL in repr(c) for c in case.checks):
            raise ConfigError(f"{case.where}: case {case.id!r} uses {WEB_URL}, {_NO_WEB}",
                              hint=_WEB_HINT)  # fmt: skip


_NO_WEB = "but the suite starts no web service"
_WEB_HINT = "add services: {web: {pages: pages}} to the suite"


def _content_hash(files: Sequence[Path], folders: Sequence[Path]) -> str:
    """sha256 over the YAML files and every file of the folders (names and contents)."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(b"file\0" + path.name.encode() + b"\0" + path.read_bytes())
    for folder in sorted(set(folders)):
        digest.update(b"folder\0" + folder.name.encode() + b"\0")
        for rel, data in _tree(folder):
            digest.update(rel.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def _tree(folder: Path) -> Iterator[tuple[str, bytes]]:
    """Every file under ``folder`` (sorted; symlinks as their target text, not followed)."""
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED)
        for name in sorted(names):
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink():
                yield rel, b"symlink\0" + str(path.readlink()).encode()
            elif path.is_file():
                yield rel, path.read_bytes()


def skipped_names() -> frozenset[str]:
    """Folder names left out of the hash, and of the copies made for attempts."""
    return frozenset(_SKIPPED)


__all__ = ["CheckSpec", "load_suite", "skipped_names"]
