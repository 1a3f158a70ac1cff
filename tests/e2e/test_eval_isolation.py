"""Attempts of one eval cannot read each other: the real ``fabric eval`` with a scripted model
behind a loopback server, three attempts of one case, in turn and two at once, under every
confining backend.

Each attempt writes a secret of its own into its workspace, then reads all it can of the eval's
output folder: the folder walked, the other attempts' secrets by their paths, and the runlogs
by the paths the host sees (as a model that guessed the run ids would). With ``--jobs 2`` the
first two attempts wait for each other, so each reads while the other runs with its secret
written. The case's check does the same from the finished workspace (a check runs the code the
model left there) and passes only when it read nothing of another attempt. The eval's folder
lies outside /tmp: bubblewrap gives commands a /tmp of their own, which would hide it anyway.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sandbox.host import confining_backends
from sandbox.lab import lab_folder
from support import mock_llm, read_events, run_fabric, write

from fabric.testing import MockOpenAIServer, completion

PROBE = """
import os, sys
out, targets = sys.argv[1], sys.argv[2:]
here = os.getcwd()
seen = {}
def take(path):
    if os.path.realpath(path).startswith(here + os.sep):
        return  # its own workspace
    try:
        with open(path, errors="replace") as f:
            seen[path] = f.read(1_000_000)
    except OSError:
        pass
for path in targets:
    take(path)
for root, _, files in os.walk(out):
    for name in files:
        take(os.path.join(root, name))
leaked = [(path, text[:200]) for path, text in sorted(seen.items())
          if "SECRET-OF-ATTEMPT" in text or "run_started" in text]
print("leaked:", leaked) if leaked else print("clean: read", len(seen), "files, none another's")
"""
SUITE = """
version: 1
name: apart
defaults: {{pack: engineering, limits: {{max_steps: 6, timeout_s: 90}}, verify: "off"}}
pack_settings:
  engineering: {{sandbox: {{confinement: {backend}}}}}
cases:
  - id: solve
    workspace: workspaces/solve
    task: "Write your answer into secret.txt."
    checks:
      - run: python probe.py {out} {targets}
        output_contains: "clean:"
"""


@pytest.fixture
def lab() -> Iterator[Path]:
    with lab_folder("eval-apart-") as root:
        yield root


class Attempts:
    """The scripted model: finds which attempt asks by its workspace (its first command prints
    it), writes that attempt's secret, reads the others', and finishes. With ``together``, the
    first two attempts wait for each other after writing and after reading."""

    def __init__(self, out: Path, together: bool) -> None:
        self.out, self.together = out, together
        self.tokens = {n: f"SECRET-OF-ATTEMPT-{n}-{secrets.token_hex(6)}" for n in (1, 2, 3)}
        self.written, self.read = threading.Barrier(2), threading.Barrier(2)
        self.met: list[str] = []

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        messages = body["messages"]
        step = sum(m["role"] == "assistant" for m in messages)
        if step == 0:
            where = "python -c 'import os; print(os.getcwd())'"
            return 200, completion(None, [("shell", {"command": where})])
        said = [str(m.get("content")) for m in messages if m["role"] == "tool"]
        found = re.search(r"/work/solve/(\d)\b", said[0])
        n = int(found.group(1)) if found else 0
        if step == 1:
            write = {"path": "secret.txt", "content": self.tokens.get(n, "?")}
            return 200, completion(None, [("write_file", write)])
        if step in (2, 3) and self.together and n in (1, 2):
            barrier = self.written if step == 2 else self.read
            barrier.wait(60)
            self.met.append(f"{n}@{step}")
        if step == 2:
            runlogs = sorted(str(p) for p in (self.out / "runs").glob("*/runlog.jsonl"))
            command = " ".join(["python probe.py", str(self.out), *self.targets(), *runlogs])
            return 200, completion(None, [("shell", {"command": command})])
        return 200, completion(None, [("finish_task", {"summary": f"attempt {n} done"})])

    def targets(self) -> list[str]:
        return [str(self.out / "work" / "solve" / str(n) / "secret.txt") for n in (1, 2, 3)]


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("backend", confining_backends())
def test_no_attempt_reads_another_attempts_workspace_or_runlog(
    lab: Path, backend: str, jobs: int
) -> None:
    out = lab / "out"
    model = Attempts(out, together=jobs == 2)
    suite = lab / "suite"
    text = SUITE.format(backend=backend, out=out, targets=" ".join(model.targets()))
    write(suite, text, "suite.yaml")
    write(suite, PROBE, "workspaces/solve/probe.py")
    with MockOpenAIServer(model) as server:
        config = {
            "version": 1,
            "llm": mock_llm(server.base_url),
            "packs": {"engineering": {"builder": "packs.engineering:build"}},
        }
        write(lab, json.dumps(config), "fabric.yaml")
        done = run_fabric(
            "eval", str(suite), "--config", str(lab / "fabric.yaml"), "--out", str(out),
            "-n", "3", "--jobs", str(jobs), cwd=lab, timeout=300,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if jobs == 2:
        assert sorted(model.met) == ["1@2", "1@3", "2@2", "2@3"], "the two did not run together"
    results = json.loads((out / "results.json").read_text())
    [case] = results["cases"]
    for attempt in case["runs"]:
        n = attempt["attempt"]
        events = read_events(out / attempt["runlog"])
        assert events[0]["confinement"]["backend"] == backend
        probed = [e["output"] for e in events if e["kind"] == "tool_result"][2]
        others = [t for m, t in model.tokens.items() if m != n]
        assert "clean:" in probed and not any(t in probed for t in others), probed
        assert attempt["passed"], f"attempt {n}'s check read another's: {attempt['checks']}"
        kept = out / "work" / "solve" / str(n) / "secret.txt"
        assert kept.read_text() == model.tokens[n]  # the workspace is kept for a person
    assert sorted(a["attempt"] for a in case["runs"]) == [1, 2, 3]
