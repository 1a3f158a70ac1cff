"""A task's own check of the work over HTTP: ``verify`` in POST /tasks is kept with the task,
its run is checked with that command, and a claim the check refutes ends ``unverified`` (a
final status); a command that cannot be parsed is refused at submission. A real `fabric
serve` on loopback against a scripted model server."""

from __future__ import annotations

from pathlib import Path

from support import read_events
from test_service import Service, error_shape, project, writer_then_finish

from fabric.testing import MockOpenAIServer


def test_a_tasks_verify_command_decides_its_end(tmp_path: Path) -> None:
    with (
        MockOpenAIServer(writer_then_finish, models=["m"]) as model,
        Service(project(tmp_path, model.base_url)) as service,
    ):
        refuted = service.submit(task="notes", verify='python -c "raise SystemExit(3)"')
        backed = service.submit(task="more notes", verify="python -c \"open('more-notes.txt')\"")
        off = service.submit(task="plain", verify="off")
        ends = {t: service.wait_final(t) for t in (refuted, backed, off)}
        bad = service.client.post("/tasks", json={"pack": "engineering", "task": "x",
                                                  "verify": "pytest 'unclosed"})  # fmt: skip
        error = error_shape(bad, 422)
        empty = service.client.post("/tasks", json={"pack": "engineering", "task": "x",
                                                    "verify": ""})  # fmt: skip
        error_shape(empty, 422)
        curl = {"pack": "engineering", "task": "x", "verify": "curl http://example.org"}
        outside = service.client.post("/tasks", json=curl)
        refused = error_shape(outside, 422)
        nothing = service.client.post("/tasks", json={"pack": "reviewer", "task": "x",
                                                      "verify": "python -V"})  # fmt: skip
        error_shape(nothing, 422)

    assert ends[refuted]["status"] == "unverified", ends[refuted]
    assert ends[refuted]["verify"] == 'python -c "raise SystemExit(3)"'
    assert ends[refuted]["error"]["code"] == "unverified"
    assert ends[refuted]["payload"] == {"summary": "wrote notes"}  # the claim, kept to read
    assert ends[backed]["status"] == "completed", ends[backed]
    # no command checked it: the claim stands, said to be unconfirmed
    assert ends[off]["status"] == "completed_unconfirmed" and ends[off]["verify"] == "off"
    assert ends[off]["error"]["code"] == "unconfirmed"
    assert "cannot parse the verify command" in error["message"]
    assert "'curl' is not one of the allowed commands of pack 'engineering'" in refused["message"]
    events = read_events(tmp_path / "runs" / refuted / "runlog.jsonl")
    started = events[0]
    assert started["verify_override"] == 'python -c "raise SystemExit(3)"'
    checks = [e for e in events if e["kind"] == "verification" and "command" in e]
    assert checks and all(not c["ok"] and c["exit_code"] == 3 for c in checks)
