"""OpenTelemetry traces of runs (ADR 0022) through ``Runner.run`` with a scripted model and the
SDK's in-memory exporter: the spans' names, nesting (a delegated run under the delegating tool
call), GenAI attributes, errors, content capture (off by default, redacted when on), and the
same spans again when the runlog is exported afterwards."""

from __future__ import annotations

import asyncio
import io
import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fabric.application.job import RunRequest
from fabric.config.loader import load_config
from fabric.config.telemetry import TraceSettings
from fabric.domain.errors import ModelServerError
from fabric.domain.models import ChatResponse, Message, RunStatus
from fabric.domain.secrets import Secrets
from fabric.infrastructure.telemetry.ids import RunlogIds, trace_id_of
from fabric.infrastructure.telemetry.observer import TraceObserver, trace_observer
from fabric.infrastructure.telemetry.offline import export_runs
from fabric.infrastructure.telemetry.pipeline import tracing
from fabric.infrastructure.telemetry.spans import SpanTranslator
from fabric.interfaces.compose import build_runner
from fabric.testing import FunctionChatClient, tool_call

CONFIG = """
    llm:
      backends:
        mock: {kind: openai, base_url: "http://127.0.0.1:9/v1", models: {default: m}}
    runs_dir: runs
    packs:
      lead:
        builder: declarative
        description: Leads the work.
        system_prompt: You lead.
        tools: [write_file]
        delegates: [helper]
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
      helper:
        builder: declarative
        description: Helps with one part.
        system_prompt: You help.
        tools: [write_file]
        finish_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
"""
SECRET = "sk-live-0123456789abcdef"
CHAT = "chat function"
"""A model call's span: ``FunctionChatClient`` calls its model ``function``."""


def _settings(capture: bool = False) -> TraceSettings:
    """Spans to the console (the tests read them from memory, or from a string)."""
    return TraceSettings(
        exporters=("console",),
        endpoint="http://unused",
        capture_content=capture,
        export_timeout=1.0,
        exit_wait=1.0,
        reason="the test",
    )


def _script(who: str, step: int) -> ChatResponse:
    if who == "lead" and step == 1:
        return tool_call("delegate_helper", task="write the part")
    if who == "lead" and step == 2:
        return tool_call("no_such_tool")
    if who == "helper" and step == 1:
        return tool_call("write_file", path="part.txt", content=f"key {SECRET}")
    return tool_call("finish_task", answer="done")


class _Traced:
    """A runner whose runs are traced into memory by the observer ``build_runner`` adds
    when tracing is on (``compose.traced``), with a tracer provider of the test's."""

    def __init__(self, tmp_path: Path, *, capture: bool = False, fail: bool = False) -> None:
        config = tmp_path / "fabric.yaml"
        config.write_text(textwrap.dedent(CONFIG))
        (tmp_path / "ws").mkdir(exist_ok=True)
        self.tmp_path = tmp_path
        self.memory = InMemorySpanExporter()
        self.settings = _settings(capture)
        made = tracing(self.settings, [SimpleSpanProcessor(self.memory)])
        self.secrets = Secrets([SECRET])
        observer = trace_observer(self.settings, self.secrets, tmp_path / "runs", made)

        async def answer(messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> Any:
            who = "lead" if str(messages[0]["content"]).startswith("You lead") else "helper"
            step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
            if fail and who == "lead" and step == 3:
                raise ModelServerError("the model server answered 503", status_code=503)
            return _script(who, step)

        self.runner = build_runner(
            load_config(config),
            chat_factory=lambda m: FunctionChatClient(answer),
            observers=[observer],
            secrets=self.secrets,
        )

    def run(self, task: str = "do the work", max_steps: int | None = None) -> Any:
        request = RunRequest("lead", task, workspace=self.tmp_path / "ws", max_steps=max_steps)
        return asyncio.run(self.runner.run(request))

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def _named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan | None:
    parent = span.parent
    if parent is None:
        return None
    return next(s for s in spans if s.context.span_id == parent.span_id)


def test_a_run_is_a_tree_of_spans_with_the_genai_attributes(tmp_path: Path) -> None:
    traced = _Traced(tmp_path)
    result = traced.run()
    assert result.status is RunStatus.COMPLETED
    spans = traced.spans()
    [root] = _named(spans, "invoke_agent lead")
    [child] = _named(spans, "invoke_agent helper")
    [delegate] = _named(spans, "execute_tool delegate_helper")
    assert root.parent is None and root.context.trace_id == trace_id_of(result.run_id)
    assert _parent_of(delegate, spans) is root
    # the delegated run is under the call that started it, in the same trace
    assert _parent_of(child, spans) is delegate
    assert {s.context.trace_id for s in spans} == {root.context.trace_id}
    assert child.attributes["fabric.parent_run_id"] == result.run_id
    assert delegate.attributes["fabric.child_run_ids"] == (child.attributes["fabric.run_id"],)
    [written] = _named(spans, "execute_tool write_file")
    assert _parent_of(written, spans) is child

    assert dict(root.attributes) | {} == {
        **dict(root.attributes),
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "lead",
        "gen_ai.conversation.id": result.run_id,
        "fabric.run_id": result.run_id,
        "fabric.run.status": "completed",
        "fabric.run.steps": 3,
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 15,
    }
    assert root.status.status_code is StatusCode.UNSET
    chats = [s for s in _named(spans, CHAT) if _parent_of(s, spans) is root]
    assert len(chats) == 3
    first = min(chats, key=lambda s: s.start_time or 0)
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.request.model"] == "function"
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first.attributes["gen_ai.usage.input_tokens"] == 10
    assert first.attributes["fabric.step"] == 1
    assert delegate.attributes["gen_ai.tool.name"] == "delegate_helper"
    assert delegate.attributes["gen_ai.tool.call.id"]
    assert delegate.attributes["gen_ai.operation.name"] == "execute_tool"
    for span in spans:  # each span lies within its parent
        parent = _parent_of(span, spans)
        assert span.end_time is not None and span.start_time is not None
        assert span.start_time <= span.end_time
        if parent is not None:
            assert parent.start_time is not None and parent.end_time is not None
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time


def test_errors_set_error_type_and_the_span_status(tmp_path: Path) -> None:
    traced = _Traced(tmp_path, fail=True)
    result = traced.run()
    assert result.status is RunStatus.FAILED
    spans = traced.spans()
    [unknown] = _named(spans, "execute_tool no_such_tool")
    assert unknown.status.status_code is StatusCode.ERROR
    assert unknown.attributes["error.type"] == "tool_error"
    assert "unknown tool" in (unknown.status.description or "")
    [root] = _named(spans, "invoke_agent lead")
    assert root.status.status_code is StatusCode.ERROR
    assert root.attributes["fabric.run.status"] == "failed"
    assert root.attributes["error.type"] == result.error["code"]
    # the model call the error cut short ends with the run, as an error
    last = max(_named(spans, CHAT), key=lambda s: s.start_time or 0)
    assert _parent_of(last, spans) is root and last.status.status_code is StatusCode.ERROR
    assert last.attributes["error.type"] == "server_error"


def _all_text(spans: Sequence[ReadableSpan]) -> str:
    """Everything the spans would send: names, attributes, events, statuses."""
    return json.dumps(
        [
            [s.name, dict(s.attributes or {}), s.status.description,
             [[e.name, dict(e.attributes or {})] for e in s.events]]
            for s in spans
        ],
        default=str,
    )  # fmt: skip


def test_content_is_left_out_unless_captured(tmp_path: Path) -> None:
    traced = _Traced(tmp_path)
    traced.run(task="the task text")
    text = _all_text(traced.spans())
    for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result", "gen_ai.system_instructions"):  # fmt: skip
        assert key not in text
    assert "the task text" not in text and "part.txt" not in text


def test_captured_content_follows_the_conventions_and_is_redacted(tmp_path: Path) -> None:
    traced = _Traced(tmp_path, capture=True)
    traced.run(task=f"the task, with {SECRET} in it")
    spans = traced.spans()
    assert SECRET not in _all_text(spans)
    [root] = _named(spans, "invoke_agent lead")
    assert json.loads(str(root.attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "the task, with [redacted] in it"}]}
    ]
    assert json.loads(str(root.attributes["gen_ai.system_instructions"]))[0]["content"] == (
        "You lead."
    )
    [written] = _named(spans, "execute_tool write_file")
    arguments = json.loads(str(written.attributes["gen_ai.tool.call.arguments"]))
    assert arguments == {"path": "part.txt", "content": "key [redacted]"}
    assert "wrote" in str(written.attributes["gen_ai.tool.call.result"])
    chat = min(_named(spans, CHAT), key=lambda s: s.start_time or 0)
    sent = json.loads(str(chat.attributes["gen_ai.input.messages"]))
    assert [m["role"] for m in sent] == ["system", "user"]
    [reply] = json.loads(str(chat.attributes["gen_ai.output.messages"]))
    assert reply["role"] == "assistant" and reply["finish_reason"] == "tool_call"
    assert reply["parts"][0]["type"] == "tool_call"


def test_secrets_the_runlog_did_not_know_are_redacted_from_spans_too() -> None:
    """An exported runlog may hold a value that is a secret now (a key set since): the
    translator redacts with the secrets it is given, in every name, attribute and status."""
    memory = InMemorySpanExporter()
    settings = _settings(capture=True)
    made = tracing(settings, [SimpleSpanProcessor(memory)])
    translator = SpanTranslator(made.tracer, made.ids, capture=False, secrets=Secrets([SECRET]))
    run = {"v": 3, "run_id": "r1", "ts": "2026-11-25T01:00:00.000000Z"}
    for seq, event in enumerate([
        {"kind": "run_started", "pack": f"p-{SECRET}", "model": SECRET, "task": SECRET},
        {"kind": "tool_call", "step": 1, "call_id": "c", "name": SECRET, "arguments": {}},
        {"kind": "tool_result", "step": 1, "call_id": "c", "name": SECRET, "ok": False,
         "output": SECRET, "duration_ms": 1,
         "error": {"code": "tool_error", "message": f"bad {SECRET}"}},
        {"kind": "run_finished", "status": "failed", "payload": None, "steps": 1,
         "usage": {}, "duration_s": 0, "error": {"code": "x", "message": SECRET}},
    ]):  # fmt: skip
        translator.feed({**run, "seq": seq, **event})
    spans = memory.get_finished_spans()
    assert len(spans) == 2 and SECRET not in _all_text(spans)


def test_the_exported_runlog_gives_the_spans_the_live_run_gave(tmp_path: Path) -> None:
    traced = _Traced(tmp_path, fail=False)
    result = traced.run()
    live = traced.spans()
    out = io.StringIO()
    report = export_runs(
        Path(str(result.runlog_path)), traced.settings, traced.secrets, console=out
    )
    assert report.spans == len(live) and len(report.runs) == 2
    exported = [json.loads(chunk) for chunk in _json_objects(out.getvalue())]
    assert _shape(exported) == _shape([json.loads(s.to_json()) for s in live])


def _json_objects(text: str) -> list[str]:
    """The console exporter's output: JSON objects one after another."""
    decoder, found, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        value, end = decoder.raw_decode(text, at)
        found.append(json.dumps(value))
        at = end + (len(text[end:]) - len(text[end:].lstrip()))
    return found


def _shape(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must agree: ids, parent, name, times, status, attributes and events."""
    return sorted(
        (s["context"]["span_id"], s["context"]["trace_id"], s["parent_id"], s["name"],
         s["start_time"], s["end_time"], json.dumps(s["status"]),
         json.dumps(s["attributes"], sort_keys=True), json.dumps(s["events"], sort_keys=True))
        for s in spans
    )  # fmt: skip


@pytest.mark.parametrize("version", ["v1", "v2", "v3"])
def test_every_runlog_version_fabric_wrote_exports_as_well_formed_spans(version: str) -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "runlogs" / version
    settings = _settings(capture=True)
    for runlog in sorted(fixtures.glob("*/runlog.jsonl")):
        out = io.StringIO()
        report = export_runs(runlog, settings, Secrets(), console=out)
        spans = [json.loads(chunk) for chunk in _json_objects(out.getvalue())]
        assert len(spans) == report.spans > 0
        ids = {s["context"]["span_id"] for s in spans}
        roots = [s for s in spans if s["parent_id"] is None]
        assert len(roots) == 1 and roots[0]["name"].startswith("invoke_agent ")
        assert all(s["parent_id"] in ids for s in spans if s["parent_id"] is not None)
        if runlog.parent.name == "killed":  # no run_finished: ends where the log stops
            assert roots[0]["attributes"]["fabric.run.status"] == "unfinished"


def test_a_resumed_run_goes_on_in_the_same_trace_with_what_its_log_says_of_it(
    tmp_path: Path,
) -> None:
    traced = _Traced(tmp_path)
    stopped = traced.run(max_steps=1)
    assert stopped.status is RunStatus.MAX_STEPS
    path = Path(str(stopped.runlog_path))
    events = [json.loads(line) for line in path.read_text().splitlines()]
    resumed = asyncio.run(traced.runner.resume(events, path, max_steps=5))
    assert resumed.status is RunStatus.COMPLETED
    first, second = sorted(
        _named(traced.spans(), "invoke_agent lead"), key=lambda s: s.start_time or 0
    )
    assert first.attributes["fabric.run.status"] == "max_steps"
    assert first.status.status_code is StatusCode.ERROR
    # the resumed part: named from the run's run_started, in the same trace, from step 2
    assert second.context.trace_id == first.context.trace_id == trace_id_of(stopped.run_id)
    assert second.attributes["fabric.resumed_from_step"] == 2
    assert second.attributes["gen_ai.request.model"] == "function"
    assert second.attributes["fabric.run.status"] == "completed"
    assert second.context.span_id != first.context.span_id
    # and its runlog, exported now, gives the same spans
    out = io.StringIO()
    export_runs(path, traced.settings, traced.secrets, console=out)
    exported = [json.loads(chunk) for chunk in _json_objects(out.getvalue())]
    assert _shape(exported) == _shape([json.loads(s.to_json()) for s in traced.spans()])
    # as an earlier fabric logged a resume (the end kept as a line of its own): the same roots
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    at = next(i for i, e in enumerate(lines) if e["kind"] == "run_resumed")
    ended = lines[at].pop("ended")
    lines.insert(at, {**lines[at], **ended, "kind": "run_finished"})
    older = tmp_path / "older" / stopped.run_id / "runlog.jsonl"
    older.parent.mkdir(parents=True)
    older.write_text("".join(json.dumps({**e, "seq": n}) + "\n" for n, e in enumerate(lines)))
    out = io.StringIO()
    export_runs(older, traced.settings, traced.secrets, console=out)
    roots = [json.loads(c) for c in _json_objects(out.getvalue()) if '"invoke_agent' in c]
    lead = [r for r in roots if r["name"] == "invoke_agent lead"]
    assert len(lead) == 2 and lead[1]["attributes"]["fabric.resumed_from_step"] == 2


class _BrokenTracer:
    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the tracer broke")


def test_a_tracing_problem_never_reaches_the_run(tmp_path: Path) -> None:
    traced = _Traced(tmp_path)
    broken = SpanTranslator(_BrokenTracer(), RunlogIds())  # type: ignore[arg-type]
    runner = build_runner(
        traced.runner.loaded,
        chat_factory=traced.runner.chat_factory,
        observers=[TraceObserver(broken)],
    )
    request = RunRequest("lead", "do the work", workspace=tmp_path / "ws")
    assert asyncio.run(runner.run(request)).status is RunStatus.COMPLETED
