"""Whether runs are traced with OpenTelemetry, and how (ADR 0022): ``telemetry:`` in fabric.yaml
and the standard ``OTEL_*`` variables, read when the config loads.

Tracing is on when any of these holds:

- ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console`` (or both, comma-separated);
- ``OTEL_TRACES_EXPORTER`` is unset and ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (OTLP/HTTP to it);
- ``telemetry.traces`` is true in fabric.yaml (OTLP/HTTP, to the endpoint variables when set,
  else to http://localhost:4318/v1/traces).

``OTEL_SDK_DISABLED=true`` and ``OTEL_TRACES_EXPORTER=none`` turn it off, whatever else says.
Content (messages, tool arguments and results) is captured when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` says so, or, when that is unset, when
``telemetry.capture_content`` is true. Nothing here imports OpenTelemetry: a config that asks for
tracing only checks that its packages are installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from msgspec import Struct

from fabric.domain.errors import ConfigError

from .schema import TelemetrySettings

SDK_DISABLED = "OTEL_SDK_DISABLED"
TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
EXPORTERS = ("otlp", "console")
INSTALL = "pip install 'agent-fabric[otel]'"
PACKAGES = (
    "opentelemetry.trace",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
_CAPTURE_ON = ("true", "span_only", "span_and_event")
_CAPTURE_OFF = ("false", "no_content", "event_only")
_OFF_HINT = f"unset it, or set {SDK_DISABLED}=true to turn tracing off"


class TraceSettings(Struct, frozen=True):
    """How spans are exported: by which exporters, to where, with or without content."""

    exporters: tuple[str, ...]
    """``otlp`` (OTLP/HTTP, protobuf) and/or ``console`` (JSON lines on stderr)."""
    endpoint: str
    """The OTLP/HTTP traces URL (``.../v1/traces``)."""
    capture_content: bool
    export_timeout: float
    """Seconds one export may take, its retries included."""
    exit_wait: float
    """The most a process waits at exit for spans not yet sent."""
    reason: str
    """What asked for tracing, in words (for messages)."""


def trace_settings(settings: TelemetrySettings, env: Mapping[str, str]) -> TraceSettings | None:
    """How this process traces its runs; None when it does not. A ConfigError for a variable
    fabric cannot follow, or when tracing is asked for but OpenTelemetry is not installed."""
    if _disabled(env):
        return None
    named = _exporters(env)
    reason = f"{TRACES_EXPORTER} is set"
    if named is None:
        variable = next((v for v in (TRACES_ENDPOINT, ENDPOINT) if env.get(v)), None)
        if variable is None and not settings.traces:
            return None
        named = ("otlp",)
        reason = f"{variable} is set" if variable else "telemetry.traces is true in fabric.yaml"
    if not named:
        return None
    return _resolved(named, reason, settings, env)


def export_settings(settings: TelemetrySettings, env: Mapping[str, str]) -> TraceSettings:
    """How ``fabric export otel`` exports: as runs would be traced, and over OTLP/HTTP when no
    variable says otherwise (it was asked to export, so tracing need not be on for runs)."""
    if _disabled(env):
        raise ConfigError(
            f"{SDK_DISABLED}=true turns OpenTelemetry off, so there is nothing to export with",
            hint=f"run it without {SDK_DISABLED} (e.g. {SDK_DISABLED}= fabric export otel RUN)",
        )
    named = _exporters(env)
    if named == ():
        raise ConfigError(
            f"{TRACES_EXPORTER}=none names no exporter to send the spans with",
            hint=f"set {TRACES_EXPORTER}=otlp (or console), or unset it",
        )
    return _resolved(named or ("otlp",), "fabric export otel", settings, env)


def _resolved(
    exporters: tuple[str, ...], reason: str, settings: TelemetrySettings, env: Mapping[str, str]
) -> TraceSettings:
    if "otlp" in exporters:
        _check_protocol(env)
    require_packages(reason)
    return TraceSettings(
        exporters=exporters,
        endpoint=_endpoint(env),
        capture_content=_capture(settings, env),
        export_timeout=settings.export_timeout,
        exit_wait=settings.exit_wait,
        reason=reason,
    )


def require_packages(reason: str) -> None:
    """A ConfigError saying how to install OpenTelemetry when it is not there (looked up, not
    imported)."""
    for name in PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(
                f"OpenTelemetry tracing is asked for ({reason}) but its packages are not "
                f"installed ({name} is missing)",
                hint=f"{INSTALL}; or turn tracing off ({SDK_DISABLED}=true, or unset the "
                "OTEL_* variables and telemetry.traces)",
            )


def _disabled(env: Mapping[str, str]) -> bool:
    return env.get(SDK_DISABLED, "").strip().lower() == "true"


def _exporters(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (``()`` for ``none``); None when unset."""
    raw = env.get(TRACES_EXPORTER, "").strip()
    if not raw:
        return None
    names = tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip()))
    if names == ("none",):
        return ()
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise ConfigError(
            f"{TRACES_EXPORTER}={raw!r}: fabric exports traces with otlp (OTLP/HTTP) or console, "
            f"not {', '.join(unknown)}",
            hint=f"set {TRACES_EXPORTER} to otlp, console or none; or {_OFF_HINT}",
        )
    return names


def _check_protocol(env: Mapping[str, str]) -> None:
    for variable in PROTOCOLS:
        protocol = env.get(variable, "").strip()
        if protocol:
            if protocol != "http/protobuf":
                raise ConfigError(
                    f"{variable}={protocol!r}: fabric sends OTLP over HTTP with protobuf only",
                    hint=f"set {variable}=http/protobuf and point the endpoint at the "
                    "collector's OTLP/HTTP port (usually 4318)",
                )
            return


def _endpoint(env: Mapping[str, str]) -> str:
    """The traces URL as the OTLP exporters find it: the traces variable as it is, else the
    general one with ``/v1/traces`` appended, else the local default."""
    url = env.get(TRACES_ENDPOINT, "").strip()
    variable = TRACES_ENDPOINT
    if not url and env.get(ENDPOINT, "").strip():
        variable = ENDPOINT
        url = env[ENDPOINT].strip().removesuffix("/") + "/v1/traces"
    if not url:
        return DEFAULT_ENDPOINT
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{variable} is not an http:// or https:// URL",
            hint=f"set it to the collector's OTLP/HTTP address, e.g. http://localhost:4318; "
            f"or {_OFF_HINT}",
        )
    return url


def _capture(settings: TelemetrySettings, env: Mapping[str, str]) -> bool:
    raw = env.get(CAPTURE, "").strip().lower()
    if not raw:
        return settings.capture_content
    if raw in _CAPTURE_ON or raw in _CAPTURE_OFF:
        return raw in _CAPTURE_ON
    raise ConfigError(
        f"{CAPTURE}={raw!r} is neither true nor false",
        hint="set it to true (capture messages and tool content, redacted) or false, or unset "
        "it to follow telemetry.capture_content",
    )
