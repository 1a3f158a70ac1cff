"""``fabric memory`` as a user runs it: what runs of a pack with memory kept (a real ``fabric
run`` against a loopback model server), listed, shown, searched and deleted; the confirmation
asked for, and refused with no terminal to ask at; clear errors for an unknown id and for a
store that does not exist yet."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import assert_valid_runlog, run_fabric

from fabric.infrastructure.additions.memory_store import MemoryStore
from fabric.testing import MockOpenAIServer, completion

CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  models: {default: m}
  retry: {attempts: 1}
runs_dir: runs
packs:
  notes:
    builder: declarative
    system_prompt: You keep notes.
    tools: [read_file]
    finish_schema: {type: object, properties: {answer: {type: string}}}
    memory: {enabled: true}
"""
FACT = "Releases are tagged vX.Y.Z and pushed by `make release`, never by hand."


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "fabric.yaml").write_text(CONFIG)
    (tmp_path / "ws").mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.setenv("FABRIC_MEMORY_DB", str(tmp_path / "data" / "memory.sqlite3"))
    return tmp_path


def fabric(project: Path, *args: str) -> tuple[int, str, str]:
    done = run_fabric(*args, cwd=project / "ws", env=os.environ)
    return done.returncode, done.stdout, done.stderr


def test_a_fact_a_run_kept_is_listed_shown_searched_and_deleted(project: Path) -> None:
    script = [
        completion(None, [("remember", {"fact": FACT})]),
        completion(None, [("finish_task", {"answer": "noted"})]),
    ]
    with MockOpenAIServer(script, models=["m"]) as server:
        env = {**os.environ, "FABRIC_BASE_URL": server.base_url}
        ran = run_fabric(
            "run", "-c", str(project / "fabric.yaml"), "-p", "notes", "--json", "note it",
            cwd=project / "ws", env=env,
        )  # fmt: skip
    assert ran.returncode in (0, 3), ran.stderr
    assert "kept memory 1: Releases are tagged" in ran.stderr
    events = assert_valid_runlog(json.loads(ran.stdout)["runlog"])
    run_id = events[0]["run_id"]

    code, out, _ = fabric(project, "memory", "list")  # the current folder's
    assert code == 0
    assert out.splitlines()[0] == f"{(project / 'ws').resolve()}: 1 fact"
    assert "1  " in out and FACT in out
    code, out, _ = fabric(project, "memory", "list", "--workspace", str(project / "other"))
    assert code == 0 and out.startswith("no memories of") and FACT not in out
    code, out, _ = fabric(project, "memory", "list", "--all", "--json")
    [listed] = json.loads(out)["facts"]
    assert listed["fact"] == FACT and listed["run_id"] == run_id and listed["pack"] == "notes"

    code, out, _ = fabric(project, "memory", "show", "1")
    assert code == 0 and f"run:       {run_id}" in out and f"fact:      {FACT}" in out
    code, out, _ = fabric(project, "memory", "search", "how to release")
    assert code == 0 and FACT in out
    code, out, _ = fabric(project, "memory", "search", "release", "-w", str(project / "other"))
    assert code == 0 and FACT not in out

    # no terminal to ask at: nothing deleted without --yes
    code, _, err = fabric(project, "memory", "delete", "1")
    assert code == 2 and "no terminal to ask at" in err and "--yes" in err
    code, out, _ = fabric(project, "memory", "delete", "1", "--yes")
    assert code == 0 and "deleted 1 memory" in out
    assert MemoryStore(project / "data" / "memory.sqlite3").facts() == []


def test_deleting_a_workspaces_memories_asks_first(project: Path) -> None:
    store = MemoryStore(project / "data" / "memory.sqlite3")
    for n in range(3):
        store.add(str((project / "ws").resolve()), f"fact {n}", "r1", "notes", most=9)
    store.add(str((project / "other").resolve()), "kept elsewhere", "r2", "notes", most=9)
    code, _, err = fabric(project, "memory", "delete", "--all")
    assert code == 2 and "--workspace DIR --all" in err
    code, out, _ = fabric(
        project, "memory", "delete", "--workspace", str(project / "ws"), "--all", "--yes", "--json"
    )
    assert code == 0 and json.loads(out) == {"status": "deleted", "deleted": [1, 2, 3]}
    assert [f.text for f in store.facts()] == ["kept elsewhere"]


def test_unknown_ids_and_a_missing_store_are_said_clearly(project: Path) -> None:
    code, out, err = fabric(project, "memory", "show", "3")
    assert code == 2 and "there are no memories yet: no store at" in err
    code, out, _ = fabric(project, "memory", "list")
    assert code == 0 and "no store yet at" in out
    assert not (project / "data").exists()  # looking made nothing
    MemoryStore(project / "data" / "memory.sqlite3").add("/x", "a fact", "r", "p", most=9)
    code, out, err = fabric(project, "memory", "delete", "1", "7", "9", "--yes", "--json")
    assert code == 2 and json.loads(out)["error"]["message"].startswith("no memory with id 7, 9")
    assert MemoryStore(project / "data" / "memory.sqlite3").count("/x") == 1  # none deleted


def test_what_the_store_holds_cannot_drive_the_terminal(project: Path) -> None:
    store = MemoryStore(project / "data" / "memory.sqlite3")
    store.add("/srv/\x1b]0;owned\x07ws", "a fact \x1b[2J\u202ereversed", "r\x1b1", "p", most=5)
    for args in (("memory", "list", "--all"), ("memory", "show", "1")):
        code, out, err = fabric(project, *args)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, out
        assert "/srv/?]0;owned?ws" in out
