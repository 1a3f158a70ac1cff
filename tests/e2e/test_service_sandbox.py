"""A task submitted over HTTP runs its commands confined like `fabric run` does: the runlog says
how, and the command cannot see the service's own files (its database holds every client's
tasks) nor write outside the task's workspace."""

from __future__ import annotations

import shlex
from pathlib import Path

from support import assert_valid_runlog
from test_service import Service, project

from fabric.testing import MockOpenAIServer, completion

SNOOP = (
    "import pathlib, sys\n"
    "try:\n"
    "    seen = pathlib.Path(sys.argv[1]).read_bytes()\n"
    "except OSError as exc:\n"
    "    seen = type(exc).__name__.encode()\n"
    "print('database:', 'SQLITE' if seen.startswith(b'SQLite format 3') else seen[:40])\n"
    "try:\n"
    "    pathlib.Path(sys.argv[2]).write_text('x')\n"
    "    print('wrote outside')\n"
    "except OSError as exc:\n"
    "    print('write refused:', type(exc).__name__)\n"
)


def test_a_service_task_runs_its_commands_confined(tmp_path: Path) -> None:
    database = tmp_path / "durable.sqlite3"
    outside = tmp_path / "outside.txt"
    command = shlex.join(["python", "-c", SNOOP, str(database), str(outside)])
    script = [
        completion(None, [("shell", {"command": command})]),
        completion(None, [("finish_task", {"summary": "looked around"})]),
    ]
    with MockOpenAIServer(script, models=["m"]) as model:
        config = project(tmp_path, model.base_url)
        with Service(config) as service:
            task_id = service.submit("engineering", "look around")
            record = service.wait_status(task_id, "completed_unconfirmed")
    assert database.stat().st_size > 0  # the service's database is real and in use
    assert not outside.exists()
    events = assert_valid_runlog(tmp_path / "runs" / record["id"] / "runlog.jsonl")
    confinement = events[0]["confinement"]
    assert confinement["backend"] in ("bwrap", "landlock") and confinement["network"] is False
    [result] = [e for e in events if e["kind"] == "tool_result" and e["name"] == "shell"]
    assert result["ok"] is True, result
    # judged on the host: under bubblewrap the write lands in the sandbox's own /tmp
    assert "database:" in result["output"] and "SQLITE" not in result["output"]
