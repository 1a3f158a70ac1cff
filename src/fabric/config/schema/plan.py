"""``plan:`` of a pack: a short checklist the model keeps while it works (ADR 0029). Off by
default: the ``update_plan`` tool and its paragraph of instructions cost every request some
bytes, and a small model may spend its steps on the list instead of the work."""

from __future__ import annotations

from pydantic import Field

from .base import _Strict


class PlanSettings(_Strict):
    """Whether a run of the pack gets ``update_plan``, and how long its checklist may be."""

    enabled: bool = Field(
        False,
        description="Give the model the update_plan tool and a paragraph on when to use it: "
        "it keeps a checklist of the task's parts (pending, in_progress, done), shown live by "
        "fabric run, the web console and the runlog's plan events.",
    )
    max_items: int = Field(
        12, ge=1, le=50, description="Steps a checklist may have at most; more are refused."
    )
    item_chars: int = Field(
        160,
        ge=20,
        le=1000,
        description="Characters one step may have at most; a longer step is refused.",
    )
