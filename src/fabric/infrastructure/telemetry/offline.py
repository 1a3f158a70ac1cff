"""``fabric export otel RUN``: a recorded run, with the runs it delegated to, turned into spans
by the same translator as live runs, and delivered (ADR 0022). The spans are made first, then
sent in batches; a batch that cannot be delivered stops the export with a ``TelemetryError``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from msgspec import Struct, field
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fabric.config.telemetry import TraceSettings
from fabric.domain.errors import TelemetryError
from fabric.domain.secrets import Secrets
from fabric.infrastructure.runlog import RUNLOG_NAME, read_runlog
from fabric.infrastructure.runlog.names import is_run_id

from .pipeline import ExportProblems, destination_of, exporters, hearing, tracing
from .spans import SpanTranslator

BATCH = 512
"""Spans sent in one request."""


class ExportReport(Struct, frozen=True):
    """What ``export_runs`` sent, and where."""

    spans: int
    runs: tuple[str, ...]
    """The run ids exported: the run first, then the runs it delegated to, as met."""
    destination: str
    notes: tuple[str, ...] = ()
    """What was left out: unreadable lines, delegated runs without a runlog."""


class _Reading(Struct):
    translator: SpanTranslator
    runs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Each run's ``run_started``, for its spans after a ``run_resumed``."""


def export_runs(
    path: Path, settings: TraceSettings, secrets: Secrets, console: TextIO
) -> ExportReport:
    """Export the run whose runlog is at ``path`` and every run it delegated to whose runlog
    is beside it; the console exporter writes to ``console``."""
    collected = InMemorySpanExporter()
    made = tracing(settings, [SimpleSpanProcessor(collected)])
    started: dict[str, Mapping[str, Any]] = {}
    translator = SpanTranslator(
        made.tracer,
        made.ids,
        capture=settings.capture_content,
        secrets=secrets,
        recall=started.get,
    )
    reading = _Reading(translator, started=started)
    try:
        _read(path, reading)
        spans = collected.get_finished_spans()
    finally:
        made.shutdown()
    destination = destination_of(settings)
    with hearing(ExportProblems(destination)) as problems:
        for exporter in exporters(settings, console):
            _deliver(exporter, spans, problems, settings.export_timeout)
    return ExportReport(len(spans), tuple(reading.runs), destination, tuple(reading.notes))


def _read(path: Path, reading: _Reading) -> None:
    """Feed the runlog at ``path`` to the translator, each delegated run's events just before
    the result of the call that started it (its span is then open to be the parent)."""
    events, problems = read_runlog(path)
    reading.notes.extend(problems)
    run_id = next((str(e["run_id"]) for e in events if "run_id" in e), path.parent.name)
    reading.runs.append(run_id)
    if events and events[0].get("kind") == "run_started":
        reading.started[run_id] = events[0]
    for event in events:
        if event.get("kind") == "tool_result":
            for child in event.get("child_run_ids") or ():
                _read_child(path, str(child), reading)
        reading.translator.feed(event)
    reading.translator.end_open(run_id)


def _read_child(path: Path, run_id: str, reading: _Reading) -> None:
    child = path.parent.parent / run_id / RUNLOG_NAME
    if not is_run_id(run_id):
        reading.notes.append(f"delegated run {run_id!r} left out: that is not a run id")
    elif run_id in reading.runs:
        reading.notes.append(f"delegated run {run_id} left out: its spans are made already")
    elif not child.is_file():
        reading.notes.append(f"delegated run {run_id} left out: no runlog at {child}")
    else:
        _read(child, reading)


def _deliver(
    exporter: SpanExporter,
    spans: Sequence[ReadableSpan],
    problems: ExportProblems,
    timeout: float,
) -> None:
    """Send ``spans`` in batches; a TelemetryError at the first batch that does not arrive."""
    try:
        for start in range(0, len(spans), BATCH):
            if exporter.export(spans[start : start + BATCH]) is not SpanExportResult.SUCCESS:
                sent = f" ({start} of {len(spans)} were sent before)" if start else ""
                raise TelemetryError(
                    f"could not send the spans to {problems.destination}{sent}: "
                    f"{problems.reason or f'no answer within {timeout:g} s'}",
                    hint="check that an OpenTelemetry collector listens there (OTLP over HTTP, "
                    "usually port 4318) and that OTEL_EXPORTER_OTLP_ENDPOINT (or "
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_EXPORTER_OTLP_HEADERS are "
                    "right, then run the export again",
                )
    finally:
        exporter.shutdown()
