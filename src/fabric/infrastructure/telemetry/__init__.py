"""OpenTelemetry traces of runs (ADR 0022): one translator from runlog events to spans
(``spans.py``), fed live by ``TraceObserver`` (``observer.py``) and offline by ``export_runs``
(``offline.py``); the SDK's provider and exporters in ``pipeline.py``. Importing any of those
imports OpenTelemetry (``pip install 'agent-fabric[otel]'``), so they are imported only when
tracing is on or an export is asked for; this package itself imports nothing."""
