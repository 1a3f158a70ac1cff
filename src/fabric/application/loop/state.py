"""A run's state, and the signal that ends it. The loop's behaviour is layered on top:
``finish.py`` (a final answer and its checks), ``tools.py`` (one tool call), ``run.py``
(steps, model calls, cancel)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from msgspec import Struct, field

from fabric.application.approvals import PolicyGate
from fabric.application.budget import BudgetSpent, Spending
from fabric.application.context import ToolContext
from fabric.application.cost import RunCost
from fabric.application.pack import FINISH_TOOL, Pack
from fabric.application.ports import ChatClient, DeltaSink, RunLog, Summarize, Tool, ToolUpdates
from fabric.application.verify import RunRecord
from fabric.config.schema import Limits
from fabric.domain.errors import FabricError
from fabric.domain.models import ChatResponse, Message, RunStatus, ToolSpec, Usage

from .search import LOAD, SEARCH, Catalog
from .window import FIRST_RATIO, RECALL, Window


class Stop(Exception):
    """Ends the loop with a status; raised anywhere in it, caught once in ``execute_task``."""

    def __init__(
        self,
        status: RunStatus,
        payload: dict[str, Any] | None = None,
        error: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status.value)
        self.status, self.payload, self.error = status, payload, error


class RunState(Struct, dict=True):
    """The state of one run. ``messages`` is the history in wire form, only ever appended."""

    run_id: str
    pack: Pack
    chat: ChatClient
    log: RunLog
    limits: Limits
    ctx: ToolContext
    cancel: asyncio.Event
    gate: PolicyGate
    on_delta: DeltaSink | None = None
    cost: RunCost | None = None
    updates: ToolUpdates | None = None
    """Where tools that come and go during the run come from (None: the pack's, fixed)."""
    spending: Spending | None = None
    """The run's budget and what it used (None: no budget here or up its task tree)."""
    window: Window | None = None
    """The model's context window (None: not known; nothing is counted or elided)."""
    summarize: Summarize | None = None
    """Writes a summary of older turns when eliding is not enough (None: none is written)."""
    catalog: Catalog | None = None
    """The run's tools when it searches them (ADR 0028; None: every tool is offered)."""
    messages: list[Message] = field(default_factory=list)
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    repairs: int = 0
    nudged: bool = False
    record: RunRecord = field(default_factory=RunRecord)
    """The tool calls so far, uncut, for the pack's verifiers."""
    _sent: int = 0
    """How many messages the runlog has (``llm_request`` logs only the new ones)."""
    _chatting: asyncio.Task[Any] | None = None
    """The task waiting for the model right now, which a cancel cuts (``_watch``)."""
    _task: asyncio.Task[Any] | None = None
    """The task the loop runs in (``Run.loop``), its own from start to end."""
    _cut: bool = False
    _last_call: tuple[str, str, str] | None = None
    _repeats: int = 0
    _scanned: int = 0
    """How many messages ``_outgoing`` has looked at for repeat notes (the history only grows)."""
    _noted: list[tuple[int, int]] = field(default_factory=list)
    """Where the messages with a repeat note are, oldest first."""
    _wire: list[Message] = field(default_factory=list)
    """The history as it is sent (``_outgoing``): the messages, older notes left off."""
    """The last model call's prompt and reply tokens: most of what the next call sends."""
    _out_of_time: BudgetSpent | None = None
    """Set when the budget's time ran out during the run (``_watch``)."""
    _ratio: float = FIRST_RATIO
    """Tokens a character, as the server counted the run's last request (``Fitting``)."""
    _last_chars: int = 0
    """The characters of the last request (``Fitting``)."""
    _tool_chars: tuple[object, int] = (None, 0)
    """The tool schemas' size in a request, and the ``tool_defs`` list it was measured for."""
    _elided: dict[int, str] = field(default_factory=dict)
    """Outputs elided to save context: their place in the history, and what is sent instead."""
    _refs: dict[str, int] = field(default_factory=dict)
    """The elided outputs by the ref the model reads them back with (``recall_output``)."""
    _summary: tuple[int, str] | None = None
    """Older turns summarised: where the history sent goes on whole, and the summary that
    stands for what came before (added to the task's message)."""

    def __post_init__(self) -> None:
        self.tools: dict[str, Tool] = {}
        self.tool_defs: list[dict[str, Any]] = []
        self._offer(self.pack.tools)
        self.finish_check = self.pack.finish_check()

    def _offer(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` and ``finish_task`` to the model from its next call on (a new list,
        so a replay sees that it changed); a run that searches its tools offers those of them
        its catalog says, and the search."""
        offered = tools
        if self.catalog is not None:
            self.catalog.update(tools)
            offered = self.catalog.offered()
        self.tools = {t.spec.name: t for t in offered}
        finish = ToolSpec(FINISH_TOOL, self.pack.finish_description, self.pack.finish_schema)
        self.tool_defs = [t.spec.as_openai() for t in offered] + [finish.as_openai()]
        if self.catalog is not None:
            self.tool_defs += [SEARCH.as_openai(), LOAD.as_openai()]
        if self._elided:  # outputs were elided: they can still be read back
            self.tool_defs.append(RECALL.as_openai())

    def _check_cancel(self) -> None:
        if self._out_of_time is not None:
            raise Stop(RunStatus.BUDGET_EXCEEDED, error=self._out_of_time.as_dict())
        if self.cancel.is_set():
            raise Stop(RunStatus.CANCELLED)

    def _charge(self, response: ChatResponse) -> None:
        """Count a model reply: the run's usage, its cost, and its budget's spending."""
        self.usage += response.usage
        before = self.cost.total if self.cost is not None else 0.0
        if self.cost is not None:
            self.cost.add(response, self.chat.model)
        if self.spending is not None:
            after = self.cost.total if self.cost is not None else 0.0
            self.spending.charge_model(response.usage, after - before)

    def _check_budget(self, **more: Any) -> None:
        """End the run ``budget_exceeded`` when a call that adds ``more`` (``Spending.check``)
        would pass a limit."""
        if self.spending is None:
            return
        try:
            self.spending.check(**more)
        except BudgetSpent as spent:
            raise Stop(RunStatus.BUDGET_EXCEEDED, error=spent.as_dict()) from None

    def _seconds_left(self) -> float | None:
        return None if self.spending is None else self.spending.seconds_left()


def describe(exc: BaseException) -> dict[str, str]:
    if isinstance(exc, FabricError):
        out = exc.as_dict()
        status = getattr(exc, "status_code", None)
        if status is not None:
            out["status_code"] = str(status)
        return out
    return {"code": "internal_error", "message": f"{type(exc).__name__}: {exc}"}


def usage_json(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def ms_since(started: float) -> float:
    """Milliseconds since ``started`` (``time.perf_counter``), to the microsecond."""
    return round((time.perf_counter() - started) * 1_000_000) / 1000  # round(ms, 3): 2.5x slower


def clip(text: str, limit: int = 80) -> str:
    """A model-chosen name, short enough to quote back in a message."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
