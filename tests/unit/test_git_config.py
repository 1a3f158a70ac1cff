"""Git's config files as fabric reads them (``packs/git_config.py``): the same settings git
reads, or none where git would refuse a line; a config cut down to settings that run nothing
holds only those, and git reads it back and keeps working."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fabric.infrastructure.packs.git_config import parse, runs_nothing, sanitized

READ_ALIKE = [
    "[core]\n\tbare = false\n\tfilemode = true\n",
    "[core] bare = true\n",
    '[remote "ori\\"g in"]\n url = a b  c \n fetch = "+refs/*" # c\n',
    "[branch.Main]\n remote = o\n",
    '[core]\n x = a\\\n b\n y = "a;b" ; c\n z\n',
    '[core]\n x = "a\\tb\\nc\\\\"\n',
    "\ufeff[core]\r\n  a = b\r\n",
    '[core]\n a = "  spaced  "\n b =    lead and trail   \n',
    '[includeIf "gitdir:~/w/"]\n path = x\n[include]\npath=y\n',
    '[core]\n a = x # comment\n b = "x # not"\n c\n',
    "[core]\n a = 1 \\\n",
    '[sec "sub\\\\x"]\n a = 1\n',
    '[sec "tab\there"]\n a = 1\n',
    '[core]\n a = "x\\\n y"\n',
    '[core]\n\ta=\n a = "" "" b\n',
]
"""Configs git reads, each with a turn of its syntax: fabric must read the same settings."""

REFUSED = [
    '[core]\n x = "unterminated\n y = 1\n',
    "[ core]\n x = 1\n",
    "[core]\n 1x = 1\n",
    "[core]\n x y = 1\n",
    "[core]\n x = a\\q\n",
    "[core]\n a = 1\n[",
    "[core]\n a = 1\n c ; a comment after a name alone\n",
]
"""Lines git refuses ("bad config line"): fabric must not read a setting from them."""


def git_reads(tmp_path: Path, text: str) -> list[tuple[str, str | None]] | None:
    """What ``git config --list`` reads from ``text``; None when git refuses it."""
    config = tmp_path / "config"
    config.write_text(text, encoding="utf-8")
    done = subprocess.run(
        ["git", "config", "--file", str(config), "--list", "--null"],
        capture_output=True,
        check=False,
        env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)},
    )
    if done.returncode:
        return None
    found: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0")[:-1]:
        key, newline, value = item.partition(b"\n")
        found.append((key.decode(), value.decode() if newline else None))
    return found


@pytest.mark.parametrize("text", READ_ALIKE)
def test_fabric_reads_what_git_reads(tmp_path: Path, text: str) -> None:
    settings, refused = parse(text)
    assert refused == []
    assert [(s.key, s.value) for s in settings] == git_reads(tmp_path, text)


@pytest.mark.parametrize("text", REFUSED)
def test_a_line_git_refuses_is_no_setting(tmp_path: Path, text: str) -> None:
    settings, refused = parse(text)
    assert git_reads(tmp_path, text) is None
    assert refused, "a line git refuses is told"
    assert [s.key for s in settings] in ([], ["core.a"]), "only what comes before it"


def test_settings_in_no_section_or_one_fabric_doubts_are_left_out(tmp_path: Path) -> None:
    """git reads a setting before any section, and ``[a.b "c"]``; nothing fabric keeps is
    there, so it reads neither."""
    text = 'x = 1\n[a.b "c"]\n y = 2\n[core]\n bare = false\n'
    assert git_reads(tmp_path, text) is not None
    settings, refused = parse(text)
    assert [s.key for s in settings] == ["core.bare"] and refused == [1, 2, 3]


HOSTILE = """\
[core]
\trepositoryformatversion = 0
\tbare = false
\tfsmonitor = "touch /tmp/x; false"
\thooksPath = /tmp/hooks
\tsshCommand = evil
[core "x"]
\tbare = false
[user]
\temail = agent@example.invalid
\tsigningkey = ./key
[alias]
\tst = !evil
[remote "origin"]
\turl = https://example.invalid/a.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
\tuploadpack = evil
[remote "ext"]
\turl = ext::sh -c evil
[filter "lfs"]
\tclean = evil
[include]
\tpath = ../elsewhere
[includeIf "onbranch:main"]
\tpath = ../elsewhere
[branch "main"]
\tremote = origin
\tmerge = refs/heads/main
[core]
\tfilemode = maybe
\tpager = "unterminated
"""


def test_a_cut_down_config_keeps_only_settings_that_run_nothing(tmp_path: Path) -> None:
    new, dropped = sanitized(HOSTILE, runs_nothing)
    assert new is not None
    assert git_reads(tmp_path, new) == [
        ("core.repositoryformatversion", "0"),
        ("core.bare", "false"),
        ("user.email", "agent@example.invalid"),
        ("remote.origin.url", "https://example.invalid/a.git"),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),
        ("branch.main.remote", "origin"),
        ("branch.main.merge", "refs/heads/main"),
    ]
    for key in ("core.fsmonitor", "core.hookspath", "alias.st", "remote.ext.url", "include.path"):
        assert key in dropped
    assert "core.x.bare" in dropped and "core.filemode" in dropped
    assert dropped[-1] == f"line {len(HOSTILE.splitlines())}", "a line git refuses is told"
    assert sanitized(new, runs_nothing) == (None, []), "nothing more to take out"


def test_git_works_in_a_repository_whose_config_was_cut_down(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    env |= {"GIT_AUTHOR_NAME": "a", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
        ).stdout

    repo.mkdir()
    git("init", "-q", "--object-format=sha256")
    config = repo / ".git" / "config"
    hostile = HOSTILE.split("[core]\n\tfilemode")[0].replace("repositoryformatversion = 0", "")
    config.write_text(config.read_text() + hostile)
    new, _ = sanitized(config.read_text(), runs_nothing)
    assert new is not None and "objectformat" in new
    config.write_text(new)
    (repo / "a.txt").write_text("a\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "after")
    assert git("log", "--format=%s|%ae") == "after|agent@example.invalid\n"
    assert git("status", "--porcelain") == ""
