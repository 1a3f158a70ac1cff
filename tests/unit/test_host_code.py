"""What counts as host code in a workspace (ADR 0013): found as deep as projects keep it, and
where Python really imports packs from, whatever links or finders lead there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabric.infrastructure.sandbox import host_code


def test_environments_and_repositories_are_found_four_levels_deep(tmp_path: Path) -> None:
    for venv in ("services/api/app/.venv", ".tox/py311"):
        (tmp_path / venv).mkdir(parents=True)
        (tmp_path / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / ".pixi/envs/default/conda-meta").mkdir(parents=True)
    (tmp_path / "services/api/vendor/.git/hooks").mkdir(parents=True)
    (tmp_path / "services/api/vendor/.git/config").write_text("")
    nested = tmp_path / ".git/modules/a/modules/b"
    (nested / "hooks").mkdir(parents=True)
    (nested / "config").write_text("")
    (tmp_path / "node_modules/x/.venv").mkdir(parents=True)
    (tmp_path / "node_modules/x/.venv/pyvenv.cfg").write_text("")

    found = {p.relative_to(tmp_path).as_posix() for p in host_code().in_workspace(tmp_path)}

    assert {
        "services/api/app/.venv",
        ".tox/py311",
        ".pixi/envs/default",
        "services/api/vendor/.git/config",
        "services/api/vendor/.git/hooks",
        ".git/modules/a/modules/b/config",
        ".git/modules/a/modules/b/hooks",
    } <= found
    assert not any(p.startswith("node_modules") for p in found)


def test_a_pack_module_counts_where_python_imports_it_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builder's package lives in tools/ (an editable install, a path entry) and is
    reached through a link: the real folder is host code, not only <config folder>/name."""
    real = tmp_path / "tools" / "mypacks_real"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "mypacks_x").symlink_to(real)
    monkeypatch.syspath_prepend(str(tmp_path / "linked"))
    sys.modules.pop("mypacks_x", None)

    code = host_code(tmp_path / "fabric.yaml", tmp_path, ["mypacks_x.eng"])

    assert real in code.fixed
    assert real in code.in_workspace(tmp_path)


def git(repo: Path, *args: str) -> None:
    env = {"GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo), "PATH": os.environ["PATH"]}
    subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)


def found(workspace: Path) -> set[str]:
    return {p.relative_to(workspace).as_posix() for p in host_code().in_workspace(workspace)}


def test_what_a_repositorys_settings_take_from_the_work_tree_is_host_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git runs the hooks of ``core.hooksPath`` (husky's ``.husky/_``, whose stubs run the
    scripts of ``.husky``), reads the files ``include.path`` names, and runs the programs the
    settings name: in the work tree, a run could rewrite them all."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global.cfg"))
    (tmp_path / "global.cfg").write_text("[core]\n\thooksPath = .githooks\n")
    ws = tmp_path / "ws"
    repo = ws / "app"
    for folder in (".husky/_", ".githooks", "tools", "repo.git"):
        (repo / folder).mkdir(parents=True)
    (repo / ".husky" / "_" / "h").write_text("sh -e .husky/$n\n")
    (repo / "team.gitconfig").write_text("[alias]\n\tlint = !tools/lint.sh\n")
    for name in ("tools/fsmonitor.sh", "tools/lint.sh", "tools/unrelated.sh"):
        (repo / name).write_text("#!/bin/sh\n")
    git(repo, "init", "-q")
    git(repo, "config", "core.hooksPath", ".husky/_")
    git(repo, "config", "core.fsmonitor", "./tools/fsmonitor.sh")
    git(repo, "config", "include.path", "../team.gitconfig")
    git(repo, "config", "extensions.worktreeConfig", "true")
    git(repo, "config", "--worktree", "core.sparseCheckout", "false")
    git(repo / "repo.git", "init", "-q", "--bare")

    assert {
        "app/.git/config",
        "app/.git/config.worktree",
        "app/.git/hooks",
        "app/.husky/_",
        "app/.husky",
        "app/.githooks",
        "app/team.gitconfig",
        "app/tools/fsmonitor.sh",
        "app/tools/lint.sh",
        "app/repo.git/config",
        "app/repo.git/hooks",
    } <= found(ws)
    assert "app/tools/unrelated.sh" not in found(ws)
    assert "app" not in found(ws)


def test_the_config_of_a_submodule_named_with_slashes_is_host_code(tmp_path: Path) -> None:
    module = tmp_path / ".git" / "modules" / "vendor" / "lib"
    (module / "hooks").mkdir(parents=True)
    (module / "config").write_text("[core]\n\tworktree = ../../../../vendor/lib\n")
    (module / "HEAD").write_text("ref: refs/heads/main\n")
    assert {".git/modules/vendor/lib/config", ".git/modules/vendor/lib/hooks"} <= found(tmp_path)


def test_hook_managers_configs_in_a_repository_are_host_code(tmp_path: Path) -> None:
    """pre-commit and lefthook run, at the next commit, the commands their config in the work
    tree names: in a repository present when the run starts, those files are host code."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    (tmp_path / "repo" / ".pre-commit-config.yaml").write_text("repos: []\n")
    (tmp_path / "repo" / "lefthook.yml").write_text("pre-commit: {}\n")
    (tmp_path / "loose.yml").write_text("not a repository's\n")

    found = host_code().in_workspace(tmp_path)

    assert tmp_path / "repo" / ".pre-commit-config.yaml" in found
    assert tmp_path / "repo" / "lefthook.yml" in found
    assert tmp_path / "loose.yml" not in found


def test_a_change_to_the_users_git_settings_is_seen_by_the_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's settings are kept between looks, and read again when their file, or a file
    it includes, changed: a new hooks folder counts from the next run on."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "global.cfg"))
    (tmp_path / "global.cfg").write_text("[include]\n\tpath = extra.cfg\n")
    (tmp_path / "extra.cfg").write_text("")
    ws = tmp_path / "ws"
    for folder in (".githooks", ".hooks2", ".hooks3"):
        (ws / folder).mkdir(parents=True)
    git(ws, "init", "-q")
    assert not {".githooks", ".hooks2", ".hooks3"} & found(ws)

    (tmp_path / "global.cfg").write_text(
        "[include]\n\tpath = extra.cfg\n[core]\n\thooksPath = .githooks\n"
    )
    assert ".githooks" in found(ws)

    (tmp_path / "extra.cfg").write_text("[core]\n\thooksPath = .hooks2\n")  # included: later
    assert ".hooks2" in found(ws)

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "other.cfg"))  # another file
    (tmp_path / "other.cfg").write_text("[core]\n\thooksPath = .hooks3\n")
    assert ".hooks3" in found(ws) and ".githooks" not in found(ws)
