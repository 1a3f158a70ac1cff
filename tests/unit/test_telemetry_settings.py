"""Which variables and settings turn OpenTelemetry tracing on, where it sends, and the errors a
person gets for what fabric cannot follow (ADR 0022, ``config/telemetry.py``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fabric.config.loader import load_config
from fabric.config.schema import TelemetrySettings
from fabric.config.telemetry import export_settings, trace_settings
from fabric.domain.errors import ConfigError
from fabric.domain.secrets import Secrets

OFF = TelemetrySettings()
ON = TelemetrySettings(traces=True)


def test_nothing_set_means_no_tracing() -> None:
    assert trace_settings(OFF, {}) is None


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/t"}, "http://c:9/t"),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "http://localhost:4318/v1/traces"),
    ],
)
def test_an_endpoint_or_the_otlp_exporter_turns_tracing_on(
    env: dict[str, str], endpoint: str
) -> None:
    settings = trace_settings(OFF, env)
    assert settings is not None
    assert settings.exporters == ("otlp",) and settings.endpoint == endpoint
    assert not settings.capture_content
    assert settings.export_timeout == 5.0 and settings.exit_wait == 1.0


def test_fabric_yaml_turns_it_on_and_the_environment_can_always_turn_it_off() -> None:
    settings = trace_settings(ON, {})
    assert settings is not None and settings.exporters == ("otlp",)
    assert "telemetry.traces" in settings.reason
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    assert trace_settings(ON, {"OTEL_SDK_DISABLED": "true", **endpoint}) is None
    assert trace_settings(ON, {"OTEL_TRACES_EXPORTER": "none", **endpoint}) is None
    assert (
        trace_settings(OFF, {"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}) is None
    )
    # any other value is not "true", as the OpenTelemetry specification reads booleans
    assert trace_settings(OFF, {"OTEL_SDK_DISABLED": "1", **endpoint}) is not None


def test_console_and_otlp_together() -> None:
    settings = trace_settings(OFF, {"OTEL_TRACES_EXPORTER": "console, otlp"})
    assert settings is not None and settings.exporters == ("console", "otlp")


def test_content_capture_follows_the_variable_first_then_fabric_yaml() -> None:
    env = {"OTEL_TRACES_EXPORTER": "console"}
    capture = TelemetrySettings(capture_content=True)
    assert _capture(OFF, env) is False
    assert _capture(capture, env) is True
    var = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    assert _capture(OFF, {**env, var: "true"}) is True
    assert _capture(OFF, {**env, var: "SPAN_ONLY"}) is True
    assert _capture(capture, {**env, var: "false"}) is False
    with pytest.raises(ConfigError, match="neither true nor false"):
        _capture(OFF, {**env, var: "maybe"})


def _capture(settings: TelemetrySettings, env: dict[str, str]) -> bool:
    resolved = trace_settings(settings, env)
    assert resolved is not None
    return resolved.capture_content


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "not zipkin"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "HTTP"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "not an http:// or https:// URL"),
    ],
)
def test_what_fabric_cannot_follow_is_a_config_error_with_what_to_do(
    env: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        trace_settings(OFF, env)
    assert caught.value.hint


def test_the_export_command_exports_over_otlp_unless_told_otherwise() -> None:
    assert export_settings(OFF, {}).exporters == ("otlp",)
    assert export_settings(OFF, {"OTEL_TRACES_EXPORTER": "console"}).exporters == ("console",)
    with pytest.raises(ConfigError, match="OTEL_SDK_DISABLED"):
        export_settings(OFF, {"OTEL_SDK_DISABLED": "true"})
    with pytest.raises(ConfigError, match="names no exporter") as caught:
        export_settings(OFF, {"OTEL_TRACES_EXPORTER": "none"})
    assert "OTEL_TRACES_EXPORTER=otlp" in caught.value.hint


def test_the_config_file_section_is_checked_and_the_loaded_config_says_how_runs_are_traced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "fabric.yaml"
    config.write_text("telemetry: {traces: true, capture_content: true, exit_wait: 0.5}\n")
    loaded = load_config(config)
    assert loaded.traces is not None
    assert loaded.traces.capture_content and loaded.traces.exit_wait == 0.5
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert load_config(config).traces is None
    config.write_text(textwrap.dedent("telemetry: {tracing: true}\n"))
    with pytest.raises(ConfigError, match="telemetry"):
        load_config(config)


def test_collector_headers_are_secrets_whatever_the_variable_is_called() -> None:
    secrets = Secrets.from_env(
        {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abcdefgh12345,Authorization=Bearer%20tok3n-value"}
    )
    text = "sent abcdefgh12345 and Bearer tok3n-value"
    assert secrets.redact(text) == "sent [redacted] and [redacted]"
