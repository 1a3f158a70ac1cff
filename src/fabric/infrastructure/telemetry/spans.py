"""The one translator from runlog events to OpenTelemetry spans (ADR 0022), fed live by
``TraceObserver`` as a run writes its events and offline by ``fabric export otel`` as it reads
a runlog; the events' own ``ts`` are the spans' times, so both give the same spans.

Per run: ``invoke_agent {pack}`` from ``run_started`` (or ``run_resumed``) to ``run_finished``;
under it ``chat {model}`` from each ``llm_request`` to its ``llm_response`` (a fallback ends one
with an error and begins another for the next model) and ``execute_tool {tool}`` from each
``tool_call`` to its ``tool_result`` (an accepted ``finish_task`` has none: it ends with the
run). A delegated run's ``invoke_agent`` is a child of the delegating ``execute_tool`` span.
Retries, policy verdicts, approvals, verifications, nudges, briefs and compactions are span
events. Unknown kinds are passed over."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from msgspec import Struct, field
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context

from fabric.domain.secrets import Secrets

from . import attributes as a
from . import content as c
from .ids import RunlogIds

Recall = Callable[[str], Mapping[str, Any] | None]
"""A run's ``run_started`` by its id (None: not found): what a resumed run's spans need."""
_UNFINISHED = (
    "unfinished",
    "the runlog has no run_finished here: the run was still going, or its process stopped",
)


class _Run(Struct):
    """One run's open spans."""

    started: Mapping[str, Any]
    """Its ``run_started`` (what is known of it, for a resumed run)."""
    facts: a.RunFacts
    root: Span
    chat: Span | None = None
    step: int | None = None
    """The step of the open ``chat`` span."""
    tools: dict[str, Span] = field(default_factory=dict)
    last: int = 0
    """When its latest event was written (ns)."""


class SpanTranslator:
    """Starts and ends spans as runlog events come, for any number of runs at once."""

    def __init__(
        self,
        tracer: Tracer,
        ids: RunlogIds,
        *,
        capture: bool = False,
        secrets: Secrets | None = None,
        recall: Recall | None = None,
    ) -> None:
        self._tracer, self._ids, self._capture = tracer, ids, capture
        self._secrets = secrets or Secrets()
        self._recall = recall
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._handlers: dict[str, Callable[[Mapping[str, Any], int], None]] = {
            "run_started": self._started,
            "run_resumed": self._resumed,
            "llm_request": self._request,
            "llm_fallback": self._fallback,
            "llm_response": self._response,
            "tool_call": self._tool_call,
            "tool_result": self._tool_result,
            "run_finished": self._finished,
        }

    def feed(self, event: Mapping[str, Any]) -> None:
        """Take one runlog event."""
        at = a.nanos(event.get("ts"))
        if at is None or not isinstance(event.get("run_id"), str):
            return
        with self._lock:
            handler = self._handlers.get(str(event.get("kind")), self._noted)
            handler(event, at)
            run = self._runs.get(event["run_id"])
            if run is not None:
                run.last = at

    def end_open(self, run_id: str | None = None) -> None:
        """End the open spans of ``run_id`` (default: of every run) where its log stops: a run
        whose log has no end (killed, or still going when it was read)."""
        with self._lock:
            for rid in [run_id] if run_id is not None else list(self._runs):
                run = self._runs.pop(rid, None)
                if run is not None:
                    self._close(run, run.last, _UNFINISHED, {"fabric.run.status": "unfinished"})

    def _started(self, event: Mapping[str, Any], at: int) -> None:
        self._begin(event, event, at)

    def _resumed(self, event: Mapping[str, Any], at: int) -> None:
        """A resumed run: the part before it ends (as ``ended`` says, or where it stopped),
        and a new ``invoke_agent`` span begins for the steps it goes on with."""
        run = self._runs.pop(event["run_id"], None)
        ended = event.get("ended") if isinstance(event.get("ended"), Mapping) else None
        if run is not None:
            end_at = a.nanos(ended.get("ts")) if ended else None
            attrs, error = a.end_attributes(ended) if ended else ({}, _UNFINISHED)
            self._close(run, end_at or run.last, error, attrs)
        started = run.started if run is not None else self._recalled(event["run_id"])
        root = self._begin(started, event, at)
        root.set_attributes(self._safe(a.resumed_attributes(event)))

    def _recalled(self, run_id: str) -> Mapping[str, Any]:
        started = self._recall(run_id) if self._recall is not None else None
        return started if isinstance(started, Mapping) else {}

    def _begin(self, started: Mapping[str, Any], event: Mapping[str, Any], at: int) -> Span:
        run_id = event["run_id"]
        facts = a.RunFacts.of(started, run_id)
        attrs = a.run_attributes(facts, started)
        if self._capture and started.get("task") is not None:
            attrs["gen_ai.input.messages"] = c.text_messages("user", started.get("task"))
            prompt = c.instructions(started.get("system_prompt"))
            if prompt is not None:
                attrs["gen_ai.system_instructions"] = prompt
        name = f"invoke_agent {facts.pack}" if facts.pack else "invoke_agent"
        root = self._start(name, event, at, self._parent_of(started), SpanKind.INTERNAL, attrs)
        self._runs[run_id] = _Run(started, facts, root)
        return root

    def _parent_of(self, started: Mapping[str, Any]) -> Span | None:
        """The delegating call's span, for a run another run delegated to."""
        parent = started.get("parent")
        if not isinstance(parent, Mapping):
            return None
        run = self._runs.get(str(parent.get("run_id")))
        return run.tools.get(str(parent.get("call_id"))) if run is not None else None

    def _request(self, event: Mapping[str, Any], at: int) -> None:
        run = self._runs.get(event["run_id"])
        if run is None:
            return
        if run.chat is not None:  # a request without a reply: the run went on past it
            self._end(run.chat, run.last, ("no_response", "no reply to it was logged"))
        run.step = event.get("step") if isinstance(event.get("step"), int) else None
        run.chat = self._chat(run, event, at)

    def _chat(self, run: _Run, event: Mapping[str, Any], at: int) -> Span:
        attrs = a.chat_attributes(run.facts, event)
        if self._capture and "messages" in event:
            attrs["gen_ai.input.messages"] = c.input_messages(event.get("messages"))
        name = f"chat {run.facts.model}" if run.facts.model else "chat"
        return self._start(name, event, at, run.root, SpanKind.CLIENT, attrs)

    def _fallback(self, event: Mapping[str, Any], at: int) -> None:
        """The model failed: its ``chat`` span ends with the error, and the same request goes
        to the next model in a span of its own."""
        run = self._runs.get(event["run_id"])
        if run is None:
            return
        to = a.mapping(event.get("to"))
        run.facts = run.facts.switched(to)
        if run.chat is None:
            return
        reason = str(event.get("reason") or "fallback")
        self._end(run.chat, at, (reason, str(event.get("message") or reason)))
        run.chat = self._chat(run, {**event, "step": run.step}, at)

    def _response(self, event: Mapping[str, Any], at: int) -> None:
        run = self._runs.get(event["run_id"])
        if run is None:
            return
        chat, run.chat = run.chat, None
        if chat is None:  # its request is not in this log (a resumed run redid it)
            chat = self._chat(run, event, at - _ms(event.get("duration_ms")))
        attrs = a.response_attributes(event)
        if self._capture:
            attrs["gen_ai.output.messages"] = c.output_messages(
                event.get("message"), event.get("finish_reason")
            )
        chat.set_attributes(self._safe(attrs))
        self._end(chat, at)

    def _tool_call(self, event: Mapping[str, Any], at: int) -> None:
        run = self._runs.get(event["run_id"])
        if run is None:
            return
        attrs = a.tool_attributes(event)
        if self._capture:
            attrs["gen_ai.tool.call.arguments"] = c.arguments(event.get("arguments"))
        name = f"execute_tool {event.get('name')}"
        run.tools[str(event.get("call_id"))] = self._start(
            name, event, at, run.root, SpanKind.INTERNAL, attrs
        )

    def _tool_result(self, event: Mapping[str, Any], at: int) -> None:
        run = self._runs.get(event["run_id"])
        if run is None:
            return
        span = run.tools.pop(str(event.get("call_id")), None)
        if span is None:  # its call is not in this log
            start = at - _ms(event.get("duration_ms"))
            span = self._start(f"execute_tool {event.get('name')}", event, start, run.root,
                               SpanKind.INTERNAL, a.tool_attributes(event))  # fmt: skip
        attrs = a.result_attributes(event)
        if self._capture and isinstance(event.get("output"), str):
            attrs["gen_ai.tool.call.result"] = event["output"]
        span.set_attributes(self._safe(attrs))
        self._end(span, at, None if event.get("ok") else a.failure(event, "tool_error"))

    def _finished(self, event: Mapping[str, Any], at: int) -> None:
        run = self._runs.pop(event["run_id"], None)
        if run is None:
            return
        attrs, error = a.end_attributes(event)
        if self._capture and event.get("payload") is not None:
            attrs["gen_ai.output.messages"] = c.text_messages("assistant", event.get("payload"))
        self._close(run, at, error, attrs)

    def _noted(self, event: Mapping[str, Any], at: int) -> None:
        """A span event on the span the event belongs to: its call's, its model call's, or
        the run's."""
        run = self._runs.get(event["run_id"])
        attrs = a.event_attributes(event, capture=self._capture)
        if run is None or attrs is None:
            return
        span = run.tools.get(str(event.get("call_id")), run.root)
        if event.get("kind") == "llm_retry" and run.chat is not None:
            span = run.chat
        span.add_event(f"fabric.{event.get('kind')}", self._safe(attrs), timestamp=at)

    def _close(self, run: _Run, at: int, error: tuple[str, str] | None, attrs: a.Attrs) -> None:
        """End a run's spans: the calls still open share the run's outcome (an accepted
        ``finish_task``, a model call cut by a fatal error or a cancel)."""
        for span in (run.chat, *run.tools.values()):
            if span is not None:
                self._end(span, at, error)
        run.root.set_attributes(self._safe(attrs))
        self._end(run.root, at, error)

    def _end(self, span: Span, at: int, error: tuple[str, str] | None = None) -> None:
        """End ``span`` at ``at``; with an error: ``error.type`` and the status ERROR with the
        (redacted) message."""
        if error is not None:
            span.set_attribute("error.type", error[0])
            span.set_status(Status(StatusCode.ERROR, self._secrets.redact(error[1])))
        span.end(end_time=max(at, _start_of(span)))

    def _start(
        self,
        name: str,
        event: Mapping[str, Any],
        at: int,
        parent: Span | None,
        kind: SpanKind,
        attrs: a.Attrs,
    ) -> Span:
        """A span with the ids of ``event`` (``ids.py``), under ``parent`` (None: a trace of
        its own, whatever span is current where fabric runs)."""
        context = set_span_in_context(parent) if parent is not None else Context()
        seq = event.get("seq")
        with self._ids.primed(event["run_id"], seq if isinstance(seq, int) else -1):
            return self._tracer.start_span(
                self._secrets.redact(name),
                context=context,
                kind=kind,
                attributes=self._safe(attrs),
                start_time=at,
            )

    def _safe(self, attrs: a.Attrs) -> a.Attrs:
        return a.redacted(attrs, self._secrets)


def _start_of(span: Span) -> int:
    start = getattr(span, "start_time", None)
    return start if isinstance(start, int) else 0


def _ms(value: Any) -> int:
    """Milliseconds (a ``duration_ms``) as nanoseconds."""
    return int(value * 1_000_000) if isinstance(value, int | float) else 0
