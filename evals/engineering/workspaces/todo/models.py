"""A to-do item."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Task:
    id: int
    title: str
    done: bool = False

    def line(self) -> str:
        """How `todo list` shows the task."""
        return f"[{'x' if self.done else ' '}] #{self.id} {self.title}"
