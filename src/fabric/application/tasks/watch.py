"""The observer of one task's run: its runlog events wake the task's event streams and note
its steps; the model's text, as it streams, goes to whoever listens (the run console)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from fabric.domain.models import ChatDelta

from .ports import Runs

Listener = Callable[[dict[str, Any]], None]
"""Gets each piece of a task's streamed model text: ``{"step": n, "text": "..."}``."""


class Watched(Protocol):
    """What a task's watch needs of the service running the task (``TaskService`` fits it)."""

    @property
    def runner(self) -> Runs: ...

    @property
    def progress(self) -> Mapping[str, int]:
        """Steps so far of running tasks."""
        ...

    @property
    def listeners(self) -> Mapping[str, Collection[Listener]]:
        """Who listens to each running task's streamed text."""
        ...

    def saw(self, task_id: str, event: Mapping[str, Any]) -> None:
        """The task's run wrote ``event``."""
        ...


class TaskWatch:
    """The ``RunObserver`` of one task's run."""

    def __init__(self, service: Watched, task_id: str) -> None:
        self._service, self._task_id = service, task_id

    def event(self, event: Mapping[str, Any]) -> None:
        self._service.saw(self._task_id, event)

    def delta(self, delta: ChatDelta) -> None:
        """Text streamed by the model goes to the task's listeners, with the step it belongs
        to (tool call fragments do not: the runlog has the whole calls a moment later)."""
        listeners = self._service.listeners.get(self._task_id)
        if not listeners or not delta.text:
            return
        step = self._service.progress.get(self._task_id, 0)
        text = self._service.runner.secrets.redact(delta.text)
        for listen in tuple(listeners):
            listen({"step": step, "text": text})
