"""``telemetry:``: OpenTelemetry traces of runs (ADR 0022). Where the spans go (endpoint,
headers, service name) is told by the standard ``OTEL_*`` variables only, never here: a header
often holds a collector's key, and the file never holds secrets."""

from __future__ import annotations

from pydantic import Field

from .base import _Strict


class TelemetrySettings(_Strict):
    """OpenTelemetry traces: one span per run, model call and tool call."""

    traces: bool = Field(
        False,
        description="Trace every run, also without OTEL_* variables (then over OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, or http://localhost:4318). OTEL_SDK_DISABLED="
        "true or OTEL_TRACES_EXPORTER=none still turn tracing off. Needs "
        "pip install 'agent-fabric[otel]'.",
    )
    capture_content: bool = Field(
        False,
        description="Put the messages, tool arguments and tool results on the spans (secrets "
        "redacted). OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, when set, decides "
        "instead.",
    )
    export_timeout: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Seconds one export of spans may take, its retries included. Live runs "
        "export in a thread of their own, so a slow collector never holds up their steps.",
    )
    exit_wait: float = Field(
        1.0,
        ge=0,
        le=60,
        description="The most a process waits when it ends for spans not yet sent (a short "
        "`fabric run` ends before any batch is due); then they are dropped, and stderr says so. "
        "A collector that is down or slow delays fabric's exit by at most this.",
    )
