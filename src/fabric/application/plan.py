"""A checklist the model keeps while it works (ADR 0029): the ``update_plan`` tool, given to a
run whose pack sets ``plan.enabled``, with a paragraph of instructions.

Each call sends the whole list. The tool checks it (every problem said at once, so the model
can fix them in one go), records a ``plan`` event in the runlog (``ToolContext.emit``), which
``fabric run``, ``fabric show``, the event streams and the web console show, and answers with
the list as it now stands. It keeps nothing between calls: every event holds the whole list
and its counts, so the events of a resumed run, or of a replay with live tools, are right
without memory of the calls before (those are answered from the log)."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from fabric.config.schema import PlanSettings
from fabric.domain.errors import ToolError
from fabric.domain.models import ToolSpec

from .additions import Addition
from .context import ToolContext

TOOL = "update_plan"
EVENT = "plan"
STATUSES = ("pending", "in_progress", "done")
MARKS = {"done": "[x]", "in_progress": "[>]", "pending": "[ ]"}
"""How a step's status is shown, in the tool's answer and at the terminal."""
EXPLANATION_CHARS = 400

PROMPT = """\
Plan: when the task has several parts, keep a checklist with update_plan. Call it before \
you change anything, with each part as a short step; as you go, mark the step you work on \
in_progress and each finished one done, sending the whole list every time. Before \
finish_task, check that every step is done. A task of one small step needs no plan."""

_HINT = (
    f"call {TOOL} again with the whole list: items, each "
    '{"step": "what to do", "status": "pending" | "in_progress" | "done"}'
)


class PlanItem(Struct, frozen=True):
    """One step of the checklist."""

    step: str
    status: str

    def as_json(self) -> dict[str, str]:
        return {"step": self.step, "status": self.status}


def plan_addition(settings: PlanSettings) -> Addition:
    """What ``plan.enabled`` adds to a run: the paragraph and the tool."""
    meta = {"max_items": settings.max_items, "item_chars": settings.item_chars}
    return Addition(EVENT, PROMPT, (PlanTool(settings),), meta)


class PlanTool:
    """``update_plan(items, explanation?)``: checks the list, records it, shows it back."""

    def __init__(self, settings: PlanSettings) -> None:
        self._max_items, self._item_chars = settings.max_items, settings.item_chars
        self._spec = ToolSpec(
            TOOL,
            "Keep a checklist of the task's parts and where you are. Send the whole list each "
            f"time, at most {settings.max_items} steps, each with its status: pending, "
            "in_progress (at most one) or done. It changes no files.",
            _schema(settings),
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def __call__(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        items, explanation = self.checked(arguments)
        counts = {status: sum(1 for i in items if i.status == status) for status in STATUSES}
        if ctx.emit is not None:
            event: dict[str, Any] = {
                "step": ctx.step,
                "call_id": ctx.call_id,
                "items": [i.as_json() for i in items],
                "counts": counts,
            }
            if explanation:
                event["explanation"] = explanation
            ctx.emit(EVENT, event)
        done, total = counts["done"], len(items)
        head = f"all {total} steps done" if done == total else f"{done} of {total} steps done"
        return f"Plan saved: {head}.\n{checklist(items)}"

    def checked(self, arguments: Mapping[str, Any]) -> tuple[list[PlanItem], str]:
        """The list and the explanation, or a ``ToolError`` naming every problem."""
        problems = [f"unknown argument {k!r}" for k in arguments if k not in _ARGUMENTS]
        explanation = _explanation(arguments.get("explanation"), problems)
        given = arguments.get("items")
        if not isinstance(given, list):
            problems.append("items must be a list of steps")
            given = []
        elif not given:
            problems.append("items is empty: a plan has at least one step")
        elif len(given) > self._max_items:
            problems.append(
                f"the plan has {len(given)} steps; at most {self._max_items} are allowed "
                "(merge small steps)"
            )
        items = [
            item
            for number, raw in enumerate(given[: self._max_items], 1)
            if (item := self._item(number, raw, problems)) is not None
        ]
        _check_in_progress(items, problems)
        if problems:
            raise ToolError(f"the plan was not saved: {'; '.join(problems)}", hint=_HINT)
        return items, explanation

    def _item(self, number: int, raw: Any, problems: list[str]) -> PlanItem | None:
        if not isinstance(raw, Mapping):
            problems.append(f"item {number} is not an object with step and status")
            return None
        extra = sorted(str(k) for k in raw if k not in ("step", "status"))
        if extra:
            problems.append(f"item {number} has unknown keys: {', '.join(extra)}")
        status = raw.get("status")
        if status not in STATUSES:
            problems.append(
                f"item {number} has status {status!r}; use pending, in_progress or done"
            )
        step = raw.get("step")
        if not isinstance(step, str) or not step.strip():
            problems.append(f"item {number} has no step text")
            return None
        text = " ".join(step.split())
        if any(unicodedata.category(c) == "Cc" for c in text):
            problems.append(f"item {number} holds control characters: write it as plain text")
        if len(text) > self._item_chars:
            problems.append(
                f"item {number} is {len(text)} characters long; at most {self._item_chars} "
                "are allowed (say it in fewer words)"
            )
        return PlanItem(text, str(status))


_ARGUMENTS = ("items", "explanation")


def _explanation(value: Any, problems: list[str]) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        problems.append("explanation must be a string")
        return ""
    text = " ".join(value.split())
    if len(text) > EXPLANATION_CHARS:
        problems.append(
            f"explanation is {len(text)} characters long; at most {EXPLANATION_CHARS} are allowed"
        )
    elif any(unicodedata.category(c) == "Cc" for c in text):
        problems.append("explanation holds control characters: write it as plain text")
    return text


def _check_in_progress(items: Sequence[PlanItem], problems: list[str]) -> None:
    """At most one step in progress."""
    working = [n for n, i in enumerate(items, 1) if i.status == "in_progress"]
    if len(working) > 1:
        numbers = ", ".join(map(str, working))
        problems.append(
            f"{len(working)} steps are in_progress (items {numbers}); at most one may be: "
            "mark the others pending or done"
        )


def checklist(items: Sequence[PlanItem]) -> str:
    """``[x] read the test`` one step a line."""
    return "\n".join(f"{MARKS[i.status]} {i.step}" for i in items)


def _schema(settings: PlanSettings) -> dict[str, Any]:
    step = {
        "type": "string",
        "maxLength": settings.item_chars,
        "description": "What to do, in a few words.",
    }
    item = {
        "type": "object",
        "properties": {"step": step, "status": {"type": "string", "enum": list(STATUSES)}},
        "required": ["step", "status"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": settings.max_items,
                "items": item,
                "description": "The whole checklist, in order.",
            },
            "explanation": {
                "type": "string",
                "description": "Optional: why the plan changed, in one sentence.",
            },
        },
        "required": ["items"],
        "additionalProperties": False,
    }
