"""The web console's API, as the page (or a person with a browser) meets it: log in with the
token and act with a cookie and a CSRF token, the page's files under a strict CSP, every run
of the runs folder listed and followed live, a run's files, replays and share file, and what
/packs and /models add. A real server on loopback (``console_app.LiveApp``)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_app import TOKEN, LiveApp, chat_factory, gate_at, project, sse, writer
from support import assert_valid_runlog, read_events
from test_service import GUARD, error_shape

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.domain.models import ChatResponse
from fabric.interfaces.compose import build_runner
from fabric.interfaces.http.console.headers import CONSOLE_CSP
from fabric.interfaces.http.console.session import ConsoleSessions
from fabric.testing import tool_call


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the run ledger of these runs
    return project(tmp_path)


def cli_run(config: Path, task: str, pack: str = "writer") -> str:
    """A run as `fabric run` leaves it in the runs folder (same config, another process's
    runner): returns its run id."""
    runner = build_runner(load_config(config), chat_factory=chat_factory(writer))
    workspace = config.parent / "ws"
    result = asyncio.run(runner.run(RunRequest(pack, task, workspace=workspace)))
    asyncio.run(runner.aclose())
    return result.run_id


def login(live: LiveApp) -> tuple[str, str]:
    """Log in as the page does; returns the cookie value and the CSRF token."""
    answer = httpx.post(f"{live.url}/console/login", json={"token": TOKEN}, timeout=30)
    assert answer.status_code == 200, answer.text  # (a client of its own: no cookie jar kept)
    return answer.cookies["fabric_console"], answer.json()["csrf"]


def with_cookie(cookie: str, **headers: str) -> dict[str, str]:
    return {"Cookie": f"fabric_console={cookie}", **headers}


# --- the session -------------------------------------------------------------------------------


def test_logging_in_gives_an_httponly_strict_cookie_and_a_csrf_token(config: Path) -> None:
    with LiveApp(config) as live:
        assert live.anonymous.get("/runs").status_code == 401
        error_shape(live.anonymous.get("/console/session"), 401, "unauthorized")
        wrong = live.anonymous.post("/console/login", json={"token": "not-the-token-12345678"})
        error_shape(wrong, 401, "unauthorized")
        assert "set-cookie" not in wrong.headers

        answer = live.anonymous.post("/console/login", json={"token": TOKEN})
        assert answer.status_code == 200
        set_cookie = answer.headers["set-cookie"]
        assert set_cookie.startswith("fabric_console=")
        for part in ("HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"):
            assert part in set_cookie
        assert "Secure" not in set_cookie  # plain http on loopback
        assert TOKEN not in set_cookie and TOKEN not in answer.text
        cookie, csrf = answer.cookies["fabric_console"], answer.json()["csrf"]

        assert live.anonymous.get("/runs", headers=with_cookie(cookie)).status_code == 200
        again = live.anonymous.get("/console/session", headers=with_cookie(cookie))
        assert again.json() == {"csrf": csrf}

        out = live.anonymous.post(
            "/console/logout", headers=with_cookie(cookie, **{"X-Fabric-CSRF": csrf})
        )
        assert out.status_code == 200
        assert "Max-Age=0" in out.headers["set-cookie"]


def test_a_change_with_the_cookie_needs_the_csrf_token_from_this_origin(config: Path) -> None:
    with LiveApp(config) as live:
        cookie, csrf = login(live)
        body = {"pack": "writer", "task": "csrf probe"}
        refused = [
            with_cookie(cookie),
            with_cookie(cookie, **{"X-Fabric-CSRF": "not-the-csrf-token"}),
            with_cookie(cookie, **{"X-Fabric-CSRF": csrf, "Origin": "http://evil.example"}),
            with_cookie(cookie, **{"X-Fabric-CSRF": csrf, "Origin": "null"}),
            with_cookie(cookie, **{"X-Fabric-CSRF": csrf, "Origin": "http://127.0.0.1:9"}),
        ]
        for headers in refused:
            answer = live.anonymous.post("/tasks", json=body, headers=headers)
            error = error_shape(answer, 403, "csrf_failed")
            assert "X-Fabric-CSRF" in error["details"]["hint"]
        logout = live.anonymous.post("/console/logout", headers=with_cookie(cookie))
        error_shape(logout, 403, "csrf_failed")
        assert live.client.get("/tasks").json()["tasks"] == []  # nothing happened

        origin = {"Origin": f"http://127.0.0.1:{live.port}"}
        for headers in (with_cookie(cookie, **{"X-Fabric-CSRF": csrf}),
                        with_cookie(cookie, **{"X-Fabric-CSRF": csrf}, **origin)):  # fmt: skip
            answer = live.anonymous.post("/tasks", json=body, headers=headers)
            assert answer.status_code == 202, answer.text
            live.wait_final(answer.json()["id"])
        # the bearer token works as before, without any CSRF token
        assert live.client.post("/tasks", json=body).status_code == 202
        assert len(live.client.get("/tasks").json()["tasks"]) == 3


def test_tampered_expired_or_foreign_cookies_and_a_token_in_the_query_are_refused(
    config: Path,
) -> None:
    with LiveApp(config) as live:
        cookie, _ = login(live)
        expiry, nonce, signature = cookie.split(".")
        flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
        expired, _ = ConsoleSessions(TOKEN, clock=lambda: time.time() - 13 * 3600).issue()
        foreign, _ = ConsoleSessions("another-token-0123456789abc").issue()
        for bad in (
            f"{expiry}.{nonce}.{flipped}",
            f"{int(expiry) + 3600}.{nonce}.{signature}",
            f"{expiry}.{nonce}x.{signature}",
            expired,
            foreign,
            "",
            "x" * 500,
        ):
            answer = live.anonymous.get("/runs", headers=with_cookie(bad))
            error_shape(answer, 401, "unauthorized")
            error_shape(live.anonymous.get("/console/session", headers=with_cookie(bad)), 401)
        for name in ("token", "access_token", "fabric_console"):
            answer = live.anonymous.get("/runs", params={name: TOKEN})
            error_shape(answer, 401, "unauthorized")
        assert live.anonymous.get("/runs", params={"fabric_console": cookie}).status_code == 401


def test_the_console_page_and_files_are_open_and_carry_a_strict_policy(config: Path) -> None:
    with LiveApp(config) as live:
        pages = [live.anonymous.get(path) for path in ("/console", "/console/")]
        pages.append(live.anonymous.get("/console/static/index.html"))
        for page in pages:
            assert page.status_code == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert "<html" in page.text
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page.text)  # no inline script
            assert 'style="' not in page.text and "onload=" not in page.text
        missing = [
            live.anonymous.get("/console/static/no-such-file.js"),
            live.anonymous.get("/console/static/%2e%2e/session.py"),
            live.anonymous.get("/console/static/..%2F..%2Fapp.py"),
            live.anonymous.get("/console/static/.hidden"),
        ]
        for answer in missing:
            error = error_shape(answer, 404, "not_found")
            assert "reinstall fabric" in error["details"]["hint"]
        refused = live.anonymous.get("/console/session")
        for answer in [*pages, *missing, refused]:
            assert answer.headers["content-security-policy"] == CONSOLE_CSP
            assert answer.headers["x-content-type-options"] == "nosniff"
            assert answer.headers["referrer-policy"] == "no-referrer"
        assert "script-src 'self'" in CONSOLE_CSP and "unsafe" not in CONSOLE_CSP
        assert "content-security-policy" not in live.client.get("/runs").headers  # API answers


# --- the runs ----------------------------------------------------------------------------------


def test_every_run_is_listed_newest_first_with_filters_search_and_pages(config: Path) -> None:
    cli_ids = [cli_run(config, f"{word} from the terminal") for word in ("alpha", "beta")]
    with LiveApp(config) as live:
        task_ids = [live.submit(task="gamma over HTTP"), live.submit("asker", "delta over HTTP")]
        live.wait_final(task_ids[0])
        live.wait_status(task_ids[1], lambda s: s == "awaiting_approval")

        everything = live.client.get("/runs").json()
        newest_first = [*reversed(task_ids), *reversed(cli_ids)]
        assert [r["run_id"] for r in everything["runs"]] == newest_first
        assert everything["next"] is None
        by_id = {r["run_id"]: r for r in everything["runs"]}
        terminal, served, asking = by_id[cli_ids[0]], by_id[task_ids[0]], by_id[task_ids[1]]
        assert set(terminal) == {
            "run_id", "status", "pack", "model", "backend", "task", "workspace", "steps",
            "tokens", "cost_usd", "duration_s", "started_at", "ended_at", "task_id",
            "replay_of", "resumed", "error",
        }  # fmt: skip
        assert terminal["status"] == "completed" and terminal["task_id"] is None
        assert terminal["task"] == "alpha from the terminal" and terminal["pack"] == "writer"
        assert terminal["model"] == "scripted-model" and terminal["steps"] == 2
        assert terminal["tokens"] == {"prompt": 20, "completion": 10, "total": 30}
        assert terminal["duration_s"] > 0 and terminal["ended_at"] >= terminal["started_at"]
        assert served["task_id"] == task_ids[0] and served["status"] == "completed"
        assert asking["status"] == "awaiting_approval" and asking["pack"] == "asker"

        def ids(**params: Any) -> list[str]:
            answer = live.client.get("/runs", params=params)
            assert answer.status_code == 200, answer.text
            return [r["run_id"] for r in answer.json()["runs"]]

        assert ids(status="awaiting_approval") == [task_ids[1]]
        assert ids(pack="asker") == [task_ids[1]]
        assert ids(q="FROM THE TERMINAL") == list(reversed(cli_ids))
        assert ids(q="over http", pack="writer") == [task_ids[0]]
        assert ids(q="nowhere") == []
        pages, before = [], None
        while True:
            params = {"limit": 1, **({"before": before} if before else {})}
            page = live.client.get("/runs", params=params).json()
            pages += [r["run_id"] for r in page["runs"]]
            before = page["next"]
            if before is None:
                break
        assert pages == [r["run_id"] for r in everything["runs"]]

        error = error_shape(live.client.get("/runs", params={"status": "sleeping"}), 422)
        assert "awaiting_approval" in error["details"]["hint"]
        error_shape(live.client.get("/runs", params={"before": "../x"}), 422, "config_error")

        detail = live.client.get(f"/runs/{task_ids[1]}").json()
        assert detail["summary"] == asking
        assert detail["started"]["kind"] == "run_started" and detail["started"]["seq"] == 0
        assert [a["tool"] for a in detail["task"]["approvals"]] == ["write_file"]
        assert live.client.get(f"/runs/{cli_ids[0]}").json()["task"] is None
        cookie, csrf = login(live)  # the page approves with its cookie
        approval = live.anonymous.post(
            f"/tasks/{task_ids[1]}/approvals/call_0",
            json={"approve": True},
            headers=with_cookie(cookie, **{"X-Fabric-CSRF": csrf}),
        )
        assert approval.status_code == 200, approval.text
        assert live.wait_final(task_ids[1])["status"] == "completed"


def test_unknown_or_malformed_run_ids_are_404_with_a_hint(config: Path) -> None:
    with LiveApp(config) as live:
        for path in ("/runs/20261125T000000.000Z-000000", "/runs/%2E%2E",
                     "/runs/nope/events", "/runs/nope/runlog", "/runs/nope/html",
                     "/runs/nope/artifacts/x.txt"):  # fmt: skip
            error = error_shape(live.client.get(path), 404, "not_found")
            assert "GET /runs" in error["details"]["hint"]
        error_shape(live.client.post("/runs/nope/replay", json={}), 404, "not_found")


def test_a_queued_task_is_listed_before_it_has_a_run_folder(config: Path) -> None:
    gate = threading.Event()
    with LiveApp(config, gate_at(gate, 1)) as live:
        first = live.submit(task="slow first")  # the workspace is busy until the gate opens
        second = live.submit(task="waiting second")
        assert live.wait_status(second, lambda s: s == "queued")["task_id"] == second
        assert not (live.runs / second).exists()
        summary = live.client.get(f"/runs/{second}").json()["summary"]
        assert summary["task"] == "waiting second" and summary["started_at"] is None
        running = live.wait_status(first, lambda s: s == "running")
        assert running["ended_at"] is None and running["error"] is None
        gate.set()
        for run_id in (first, second):
            assert live.wait_final(run_id)["status"] == "completed"


def test_a_run_that_stopped_without_an_end_is_interrupted_and_says_how_to_go_on(
    config: Path,
) -> None:
    run_id = cli_run(config, "cut short")
    runlog = config.parent / "runs" / run_id / "runlog.jsonl"
    lines = runlog.read_text().splitlines(keepends=True)
    runlog.write_text("".join(lines[:-1]))  # killed before run_finished
    with LiveApp(config) as live:
        summary = live.client.get(f"/runs/{run_id}").json()["summary"]
        assert summary["status"] == "interrupted"
        assert summary["error"]["code"] == "interrupted"
        assert f"fabric resume {run_id}" in summary["error"]["hint"]
        assert [m["event"] for m in _events(live, run_id)][-1] != "run_finished"


def _events(live: LiveApp, run_id: str, **headers: str) -> list[dict[str, Any]]:
    with live.client.stream("GET", f"/runs/{run_id}/events", headers=headers) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        return list(sse(stream))


def test_the_events_of_a_terminal_run_stream_and_resume_like_a_tasks(config: Path) -> None:
    run_id = cli_run(config, "notes from the terminal")
    with LiveApp(config) as live:
        events = read_events(live.runs / run_id / "runlog.jsonl")
        seen = _events(live, run_id)
        assert [m["data"] for m in seen] == events
        assert [m["id"] for m in seen] == [str(e["seq"]) for e in events]
        assert [m["event"] for m in seen] == [e["kind"] for e in events]
        resumed = _events(live, run_id, **{"Last-Event-ID": "2"})
        assert [m["data"]["seq"] for m in resumed] == [e["seq"] for e in events[3:]]
        [written] = [e for e in events if e["kind"] == "tool_result" and e["name"] == "write_file"]
        assert written["changes"][0]["path"] == "notes.txt"
        assert written["changes"][0]["created"] is True
        assert "+notes from the terminal" in written["changes"][0]["diff"]


def test_a_running_tasks_events_carry_the_models_text_as_it_streams(config: Path) -> None:
    gate = threading.Event()
    with LiveApp(config, gate_at(gate, 1)) as live:  # the model speaks once we listen
        run_id = live.submit(task="slow streaming")
        seen: list[dict[str, Any]] = []
        with live.client.stream("GET", f"/runs/{run_id}/events") as stream:
            messages = sse(stream)
            for message in messages:
                seen.append(message)
                if message["event"] == "llm_request":
                    gate.set()
            seen += list(messages)
    kinds = [m["event"] for m in seen]
    deltas = [m for m in seen if m["event"] == "delta"]
    assert [d["data"] for d in deltas] == [
        {"step": 1, "text": "Writing slow.txt now."},
        {"step": 2, "text": "Done."},
    ]
    assert all(d["id"] is None for d in deltas)
    for delta in deltas:  # after its step's request, before its step's response
        at = seen.index(delta)
        requests = [m["data"]["step"] for m in seen[:at] if m["event"] == "llm_request"]
        responses = [m["data"]["step"] for m in seen[:at] if m["event"] == "llm_response"]
        assert requests[-1] == delta["data"]["step"]
        assert delta["data"]["step"] not in responses
    assert kinds[-1] == "run_finished"
    assert [m for m in seen if m["event"] != "delta"] == [
        {"id": str(e["seq"]), "event": e["kind"], "data": e}
        for e in read_events(live.runs / run_id / "runlog.jsonl")
    ]


def test_the_runs_stream_sees_a_new_run_appear_and_end(config: Path) -> None:
    cli_run(config, "already there")
    with LiveApp(config) as live, live.client.stream("GET", "/runs/stream") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        run_id = live.submit(task="newcomer run")
        statuses = []
        deadline = time.monotonic() + GUARD
        for message in sse(stream):
            assert time.monotonic() < deadline, f"the run never ended: {statuses}"
            assert message["event"] == "run" and message["id"] is None
            assert message["data"]["run_id"] == run_id  # the old run did not change
            statuses.append(message["data"]["status"])
            if statuses[-1] == "completed":
                break
        assert message["data"]["task"] == "newcomer run"
        assert message["data"]["task_id"] == run_id


# --- a run's files, replays and share file ------------------------------------------------------


def test_the_runlog_and_an_artifact_download_as_they_are(config: Path) -> None:
    (config.parent / "ws" / "big.txt").write_text("".join(f"line {n}\n" for n in range(200)))

    async def reader(task: str, step: int) -> ChatResponse:
        if step == 1:
            return tool_call("read_file", path="big.txt")
        return tool_call("finish_task", summary="read it")

    with LiveApp(config, reader) as live:
        run_id = live.submit(task="read big")
        live.wait_final(run_id)
        runlog = live.client.get(f"/runs/{run_id}/runlog")
        path = live.runs / run_id / "runlog.jsonl"
        assert runlog.status_code == 200 and runlog.content == path.read_bytes()
        assert runlog.headers["content-type"].startswith("application/x-ndjson")
        assert f'filename="{run_id}.jsonl"' in runlog.headers["content-disposition"]
        [result] = [e for e in read_events(path) if e["kind"] == "tool_result"][:1]
        assert result["artifact"].startswith("artifacts/")
        artifact = live.client.get(f"/runs/{run_id}/" + result["artifact"])
        assert artifact.status_code == 200
        assert artifact.headers["content-type"] == "text/plain; charset=utf-8"
        assert artifact.headers["x-content-type-options"] == "nosniff"
        assert artifact.headers["content-security-policy"] == "sandbox"
        assert "| line 100\n" in artifact.text and "line 100" not in result["output"]


def test_artifact_paths_cannot_leave_the_runs_artifacts_folder(config: Path) -> None:
    run_id = cli_run(config, "plain run")
    folder = config.parent / "runs" / run_id
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "kept.txt").write_text("an artifact")
    (config.parent / "secret.txt").write_text("SECRET CONTENT")
    (folder / "artifacts" / "escape.txt").symlink_to(config.parent / "secret.txt")
    with LiveApp(config) as live:
        assert live.client.get(f"/runs/{run_id}/artifacts/kept.txt").text == "an artifact"
        for name in ("escape.txt", "..%2Frunlog.jsonl", "%2E%2E", "%2Fetc%2Fpasswd",
                     "..%2F..%2Fsecret.txt", "kept.txt%00.png"):  # fmt: skip
            answer = live.client.get(f"/runs/{run_id}/artifacts/{name}")
            assert answer.status_code == 404, name
            assert "SECRET" not in answer.text and "an artifact" not in answer.text
        answer = live.client.get(f"/runs/{run_id}/artifacts/../../../secret.txt")
        assert answer.status_code == 404 and "SECRET" not in answer.text


def test_hostile_runs_neither_break_the_listing_nor_leak_files(config: Path) -> None:
    good = cli_run(config, "the good run")
    runs = config.parent / "runs"
    outside = config.parent / "outside.jsonl"
    outside.write_text((runs / good / "runlog.jsonl").read_text().replace("the good run", "LEAK"))
    (runs / "20990101T000000.000Z-linked").mkdir()
    (runs / "20990101T000000.000Z-linked" / "runlog.jsonl").symlink_to(outside)
    (runs / "20990101T000000.000Z-folder").symlink_to(runs / good)
    (runs / "20990101T000000.000Z-junk").mkdir()
    junk = b'not json\n{"kind": 3}\n' + b"x" * 100_000 + b"\n\xff\xfe\n"
    (runs / "20990101T000000.000Z-junk" / "runlog.jsonl").write_bytes(junk)
    with LiveApp(config) as live:
        listed = live.client.get("/runs").json()["runs"]
        assert [r["run_id"] for r in listed] == ["20990101T000000.000Z-junk", good]
        assert listed[0]["status"] == "unreadable"
        assert listed[0]["error"]["code"] == "unreadable_runlog"
        assert "runlog.jsonl" in listed[0]["error"]["hint"]
        for run_id in ("20990101T000000.000Z-linked", "20990101T000000.000Z-folder"):
            for path in ("", "/events", "/runlog", "/html"):
                answer = live.client.get(f"/runs/{run_id}{path}")
                assert answer.status_code == 404 and "LEAK" not in answer.text
            assert live.client.post(f"/runs/{run_id}/replay", json={}).status_code == 404


def test_secrets_in_an_old_runlog_never_leave_the_service(config: Path) -> None:
    run_id = cli_run(config, "innocent task")
    path = config.parent / "runs" / run_id / "runlog.jsonl"
    path.write_text(path.read_text().replace("innocent task", f"use {TOKEN} please"))
    with LiveApp(config) as live:
        answers = [
            live.client.get("/runs"),
            live.client.get(f"/runs/{run_id}"),
            live.client.get(f"/runs/{run_id}/runlog"),
            live.client.get(f"/runs/{run_id}/html"),
        ]
        with live.client.stream("GET", f"/runs/{run_id}/events") as stream:
            events = list(sse(stream))
        for answer in answers:
            assert answer.status_code == 200
            assert TOKEN not in answer.text and "[redacted]" in answer.text
        assert TOKEN not in json.dumps(events) and "[redacted]" in json.dumps(events)


def test_a_replay_with_live_tools_runs_only_where_the_service_may_work(config: Path) -> None:
    run_id = cli_run(config, "replay me for real")
    runs = config.parent / "runs"
    elsewhere = config.parent / "elsewhere"  # a CLI run's folder, not under workspace_roots
    elsewhere.mkdir()
    outside = "20261231T235959.000Z-outside"
    (runs / outside).mkdir()
    text = (runs / run_id / "runlog.jsonl").read_text()
    recorded = str((config.parent / "ws").resolve())
    (runs / outside / "runlog.jsonl").write_text(
        text.replace(json.dumps(recorded)[1:-1], str(elsewhere)).replace(run_id, outside)
    )
    with LiveApp(config) as live:
        before = set(runs.iterdir())
        refused = live.client.post(f"/runs/{outside}/replay", json={"live_tools": True})
        body = error_shape(refused, 422, "config_error")
        assert str(elsewhere) in body["message"] and "live_tools false" in body["details"]["hint"]
        assert set(runs.iterdir()) == before  # nothing replayed
        inside = live.client.post(f"/runs/{run_id}/replay", json={"live_tools": True})
        assert inside.status_code == 200, inside.text
        replayed = inside.json()  # the tools ran again, on a copy of the folder as it is now
        assert (runs / replayed["run_id"] / "runlog.jsonl").is_file()
        assert "already held exactly this text" in replayed["divergence"]["now"]


def test_a_replay_over_http_is_identical_or_says_where_it_diverged(config: Path) -> None:
    run_id = cli_run(config, "replay me")
    runs = config.parent / "runs"
    changed = "20261231T235959.000Z-edited"
    (runs / changed).mkdir()
    text = (runs / run_id / "runlog.jsonl").read_text()
    (runs / changed / "runlog.jsonl").write_text(
        text.replace("You write files.", "You wrote files once.").replace(run_id, changed)
    )
    with LiveApp(config) as live:
        same = live.client.post(f"/runs/{run_id}/replay", json={"live_tools": False})
        assert same.status_code == 200, same.text
        body = same.json()
        assert (body["identical"], body["divergence"], body["steps"]) == (True, None, 2)
        replay = live.client.get(f"/runs/{body['run_id']}").json()["summary"]
        assert replay["replay_of"] == run_id and body["run_id"] != run_id
        assert_valid_runlog(runs / body["run_id"] / "runlog.jsonl")

        other = live.client.post(f"/runs/{changed}/replay").json()
        assert other["identical"] is False
        assert other["divergence"]["step"] == 1
        assert other["divergence"]["field"] == "messages[0].content"
        assert "You wrote files once." in other["divergence"]["recorded"]
        assert "You write files." in other["divergence"]["now"]
        error_shape(live.client.post(f"/runs/{run_id}/replay", json={"live_tools": "yes"}), 422)


def test_the_share_file_embeds_the_run_safely_under_its_own_policy(config: Path) -> None:
    run_id = cli_run(config, "</script><script>alert(1)</script> <!-- and more")
    with LiveApp(config) as live:
        answer = live.client.get(f"/runs/{run_id}/html")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    assert answer.headers["content-disposition"] == f'attachment; filename="{run_id}.html"'
    assert answer.headers["content-security-policy"] == "sandbox allow-scripts"
    assert answer.headers["x-content-type-options"] == "nosniff"
    page = answer.text
    data = re.search(r'<script type="application/json" id="fabric-run">(.*?)</script>', page, re.S)
    assert data is not None and "<" not in data.group(1)
    events = json.loads(data.group(1))["events"]
    assert events == read_events(config.parent / "runs" / run_id / "runlog.jsonl")
    assert "alert(1)" in events[0]["task"]
    scripts = [
        body
        for attributes, body in re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
        if "application/json" not in attributes and "src=" not in attributes
    ]
    assert scripts and not any("alert(1)" in script for script in scripts)
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert policy is not None
    allowed = policy.group(1).replace("&#x27;", "'").replace("&#39;", "'")
    script_src = re.search(r"script-src ([^;]+)", allowed)
    assert script_src is not None and "unsafe-inline" not in script_src.group(1)
    for script in scripts:  # each inline script runs by its hash, and nothing else does
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in script_src.group(1)


# --- packs and models ---------------------------------------------------------------------------


def test_packs_say_their_policy_limits_schema_tools_and_inputs(config: Path) -> None:
    with LiveApp(config) as live:
        packs = {p["name"]: p for p in live.client.get("/packs").json()["packs"]}
    asker, writer_ = packs["asker"], packs["writer"]
    assert asker["policy"] == {
        "default": "allow",
        "approval_timeout": 300.0,
        "rules": [{"tool": "write_file", "command": None, "path": None, "verdict": "ask"}],
    }
    assert writer_["limits"]["tool_output_chars"] == 256
    assert set(writer_["limits"]) == {"max_steps", "finish_repairs", "tool_timeout",
                                      "tool_output_chars", "max_depth", "budget"}  # fmt: skip
    assert writer_["limits"]["budget"] == {
        "tokens": None, "cost_usd": None, "seconds": None, "tool_calls": None, "model_calls": None
    }  # fmt: skip
    assert writer_["inputs"]["budget"] == {}  # no limits: a task may set its own
    assert writer_["finish_schema"]["required"] == ["summary"]
    tools = {t["name"]: t for t in writer_["tools_detail"]}
    assert set(tools) == {"read_file", "write_file", "edit_file", "finish_task"}
    assert tools["write_file"]["parameters"]["required"] == ["path", "content"]
    assert tools["finish_task"]["parameters"] == writer_["finish_schema"]
    assert writer_["inputs"]["workspace"] is True
    assert writer_["inputs"]["workspace_roots"] == [str(config.parent / "ws")]
    assert writer_["inputs"]["verify"] == []
    assert writer_["inputs"]["max_steps"] == {"default": 30, "max": 10_000}
    assert writer_["tools"] == ["read_file", "write_file", "edit_file", "finish_task"]  # as before


def test_models_say_how_fast_the_runs_measured_them(config: Path) -> None:
    cli_run(config, "one")
    cli_run(config, "two")
    with LiveApp(config) as live:
        report = live.client.get("/models").json()
    assert "backends" in report  # as before
    [measured] = report["measured"]
    assert (measured["model"], measured["runs"], measured["completion_tokens"]) == (
        "scripted-model", 2, 20,
    )  # fmt: skip
    assert measured["llm_seconds"] >= 0
    assert set(measured) == {"backend", "model", "runs", "completion_tokens", "llm_seconds",
                             "tokens_per_s"}  # fmt: skip


def test_the_token_is_needed_for_every_new_endpoint(config: Path) -> None:
    run_id = cli_run(config, "guarded")
    with LiveApp(config) as live:
        for method, path in [("GET", "/runs"), ("GET", "/runs/stream"), ("GET", f"/runs/{run_id}"),
                             ("GET", f"/runs/{run_id}/events"), ("GET", f"/runs/{run_id}/runlog"),
                             ("GET", f"/runs/{run_id}/artifacts/x.txt"),
                             ("POST", f"/runs/{run_id}/replay"), ("GET", f"/runs/{run_id}/html"),
                             ("GET", "/packs"), ("GET", "/models")]:  # fmt: skip
            error_shape(live.anonymous.request(method, path), 401, "unauthorized")
        assert len(list((config.parent / "runs").iterdir())) == 1  # no replay ran
