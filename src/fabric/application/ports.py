"""The ports the application needs. Adapters implement them structurally; the type checker
proves they fit. No adapter inherits from these classes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from msgspec import Struct

from fabric.domain.models import (
    ChatDelta,
    ChatRequest,
    ChatResponse,
    Message,
    ModelInfo,
    ToolSpec,
)
from fabric.domain.models import DeltaSink as DeltaSink  # the adapters and the loop import it here
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest
from fabric.domain.tasks import TaskRecord

from .context import ToolContext


class ChatClient(Protocol):
    """One model behind one endpoint. ``chat`` sends the request's whole history in wire form;
    a client that streams passes each piece to ``request.on_delta`` and still returns the whole
    reply."""

    @property
    def model(self) -> str: ...

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    async def aclose(self) -> None: ...


class ModelCatalog(Protocol):
    """What one backend offers."""

    @property
    def backend(self) -> str:
        """The backend's name in fabric.yaml."""
        ...

    async def list_models(self) -> list[ModelInfo]:
        """Every model the backend has; raises ModelError when it cannot be reached."""
        ...


class RunLog(Protocol):
    """Where a run tells its story, one event at a time, in order."""

    @property
    def location(self) -> str | None:
        """A path a person can open, or None for in-memory logs."""
        ...

    def emit(self, kind: str, data: Mapping[str, Any]) -> None:
        """Record one event. ``v``, ``seq``, ``ts`` and ``run_id`` are added by the log."""
        ...

    def save_artifact(self, name: str, content: str) -> str:
        """Keep a large output beside the log; return its reference (a relative path)."""
        ...

    def close(self) -> None: ...


class Tool(Protocol):
    """A callable the model may use. Arguments are validated by the tool itself; every
    problem is raised as a ``ToolError`` and becomes a tool result."""

    @property
    def spec(self) -> ToolSpec: ...

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str: ...


class ToolChange(Struct, frozen=True):
    """The tools a run offers from now on, because a source of them changed (an MCP server's
    list): every tool but ``finish_task``, and what changed, for ``llm_request.tools_changed``."""

    tools: tuple[Tool, ...]
    note: Mapping[str, Any]


def tool_diff(before: Sequence[Tool], now: Sequence[Tool]) -> dict[str, list[str]]:
    """The names ``added``, ``removed`` and ``changed`` (same name, other spec) from one set of
    tools to the next, for ``ToolChange.note``."""
    old = {t.spec.name: t.spec for t in before}
    new = {t.spec.name: t.spec for t in now}
    return {
        "added": [n for n in new if n not in old],
        "removed": [n for n in old if n not in new],
        "changed": [n for n, spec in new.items() if n in old and old[n] != spec],
    }


class ToolUpdates(Protocol):
    """Tools that may come and go while a run goes on. Asked before every model call; cheap
    when nothing changed."""

    async def changed(self, step: int) -> ToolChange | None:
        """The new set before model call ``step``, or None when it is the same."""
        ...


class Approver(Protocol):
    """Asks a person whether a call the policy marks ``ask`` may run. It may take as long as
    the person does: the loop bounds it by the policy's approval_timeout and cancels it on
    timeout or when the run is cancelled (so it must clean up in ``finally``)."""

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer: ...


EventObserver = Callable[[str, Mapping[str, Any]], None]
"""Something that watches a run's events as they happen (the CLI's progress display)."""


class RunObserver(Protocol):
    """Watches one run live (the CLI's progress lines, the HTTP service's event streams)."""

    def event(self, event: Mapping[str, Any]) -> None:
        """A runlog event, once the log holds it (secrets redacted, ``seq`` and ``ts`` set)."""
        ...

    def delta(self, delta: ChatDelta) -> None:
        """A piece of the model's reply as it streams in (for display only; never logged)."""
        ...


Summarize = Callable[[Sequence[Message]], Awaitable[ChatResponse]]
"""Asks the run's model for a summary of older turns (the messages of that request): the
reply's text is the summary. Its own port, so a replay answers with the recorded summary and
a durable run records it as a step, apart from the run's numbered model calls."""

ToolProbe = Callable[[str, str], Awaitable[bool]]
"""Asks backend ``backend`` whether model ``model`` really calls tools (one tiny request,
cached by the adapter that implements it)."""


class TaskStore(Protocol):
    """Where the service's tasks are recorded (the DBOS queues' workflow rows, ADR 0020)."""

    async def add(self, record: TaskRecord) -> None: ...

    async def get(self, task_id: str) -> TaskRecord | None: ...

    async def update(self, task_id: str, **fields: Any) -> TaskRecord:
        """Change fields of one task and return the new record; KeyError if it is unknown."""
        ...

    async def query(
        self,
        *,
        status: str | None = None,
        pack: str | None = None,
        limit: int = 50,
        before: str | None = None,
        statuses: Sequence[str] | None = None,
        oldest_first: bool = False,
    ) -> list[TaskRecord]:
        """Tasks newest first (or oldest first), filtered; ``before`` is a task id to page
        after (ids sort by creation time)."""
        ...

    def note(self, task_id: str, **fields: Any) -> None:
        """Fields of a running task that other processes should see before it ends (steps
        so far, the model used): written soon in the background, or not at all by a store
        only this process reads (the service shows its own running tasks' fields)."""
        ...

    async def asks(self, task_id: str) -> list[dict[str, Any]]:
        """The calls of the task waiting for a person, as the process running it noted them
        (``note(task_id, asks=[...])``)."""
        ...

    async def answer_of(self, task_id: str, call_id: str) -> dict[str, Any] | None:
        """The answer given through the store to one waiting call, if any."""
        ...

    async def give_answer(self, task_id: str, call_id: str, answer: dict[str, Any]) -> None:
        """Store a person's answer to a call (for the process that runs the task)."""
        ...


class TaskExecutor(Protocol):
    """Runs submitted tasks in the background (in this process, or a distributed engine)."""

    @property
    def accepting(self) -> bool:
        """False once shutdown began."""
        ...

    async def submit(self, record: TaskRecord) -> None:
        """Queue a task stored as queued (new, or resumed); RuntimeError once shutdown began."""
        ...

    def holds(self, task_id: str) -> bool:
        """Whether the task is queued or running here."""
        ...

    async def cancel(self, task_id: str) -> str | None:
        """``"dequeued"``, ``"signalled"`` (stops at the next safe point) or None (unknown)."""
        ...

    async def waiting_for(self, record: TaskRecord) -> list[str]:
        """The tasks a queued task waits for because they use its workspace: the running
        ones, then the earlier queued ones."""
        ...

    async def shutdown(self, grace: float) -> list[str]:
        """Stop taking work; return the ids of tasks cut off after ``grace`` seconds."""
        ...
