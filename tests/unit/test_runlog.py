"""The runlog: one valid JSON object a line, readable while the run goes on, artifacts beside
it, one folder per run. Ends with a whole run against a real loopback model server."""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from support import assert_valid_runlog, kinds, read_events

from fabric.application.execute_task import execute_task
from fabric.application.job import Job, Kit
from fabric.domain.clock import iso_z
from fabric.domain.errors import ConfigError
from fabric.domain.models import RunStatus
from fabric.infrastructure.llm.openai_compat import OpenAIChatClient
from fabric.infrastructure.runlog import (
    FORMAT_VERSION,
    JsonlRunLog,
    MemoryRunLog,
    new_run_id,
    schema_path,
)
from fabric.infrastructure.runlog.encoding import (
    now_stamp,
    read_line,
    runlog_line,
    strict_json,
    timestamp,
)
from fabric.infrastructure.runlog.reader import read_runlog
from fabric.infrastructure.runlog.reopen import last_line
from fabric.infrastructure.sandbox import command_runner
from fabric.testing import MockOpenAIServer, completion
from packs.engineering import EngineeringSettings, build

SCHEMA = json.loads(schema_path().read_text("utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)


def started_event() -> dict[str, Any]:
    return {
        "pack": "p",
        "task": "t",
        "model": "m",
        "workspace": "/w",
        "limits": {},
        "sandbox": {},
        "system_prompt": "s",
        "finish_schema": {"type": "object"},
        "confinement": None,
        "verify": [],
    }


def finished_event(status: str = "completed") -> dict[str, Any]:
    usage = {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    return {"status": status, "payload": {}, "steps": 1, "usage": usage, "duration_s": 0.1}


# --- the envelope and line format -------------------------------------------------------------


def test_every_line_has_the_envelope_in_order(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    before = datetime.now(UTC)
    log.emit("run_started", started_event())
    log.emit("nudge", {"step": 1, "message": "go on"})
    log.emit("run_finished", finished_event())
    log.close()
    after = datetime.now(UTC)

    lines = Path(log.location).read_text("utf-8").splitlines()
    assert len(lines) == 3
    events = [json.loads(line) for line in lines]
    for seq, event in enumerate(events):
        assert list(event)[:5] == ["v", "seq", "ts", "run_id", "kind"]
        assert event["v"] == FORMAT_VERSION and event["seq"] == seq and event["run_id"] == "r1"
        assert event["ts"].endswith("Z")
        ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
        assert before - timedelta(seconds=1) <= ts <= after + timedelta(seconds=1)
    assert kinds(events) == ["run_started", "nudge", "run_finished"]
    assert events[1]["message"] == "go on"
    assert_valid_runlog(log.location)


def test_event_data_cannot_overwrite_the_envelope(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    log.emit("run_started", {**started_event(), "seq": 99, "run_id": "x", "kind": "nudge"})
    log.emit("run_finished", finished_event())
    log.close()
    first = read_events(log.location)[0]
    assert (first["seq"], first["run_id"], first["kind"]) == (0, "r1", "run_started")
    assert_valid_runlog(log.location)


def test_lines_are_compact_json_with_readable_unicode(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    log.emit("run_started", {**started_event(), "task": "grüße\nnew line 日本"})
    log.close()
    text = Path(log.location).read_text("utf-8")
    assert text.count("\n") == 1 and text.endswith("\n")  # a newline in data stays escaped
    assert "grüße" in text and "日本" in text and ": " not in text


def test_values_json_cannot_hold_are_written_as_text(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    log.emit("run_started", {**started_event(), "workspace": Path("/w/x"), "extra": {1, 2}})
    log.close()
    event = read_events(log.location)[0]
    assert event["workspace"] == "/w/x"


def test_numbers_json_cannot_hold_are_written_as_text_not_nan(tmp_path: Path) -> None:
    """Most JSON readers (jq, browsers, Go) refuse NaN and Infinity, so they never appear."""
    data = {**started_event(), "limits": {"a": float("nan"), "b": [float("inf"), 1.5]}}
    log = JsonlRunLog(tmp_path, "r1")
    log.emit("run_started", data)
    log.close()
    text = Path(log.location).read_text("utf-8")
    strict = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the log"))
    assert strict["limits"] == {"a": "nan", "b": ["inf", 1.5]}
    memory = MemoryRunLog("m")
    memory.emit("run_started", data)
    assert memory.events[0]["limits"] == strict["limits"]


@pytest.mark.parametrize(
    "options", [{}, {"ensure_ascii": False, "separators": (",", ":")}, {"indent": 2}]
)
def test_strict_json_writes_what_the_json_module_writes(options: dict[str, Any]) -> None:
    """The encoder made once per options writes each line as ``json.dumps`` would."""
    value = {"a": [1, 2.5, None, True, {"é": "日本\n\u2028\ud800"}], "w": Path("/w"), "n": -0.0}
    expected = json.dumps(value, allow_nan=False, default=str, **options)
    assert strict_json(value, **options) == expected
    assert strict_json([value, "x"], **options) == json.dumps(
        [value, "x"], allow_nan=False, default=str, **options
    )


@pytest.mark.parametrize(
    "value",
    [
        {"kind": "tool_result", "output": "grüße 日本\n\u2028", "n": [1, 2.5, -0.0, 1e300, True]},
        {"kind": "x", "w": Path("/w"), "set": {1}, "at": datetime(2026, 1, 2, tzinfo=UTC)},
        {"kind": "x", "rule": None, "nan": float("nan"), "inf": [float("-inf")]},
        {"kind": "x", "big": 2**70, "small": -(2**63) - 1},
        {"kind": "x", "text": "a\ud800b"},
        {"kind": "x", "keys": {1: "one", None: "none"}},
        {"kind": "x", "deep": json.loads("[" * 300 + "]" * 300)},
        {"kind": "x", "says": "the word null, in a string"},
        {"kind": "x", "message": {"content": None, "calls": [{"n": 1.5}]}, "rule": None},
        {"kind": "x", "rule": None, "at": (1, 2), "where": Path("/w")},
        {"kind": "x", "status": RunStatus.COMPLETED, "tiny": 1e-07},
    ],
)
def test_a_runlog_line_holds_what_strict_json_writes(value: dict[str, Any]) -> None:
    """orjson makes most lines; whatever makes one, it reads back as the strict line does, and
    the text is the same (as UTF-8, a lone surrogate as its JSON escape, a newline at the end)
    but for a float's exponent (``1e-7`` for ``1e-07``)."""
    line, strict = runlog_line(value), strict_json(value, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(line) == json.loads(strict)
    assert line.replace(b"e-7", b"e-07") == (strict + "\n").encode("utf-8", "backslashreplace")
    assert line.count(b"\n") == 1 and b"NaN" not in line and b"Infinity" not in line


@pytest.mark.parametrize(
    "line",
    [
        '{"v":2,"seq":0,"kind":"tool_call","arguments":{"n":123456789012345678901234567890}}',
        '{"v":2,"seq":0,"kind":"tool_call","arguments":{"n":-9223372036854775809}}',
        '{"v":2,"seq":0,"kind":"tool_call","arguments":{"n":NaN,"m":Infinity,"f":1e-07}}',
        '{"v":2,"seq":0,"kind":"tool_call","arguments":{"s":"a\\ud800b","t":"\u00e9"}}',
    ],
)
def test_a_runlog_is_read_as_json_reads_it(tmp_path: Path, line: str) -> None:
    """A log with a torn last line is read line by line: an integer past 64 bits, NaN and a
    lone surrogate come back exactly as ``json`` reads them, on any line of the log."""
    path = tmp_path / "runlog.jsonl"
    first = '{"v":2,"seq":1,"kind":"note","text":"before"}'
    path.write_text(f"{first}\r\n{line}\n{{torn", "utf-8")
    events, problems = read_runlog(path)
    assert events == [json.loads(first), json.loads(line)]
    assert repr(events[1]) == repr(json.loads(line))  # ints stay ints, nan stays nan
    assert problems == [f"{path}:3: the last line is torn (the run may have crashed); skipped"]


def test_a_whole_runlog_is_read_as_json_reads_it(tmp_path: Path) -> None:
    """Every line whole and an event: big integers, NaN and escaped lone surrogates come back
    as ``json`` reads them, on the fast path too."""
    lines = [
        '{"v":3,"seq":0,"kind":"tool_call","arguments":{"n":123456789012345678901234567890}}',
        '{"v":3,"seq":1,"kind":"tool_call","arguments":{"n":-9223372036854775809,"f":1e-07}}',
        '{"v":3,"seq":2,"kind":"tool_call","arguments":{"n":NaN,"s":"a\\ud800b","t":"\u00e9"}}',
    ]
    path = tmp_path / "runlog.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    events, problems = read_runlog(path)
    assert repr(events) == repr([json.loads(line) for line in lines]) and problems == []


def test_a_line_nested_too_deeply_is_reported_not_fatal(tmp_path: Path) -> None:
    """A hostile log's line nested past what any reader takes is a bad line, for every reader
    of runlogs: the listing's facts, the live tail, a resume's last line."""
    deep = '{"v":3,"seq":1,"kind":"note","x":' + "[" * 100_000 + "]" * 100_000 + "}"
    good = '{"v":3,"seq":0,"kind":"note","text":"one"}'
    path = tmp_path / "runlog.jsonl"
    path.write_text(f"{good}\n{deep}\n", "utf-8")
    events, problems = read_runlog(path)
    assert events == [json.loads(good)]
    assert problems == [f"{path}:2: bad JSON; skipped"]
    assert last_line(path.read_bytes()) == (0, json.loads(good))
    with pytest.raises(ValueError, match="nested too deeply"):
        read_line(deep)


def test_a_runlog_with_lines_that_are_no_events_is_read_line_by_line(tmp_path: Path) -> None:
    """Bytes that are no UTF-8 are read as text mode reads them (U+FFFD), and a line that is
    no event is reported by its number, however the good lines were read."""
    path = tmp_path / "runlog.jsonl"
    path.write_bytes(
        b'{"v":3,"seq":0,"kind":"note","text":"one"}\n'
        b'{"v":3,"seq":1,"kind":"note","text":"bad \xff byte"}\n'
        b"[1, 2]\n"
        b"   \n"
        b'{"v":3,"seq":2,"kind":"note","text":"two"}\n'
    )
    events, problems = read_runlog(path)
    assert [e["text"] for e in events] == ["one", "bad \ufffd byte", "two"]
    assert problems == [f"{path}:3: not a runlog event; skipped"]


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 11, 22, 3, 15, 0, 0, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 1, 2, 3, 4, 5, 6),
    ],
)
def test_line_timestamps_are_iso_z_to_the_microsecond(moment: datetime) -> None:
    assert timestamp(moment) == iso_z(moment, "microseconds")


def test_the_clock_s_time_stamp_is_now_to_the_microsecond() -> None:
    """``now_stamp`` (a runlog's default clock) writes what ``timestamp(utc_now())`` would."""
    for _ in range(2):
        before = datetime.now(UTC)
        stamp = now_stamp()
        after = datetime.now(UTC)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), stamp
        assert timestamp(before) <= stamp <= timestamp(after)
        time.sleep(0.6)  # into the next second, whose text is written anew


def test_a_lone_surrogate_stays_valid_utf8_and_round_trips(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    log.emit("run_started", {**started_event(), "task": "a\ud800b\\ud800"})
    log.close()
    Path(log.location).read_bytes().decode("utf-8")  # strict
    assert read_events(log.location)[0]["task"] == "a\ud800b\\ud800"


def test_every_line_is_flushed_as_it_is_written(tmp_path: Path) -> None:
    """Another reader (fabric show, the HTTP event stream, tail -f) sees each complete line
    while the log is still open."""
    log = JsonlRunLog(tmp_path, "r1")
    path = Path(log.location)
    seen: list[int] = []
    log.emit("run_started", started_event())
    for step in range(1, 4):
        log.emit("nudge", {"step": step, "message": "m"})
        with path.open(encoding="utf-8") as reader:  # a separate handle
            text = reader.read()
        assert text.endswith("\n")
        seen.append(len([json.loads(line) for line in text.splitlines()]))
    assert seen == [2, 3, 4]
    log.close()


def test_in_a_run_the_lines_are_on_disk_before_anything_waits(tmp_path: Path) -> None:
    """Inside an event loop the lines written together go to the file together, as soon as
    the loop gets control back: a reader woken by the last of them, or one looking while
    the run waits on its model, finds them all."""
    log = JsonlRunLog(tmp_path, "r1")
    path = Path(log.location)

    def lines() -> int:
        return len(path.read_text(encoding="utf-8").splitlines())

    async def step() -> list[int]:
        log.emit("run_started", started_event())
        log.emit("nudge", {"step": 1, "message": "m"})
        woken = asyncio.Event()
        seen: list[int] = []

        async def reader() -> None:
            await woken.wait()
            seen.append(lines())

        task = asyncio.ensure_future(reader())
        await asyncio.sleep(0)
        log.emit("nudge", {"step": 2, "message": "m"})
        woken.set()  # as the service's event stream is woken by an observer
        await task
        await asyncio.sleep(0.01)  # "the model": the run waits
        seen.append(lines())
        return seen

    assert asyncio.run(step()) == [3, 3]
    log.close()


def test_a_long_stretch_without_a_wait_reaches_the_file_in_whole_lines(tmp_path: Path) -> None:
    """A replay never waits: its lines are written once enough are held, each one whole, and
    the rest when the log is closed."""
    log = JsonlRunLog(tmp_path, "r1")
    path = Path(log.location)

    async def stretch() -> bytes:
        for step in range(400):
            log.emit("nudge", {"step": step, "message": "m" * 500})
        return path.read_bytes()  # no wait yet: the loop has not had control back

    written = asyncio.run(stretch())
    assert written and written.endswith(b"\n")
    assert len(written) < 400 * 500  # not all of it yet
    assert [json.loads(line)["step"] for line in written.splitlines()] == list(
        range(len(written.splitlines()))
    )
    log.close()
    assert [e["step"] for e in read_events(log.location)] == list(range(400))


def test_observers_see_each_event_as_written(tmp_path: Path) -> None:
    got: list[tuple[int, str]] = []
    log = JsonlRunLog(tmp_path, "r1", lambda e: got.append((e["seq"], e["kind"])))
    log.emit("run_started", started_event())
    log.emit("run_finished", finished_event())
    log.close()
    assert got == [(0, "run_started"), (1, "run_finished")]


def test_close_twice_is_fine(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    log.close()
    log.close()


# --- one folder per run -------------------------------------------------------------------------


def test_the_log_lives_in_runs_dir_slash_run_id(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path / "nested" / "runs", "20261122T031500Z-abc123")
    assert log.location == str(tmp_path / "nested/runs/20261122T031500Z-abc123/runlog.jsonl")
    assert Path(log.location).is_file()
    log.close()


def test_a_run_folder_is_never_reused(tmp_path: Path) -> None:
    first = JsonlRunLog(tmp_path, "same")
    first.emit("run_started", started_event())
    first.close()
    with pytest.raises(FileExistsError):
        JsonlRunLog(tmp_path, "same")
    assert len(read_events(first.location)) == 1  # the first run's log is untouched


@pytest.mark.parametrize(
    "run_id", ["", "../escape", "a/b", "/abs", ".hidden", "x" * 200, "tab\tid", "a\\b"]
)
def test_run_ids_that_are_not_plain_folder_names_are_refused(tmp_path: Path, run_id: str) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(ConfigError, match="cannot name a run folder") as info:
        JsonlRunLog(runs, run_id)
    assert info.value.hint
    assert not (tmp_path / "escape").exists() and not runs.exists()


def test_new_run_ids_sort_by_time_and_are_plain_folder_names(tmp_path: Path) -> None:
    ids = [new_run_id() for _ in range(50)]
    assert len(set(ids)) == 50
    for run_id in ids:
        assert re.fullmatch(r"\d{8}T\d{6}\.\d{3}Z-[0-9a-f]{6}", run_id)
    JsonlRunLog(tmp_path, ids[0]).close()


# --- artifacts -------------------------------------------------------------------------------


def test_artifacts_are_written_beside_the_log(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    ref = log.save_artifact("step1-read_file-call_0.txt", "full output ✓\n" * 1000)
    assert ref == "artifacts/step1-read_file-call_0.txt"
    assert (tmp_path / "r1" / ref).read_text("utf-8") == "full output ✓\n" * 1000
    log.close()


@pytest.mark.parametrize(
    "name", ["../../outside.txt", "/etc/passwd", "..", "a/../../b", "x\x00y", "", "...txt"]
)
def test_artifact_names_cannot_leave_the_artifacts_folder(tmp_path: Path, name: str) -> None:
    log = JsonlRunLog(tmp_path / "runs", "r1")
    ref = log.save_artifact(name, "data")
    target = (tmp_path / "runs" / "r1" / ref).resolve()
    assert target.parent == (tmp_path / "runs" / "r1" / "artifacts").resolve()
    assert target.read_text() == "data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]
    log.close()


def test_long_and_repeated_artifact_names_never_overwrite(tmp_path: Path) -> None:
    log = JsonlRunLog(tmp_path, "r1")
    long_name = "step1-" + "n" * 5000 + ".txt"
    refs = [log.save_artifact(long_name, str(i)) for i in range(3)]
    refs += [log.save_artifact("out.txt", str(i)) for i in range(3, 5)]
    assert len(set(refs)) == 5
    assert all(len(Path(r).name) <= 128 and r.endswith(".txt") for r in refs)
    assert [(tmp_path / "r1" / r).read_text() for r in refs] == ["0", "1", "2", "3", "4"]
    log.close()


def test_memory_log_keeps_artifacts_and_events_like_the_file_log() -> None:
    log = MemoryRunLog("mem")
    ref = log.save_artifact("../x.txt", "one")
    again = log.save_artifact("../x.txt", "two")
    assert ref == "artifacts/x.txt" and again != ref
    assert log.artifacts == {ref: "one", again: "two"}
    log.emit("run_started", {**started_event(), "workspace": Path("/w"), "pair": (1, 2)})
    assert log.events[0]["workspace"] == "/w" and log.events[0]["pair"] == [1, 2]
    assert log.location is None and log.kinds() == ["run_started"]
    assert not log.closed
    log.close()
    assert log.closed


# --- the published schema ----------------------------------------------------------------------


def test_the_schema_is_valid_draft_2020_12_and_ships_with_the_package() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["v"]["const"] == FORMAT_VERSION
    statuses = SCHEMA["allOf"][-1]["then"]["properties"]["status"]["enum"]
    assert statuses == [s.value for s in RunStatus]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"v": FORMAT_VERSION + 1}, "v"),
        ({"v": 1}, "v"),
        ({"seq": -1}, "seq"),
        ({"ts": "2026-11-22T03:17:07"}, "ts"),
        ({"ts": "2026-11-22 03:17:07Z"}, "ts"),
        ({"ts": "yesterday Z"}, "ts"),
        ({"run_id": ""}, "run_id"),
        ({"kind": "something_else"}, "kind"),
        ({"status": "done"}, "status"),
        ({"usage": {"prompt_tokens": 1}}, "usage"),
        ({"payload": "text"}, "payload"),
    ],
)
def test_the_schema_rejects_broken_lines(change: dict[str, Any], problem: str) -> None:
    good = {
        "v": FORMAT_VERSION,
        "seq": 0,
        "ts": "2026-11-22T03:17:07.057280Z",
        "run_id": "r",
        "kind": "run_finished",
        **finished_event(),
    }
    assert not list(VALIDATOR.iter_errors(good))
    errors = list(VALIDATOR.iter_errors({**good, **change}))
    assert errors, f"{change} should be invalid"


def test_the_schema_requires_each_kinds_fields() -> None:
    base = {"v": FORMAT_VERSION, "seq": 0, "ts": "2026-11-22T03:17:07Z", "run_id": "r"}
    for kind in ["run_started", "llm_request", "llm_response", "tool_call", "tool_result",
                 "nudge", "run_finished", "policy_decision", "approval_requested",
                 "approval"]:  # fmt: skip
        assert list(VALIDATOR.iter_errors({**base, "kind": kind})), kind


# --- a whole run: real HTTP, real files, real engineering pack ----------------------------------


def test_full_run_against_a_loopback_server_changes_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "README.md").write_text("# demo\n")
    script = [
        completion(None, [("list_files", {})]),
        completion(
            "I will write the program.",
            [("write_file", {"path": "hello.py", "content": "print('hello, fabric')\n"})],
        ),
        completion(None, [("shell", {"command": "python hello.py"})]),
        completion(None, [("read_file", '{"path": "hello.py"')]),  # broken JSON: repaired
        completion(
            None,
            [
                (
                    "finish_task",
                    {"summary": "wrote hello.py and ran it", "artifacts": ["hello.py"]},
                )
            ],
            prompt_tokens=100,
            completion_tokens=20,
        ),
    ]
    runs = tmp_path / "runs"
    pack = build(EngineeringSettings(builder="packs.engineering:build"))

    async def main(base_url: str) -> Any:
        client = OpenAIChatClient(base_url=base_url, model="mock-coder")
        log = JsonlRunLog(runs, "run-e2e")
        try:
            return await execute_task(
                Job(
                    "write hello.py that prints a greeting, and run it", pack, "run-e2e", workspace
                ),
                Kit(
                    client,
                    log,
                    protected=(runs,),
                    commands=command_runner(pack.sandbox, workspace, (runs,)),
                ),
            )
        finally:
            await client.aclose()

    with MockOpenAIServer(script) as server:
        result = asyncio.run(main(server.base_url))

    # no tests in the workspace, so nothing of fabric's could confirm the work: it says so
    assert result.status is RunStatus.COMPLETED_UNCONFIRMED, result.error
    assert result.error and result.error["code"] == "unconfirmed"
    assert result.payload == {"summary": "wrote hello.py and ran it", "artifacts": ["hello.py"]}
    assert (workspace / "hello.py").read_text() == "print('hello, fabric')\n"
    assert result.steps == 5
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (140, 40)

    events = assert_valid_runlog(runs / "run-e2e" / "runlog.jsonl")
    assert result.runlog_path == str(runs / "run-e2e" / "runlog.jsonl")
    assert events[0]["model"] == "mock-coder" and events[0]["pack"] == "engineering"
    confinement = events[0]["confinement"]
    assert confinement["backend"] in ("bwrap", "landlock") and confinement["network"] is False
    end = events[-1]
    assert end["status"] == "completed_unconfirmed" and end["usage"]["total_tokens"] == 180
    tool_results = [e for e in events if e["kind"] == "tool_result"]
    assert [(e["name"], e["ok"]) for e in tool_results] == [
        ("list_files", True),
        ("write_file", True),
        ("shell", True),
        ("read_file", False),
    ]

    bodies = server.requests
    assert len(bodies) == 5
    assert all(b["_path"] == "/v1/chat/completions" and b["model"] == "mock-coder" for b in bodies)
    assert all(b["_authorization"] is None for b in bodies)
    names = [t["function"]["name"] for t in bodies[0]["tools"]]
    assert names == [
        "read_file",
        "edit_file",
        "write_file",
        "list_files",
        "search_files",
        "shell",
        "finish_task",
    ]
    assert all(b["tools"] == bodies[0]["tools"] for b in bodies)  # every request offers them
    assert bodies[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": "README.md",
    }
    assert "hello, fabric" in bodies[3]["messages"][-1]["content"]
    assert "not a JSON object" in bodies[4]["messages"][-1]["content"]
    # The runlog rebuilds exactly the history the server received last.
    history: list[dict[str, Any]] = []
    for event in events:
        if event["kind"] == "llm_request":
            history += event["messages"]
        elif event["kind"] == "llm_response":
            history.append(event["message"])
    assert history[:-1] == bodies[-1]["messages"]


def test_a_server_error_mid_run_fails_the_run_with_the_status(
    workspace: Path, tmp_path: Path
) -> None:
    """The mock server answers 500 once its script runs out."""
    pack = build(EngineeringSettings(builder="packs.engineering:build"))

    async def main(base_url: str) -> Any:
        client = OpenAIChatClient(base_url=base_url, model="m")
        try:
            return await execute_task(
                Job("t", pack, "r", workspace), Kit(client, JsonlRunLog(tmp_path / "runs", "r"))
            )
        finally:
            await client.aclose()

    with MockOpenAIServer([completion(None, [("list_files", {})])]) as server:
        result = asyncio.run(main(server.base_url))
    assert result.status is RunStatus.FAILED
    assert result.error is not None and result.error["status_code"] == "500"
    assert "script ran out" in result.error["message"] and result.error["hint"]
    events = assert_valid_runlog(tmp_path / "runs" / "r" / "runlog.jsonl")
    assert events[-1]["error"] == result.error


def test_a_discarded_new_log_leaves_no_run_folder(tmp_path: Path) -> None:
    """A run that never got to its first line (cancelled while it was being set up) leaves
    nothing in the runs folder; a log that holds lines is only closed."""
    from fabric.infrastructure.runlog import JsonlRunLog

    unused = JsonlRunLog(tmp_path, "never-started")
    unused.discard()
    assert list(tmp_path.iterdir()) == []
    started = JsonlRunLog(tmp_path, "started")
    started.emit("run_started", {"task": "t"})
    started.discard()
    assert kinds(read_events(tmp_path / "started" / "runlog.jsonl")) == ["run_started"]
    reopened = JsonlRunLog.reopen(tmp_path / "started" / "runlog.jsonl")
    reopened.discard()
    assert (tmp_path / "started" / "runlog.jsonl").is_file()
