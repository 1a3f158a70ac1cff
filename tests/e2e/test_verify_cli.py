"""What a user sees when a model claims success the work does not back: the real ``fabric``
process, the engineering pack, a loopback model server that "fixes" a bug wrongly and says it
is done. The run ends ``unverified`` (exit 1), ``fabric show`` shows the failing test, and the
``--verify``/``--no-verify`` options change what is checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support import assert_valid_runlog, mock_llm, run_fabric

from fabric.testing import MockOpenAIServer, completion

BROKEN = "def add(a, b):\n    return a - b\n"
SEEN = "figures: every number the summary states was seen during the run"
FIXED = "def add(a, b):\n    return a + b\n"


def project(tmp_path: Path, llm_url: str) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "calc.py").write_text(BROKEN)
    (ws / "conftest.py").write_text("")
    (ws / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    config = {
        "version": 1,
        "llm": mock_llm(llm_url),
        "runs_dir": str(tmp_path / "runs"),
        "default_pack": "engineering",
        "packs": {
            "engineering": {
                "builder": "packs.engineering:build",
                "limits": {"max_steps": 8, "finish_repairs": 1},
            }
        },
    }
    (tmp_path / "fabric.yaml").write_text(json.dumps(config))
    return ws, tmp_path / "fabric.yaml"


def claims_done(wrong: str) -> list[dict[str, object]]:
    """A model that edits calc.py into ``wrong`` and says the tests pass, twice."""
    write = completion(None, [("edit_file", {"path": "calc.py", "old": BROKEN, "new": wrong})])
    done = completion(None, [("finish_task", {"summary": "Fixed add; all tests pass."})])
    return [write, done, done]


def fabric(config: Path, ws: Path, *args: str) -> tuple[int, str, str]:
    proc = run_fabric(
        "run", "--config", str(config), "--workspace", str(ws), *args, cwd=ws.parent,
        env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def test_a_false_claim_of_success_ends_unverified_with_the_evidence(tmp_path: Path) -> None:
    with MockOpenAIServer(claims_done("def add(a, b):\n    return a * b\n")) as server:
        ws, config = project(tmp_path, server.base_url)
        code, out, err = fabric(config, ws, "--json", "Fix add in calc.py")

    assert code == 1, err
    result = json.loads(out)
    assert result["status"] == "unverified"
    assert result["payload"] == {"summary": "Fixed add; all tests pass."}  # the claim, kept
    assert result["error"]["code"] == "unverified"
    assert "assert 6 == 5" in result["error"]["message"]
    events = assert_valid_runlog(Path(result["runlog"]))
    checks = [e for e in events if e["kind"] == "verification" and "command" in e]
    assert [c["ok"] for c in checks] == [False, False]
    assert checks[0]["command"] == "python -m pytest -q -x -p no:cacheprovider"
    # what the model was told after its first claim
    told = next(e for e in events if e["kind"] == "tool_result" and e["name"] == "finish_task")
    assert "did not pass verification" in told["output"] and "assert 6 == 5" in told["output"]

    shown = run_fabric("show", result["runlog"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "NOT verified: `python -m pytest -q -x -p no:cacheprovider` failed" in shown.stdout
    assert "assert 6 == 5" in shown.stdout
    assert "unverified after 3 step(s)" in shown.stdout
    assert "looked at the workspace first" in shown.stdout and "The tests fail now" in shown.stdout
    brief = next(e for e in events if e["kind"] == "brief")["text"]
    assert "calc.py" in brief and "assert -1 == 5" in brief  # before the model's change


def test_a_real_fix_is_verified_and_completes(tmp_path: Path) -> None:
    with MockOpenAIServer(claims_done(FIXED)) as server:
        ws, config = project(tmp_path, server.base_url)
        code, out, err = fabric(config, ws, "--json", "Fix add in calc.py")
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed" and result["steps"] == 2
    events = assert_valid_runlog(Path(result["runlog"]))
    (check,) = [e for e in events if e["kind"] == "verification" and "command" in e]
    assert check["ok"] and check["exit_code"] == 0
    # the tests failed when the pack looked first and pass now: that confirms the fix
    assert (check["before"], check["confirms"]) == (1, True)
    assert next(e for e in events if e["kind"] == "brief")["ran"] == {check["command"]: 1}


def test_an_answer_in_a_project_whose_tests_pass_is_done_but_unconfirmed(tmp_path: Path) -> None:
    """Tests that passed before the run pass after a run that changed nothing: they cannot
    show that a question was answered right, and fabric says so instead of ``completed``."""
    answer = completion(None, [("finish_task", {"summary": "add returns the sum of a and b"})])
    with MockOpenAIServer([answer]) as server:
        ws, config = project(tmp_path, server.base_url)
        (ws / "calc.py").write_text(FIXED)
        code, out, err = fabric(config, ws, "--json", "What does add in calc.py return?")
    assert code == 3, err
    result = json.loads(out)
    assert result["status"] == "completed_unconfirmed"
    assert result["payload"] == {"summary": "add returns the sum of a and b"}
    assert result["error"]["code"] == "unconfirmed"
    assert (
        "they passed before the run too, so they do not show the work"
        in (result["error"]["message"])
    )
    assert "completed_unconfirmed after 1 step(s)" in err
    events = assert_valid_runlog(Path(result["runlog"]))
    (check,) = [e for e in events if e["kind"] == "verification" and "command" in e]
    assert (check["ok"], check["before"], check["confirms"]) == (True, 0, False)
    shown = run_fabric("show", result["runlog"], cwd=tmp_path)
    assert "none of them confirms it was done" in shown.stdout
    assert "step  1  checked: `python -m pytest -q -x -p no:cacheprovider` passed" in shown.stdout


def test_verify_and_no_verify_choose_the_check_for_one_task(tmp_path: Path) -> None:
    with MockOpenAIServer(claims_done("def add(a, b):\n    return 0\n")) as server:
        ws, config = project(tmp_path, server.base_url)
        code, out, err = fabric(config, ws, "--json", "--no-verify", "Fix add")
    # nothing checked: the claim stands, as the user asked, but it is not said to be confirmed
    assert code == 3, err
    assert json.loads(out)["status"] == "completed_unconfirmed"
    events = assert_valid_runlog(Path(json.loads(out)["runlog"]))
    # no command check: only the pack's own check of the summary's figures, which has none
    assert events[0]["verify"] == [SEEN] and events[0]["verify_override"] == "off"

    with MockOpenAIServer(claims_done(FIXED)) as server:
        ws, config = project(tmp_path / "second", server.base_url)
        check = "python -c \"import calc; assert calc.add(1, 1) == 3, 'one and one'\""
        code, out, err = fabric(config, ws, "--json", "--verify", check, "Fix add")
    assert code == 1
    result = json.loads(out)
    assert result["status"] == "unverified" and "one and one" in result["error"]["message"]

    code, out, err = fabric(config, ws, "--verify", "x", "--no-verify", "Fix add")
    assert code == 2 and "contradict" in err
