"""A run plants code for later, and the next start of fabric runs none of it.

The attack of issue 11: the workspace is the folder that holds ``fabric.yaml`` and ``packs/``
(fabric's default when started there). A hostile model has a confined command rewrite the
config and the pack module, rename ``packs/`` away for a new one, and drop modules that would
shadow ones fabric or its libraries import (``brotli.py``, which httpx tries at import time;
``regex.py``; ``packs.py``; a sourceless ``.pyc``). Every planted file would, if run, leave a
mark in a folder outside the workspace. Then fabric starts again, in the same folder: no mark
may appear, and the config and the pack module must be as the user wrote them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sandbox.host import confining_backends
from support import assert_valid_runlog

from fabric.testing import MockOpenAIServer, completion

GUARD = 120.0
BACKENDS = confining_backends()
CONFIG = """\
version: 1
llm:
  backend: openai
  backends:
    openai: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  models: {default: m, coder: m}
  retry: {attempts: 1}
runs_dir: runs
default_pack: mine
packs:
  mine:
    builder: packs.mine:build
    sandbox: {allowed_commands: [python], confinement: BACKEND}
"""
PACK = "from packs.engineering import build  # the user's own pack: the engineering one\n"
MARK = "open({mark!r} + '/{name}', 'w').close()\n"
ATTACK = """\
import os, sys
marks = sys.argv[1]
def plant(path, name):
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(f"open({marks!r} + '/{name}', 'w').close()\\n")
        print("planted", path)
    except OSError as exc:
        print("refused", path, exc)
plant("packs/mine.py", "pack-module")
plant("packs/evil.py", "pack-new-module")
plant("brotli.py", "brotli")
plant("regex.py", "regex")
plant("packs.py", "packs-module")
plant("sitecustomize.py", "sitecustomize")
try:
    with open("fabric.yaml", "a") as f:
        f.write("\\n# changed by the run\\n")
except OSError as exc:
    print("refused fabric.yaml", exc)
try:
    os.rename("packs", "packs-old")
    plant("packs/mine.py", "pack-replaced")
except OSError as exc:
    print("refused rename", exc)
"""


def the_model(marks: Path) -> Any:
    """Writes attack.py, runs it, tries to write the pack module with write_file, finishes."""
    planted = MARK.format(mark=str(marks), name="t")
    steps = [
        ("write_file", {"path": "attack.py", "content": ATTACK}),
        ("shell", {"command": f"python attack.py {marks}"}),
        ("write_file", {"path": "packs/mine.py", "content": planted}),
        ("write_file", {"path": ".venv/lib/x.pth", "content": "import os"}),
    ]

    def handler(body: dict[str, Any]) -> tuple[int, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < len(steps):
            return 200, completion(None, [steps[done]])
        return 200, completion(None, [("finish_task", {"summary": "done"})])

    return handler


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_cannot_plant_code_that_fabric_runs_next(tmp_path: Path, backend: str) -> None:
    project, marks = tmp_path / "project", tmp_path / "marks"
    (project / "packs").mkdir(parents=True)
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    marks.mkdir()
    config = CONFIG.replace("BACKEND", backend)
    (project / "fabric.yaml").write_text(config)
    (project / "packs" / "mine.py").write_text(PACK)
    env = {**os.environ, "HOME": str(tmp_path)}

    def fabric(*args: str, url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fabric", *args],
            env={**env, "FABRIC_BASE_URL": url}, cwd=project, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=GUARD, check=False,
        )  # fmt: skip

    with MockOpenAIServer(the_model(marks), models=["m"]) as server:
        first = fabric("run", "--pack", "mine", "do the task", url=server.base_url)
        assert first.returncode == 3, first.stderr  # done; no check of the pack confirmed it
        second = fabric("run", "--pack", "mine", "do the task", url=server.base_url)
        packs = fabric("packs", url=server.base_url)

    assert sorted(p.name for p in marks.iterdir()) == [], (first.stdout, second.stderr)
    # packs.py beside packs/: fabric refuses to guess which one the user wrote
    assert second.returncode == 2 and "will not guess" in second.stderr, second.stderr
    assert (project / "fabric.yaml").read_text() == config
    assert (project / "packs" / "mine.py").read_text() == PACK
    assert not (project / "packs" / "evil.py").exists()
    assert not (project / ".venv" / "lib" / "x.pth").exists()
    assert "will not guess" in packs.stderr, packs.stderr

    [log] = (project / "runs").glob("*/runlog.jsonl")  # the second run never started
    events = assert_valid_runlog(log)
    results = [e for e in events if e["kind"] == "tool_result"]
    [_, run_attack, write_pack, write_pth] = results
    assert "refused packs/mine.py" in run_attack["output"]
    assert "refused rename" in run_attack["output"]
    assert write_pack["error"]["code"] == "sandbox_denied" or "read-only" in str(write_pack)
    assert "read-only" in write_pack["error"]["message"]
    assert "read-only" in write_pth["error"]["message"] or "virtualenv" in str(write_pth)


PLANT_CONFIG = """\
import sys
marks = sys.argv[1]
with open("evil.py", "w") as f:
    f.write(f"open({marks!r} + '/evil', 'w').close()\\ndef build(settings): ...\\n")
with open("fabric.yaml", "w") as f:
    f.write("version: 1\\npacks: {evil: {builder: 'evil:build'}}\\n")
print("planted")
"""


def test_configuration_a_run_creates_is_not_loaded_at_the_next_start(tmp_path: Path) -> None:
    """The workspace had no fabric.yaml (fabric ran there on another config): a run creates
    one, naming a pack module it also writes. fabric started in that folder refuses the config,
    and after the user accepts it (saves it again), still refuses the module the run wrote."""
    conf, ws, marks = tmp_path / "conf", tmp_path / "ws", tmp_path / "marks"
    for folder in (conf, ws, marks):
        folder.mkdir()
    (conf / "fabric.yaml").write_text(
        CONFIG.replace("BACKEND", BACKENDS[0]).replace(
            "packs.mine:build", "packs.engineering:build"
        )
    )
    steps = [
        ("write_file", {"path": "plant.py", "content": PLANT_CONFIG}),
        ("shell", {"command": f"python plant.py {marks}"}),
    ]

    def model(body: dict[str, Any]) -> tuple[int, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "tool")
        if done < len(steps):
            return 200, completion(None, [steps[done]])
        return 200, completion(None, [("finish_task", {"summary": "done"})])

    env = {**os.environ, "HOME": str(tmp_path)}

    def fabric(*args: str, cwd: Path, url: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "fabric", *args],
            env={**env, "FABRIC_BASE_URL": url} if url else env, cwd=cwd,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=GUARD, check=False,
        )  # fmt: skip

    with MockOpenAIServer(model, models=["m"]) as server:
        first = fabric(
            "run", "--config", str(conf / "fabric.yaml"), "-w", str(ws), "plant it",
            cwd=tmp_path, url=server.base_url,
        )  # fmt: skip
    assert first.returncode == 3, first.stderr  # done; no check of the pack confirmed it
    assert "planted" in (ws / "fabric.yaml").read_text() or (ws / "fabric.yaml").is_file()

    refused = fabric("packs", cwd=ws)
    assert refused.returncode == 2, refused.stdout
    assert "was written while run" in refused.stderr and "save it again" in refused.stderr

    (ws / "fabric.yaml").write_text((ws / "fabric.yaml").read_text())  # the user accepts it
    still = fabric("packs", cwd=ws)
    assert "evil.py was written while run" in still.stderr, still.stderr
    assert list(marks.iterdir()) == []  # the planted module never ran
