"""``fabric eval`` end to end: the real command, a scripted model behind a loopback OpenAI-style
server, real confined check commands, the suite's own loopback web service.

One suite of four cases: one the model really fixes, one it only claims to have fixed (a false
success), one whose check command tries to reach the network and write outside the workspace
(the network must be refused, and the write must not reach the host: under bubblewrap it lands
in the command's private /tmp), and a research case that searches and reads the suite's local pages.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import assert_valid_runlog, mock_llm, read_events, run_fabric, write

from fabric.testing import MockOpenAIServer, completion

SUITE = """
version: 1
name: tiny
description: Four small cases for the eval machinery's own tests.
defaults:
  pack: engineering
  limits: {max_steps: 6, timeout_s: 60}
services:
  web: {pages: pages}
pack_settings:
  research:
    sandbox: {network: true, allow_private_addresses: true}
    web: {search: {kind: searxng, url: "${web_url}"}}
cases:
  - id: greet
    workspace: workspaces/greet
    task: "[case:greet] hello() in greet.py has a typo; make it return 'hello'."
    checks:
      - run: python -c "import greet; assert greet.hello() == 'hello'"
      - file: greet.py
        contains: return "hello"
  - id: false-claim
    workspace: workspaces/greet
    task: "[case:false-claim] Make hello() in greet.py return 'hello'. (peek: SOLUTION)"
    verify: python -c "import greet"  # a weak check of the user's: it confirms a claim
    checks:
      - run: python -c "import greet; assert greet.hello() == 'hello'"
"""
CONFINED_CASE = """
id: confined
tier: medium
workspace: ../workspaces/probe
task: "[case:confined] Nothing to change; just finish."
checks:
  - run: python probe.py {outside} {port}
    output_contains: "network: blocked"
"""
RESEARCH_CASE = """
id: research
tier: hard
pack: research
verify: null
task: "[case:research] What colour is the sky on Fabricia? Search ${web_url} pages."
checks:
  - payload: answer
    contains: green
  - payload: citations.0.url
    matches: "^${web_url}/fabricia\\\\.html$"
"""
PROBE = """
import socket, sys
outside, port = sys.argv[1], int(sys.argv[2])
said = []
try:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as conn:
        conn.sendall(b"POST /probe HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 2\\r\\n\\r\\n{}")
        conn.recv(100)
    said.append("network: reached")
except OSError:
    said.append("network: blocked")
try:
    with open(outside, "w") as out:
        out.write("escaped")
    said.append("write: done")
except OSError:
    said.append("write: blocked")
print(" ".join(said))
sys.exit(0 if said[0] == "network: blocked" else 1)
"""
FABRICIA = """<html><head><title>Fabricia facts</title></head><body>
<h1>Fabricia facts</h1><p>The sky on Fabricia is green, because of its copper dust.</p>
</body></html>"""
OTHER = "<html><head><title>Weather on Earth</title></head><body>Blue skies.</body></html>"


def _script(case: str, step: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the scripted model answers at ``step`` (0-based) of ``case``."""
    if case == "greet" and step == 0:
        fix = {"path": "greet.py", "old": 'return "helo"', "new": 'return "hello"'}
        return completion(None, [("edit_file", fix)])
    if case == "research":
        if step == 0:
            return completion(None, [("web_search", {"query": "Fabricia sky colour"})])
        found = re.search(r"http://[\w.:]+/fabricia\.html", str(messages[-1].get("content")))
        url = found.group(0) if found else "http://nowhere.invalid/"
        if step == 1:
            return completion(None, [("fetch_url", {"url": url})])
        quote = "The sky on Fabricia is green, because of its copper dust."
        answer = {"answer": "It is green.", "citations": [{"url": url, "quote": quote}]}
        return completion(None, [("finish_task", answer)])
    if case == "false-claim" and step == 0:  # try to copy the reference solution
        peek = re.search(r"\(peek: (\S+)\)", messages[1]["content"]).group(1)  # type: ignore[union-attr]
        return completion(None, [("shell", {"command": f"cat {peek}"})])
    return completion(None, [("finish_task", {"summary": f"{case}: done, all fixed."})])


class Model:
    """The scripted model: answers by case and step; counts each case's runs; can hold a
    case's first answer until released (to stop an eval mid-run)."""

    def __init__(self, hold: str | None = None) -> None:
        self.starts: Counter[str] = Counter()
        self.hold, self.holding, self.release = hold, threading.Event(), threading.Event()

    def __call__(self, body: dict[str, Any]) -> tuple[int, Any]:
        messages = body["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        case = re.search(r"\[case:([a-z-]+)\]", task).group(1)  # type: ignore[union-attr]
        step = sum(m["role"] == "assistant" for m in messages)
        if step == 0:
            self.starts[case] += 1
        if case == self.hold and not self.release.is_set():
            self.holding.set()
            self.release.wait(60)
        return 200, _script(case, step, messages)


def _suite(root: Path, port: int) -> Path:
    suite = root / "suite"
    solution = suite / "solutions" / "greet" / "greet.py"
    write(suite, SUITE.replace("SOLUTION", str(solution)), "suite.yaml")
    write(suite, 'def hello():\n    return "helo"\n', "workspaces/greet/greet.py")
    write(suite, PROBE, "workspaces/probe/probe.py")
    outside = root / "escaped.txt"
    write(suite, CONFINED_CASE.format(outside=outside, port=port), "cases/10-confined.yaml")
    write(suite, RESEARCH_CASE, "cases/20-research.yaml")
    write(suite, FABRICIA, "pages/fabricia.html")
    write(suite, OTHER, "pages/earth.html")
    write(suite, 'def hello():\n    return "hello"\n', "solutions/greet/greet.py")
    return suite


def _config(root: Path, base_url: str) -> Path:
    config = {
        "version": 1,
        "llm": mock_llm(base_url),
        "runs_dir": "runs",
        "packs": {
            "engineering": {"builder": "packs.engineering:build"},
            "research": {"builder": "packs.research:build"},
        },
    }
    return write(root, json.dumps(config), "fabric.yaml")


def _case(results: dict[str, Any], case_id: str) -> dict[str, Any]:
    return next(c for c in results["cases"] if c["id"] == case_id)


def test_an_eval_checks_the_work_and_continues_where_it_stopped(tmp_path: Path) -> None:
    model = Model()
    with MockOpenAIServer(model) as server:
        port = int(server.base_url.split(":")[2].split("/")[0])
        suite, config = _suite(tmp_path, port), _config(tmp_path, server.base_url)
        out = tmp_path / "out"
        common = ["eval", str(suite), "--config", str(config), "--out", str(out), "-n", "2"]

        first = run_fabric(*common, "--jobs", "2", "--case", "greet", "--case", "false-*",
                           cwd=tmp_path)  # fmt: skip
        assert first.returncode == 0, first.stderr
        lines = (out / "attempts.jsonl").read_text().splitlines()
        assert len(lines) == 4
        results = json.loads((out / "results.json").read_text())
        assert _case(results, "greet")["passed"] == 2
        claim = _case(results, "false-claim")
        assert (claim["passed"], claim["false_successes"], claim["statuses"]) == (
            0, 2, {"completed": 2}
        )  # fmt: skip
        assert "exit code 1" in claim["runs"][0]["checks"][0]["evidence"]
        assert "AssertionError" in claim["runs"][0]["checks"][0]["evidence"]
        peeked = [
            e for e in read_events(out / claim["runs"][0]["runlog"]) if e["kind"] == "tool_result"
        ]
        assert "No such file" in peeked[0]["output"], peeked  # (Landlock: test_eval_attempts)
        # complete for what this command chose (--case); the rest of the suite is not listed
        assert results["complete"] is True and results["missing"] == 0
        assert sorted(c["id"] for c in results["cases"]) == ["false-claim", "greet"]
        assert "| greet | easy | 2/2 | 100% (34% to 100%)" in first.stdout
        for case in results["cases"]:
            for attempt in case["runs"]:
                assert_valid_runlog(out / attempt["runlog"])
                assert (out / "work" / case["id"] / str(attempt["attempt"])).is_dir()

        second = run_fabric(*common, cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        assert model.starts == {"greet": 2, "false-claim": 2, "confined": 2, "research": 2}
        results = json.loads((out / "results.json").read_text())
        confined = _case(results, "confined")
        assert confined["passed"] == 2, confined["runs"][0]["checks"]
        assert "exit code 0" in confined["runs"][0]["checks"][0]["evidence"]
        assert not (tmp_path / "escaped.txt").exists()
        assert not [r for r in server.requests if r["_path"] == "/probe"]
        assert _case(results, "research")["passed"] == 2, _case(results, "research")["runs"]
        assert results["complete"] is True and results["overall"]["attempts"] == 8
        assert results["overall"]["passed"] == 6 and results["overall"]["false_successes"] == 2
        assert set(results["tiers"]) == {"easy", "medium", "hard"}
        assert results["overall"]["pass_at_k"] == {"1": 0.75, "2": 0.75}
        summary = (out / "summary.md").read_text()
        assert "## By tier" in summary and "completed (false success)" in summary
        assert f"`fabric {' '.join(common)}`" in summary
        assert len((out / "attempts.jsonl").read_text().splitlines()) == 8

        other = run_fabric(*common, "--model", "another", cwd=tmp_path)
        assert other.returncode == 2
        assert "cannot be continued" in other.stderr and "--restart" in other.stderr

    changed = json.loads((out / "results.json").read_text())
    greet = _case(changed, "greet")
    greet["passed"], greet["pass_rate"] = 0, 0.0
    write(tmp_path, json.dumps(changed), "b/results.json")
    compared = run_fabric("eval", "compare", str(out), str(tmp_path / "b"), cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    row = next(line for line in compared.stdout.splitlines() if line.startswith("| greet "))
    assert "B worse" in row and "-100 pp" in row
    assert "| research | hard | 2/2 (100%) | 2/2 (100%) | +0 pp" in compared.stdout
    as_json = run_fabric("eval", "compare", str(out), str(tmp_path / "b"), "--json", cwd=tmp_path)
    verdicts = {c["case"]: c["verdict"] for c in json.loads(as_json.stdout)["cases"]}
    assert verdicts == {"greet": "B worse", "false-claim": "within noise",
                        "confined": "within noise", "research": "within noise"}  # fmt: skip


def test_ctrl_c_keeps_what_finished_and_a_rerun_makes_the_rest(tmp_path: Path) -> None:
    model = Model(hold="false-claim")
    with MockOpenAIServer(model) as server:
        suite, config = _suite(tmp_path, 9), _config(tmp_path, server.base_url)
        out = tmp_path / "out"
        argv = ["eval", str(suite), "--config", str(config), "--out", str(out)]
        argv += ["--case", "greet", "--case", "false-claim"]
        proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "fabric", *argv],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert model.holding.wait(60), "the second attempt never reached the model"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            model.release.set()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        assert "continue with: fabric eval" in err
        [kept] = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
        assert kept["case"] == "greet" and kept["passed"] is True
        logs = {read_events(p)[0]["task"][:20]: p for p in (out / "runs").glob("*/runlog.jsonl")}
        cut = read_events(next(p for t, p in logs.items() if "false-claim" in t))
        assert cut[-1]["kind"] == "run_finished" and cut[-1]["status"] == "cancelled"
        assert "| false-claim | easy | 0 |" in (out / "summary.md").read_text()

        again = run_fabric(*argv, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert model.starts == {"greet": 1, "false-claim": 2}
        assert len((out / "attempts.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"args": ["nowhere"]}, "suite nowhere does not exist"),
        ({"case": "nothing-*"}, "--case 'nothing-*' matches no case of suite tiny"),
        ({"suite_text": SUITE.replace("    checks:", "    checkz:", 1)}, "suite.yaml:"),
        ({"suite_text": SUITE.replace("pack: engineering", "pack: nope")}, "no pack named 'nope'"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    suite, config = _suite(tmp_path, 9), _config(tmp_path, "http://127.0.0.1:9/v1")
    if "suite_text" in change:
        write(suite, change["suite_text"], "suite.yaml")
    args = change.get("args", [str(suite)])
    extra = ["--case", change["case"]] if "case" in change else []
    result = run_fabric("eval", *args, "--config", str(config), *extra, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
