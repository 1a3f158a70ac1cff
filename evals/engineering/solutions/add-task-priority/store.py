"""The to-do list on disk: a JSON array of tasks."""

from __future__ import annotations

import json
from pathlib import Path

from models import Task


def load(path: Path) -> list[Task]:
    if not path.exists():
        return []
    records = json.loads(path.read_text(encoding="utf-8"))
    return [
        Task(
            id=r["id"],
            title=r["title"],
            done=r.get("done", False),
            priority=r.get("priority", "normal"),
        )
        for r in records
    ]


def save(path: Path, tasks: list[Task]) -> None:
    records = [{"id": t.id, "title": t.title, "done": t.done, "priority": t.priority} for t in tasks]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def next_id(tasks: list[Task]) -> int:
    return max((t.id for t in tasks), default=0) + 1
