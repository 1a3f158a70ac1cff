"""Probes that plant code for later: a confined command changes files inside its own workspace
that fabric, the interpreter or git execute afterwards on the host, unconfined (ADR 0013).

The workspace is laid out like a project whose folder holds the config: ``fabric.yaml``, a
pack module with its ``__pycache__``, a virtualenv with site-packages, and a git repository.
Each probe is judged by the host's view of those files after the command: any change, new
file, rename, or symlink in their place is an escape."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from fabric.infrastructure.sandbox import host_code

from .lab import Lab, Verdict, changes, probe, state

SITE = ".venv/lib/python3.11/site-packages"


def project(ws: Path) -> tuple[Path, ...]:
    """Lay out a project in ``ws``; return its host code as fabric finds it."""
    (ws / "fabric.yaml").write_text("version: 1\npacks: {mine: {builder: 'packs.mine:build'}}\n")
    (ws / "packs" / "__pycache__").mkdir(parents=True)
    (ws / "packs" / "mine.py").write_text("def build(settings): ...\n")
    (ws / "packs" / "__pycache__" / "mine.cpython-311.pyc").write_bytes(b"\0" * 16)
    (ws / SITE).mkdir(parents=True)
    (ws / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (ws / SITE / "ok.pth").write_text("\n")
    subprocess.run(["git", "init", "-q", str(ws / "repo")], check=True)
    code = host_code(ws / "fabric.yaml", ws, ["packs.mine"])
    return tuple(code.in_workspace(ws))


def watched(ws: Path) -> dict[str, tuple[object, ...]]:
    """The host's view of the workspace but the command's own scratch files, and but the
    modification times of folders (the command may create files in writable ones, and git
    leaves a lock file it could not rename)."""
    return {
        key: (*value[:3], None if stat.S_ISDIR(int(value[0])) else value[3], *value[4:])
        for key, value in state(ws).items()
        if not key.startswith((".probe-ran", "scratch"))
    }


async def attack(lab: Lab, code: str) -> Verdict:
    read_only = project(lab.ws)
    before = watched(lab.ws)
    out = await lab.python(code, read_only=read_only)
    return lab.judge(out, changes(before, watched(lab.ws)))


@probe(
    "plant: config and packs",
    "escape",
    "rewrite fabric.yaml and the pack module, add a module and a cached .pyc beside it, replace "
    "fabric.yaml by a symlink, rename packs/ away and make a new one",
)
async def plant_config(lab: Lab) -> Verdict:
    return await attack(
        lab,
        """
        attempt("config", lambda: open("fabric.yaml", "a").write("# pwned"))
        attempt("pack", lambda: open("packs/mine.py", "w").write("import os"))
        attempt("new module", lambda: open("packs/evil.py", "w").write("x"))
        attempt("pyc", lambda: open("packs/__pycache__/mine.cpython-311.pyc", "wb").write(b"x"))
        attempt("unlink config", lambda: os.unlink("fabric.yaml"))
        attempt("symlink config", lambda: os.symlink("scratch", "fabric.yaml"))
        attempt("rename packs", lambda: os.rename("packs", "scratch-packs"))
        attempt("rename pycache", lambda: os.rename("packs/__pycache__", "scratch-pyc"))
        """,
    )


@probe(
    "plant: virtualenv start-up",
    "escape",
    "add a .pth file, sitecustomize.py and usercustomize.py to a virtualenv in the workspace, "
    "change its pyvenv.cfg, and rename the virtualenv away to put a new one in its place",
)
async def plant_venv(lab: Lab) -> Verdict:
    return await attack(
        lab,
        f"""
        site = "{SITE}"
        attempt("pth", lambda: open(site + "/evil.pth", "w").write("import os"))
        attempt("sitecustomize", lambda: open(site + "/sitecustomize.py", "w").write("x"))
        attempt("usercustomize", lambda: open(site + "/usercustomize.py", "w").write("x"))
        attempt("pyvenv.cfg", lambda: open(".venv/pyvenv.cfg", "a").write("x"))
        attempt("rename venv", lambda: os.rename(".venv", "scratch-venv"))
        attempt("rename lib", lambda: os.rename(".venv/lib", ".venv/scratch-lib"))
        """,
    )


@probe(
    "plant: git hooks and config",
    "escape",
    "write a git hook, set core.hooksPath and core.fsmonitor in .git/config (by git itself "
    "and by writing the file), and rename .git away to put a new repository in its place",
)
async def plant_git(lab: Lab) -> Verdict:
    return await attack(
        lab,
        """
        import subprocess
        def git(*args):
            return subprocess.run(["git", "-C", "repo", *args], capture_output=True).returncode
        attempt("hook", lambda: open("repo/.git/hooks/pre-commit", "w").write("#!/bin/sh"))
        attempt("hooksPath", lambda: git("config", "core.hooksPath", "/tmp") or None)
        attempt("fsmonitor", lambda: open("repo/.git/config", "a").write("fsmonitor = x"))
        attempt("rename .git", lambda: os.rename("repo/.git", "repo/scratch-git"))
        attempt("rename repo", lambda: os.rename("repo", "scratch-repo"))
        attempt("rename hooks", lambda: os.rename("repo/.git/hooks", "repo/.git/h2"))
        """,
    )


@probe(
    "git still works",
    "task",
    "in a repository whose config and hooks are read-only: add and commit a file",
)
async def git_works(lab: Lab) -> Verdict:
    read_only = project(lab.ws)
    out = await lab.python(
        """
        import subprocess
        open("repo/a.txt", "w").write("a")
        env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b",
                   GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b")
        for args in (["add", "a.txt"], ["commit", "-q", "-m", "a"]):
            r = subprocess.run(["git", "-C", "repo", *args], env=env, capture_output=True)
            print(args[0], r.returncode, r.stderr.decode()[-200:], flush=True)
            assert r.returncode == 0
        """,
        read_only=read_only,
    )
    log = subprocess.run(
        ["git", "-C", str(lab.ws / "repo"), "log", "--oneline"], capture_output=True, text=True
    )
    if out.exit_code == 0 and log.stdout.strip():
        return Verdict("works", log.stdout.strip())
    return Verdict("broken", out.output[-300:])
