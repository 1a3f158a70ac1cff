"""Where spans go (ADR 0022): an OpenTelemetry SDK tracer provider of fabric's own (never the
process's global one), its exporters (OTLP/HTTP, console), and the bounds that keep a collector
that is down or slow from holding up a run: live spans are exported in batches by a thread of
their own, each export takes at most ``export_timeout`` seconds (retries included), and a
process waits at most ``exit_wait`` seconds when it ends for the spans not yet sent.

Export problems are said once, in fabric's words, on stderr; the SDK's own log lines about them
are kept from the terminal unless the process has configured logging."""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import TextIO

from msgspec import Struct
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Tracer

import fabric
from fabric.config.telemetry import TraceSettings

from .ids import RunlogIds

SERVICE = "fabric"
"""``service.name`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one."""
_SDK_LOGGER = "opentelemetry"


class Tracing(Struct):
    """A tracer provider whose span ids come from the runlog (``RunlogIds``)."""

    provider: TracerProvider
    ids: RunlogIds
    settings: TraceSettings
    problems: ExportProblems | None = None
    """Hears the exporters' failures (live tracing)."""

    @property
    def tracer(self) -> Tracer:
        return self.provider.get_tracer("fabric", fabric.__version__)

    def shutdown(self) -> None:
        """Send what is left and stop, waiting at most ``exit_wait`` seconds; after that the
        spans not yet sent are dropped (the exports go on in a daemon thread the end of the
        process stops), and stderr says so."""
        worker = threading.Thread(target=self.provider.shutdown, name="fabric-otel", daemon=True)
        worker.start()
        worker.join(self.settings.exit_wait)
        if self.problems is None:
            return
        logging.getLogger(_SDK_LOGGER).removeHandler(self.problems)
        if worker.is_alive() and not self.problems.failures:
            why = self.problems.reason or f"{self.problems.destination} did not answer in time"
            self.problems.say(
                f"spans not yet sent after {self.settings.exit_wait:g} s were dropped ({why})"
            )


class ExportProblems(logging.Handler):
    """Hears what the SDK logs about exports that failed: keeps the latest reason, and has
    ``say`` write the first failure to stderr when ``live``."""

    def __init__(self, destination: str, *, live: bool = False) -> None:
        super().__init__(logging.WARNING)
        self.destination = destination
        self.live = live
        self.reason: str | None = None
        """Why the latest export failed, when the SDK said (not when it only gave up)."""
        self.failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.reason = _reason(record) or self.reason
        if record.levelno < logging.ERROR:
            return
        self.failures += 1
        if self.live and self.failures == 1:
            why = self.reason or "the export timed out or ran out of retries"
            self.say(f"could not send spans to {self.destination} ({why})")

    def say(self, what: str) -> None:
        """One line on stderr for the person at the terminal or reading the service's log."""
        sys.stderr.write(
            f"fabric: traces: {what}. Runs go on without them; check that the collector runs "
            f"at {self.destination}, or turn tracing off with OTEL_SDK_DISABLED=true\n"
        )


_ERRNO = re.compile(r"\[Errno -?\d+\][^\"')]*")


def _reason(record: logging.LogRecord) -> str | None:
    """Why an export failed, from one of the SDK's log records (None: the record only says
    that the SDK gave up: timeout, retries or shutdown)."""
    args = record.args if isinstance(record.args, tuple) else ()
    message = str(record.msg)
    if "due to timeout" in message:
        return None
    if message.startswith("Transient error") and args:
        text = str(args[0])
    elif "reason:" in message and len(args) >= 3 and args[2]:
        text = f"HTTP {args[1]}: {args[2]}" if args[1] else str(args[2])
    else:
        text = record.getMessage()
    errno = _ERRNO.search(text)  # the system's words, not the HTTP library's wrapping
    return f"connection failed: {errno.group(0).strip()}" if errno else text[:300]


_live: dict[TraceSettings, Tracing] = {}
_live_lock = threading.Lock()


def live_tracing(settings: TraceSettings) -> Tracing:
    """This process's tracing of its runs with ``settings``: made once, batch processors (the
    exports happen in a thread of their own, never in a run's way), shut down at exit within
    the bound."""
    with _live_lock:
        if settings not in _live:
            problems = ExportProblems(destination_of(settings), live=True)
            processors = [BatchSpanProcessor(e) for e in exporters(settings, sys.stderr)]
            _live[settings] = tracing(settings, processors, problems)
            atexit.register(_live[settings].shutdown)
        return _live[settings]


def tracing(
    settings: TraceSettings,
    processors: Sequence[SpanProcessor],
    problems: ExportProblems | None = None,
) -> Tracing:
    """A provider sending its spans to ``processors`` (the tests' in-memory exporter, the
    offline export's collector, the live batches); ``problems`` hears the failures of their
    exporters until it is shut down."""
    provider = TracerProvider(
        resource=_resource(), id_generator=(ids := RunlogIds()), shutdown_on_exit=False
    )
    for processor in processors:
        provider.add_span_processor(processor)
    if problems is not None:
        _hear(problems)
    return Tracing(provider, ids, settings, problems)


@contextlib.contextmanager
def hearing(problems: ExportProblems) -> Iterator[ExportProblems]:
    """``problems`` hears the SDK's log lines about exports while it lasts."""
    _hear(problems)
    try:
        yield problems
    finally:
        logging.getLogger(_SDK_LOGGER).removeHandler(problems)


def exporters(settings: TraceSettings, console: TextIO) -> list[SpanExporter]:
    """The exporters ``settings`` name: OTLP/HTTP with fabric's timeout (headers, certificates
    and compression from the ``OTEL_EXPORTER_OTLP_*`` variables), and/or JSON to ``console``."""
    made: list[SpanExporter] = []
    for name in settings.exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            made.append(OTLPSpanExporter(settings.endpoint, timeout=settings.export_timeout))
        elif name == "console":
            made.append(ConsoleSpanExporter(out=console))
    return made


def destination_of(settings: TraceSettings) -> str:
    """Where the spans go, in words: the endpoint (without credentials) and/or the console."""
    where = [
        _shown(settings.endpoint) if n == "otlp" else "the console" for n in settings.exporters
    ]
    return " and ".join(where)


def _shown(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _resource() -> Resource:
    """The environment's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), with
    fabric's name and version where it names none."""
    import os

    named = {
        pair.partition("=")[0].strip()
        for pair in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    }
    if os.environ.get("OTEL_SERVICE_NAME"):
        named.add("service.name")
    own = {"service.name": SERVICE, "service.version": fabric.__version__}
    return Resource.create({key: value for key, value in own.items() if key not in named})


def _hear(problems: ExportProblems) -> None:
    """Hear the SDK's log lines about exports; keep them from stderr (where ``problems`` says
    it once) unless the process set up logging of its own."""
    logger = logging.getLogger(_SDK_LOGGER)
    logger.addHandler(problems)
    logger.propagate = bool(logging.getLogger().handlers)
