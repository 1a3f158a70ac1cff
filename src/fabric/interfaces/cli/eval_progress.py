"""What ``fabric eval`` shows while it runs: a live bar on a terminal (attempts done of all,
passing so far, elapsed time and ETA), else one plain line per finished attempt."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

from fabric.application.evals.summary import clip_middle

if TYPE_CHECKING:
    from fabric.application.evals.attempts import Planned
    from fabric.application.evals.records import AttemptRecord


class EvalProgress:
    def __init__(self, stream: TextIO, *, total: int, done_before: int = 0) -> None:
        self.stream = stream
        self.total = total
        self.done = 0
        self.passed = 0
        self.running: list[str] = []
        self.live = stream.isatty()
        self._bar: Any = None
        self._task: Any = None
        if done_before and total:
            self.say(f"continuing: {done_before} attempt(s) already made, {total} to go")
        elif done_before:
            self.say(f"nothing to do: all {done_before} attempt(s) were already made")

    def __enter__(self) -> EvalProgress:
        if self.live and self.total:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console(file=self.stream, force_terminal=True)
            self._bar = Progress(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("passing {task.fields[passing]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.description}"),
                console=console,
                transient=False,
            )
            self._task = self._bar.add_task("", total=self.total, passing="0/0")
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def started(self, item: Planned) -> None:
        self.running.append(f"{item.case.id} #{item.attempt}")
        self._refresh()

    def finished(self, record: AttemptRecord) -> None:
        self.done += 1
        self.passed += record.passed
        name = f"{record.case} #{record.attempt}"
        if name in self.running:
            self.running.remove(name)
        if self._bar is not None:
            self._bar.advance(self._task)
            self._refresh()
        if self._bar is not None and record.passed:
            return  # on the bar, only failures get a line of their own
        verdict = "passed" if record.passed else "FAILED"
        if record.false_success:
            verdict = "FAILED (false success)"
        elif record.unconfirmed_failure:
            verdict = "FAILED (claimed done, unconfirmed)"
        why = next((f"{c.label}: {c.evidence}" for c in record.checks if not c.passed), "")
        if not why and record.error:
            why = str(record.error.get("message", ""))
        why = f"; {clip_middle(why, 200)}" if why else ""
        self.say(
            f"[{self.done}/{self.total}] {name}: {verdict} · {record.status}, "
            f"{record.steps} step{'' if record.steps == 1 else 's'}, {record.wall_s:.1f} s · "
            f"passing {self.passed}/{self.done}{why}"
        )

    def say(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def _refresh(self) -> None:
        if self._bar is None:
            return
        shown = ", ".join(self.running[:3]) + (" ..." if len(self.running) > 3 else "")
        self._bar.update(self._task, description=shown, passing=f"{self.passed}/{self.done}")
