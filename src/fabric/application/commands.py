"""The port through which tools start processes: the confined command runner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from msgspec import Struct


class CommandOutcome(Struct, frozen=True):
    """How a command ended: its exit code (None when fabric stopped it), its combined output
    (capped) and, when fabric stopped it, why."""

    exit_code: int | None
    output: str
    stopped: str | None = None


class CommandRunner(Protocol):
    """Starts a program in the run's workspace under the pack's confinement and limits."""

    @property
    def confinement(self) -> Mapping[str, Any]:
        """What confines the commands (recorded as ``run_started.confinement``)."""
        ...

    async def run(
        self, argv: Sequence[str], *, env: Mapping[str, str], timeout: float
    ) -> CommandOutcome:
        """Run ``argv`` (``argv[0]`` an absolute path) to the end or until ``timeout``
        seconds pass; nothing it started is left running afterwards."""
        ...
