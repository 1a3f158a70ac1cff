"""The git audit (ADR 0013): what a run planted in a repository's ``.git`` that git on the host
acts on is removed, and said; what git itself writes in normal work, what changed before the
command and what the run could not write are kept; links are removed, never followed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from fabric.infrastructure.packs.git_audit import sweep

IDENTITY = {
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
}


def git(repo: Path, *args: str, check: bool = True) -> str:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo.parent)}
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 or not check, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit, made well before the test's ``since``."""
    folder = tmp_path / "ws" / "repo"
    folder.mkdir(parents=True)
    git(folder, "init", "-q", "-b", "main")
    (folder / "a.txt").write_text("a\n")
    git(folder, "add", "a.txt")
    git(folder, "commit", "-q", "-m", "first")
    time.sleep(0.05)  # ctime comes from the kernel's coarse clock
    return folder


def window() -> float:
    """When a command starts: a little after what came before, and a tick early, since ctime
    comes from the kernel's coarse clock (fabric's own windows start a second early)."""
    time.sleep(0.05)
    return time.time() - 0.02


def plant(path: Path, text: str = "planted\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_git_at_work_leaves_nothing_to_remove(repo: Path) -> None:
    since = time.time() - 1
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "second")
    git(repo, "checkout", "-q", "-b", "topic")
    (repo / "c.txt").write_text("c\n")
    git(repo, "add", "c.txt")
    git(repo, "commit", "-q", "-m", "third")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "topic")
    git(repo, "tag", "-a", "v1", "-m", "one")
    (repo / "a.txt").write_text("changed\n")
    git(repo, "stash", "-q")
    git(repo, "stash", "pop", "-q")
    git(repo, "checkout", "-q", "--", "a.txt")
    git(repo, "rebase", "-q", "main", "topic")
    git(repo, "gc", "-q")
    git(repo, "worktree", "add", "-q", "../wt", "-b", "side")
    git(repo.parent / "wt", "commit", "-q", "--allow-empty", "-m", "in the worktree")
    (repo / "a.txt").write_text("one side\n")
    git(repo, "commit", "-q", "-am", "one side")
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text("other side\n")
    git(repo, "commit", "-q", "-am", "other side")
    git(repo, "merge", "topic", check=False)  # a conflict: the merge waits for the user

    assert sweep(repo.parent, since) == []
    assert (repo / ".git" / "MERGE_HEAD").exists()
    git(repo, "merge", "--abort")
    assert git(repo, "status", "--porcelain") == ""
    assert "merge" in git(repo, "log", "--oneline", "main")
    assert "in the worktree" in git(repo.parent / "wt", "log", "--oneline")


def test_planted_control_files_are_removed_and_said(repo: Path, tmp_path: Path) -> None:
    git(repo, "worktree", "add", "-q", "../wt")
    module = repo / ".git" / "modules" / "a"
    plant(module / "HEAD", "ref: refs/heads/main\n")
    plant(module / "modules" / "b" / "HEAD", "ref: refs/heads/main\n")
    time.sleep(0.05)
    since = time.time()
    dot_git = repo / ".git"
    plant(dot_git / "commondir", "../evil\n")
    plant(dot_git / "config.worktree")
    plant(dot_git / "worktrees" / "wt" / "commondir", "../../../../evil\n")
    plant(module / "modules" / "b" / "config", "[core]\n\tbare = false\n\tfsmonitor = x\n")
    plant(dot_git / "info" / "attributes", "* filter=x\n")
    plant(dot_git / "hooks" / "post-checkout")
    plant(dot_git / "remotes" / "origin", "URL: /somewhere/else\n")
    plant(dot_git / "gitdir", "/somewhere/else\n")

    removed = sweep(tmp_path / "ws", since, keep=())

    planted = [
        "commondir",
        "config.worktree",
        "worktrees/wt/commondir",
        "info/attributes",
        "hooks/post-checkout",
        "remotes/origin",
        "gitdir",
    ]
    nested = "modules/a/modules/b/config"
    assert sorted(line.split(":")[0] for line in removed) == sorted(
        f"repo/.git/{p}" for p in [*planted, nested]
    )
    assert not any(os.path.lexists(dot_git / p) for p in planted)
    assert "from the folder it names" in "\n".join(removed)
    assert "took out core.fsmonitor" in "\n".join(removed)
    assert (dot_git / nested).read_text() == '[core]\n\tbare = "false"\n', "cut down, kept"
    assert (dot_git / "hooks" / "pre-commit.sample").exists(), "git's samples stay"
    git(repo, "status")


def test_what_changed_before_the_command_is_kept(repo: Path) -> None:
    plant(repo / ".git" / "hooks" / "pre-commit")
    plant(repo / ".git" / "info" / "attributes")
    time.sleep(0.05)
    assert sweep(repo.parent, time.time()) == []
    assert (repo / ".git" / "hooks" / "pre-commit").exists()
    assert (repo / ".git" / "info" / "attributes").exists()


def test_what_the_run_could_not_write_is_kept(repo: Path) -> None:
    """``keep``: the run's read-only host code; a change there since is the user's."""
    since = time.time() - 1
    plant(repo / ".git" / "hooks" / "pre-push")
    assert sweep(repo.parent, since, keep=[repo / ".git" / "hooks"]) == []
    assert (repo / ".git" / "hooks" / "pre-push").exists()


def test_links_are_removed_never_followed(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    plant(outside / "config", "[core]\n\tfsmonitor = evil\n")
    plant(outside / "hook")
    since = time.time() - 1
    dot_git = repo / ".git"
    (dot_git / "commondir").symlink_to(outside)
    (dot_git / "modules").mkdir()
    (dot_git / "modules" / "a").symlink_to(outside)
    (dot_git / "hooks" / "post-merge").symlink_to(outside / "hook")
    removed = sweep(repo.parent, since)
    assert len(removed) == 3, removed
    assert not any(
        os.path.lexists(p)
        for p in (
            dot_git / "commondir",
            dot_git / "modules" / "a",
            dot_git / "hooks" / "post-merge",
        )
    )
    assert sorted(p.name for p in outside.iterdir()) == ["config", "hook"]


def test_a_folder_of_another_tool_keeps_what_it_had(repo: Path) -> None:
    """A folder git never writes is removed only when everything in it is new: git-svn's, say,
    keeps its old files when a command adds one (git reads no such folder)."""
    plant(repo / ".git" / "svn" / "old")
    time.sleep(0.05)
    since = time.time()
    plant(repo / ".git" / "svn" / "new")
    plant(repo / ".git" / "evil" / "deep" / "config")
    removed = sweep(repo.parent, since)
    assert [line.split(":")[0] for line in removed] == ["repo/.git/evil"]
    assert sorted(p.name for p in (repo / ".git" / "svn").iterdir()) == ["new", "old"]


def test_a_folder_the_command_locked_is_opened_up(repo: Path) -> None:
    since = time.time() - 1
    dot_git = repo / ".git"
    plant(dot_git / "commondir", "../evil\n")
    plant(dot_git / "trap" / "inner" / "file")
    (dot_git / "trap" / "inner").chmod(0o500)
    (dot_git / "trap").chmod(0)
    dot_git.chmod(0)  # root needs no rights; anyone else gets the owner's back
    try:
        removed = sweep(repo.parent, since)
    finally:
        dot_git.chmod(0o755)
    assert sorted(line.split(":")[0] for line in removed) == [
        "repo/.git/commondir",
        "repo/.git/trap",
    ]
    assert not os.path.lexists(dot_git / "commondir")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can bind-mount a file")
def test_what_cannot_be_removed_is_told_not_raised(repo: Path, tmp_path: Path) -> None:
    since = time.time() - 1
    plant(repo / ".git" / "commondir", "../evil\n")
    plant(tmp_path / "cover")
    mounted = subprocess.run(
        ["mount", "--bind", str(tmp_path / "cover"), str(repo / ".git" / "commondir")],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode()}")
    try:
        removed = sweep(repo.parent, since)
    finally:
        subprocess.run(["umount", str(repo / ".git" / "commondir")], check=True)
    assert len(removed) == 1 and "could not remove it" in removed[0], removed


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    """Outside the workspace: a program the run planted, had git run it, leaves a mark here."""
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


def mark(marks: Path) -> str:
    return f"touch {marks}/ran; false"


def hook(path: Path, marks: Path) -> None:
    plant(path, f"#!/bin/sh\n{mark(marks)}\n")
    path.chmod(0o755)


def evil_repository(folder: Path, marks: Path, *init: str) -> str:
    """What a command does: a repository of its own at ``folder``, one commit, whose config
    and hooks run the command's program in many ways; returns its commit."""
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q", "-b", "main", *init)
    git(folder, "commit", "-q", "--allow-empty", "-m", "run's")
    git(folder, "config", "user.email", "run@example.invalid")
    git(folder, "remote", "add", "origin", "https://example.invalid/x.git")
    git(folder, "config", "core.fsmonitor", mark(marks))
    git(folder, "config", "alias.st", f"!{mark(marks)}")
    git(folder, "config", "core.pager", mark(marks))
    plant(folder.parent / "more.cfg", f"[core]\n\tsshCommand = {mark(marks)}\n")
    git(folder, "config", "include.path", str(folder.parent / "more.cfg"))
    gitdir = Path(git(folder, "rev-parse", "--absolute-git-dir").strip())
    hook(gitdir / "hooks" / "pre-commit", marks)
    return git(folder, "rev-parse", "HEAD").strip()


def git_on_the_host(*folders: Path) -> None:
    """What the user does later: ordinary git commands, each of which would run a program
    the run planted."""
    for folder in folders:
        git(folder, "status")
        git(folder, "st", check=False)
        git(folder, "log", "-p")
        git(folder, "commit", "-q", "--allow-empty", "-m", "the user's")


@pytest.mark.parametrize("where", ["sub", "a/b/c/d/e/sub"])
def test_a_repository_the_run_made_keeps_only_settings_that_run_nothing(
    repo: Path, marks: Path, where: str
) -> None:
    """Nested in the user's repository and registered in its index as a submodule (a
    gitlink): the user's ``git status`` at the top runs git in it. Deeper than the audit's
    search, the index leads there."""
    since = window()
    sub = repo / where
    commit = evil_repository(sub, marks)
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},{where}")

    removed = sweep(repo.parent, since, keep=())

    git_on_the_host(repo, sub)
    assert list(marks.iterdir()) == []
    told = "\n".join(removed)
    for key in ("core.fsmonitor", "alias.st", "core.pager", "include.path", "pre-commit"):
        assert key in told
    assert git(sub, "config", "user.email").strip() == "run@example.invalid"
    assert git(sub, "remote", "get-url", "origin").strip() == "https://example.invalid/x.git"
    assert "the user's" in git(sub, "log", "--oneline")


def test_a_repository_made_where_there_was_none(tmp_path: Path, marks: Path) -> None:
    workspace = tmp_path / "ws"
    since = window()
    evil_repository(workspace, marks)
    removed = sweep(workspace, since, keep=())
    git_on_the_host(workspace)
    assert list(marks.iterdir()) == [], removed


@pytest.mark.parametrize("pointer", ["gitdir file", "link"])
def test_the_folder_a_dot_git_file_or_link_names_is_audited(
    tmp_path: Path, marks: Path, pointer: str
) -> None:
    """``proj/.git`` is a file naming a folder deep in the workspace (``--separate-git-dir``),
    or a link to one: git takes the config and hooks from there."""
    workspace = tmp_path / "ws"
    deep = workspace / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    since = window()
    if pointer == "link":
        evil_repository(deep / "real", marks)
        (workspace / "proj").mkdir()
        (workspace / "proj" / ".git").symlink_to(deep / "real" / ".git")
    else:
        evil_repository(workspace / "proj", marks, "--separate-git-dir", str(deep / "store"))
        assert (workspace / "proj" / ".git").is_file()
    sweep(workspace, since, keep=())
    git_on_the_host(workspace / "proj")
    assert list(marks.iterdir()) == []


@pytest.mark.parametrize(
    ("init", "setting"),
    [((), "index.version=4"), ((), "core.splitIndex=true"), (("--object-format=sha256",), "")],
    ids=["index v4", "split index", "sha256"],
)
def test_the_index_leads_to_the_repositories_it_registers_in_every_format(
    tmp_path: Path, marks: Path, init: tuple[str, ...], setting: str
) -> None:
    outer = tmp_path / "ws" / "outer"
    outer.mkdir(parents=True)
    git(outer, "init", "-q", *init)
    if setting:
        git(outer, "config", *setting.split("="))
    plant(outer / "a.txt", "a\n")
    git(outer, "add", "a.txt")
    git(outer, "commit", "-q", "-m", "first")
    since = window()
    where = "a/b/c/d/e/sub"
    commit = evil_repository(outer / where, marks, *init)
    git(outer, "update-index", "--add", "--cacheinfo", f"160000,{commit},{where}")
    if setting == "core.splitIndex=true":
        git(outer, "update-index", "--split-index")  # the gitlink moves to the shared part
        assert list((outer / ".git").glob("sharedindex.*"))
    removed = sweep(outer.parent, since, keep=())
    assert any(line.startswith(f"outer/{where}/.git/config:") for line in removed), removed
    git_on_the_host(outer)
    assert list(marks.iterdir()) == []


def test_a_bare_repository_the_run_made_keeps_no_hooks(tmp_path: Path, marks: Path) -> None:
    """The run's repository pushes to a bare one the run made beside it: ``git push`` runs
    the bare repository's hooks."""
    workspace = tmp_path / "ws"
    since = window()
    evil_repository(workspace / "app", marks)
    git(workspace, "init", "-q", "--bare", "remote.git")
    hook(workspace / "remote.git" / "hooks" / "pre-receive", marks)
    git(workspace / "app", "remote", "set-url", "origin", "../remote.git")
    removed = sweep(workspace, since, keep=())
    git(workspace / "app", "push", "-q", "origin", "main")
    assert list(marks.iterdir()) == []
    assert "remote.git/hooks/pre-receive" in "\n".join(removed)


def interrupted_rebase(repo: Path, *options: str) -> None:
    """``topic``: two commits on ``a.txt``, the first in conflict with ``main``: a rebase of it
    onto main stops there, with the second still to do."""
    git(repo, "checkout", "-q", "-b", "topic")
    for text in ("topic 1\n", "topic 2\n"):
        (repo / "a.txt").write_text(text)
        git(repo, "commit", "-q", "-am", text.strip())
    git(repo, "checkout", "-q", "main")
    (repo / "a.txt").write_text("main\n")
    git(repo, "commit", "-q", "-am", "main")
    git(repo, "rebase", *options, "main", "topic", check=False)
    assert (repo / ".git" / "rebase-merge" / "git-rebase-todo").is_file()


def continue_rebase(repo: Path) -> None:
    (repo / "a.txt").write_text("resolved\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "core.editor=true", "rebase", "--continue", check=False)
    git(repo, "checkout", "-q", "--theirs", "a.txt", check=False)
    git(repo, "add", "a.txt")
    git(repo, "-c", "core.editor=true", "rebase", "--continue")


def test_exec_lines_planted_in_an_interrupted_rebase_are_removed(repo: Path, marks: Path) -> None:
    """The user's rebase waits for them; a command adds ``exec`` lines to its todo list: they
    would run when the user continues it."""
    interrupted_rebase(repo)
    time.sleep(0.05)
    since = window()
    todo = repo / ".git" / "rebase-merge" / "git-rebase-todo"
    picks = todo.read_text()
    todo.write_text(f"x {mark(marks)}\n{picks}\t exec {mark(marks)}\n")

    removed = sweep(repo.parent, since, keep=())

    assert len(removed) == 1 and "2 exec lines" in removed[0], removed
    assert todo.read_text() == picks
    continue_rebase(repo)
    assert list(marks.iterdir()) == []
    assert "topic 2" in git(repo, "log", "--oneline", "topic")


def test_a_rebase_the_command_started_keeps_its_picks(repo: Path, marks: Path) -> None:
    since = window()
    interrupted_rebase(repo, "--exec", mark(marks))
    assert "exec" in (repo / ".git" / "rebase-merge" / "git-rebase-todo").read_text()
    assert sweep(repo.parent, since, keep=())
    continue_rebase(repo)
    assert list(marks.iterdir()) == []
    assert "topic 2" in git(repo, "log", "--oneline", "topic")


def test_a_dead_runs_audit_cuts_down_only_the_config_of_a_repository_it_made(
    repo: Path, marks: Path
) -> None:
    """A run whose fabric died is audited at the next start (no ``keep``: its host code is
    not known), and its window lasts until then: the user may have changed their own
    repository's config since (``git push -u``, ``git config``); that stays."""
    since = window()
    evil_repository(repo.parent / "made", marks)
    git(repo, "config", "alias.co", "checkout")

    removed = sweep(repo.parent, since)

    assert [line.split(":")[0] for line in removed] == [
        "made/.git/config",
        "made/.git/hooks/pre-commit",
    ]
    assert git(repo, "config", "alias.co").strip() == "checkout"
    git_on_the_host(repo.parent / "made")
    assert list(marks.iterdir()) == []
