"""What a run may spend (``limits.budget``) and what it has spent: tokens, cost, wall-clock
time, tool calls and model calls. A run delegated to by another charges its parent's
``Spending`` too, so a budget holds for the whole task tree. The loop asks before each model
call and each tool call (``check``) and the run ends ``budget_exceeded`` when the call would
pass a limit; a model call still running when the time is up is cut."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from msgspec import Struct

from fabric.config.schema import Budget
from fabric.domain.errors import RunError
from fabric.domain.models import Usage

_UNITS = {
    "tokens": "tokens",
    "cost_usd": "US dollars",
    "seconds": "seconds",
    "tool_calls": "tool calls",
    "model_calls": "model calls",
}
_FLAGS = {
    "tokens": "--max-tokens",
    "cost_usd": "--max-cost",
    "seconds": "--max-seconds",
    "tool_calls": "--max-tool-calls",
    "model_calls": "--max-model-calls",
}


class BudgetSpent(RunError):
    """A limit of the budget is reached: ``limit`` names it, ``used`` and ``allowed`` say how
    far (the run's own budget, or the one of a run that delegated to it)."""

    CODE = "budget_exceeded"

    def __init__(
        self, limit: str, used: float, allowed: float, whose: str, more: float = 0
    ) -> None:
        told = f"{whose} allows {_amount(limit, allowed)}; {_amount(limit, used)} used"
        if more and limit in ("tokens", "cost_usd"):  # a call is one call
            told += f", and the next call would add about {_amount(limit, more)}"
        super().__init__(
            told,
            hint=f"raise limits.budget.{limit} for the pack (or {_FLAGS[limit]} for one run) "
            "and start it again",
        )
        self.limit, self.used, self.allowed = limit, used, allowed


def _amount(limit: str, value: float) -> str:
    if limit == "cost_usd":
        return f"${value:.4f}"
    if limit == "seconds":
        return f"{value:.1f} seconds"
    return f"{int(value):,} {_UNITS[limit]}"


class Used(Struct):
    tokens: int = 0
    cost_usd: float = 0.0
    tool_calls: int = 0
    model_calls: int = 0


class Spending:
    """One run's budget and what it has used; ``parent``: the delegating run's (its budget
    holds for this run too, and this run's use counts against it)."""

    def __init__(
        self,
        budget: Budget,
        run_id: str,
        *,
        parent: Spending | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget, self.run_id, self.parent = budget, run_id, parent
        self.used = Used()
        self._clock = clock
        self._started = clock()

    def _chain(self) -> Iterator[Spending]:
        at: Spending | None = self
        while at is not None:
            yield at
            at = at.parent

    def seconds(self) -> float:
        return self._clock() - self._started

    def seconds_left(self) -> float | None:
        """The time left before the first of the time limits up the tree (None: none set)."""
        left = [s.budget.seconds - s.seconds() for s in self._chain() if s.budget.seconds]
        return max(0.0, min(left)) if left else None

    def check(
        self, *, tokens: int = 0, cost_usd: float = 0.0, tool_calls: int = 0, model_calls: int = 0
    ) -> None:
        """Raise ``BudgetSpent`` when a call that adds this much would pass a limit here or up
        the tree, or the time is up."""
        for spending in self._chain():
            budget, used = spending.budget, spending.used
            wanted = (
                ("tokens", used.tokens, tokens),
                ("cost_usd", used.cost_usd, cost_usd),
                ("tool_calls", used.tool_calls, tool_calls),
                ("model_calls", used.model_calls, model_calls),
            )
            whose = spending._whose(self)
            for name, so_far, more in wanted:
                allowed = getattr(budget, name)
                if allowed is not None and more and so_far + more > allowed:
                    raise BudgetSpent(name, so_far, allowed, whose, more)
            if budget.seconds is not None and spending.seconds() >= budget.seconds:
                raise BudgetSpent("seconds", spending.seconds(), budget.seconds, whose)

    def time_up(self) -> BudgetSpent:
        """The time limit that ran out first up the tree, as the error the run ends with."""
        timed = [s for s in self._chain() if s.budget.seconds is not None]
        first = min(timed, key=lambda s: (s.budget.seconds or 0.0) - s.seconds())
        allowed = first.budget.seconds or 0.0
        return BudgetSpent("seconds", max(first.seconds(), allowed), allowed, first._whose(self))

    def _whose(self, asking: Spending) -> str:
        return "the run's budget" if self is asking else f"the budget of run {self.run_id}"

    def charge_model(self, usage: Usage, cost_usd: float) -> None:
        for spending in self._chain():
            spending.used.tokens += usage.total_tokens
            spending.used.cost_usd += cost_usd
            spending.used.model_calls += 1

    def charge_tool(self) -> None:
        for spending in self._chain():
            spending.used.tool_calls += 1

    def used_json(self) -> dict[str, float]:
        """What this run (with the runs it delegated to) has used so far."""
        return {
            "tokens": self.used.tokens,
            "cost_usd": round(self.used.cost_usd, 6),
            "seconds": round(self.seconds(), 3),
            "tool_calls": self.used.tool_calls,
            "model_calls": self.used.model_calls,
        }

    def as_json(self) -> dict[str, object]:
        """What was used against which limits, up the tree (``run_finished.budget``)."""
        out: dict[str, object] = {"used": self.used_json(), "limits": self.budget.set()}
        if self.parent is not None:
            out["parent"] = {"run_id": self.parent.run_id, **self.parent.as_json()}
        return out


__all__ = ["BudgetSpent", "Spending", "Used"]
