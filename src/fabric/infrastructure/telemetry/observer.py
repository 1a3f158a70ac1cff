"""``TraceObserver``: a run observer that turns each run's events into spans as the run writes
them (ADR 0022). The composition root adds one to every runner when tracing is on."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fabric.config.telemetry import TraceSettings
from fabric.domain.models import ChatDelta
from fabric.domain.secrets import Secrets
from fabric.infrastructure.runlog import runlog_path

from .pipeline import Tracing, live_tracing
from .spans import Recall, SpanTranslator

_log = logging.getLogger(__name__)


class TraceObserver:
    """Feeds the events of every run it watches to one ``SpanTranslator``. A problem with the
    spans never reaches the run: it is logged once and the run goes on."""

    def __init__(self, translator: SpanTranslator) -> None:
        self._translator = translator
        self._failed = False

    def event(self, event: Mapping[str, Any]) -> None:
        try:
            self._translator.feed(event)
        except Exception:  # telemetry never fails a run
            if not self._failed:
                self._failed = True
                _log.warning("fabric could not trace an event; runs go on", exc_info=True)

    def delta(self, delta: ChatDelta) -> None:
        """Streamed pieces are not traced: the reply is in ``llm_response``."""


def trace_observer(
    settings: TraceSettings, secrets: Secrets, runs_dir: Path, tracing: Tracing | None = None
) -> TraceObserver:
    """The observer of the runs of a runner whose runlogs are in ``runs_dir``, redacting
    ``secrets``, exporting with ``tracing`` (default: this process's for ``settings``)."""
    tracing = tracing or live_tracing(settings)
    translator = SpanTranslator(
        tracing.tracer,
        tracing.ids,
        capture=settings.capture_content,
        secrets=secrets,
        recall=recall_in(runs_dir),
    )
    return TraceObserver(translator)


def recall_in(runs_dir: Path) -> Recall:
    """A run's ``run_started``, read from its runlog in ``runs_dir``: a resumed run's spans
    take its pack, model and parent from it."""
    return lambda run_id: first_event(runlog_path(runs_dir, run_id))


def first_event(path: Path) -> Mapping[str, Any] | None:
    """The ``run_started`` of the runlog at ``path`` (None: none there)."""
    try:
        with path.open(encoding="utf-8") as file:
            event = json.loads(file.readline())
    except (OSError, ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) and event.get("kind") == "run_started" else None
