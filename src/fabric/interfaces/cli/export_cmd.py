"""``fabric export``: recorded runs sent elsewhere. ``otel``: a run, with the runs it delegated
to, as OpenTelemetry spans (ADR 0022), made from its runlog by the same translator that traces
live runs, and sent where the ``OTEL_*`` variables say (OTLP/HTTP by default)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from .options import ConfigOpt, JsonOpt
from .startup import fail, load, output_secrets, say

export_app = typer.Typer(
    help="Send recorded runs elsewhere: otel (OpenTelemetry spans).", no_args_is_help=True
)


@export_app.command(name="otel")
def otel(
    run: Annotated[str, typer.Argument(help="A run id, a run folder or a runlog.jsonl path.")],
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a recorded run, with the runs it delegated to, as OpenTelemetry spans: over
    OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (default
    http://localhost:4318), or as JSON on stdout with OTEL_TRACES_EXPORTER=console. Exits 1
    when they cannot be delivered."""
    import os

    from fabric.config.telemetry import export_settings
    from fabric.domain.errors import ConfigError, TelemetryError

    from .show import find_runlog

    loaded = load(config, as_json)
    try:
        settings = export_settings(loaded.config.telemetry, os.environ)
        path = find_runlog(run, lambda: loaded.runs_dir)
    except ConfigError as exc:
        fail(exc, as_json=as_json, code=2)
    from fabric.infrastructure.telemetry.offline import export_runs

    try:
        report = export_runs(path, settings, output_secrets(), sys.stdout)
    except ConfigError as exc:  # a runlog that cannot be read, or is too new
        fail(exc, as_json=as_json, code=2)
    except TelemetryError as exc:
        fail(exc, as_json=as_json, code=1)
    for note in report.notes:
        say(f"warning: {note}")
    err = "console" in settings.exporters  # the spans themselves are on stdout
    if as_json:
        told = {"status": "exported", "spans": report.spans, "runs": list(report.runs),
                "destination": report.destination, "notes": list(report.notes)}  # fmt: skip
        typer.echo(json.dumps(told, indent=2), err=err)
        return
    runs = f"run {report.runs[0]}" + (
        f" and {len(report.runs) - 1} delegated run(s)" if len(report.runs) > 1 else ""
    )
    typer.echo(f"exported {report.spans} span(s) of {runs} to {report.destination}", err=err)
