"""OpenTelemetry traces end to end (ADR 0022): real `fabric run` and `fabric export otel`
processes against a loopback OTLP/HTTP collector (a tiny server in the test that decodes the
protobuf requests), a collector that refuses connections and one that never answers (the run
ends as it would without tracing, and not noticeably later), and fabric without the
OpenTelemetry packages."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from support import free_port

from fabric.infrastructure.telemetry.ids import trace_id_of
from fabric.testing import MockOpenAIServer, completion

CONFIG = """
version: 1
llm:
  backend: openai
  backends:
    openai: {{kind: openai, base_url: "{url}"}}
  models: {{default: mock}}
runs_dir: runs
packs:
  lead:
    builder: declarative
    description: Leads.
    system_prompt: You lead.
    tools: [read_file]
    delegates: [builder]
    finish_schema: {{type: object, properties: {{answer: {{type: string}}}}, required: [answer]}}
  builder:
    builder: declarative
    description: Builds files.
    system_prompt: You build.
    tools: [write_file]
    finish_schema: {{type: object, properties: {{built: {{type: string}}}}, required: [built]}}
"""
EXTRA_SECONDS = 6.0
"""How much longer than the same run without tracing a run against a dead collector may take:
loose on purpose (telemetry.exit_wait is 1 s by default; without that bound the test's exports
of up to 30 s would be waited for, and the SDK's own setup takes 10 s or more)."""


def model(body: dict[str, Any]) -> tuple[int, Any]:
    messages = body["messages"]
    lead = str(messages[0]["content"]).startswith("You lead")
    step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
    if lead and step == 1:
        return 200, completion(None, [("delegate_builder", {"task": "write built.txt"})])
    if lead and step == 2:
        return 200, completion(None, [("read_file", {"path": "built.txt"})])
    if lead:
        return 200, completion(None, [("finish_task", {"answer": "built and read"})])
    if step == 1:
        return 200, completion(None, [("write_file", {"path": "built.txt", "content": "x"})])
    return 200, completion(None, [("finish_task", {"built": "built.txt"})])


class Collector:
    """An OTLP/HTTP traces endpoint on 127.0.0.1: keeps every span it is sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        collector = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                collector.receive(request)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def receive(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            self.resources.append(_attributes(resource_spans.resource.attributes))
            for scope_spans in resource_spans.scope_spans:
                self.spans += [_span(s) for s in scope_spans.spans]

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _span(span: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "status": span.status.code,
        "attributes": _attributes(span.attributes),
        "events": [e.name for e in span.events],
    }


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    with MockOpenAIServer(model) as server:
        (tmp_path / "fabric.yaml").write_text(CONFIG.format(url=server.base_url))
        (tmp_path / "ws").mkdir()
        yield tmp_path


def _fabric(
    folder: Path, *argv: str, env: Mapping[str, str] = {}
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fabric", *argv, "--config", str(folder / "fabric.yaml")],
        cwd=folder / "ws", capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip


def _run(folder: Path, env: Mapping[str, str] = {}) -> tuple[dict[str, Any], str, float]:
    """`fabric run` of the lead pack: its JSON result, its stderr and how long it took."""
    began = time.monotonic()
    ran = _fabric(folder, "run", "--pack", "lead", "--json", "build it", env=env)
    took = time.monotonic() - began
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout[ran.stdout.index("{") :]), ran.stderr, took


def test_a_live_run_and_its_export_send_the_same_spans(project: Path) -> None:
    with Collector() as collector:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint}
        result, _, _ = _run(project, env)
        live = sorted(collector.spans, key=lambda s: s["span_id"])
        assert collector.resources[0]["service.name"] == "fabric"
        names = [s["name"] for s in live]
        for name in ("invoke_agent lead", "invoke_agent builder", "execute_tool delegate_builder",
                     "execute_tool write_file", "execute_tool read_file", "chat mock"):  # fmt: skip
            assert name in names, names
        [lead] = [s for s in live if s["name"] == "invoke_agent lead"]
        [builder] = [s for s in live if s["name"] == "invoke_agent builder"]
        [delegate] = [s for s in live if s["name"] == "execute_tool delegate_builder"]
        assert lead["parent"] is None and int(lead["trace_id"], 16) == trace_id_of(result["run_id"])
        assert builder["parent"] == delegate["span_id"] and delegate["parent"] == lead["span_id"]
        assert lead["attributes"]["gen_ai.agent.name"] == "lead"
        assert lead["attributes"]["gen_ai.provider.name"] == "openai"
        assert lead["attributes"]["fabric.run.status"] == "completed"
        assert "gen_ai.input.messages" not in json.dumps(live)  # no content unless asked

        collector.spans.clear()
        exported = _fabric(project, "export", "otel", result["run_id"], env=env)
        assert exported.returncode == 0, exported.stderr
        assert exported.stdout.strip() == (
            f"exported {len(live)} span(s) of run {result['run_id']} and 1 delegated run(s) "
            f"to {collector.endpoint}/v1/traces"
        )
        assert sorted(collector.spans, key=lambda s: s["span_id"]) == live


@pytest.mark.parametrize("collector", ["refuses", "never answers"])
def test_a_dead_collector_neither_fails_nor_holds_up_a_run(project: Path, collector: str) -> None:
    # exports that may take 30 s: only the bound on the wait at exit keeps the run short
    with (project / "fabric.yaml").open("a") as config:
        config.write("telemetry: {export_timeout: 30}\n")
    _, _, baseline = _run(project)
    with _dead(collector) as endpoint:
        result, stderr, took = _run(project, {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    assert result["status"] == "completed"
    assert took < baseline + EXTRA_SECONDS, (took, baseline)
    assert "fabric: traces:" in stderr and "OTEL_SDK_DISABLED=true" in stderr


@pytest.mark.parametrize("collector", ["refuses", "never answers"])
def test_an_export_that_cannot_be_delivered_says_so_and_exits_1(
    project: Path, collector: str
) -> None:
    result, _, _ = _run(project)
    with _dead(collector) as endpoint:
        exported = _fabric(
            project,
            "export",
            "otel",
            result["run_id"],
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        )
    assert exported.returncode == 1, exported.stdout + exported.stderr
    assert f"error: could not send the spans to {endpoint}/v1/traces" in exported.stderr
    assert "hint: check that an OpenTelemetry collector listens there" in exported.stderr


class _dead:
    """An OTLP endpoint that refuses connections (nothing listens), or that takes them and
    never answers (a socket that listens and never accepts)."""

    def __init__(self, how: str) -> None:
        self._how = how
        self._socket: socket.socket | None = None

    def __enter__(self) -> str:
        if self._how == "refuses":
            return f"http://127.0.0.1:{free_port()}"
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}"

    def __exit__(self, *exc: object) -> None:
        if self._socket is not None:
            self._socket.close()


HIDE_OTEL = """
import sys
for name in ("opentelemetry.sdk", "opentelemetry.exporter"):
    sys.modules[name] = None  # as if agent-fabric[otel] were not installed
sys.argv = ["fabric", *sys.argv[1:]]
from fabric.__main__ import main
main()
"""


def _without_otel(folder: Path, *argv: str, env: Mapping[str, str] = {}) -> Any:
    return subprocess.run(
        [sys.executable, "-c", HIDE_OTEL, *argv, "--config", str(folder / "fabric.yaml")],
        cwd=folder / "ws", capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL, env={**os.environ, **env},
    )  # fmt: skip


def test_without_the_otel_extra_fabric_runs_and_asking_for_traces_says_what_to_install(
    project: Path,
) -> None:
    ran = _without_otel(project, "run", "--pack", "lead", "--json", "build it")
    assert ran.returncode == 0, ran.stderr
    asked = _without_otel(
        project, "run", "--pack", "lead", "build it",
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert asked.returncode == 2
    assert "OpenTelemetry tracing is asked for (OTEL_EXPORTER_OTLP_ENDPOINT is set)" in asked.stderr
    assert "pip install 'agent-fabric[otel]'" in asked.stderr
    exported = _without_otel(project, "export", "otel", "any-run")
    assert exported.returncode == 2 and "pip install 'agent-fabric[otel]'" in exported.stderr


def test_a_run_without_tracing_imports_nothing_of_opentelemetry(project: Path) -> None:
    ran = _fabric(
        project, "run", "--pack", "lead", "build it", env={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert ran.returncode == 0, ran.stderr
    imported = [line for line in ran.stderr.splitlines() if line.startswith("import time:")]
    assert imported and not [line for line in imported if "opentelemetry" in line]
