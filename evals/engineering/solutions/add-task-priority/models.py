"""A to-do item."""

from __future__ import annotations

from dataclasses import dataclass

PRIORITIES = ("high", "normal", "low")
"""In the order `todo list` shows them."""


@dataclass
class Task:
    id: int
    title: str
    done: bool = False
    priority: str = "normal"

    def __post_init__(self) -> None:
        if self.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {', '.join(PRIORITIES)}, not {self.priority!r}")

    def line(self) -> str:
        """How `todo list` shows the task."""
        mark = "! " if self.priority == "high" else ""
        return f"[{'x' if self.done else ' '}] #{self.id} {mark}{self.title}"


def listing_order(tasks: list[Task]) -> list[Task]:
    """High priority first, then normal, then low; the order of adding within each."""
    return sorted(tasks, key=lambda t: PRIORITIES.index(t.priority))
