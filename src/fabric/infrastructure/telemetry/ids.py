"""Span and trace ids derived from the runlog, so a run exported live and exported again later
from its runlog (``fabric export otel``) has the same ids, and a run's trace id can be worked
out from its run id: the first 16 bytes of SHA-256 of the run id (a run another run delegated
to is in its parent's trace); a span's id, 8 bytes of SHA-256 of the run id and the ``seq`` of
the event that began it."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
from collections.abc import Iterator

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator


@functools.lru_cache(maxsize=256)
def trace_id_of(run_id: str) -> int:
    """The trace id of a run that no other run delegated to (asked for every span a run
    starts: kept for the runs going on)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16]) or 1


def span_id_of(run_id: str, seq: int) -> int:
    """The id of the span begun by event ``seq`` of run ``run_id``."""
    return int.from_bytes(hashlib.sha256(f"{run_id}\n{seq}".encode()).digest()[:8]) or 1


class RunlogIds(IdGenerator):
    """The ids of the next span, set by whoever starts it (``primed``); random ids for spans
    started without (none are, in fabric's own providers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trace = 0
        self._span = 0
        self._random = RandomIdGenerator()

    @contextlib.contextmanager
    def primed(self, run_id: str, seq: int) -> Iterator[None]:
        """While it lasts, the span started gets the ids of event ``seq`` of ``run_id`` (held
        under a lock: translators of several runners may share one provider)."""
        with self._lock:
            self._trace, self._span = trace_id_of(run_id), span_id_of(run_id, seq)
            try:
                yield
            finally:
                self._trace = self._span = 0

    def generate_span_id(self) -> int:
        return self._span or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._trace or self._random.generate_trace_id()
