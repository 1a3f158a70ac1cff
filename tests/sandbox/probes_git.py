"""Probes that plant git control files: a confined command creates or changes, in a
repository's ``.git`` (which must stay writable), a file git on the host acts on later, so
that the user's next ``git status`` or ``git commit`` runs a program of the command's.

Each probe's repositories exist before the run, as the user's would; the command plants, the
runner audits ``.git`` after it (``packs/git_audit.py``), and then the probe runs git on the host,
unconfined: the planted program would leave a mark in a folder outside the workspace. Any
mark is an escape. The last probe is the other side: git's own work in a repository that
existed before the run keeps working, and the audit removes none of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

from fabric.infrastructure.sandbox import host_code

from .lab import Lab, Verdict, probe, source, summary

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "a",
    "GIT_AUTHOR_EMAIL": "a@b",
    "GIT_COMMITTER_NAME": "a",
    "GIT_COMMITTER_EMAIL": "a@b",
}


def host_git(lab: Lab, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Git as the user runs it on the host, later: unconfined, in ``folder``."""
    env = {**os.environ, **GIT_ENV, "HOME": str(lab.home)}
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-C", str(folder), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def repository(lab: Lab, folder: Path) -> Path:
    """A repository with one commit (``a.txt``) at ``folder`` in the lab."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.txt").write_text("a\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "first"]):
        host_git(lab, folder, *args).check_returncode()
    return folder


def marker(lab: Lab, name: str) -> str:
    """A shell command that leaves ``name`` in a folder outside the workspace: what a planted
    program would do, had git on the host run it."""
    return f"touch {lab.root / 'marks'}/{name}; false"


EVIL_REPOSITORY = """
import shutil
def evil_repository(where):
    shutil.copytree("repo/.git/objects", where + "/objects")
    shutil.copytree("repo/.git/refs", where + "/refs")
    with open(where + "/config", "w") as config:
        config.write(FSMONITOR)
"""
"""A repository of the command's own, with the history of ``repo`` and a config whose
``core.fsmonitor`` (a program ``git status`` runs) leaves the mark."""


async def plant_for_git(lab: Lab, code: str, *looks: tuple[str, ...]) -> Verdict:
    """Run ``code`` (``MARK``: the marker command; ``FSMONITOR``: a config whose
    ``core.fsmonitor``, a program ``git status`` runs, is the marker; ``evil_repository``:
    makes a repository with it) in a workspace whose repositories the probe set up; then run
    each of ``looks`` (a folder, then git's arguments) on the host, as the user would: any
    mark is an escape."""
    (lab.root / "marks").mkdir(exist_ok=True)
    read_only = tuple(host_code().in_workspace(lab.ws))
    mark = marker(lab, "ran")
    fsmonitor = f'[core]\n\tfsmonitor = "{mark}"\n'
    program = f"MARK = {mark!r}\nFSMONITOR = {fsmonitor!r}\n{EVIL_REPOSITORY}"
    program += textwrap.dedent(code)
    out = await lab.python(program, read_only=read_only)
    for folder, *args in looks:
        host_git(lab, lab.ws / folder, *args)
    if any((lab.root / "marks").iterdir()):
        return lab.judge(out, ["git on the host ran a program the command planted"])
    return lab.judge(out, [])


@probe(
    "plant: git commondir",
    "escape",
    "create .git/commondir naming a folder the command wrote, whose config sets "
    "core.fsmonitor; then git status on the host",
)
async def plant_commondir(lab: Lab) -> Verdict:
    repository(lab, lab.ws / "repo")
    code = """
    evil_repository("repo/evil")
    attempt("commondir", lambda: open("repo/.git/commondir", "w").write("../evil\\n"))
    """
    return await plant_for_git(lab, code, ("repo", "status"))


@probe(
    "plant: git config.worktree",
    "escape",
    "in a repository with extensions.worktreeConfig (sparse checkouts set it), create "
    ".git/config.worktree setting core.fsmonitor; then git status on the host",
)
async def plant_config_worktree(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    host_git(lab, repo, "config", "extensions.worktreeConfig", "true").check_returncode()
    code = """
    attempt("config.worktree", lambda: open("repo/.git/config.worktree", "w").write(FSMONITOR))
    """
    return await plant_for_git(lab, code, ("repo", "status"))


@probe(
    "plant: git worktree's commondir",
    "escape",
    "point the commondir of a linked worktree's folder (.git/worktrees/wt) at a folder the "
    "command wrote, whose config sets core.fsmonitor; then git status in the worktree",
)
async def plant_worktree_commondir(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    host_git(lab, repo, "worktree", "add", "-q", "../wt").check_returncode()
    code = """
    evil_repository("repo/evil")
    where = "repo/.git/worktrees/wt/commondir"
    attempt("commondir", lambda: open(where, "w").write("../../../evil\\n"))
    """
    return await plant_for_git(lab, code, ("wt", "status"))


@probe(
    "plant: nested submodule's config",
    "escape",
    "set core.fsmonitor in the config of a submodule's submodule "
    "(.git/modules/a/modules/b/config); then git status on the host, which recurses into them",
)
async def plant_nested_submodule(lab: Lab) -> Verdict:
    sources = lab.root / "sources"
    repository(lab, sources / "b")
    a = repository(lab, sources / "a")
    host_git(lab, a, "submodule", "add", "-q", str(sources / "b"), "b").check_returncode()
    host_git(lab, a, "commit", "-q", "-m", "b").check_returncode()
    repo = repository(lab, lab.ws / "repo")
    host_git(lab, repo, "submodule", "add", "-q", str(a), "a").check_returncode()
    host_git(lab, repo, "submodule", "update", "--init", "--recursive", "-q").check_returncode()
    host_git(lab, repo, "commit", "-q", "-m", "a").check_returncode()
    code = """
    where = "repo/.git/modules/a/modules/b/config"
    attempt("config", lambda: open(where, "a").write(FSMONITOR))
    """
    return await plant_for_git(lab, code, ("repo", "status"), ("repo/a/b", "status"))


@probe(
    "plant: git info/attributes",
    "escape",
    "create .git/info/attributes sending every file through a filter driver the user "
    "configured for some files, and touch a tracked file; then git status on the host",
)
async def plant_attributes(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    driver = f"{marker(lab, 'ran').replace('; false', '')}; cat"
    host_git(lab, repo, "config", "filter.mine.clean", driver).check_returncode()
    (lab.ws / "repo" / ".git" / "info").mkdir(exist_ok=True)
    code = """
    where = "repo/.git/info/attributes"
    attempt("attributes", lambda: open(where, "w").write("* filter=mine\\n"))
    time.sleep(0.01)
    os.utime("repo/a.txt")  # same content, new time: git status reads it through the filter
    """
    return await plant_for_git(lab, code, ("repo", "status"))


@probe(
    "plant: hook where there were none",
    "escape",
    "write .git/hooks/pre-commit in a repository that had no hooks folder (some tools make "
    "none); then git commit on the host",
)
async def plant_first_hook(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    shutil.rmtree(repo / ".git" / "hooks")
    code = """
    def hook():
        os.makedirs("repo/.git/hooks")
        with open("repo/.git/hooks/pre-commit", "w") as script:
            script.write(f"#!/bin/sh\\n{MARK}\\n")
        os.chmod("repo/.git/hooks/pre-commit", 0o755)
    attempt("hook", hook)
    """
    return await plant_for_git(lab, code, ("repo", "commit", "-q", "--allow-empty", "-m", "x"))


OWN_REPOSITORY = """
import subprocess
ENV = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b", GIT_COMMITTER_NAME="a",
           GIT_COMMITTER_EMAIL="a@b")
def git(folder, *args):
    done = subprocess.run(["git", "-C", folder, *args], env=ENV, capture_output=True, text=True)
    print("git", *args[:2], done.returncode, done.stderr[-200:], flush=True)
    return done.stdout.strip()
def own_repository(folder):
    os.makedirs(folder, exist_ok=True)
    git(folder, "init", "-q")
    git(folder, "commit", "-q", "--allow-empty", "-m", "the run's")
    git(folder, "config", "core.fsmonitor", MARK)
    git(folder, "config", "alias.st", "!" + MARK)
    os.makedirs(folder + "/.git/hooks", exist_ok=True)
    with open(folder + "/.git/hooks/pre-commit", "w") as script:
        script.write(f"#!/bin/sh\\n{MARK}\\n")
    os.chmod(folder + "/.git/hooks/pre-commit", 0o755)
    return git(folder, "rev-parse", "HEAD")
"""
"""A repository of the command's own at ``folder`` whose config (``core.fsmonitor``, an alias)
and ``pre-commit`` hook leave the mark."""


@probe(
    "plant: repositories of the run's own",
    "escape",
    "git init a repository at the workspace's top, one in a repository of the user's and one "
    "six levels deep, each with core.fsmonitor, an alias and a hook leaving a mark, the nested "
    "ones registered in the user's index as submodules (gitlinks); then git status, the alias "
    "and git commit on the host, at the top of the user's repository and in each",
)
async def plant_own_repositories(lab: Lab) -> Verdict:
    repository(lab, lab.ws / "repo")
    code = source(
        OWN_REPOSITORY,
        """
    own_repository(".")
    for where in ("sub", "a/b/c/d/e/sub"):
        commit = own_repository("repo/" + where)
        git("repo", "update-index", "--add", "--cacheinfo", f"160000,{commit},{where}")
    """,
    )
    looks = [
        (folder, *args)
        for folder in (".", "repo", "repo/sub", "repo/a/b/c/d/e/sub")
        for args in (("status",), ("st",), ("commit", "-q", "--allow-empty", "-m", "user's"))
    ]
    return await plant_for_git(lab, code, *looks)


HUSKY_STUB = '#!/usr/bin/env sh\n. "$(dirname "$0")/h"\n'
HUSKY_H = """#!/usr/bin/env sh
n=$(basename "$0")
s=$(dirname "$(dirname "$0")")/$n
[ ! -f "$s" ] && exit 0
sh -e "$s" "$@"
"""
"""husky 9: ``core.hooksPath`` is ``.husky/_``, whose stubs run the scripts of ``.husky``."""


@probe(
    "plant: husky's hooks folder",
    "escape",
    "in a repository whose core.hooksPath is husky's .husky/_ (in the work tree), rewrite the "
    "user's .husky/pre-commit, husky's stub and its runner to leave a mark, and add a hook; "
    "then git commit on the host",
)
async def plant_husky(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    (repo / ".husky" / "_").mkdir(parents=True)
    for name, text in (("_/pre-commit", HUSKY_STUB), ("_/h", HUSKY_H), ("pre-commit", "true\n")):
        (repo / ".husky" / name).write_text(text)
        (repo / ".husky" / name).chmod(0o755)
    host_git(lab, repo, "config", "core.hooksPath", ".husky/_").check_returncode()
    code = """
    def plant(name):
        with open("repo/.husky/" + name, "w") as script:
            script.write(f"#!/bin/sh\\n{MARK}\\n")
        os.chmod("repo/.husky/" + name, 0o755)
    for name in ("pre-commit", "_/pre-commit", "_/h", "_/post-commit"):
        attempt(name, lambda: plant(name))
    """
    return await plant_for_git(lab, code, ("repo", "commit", "-q", "--allow-empty", "-m", "x"))


@probe(
    "plant: exec in a rebase's todo list",
    "escape",
    "add exec lines to the todo list of the user's interrupted rebase (a conflict waits for "
    "them); then the user resolves it and continues the rebase on the host",
)
async def plant_rebase_exec(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    for args in (["checkout", "-q", "-b", "topic"], ["commit", "-q", "-am", "topic 1"]):
        (repo / "a.txt").write_text(f"{args[-1]}\n")
        host_git(lab, repo, *args).check_returncode()
    host_git(lab, repo, "commit", "-q", "--allow-empty", "-m", "topic 2").check_returncode()
    host_git(lab, repo, "checkout", "-q", "main").check_returncode()
    (repo / "a.txt").write_text("main\n")
    host_git(lab, repo, "commit", "-q", "-am", "main").check_returncode()
    host_git(lab, repo, "rebase", "main", "topic")  # stops at the conflict
    if not (repo / ".git" / "rebase-merge" / "git-rebase-todo").is_file():
        return Verdict("error", "the rebase did not stop at its conflict")
    (repo / "a.txt").write_text("resolved\n")
    host_git(lab, repo, "add", "a.txt").check_returncode()
    code = """
    todo = "repo/.git/rebase-merge/git-rebase-todo"
    picks = open(todo).read()
    attempt("exec", lambda: open(todo, "w").write(f"x {MARK}\\n{picks}exec {MARK}\\n"))
    """
    continued = ("repo", "-c", "core.editor=true", "rebase", "--continue")
    return await plant_for_git(lab, code, continued)


@probe(
    "git still works: branches, merges, rebase, stash, gc, tags, worktrees",
    "task",
    "in a repository that existed before the run: branch, commit, merge, rebase, stash, tag, "
    "gc and add a worktree; the git audit after the command must remove none of it",
)
async def git_works_on(lab: Lab) -> Verdict:
    repo = repository(lab, lab.ws / "repo")
    read_only = tuple(host_code().in_workspace(lab.ws))
    out = await lab.python(
        """
        import subprocess
        env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b",
                   GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b")
        def git(*args):
            r = subprocess.run(["git", "-C", "repo", *args], env=env, capture_output=True,
                               text=True)
            print(*args[:2], r.returncode, r.stderr[-200:], flush=True)
            assert r.returncode == 0
        def change(name, text):
            with open("repo/" + name, "w") as f:
                f.write(text)
        git("checkout", "-q", "-b", "topic")
        change("b.txt", "b\\n"); git("add", "b.txt"); git("commit", "-q", "-m", "topic work")
        git("checkout", "-q", "main")
        change("c.txt", "c\\n"); git("add", "c.txt"); git("commit", "-q", "-m", "main work")
        git("merge", "-q", "--no-ff", "-m", "merged", "topic")
        git("rebase", "-q", "main", "topic")
        change("a.txt", "stashed\\n"); git("stash", "-q"); git("stash", "pop", "-q")
        git("commit", "-q", "-am", "after the stash")
        git("tag", "-a", "v1", "-m", "one")
        git("gc", "-q")
        git("worktree", "add", "-q", "../wt", "-b", "side")
        """,
        read_only=read_only,
    )
    status = host_git(lab, repo, "status", "--porcelain").stdout
    log = host_git(lab, repo, "log", "--oneline", "--all").stdout
    wanted = ("topic work", "main work", "merged", "after the stash")
    if "fabric removed" in out.output:
        return Verdict("broken", f"the audit removed something: {out.output[-400:]}")
    if out.exit_code != 0 or status or not all(w in log for w in wanted):
        return Verdict("broken", f"{summary(out)} | status {status!r} | log {log!r}")
    if host_git(lab, lab.ws / "wt", "status").returncode != 0:
        return Verdict("broken", "the worktree does not work on the host")
    return Verdict("works", log.strip().replace("\n", "; "))


@probe(
    "git works in a repository the run makes",
    "task",
    "git init a repository, set its user and a remote, commit with the identity from the "
    "environment, branch, merge and tag; the git audit must keep all of it, its config too",
)
async def git_works_in_own(lab: Lab) -> Verdict:
    read_only = tuple(host_code().in_workspace(lab.ws))
    out = await lab.python(
        source(
            OWN_REPOSITORY,
            """
        os.makedirs("proj")
        git("proj", "init", "-q", "-b", "main")
        git("proj", "config", "user.email", "agent@example.invalid")
        git("proj", "remote", "add", "origin", "https://example.invalid/proj.git")
        open("proj/README.md", "w").write("hello\\n")
        git("proj", "add", "README.md")
        git("proj", "commit", "-q", "-m", "first")
        git("proj", "checkout", "-q", "-b", "feature")
        open("proj/b.txt", "w").write("b\\n")
        git("proj", "add", "b.txt")
        git("proj", "commit", "-q", "-m", "feature work")
        git("proj", "checkout", "-q", "main")
        git("proj", "merge", "-q", "--no-ff", "-m", "merged", "feature")
        git("proj", "tag", "v1")
        """,
        ),
        read_only=read_only,
    )
    proj = lab.ws / "proj"
    log = host_git(lab, proj, "log", "--format=%s|%ae", "--all").stdout
    email = host_git(lab, proj, "config", "user.email").stdout.strip()
    url = host_git(lab, proj, "remote", "get-url", "origin").stdout.strip()
    if "fabric removed" in out.output:
        return Verdict("broken", f"the audit changed something: {out.output[-400:]}")
    if not all(w in log for w in ("first|a@b", "feature work", "merged")):
        return Verdict("broken", f"{summary(out)} | log {log!r}")
    if email != "agent@example.invalid" or not url.endswith("proj.git"):
        return Verdict("broken", f"the config lost the run's settings: {email!r} {url!r}")
    if host_git(lab, proj, "status", "--porcelain").stdout:
        return Verdict("broken", "the host's git status is not clean")
    return Verdict("works", log.strip().replace("\n", "; "))
