"""Answering the policy's ``ask`` at the terminal.

``fabric run`` and ``fabric resume`` show the exact call (tool, arguments, the rule and why) on
stderr and read ``y`` (run it), ``n`` (refuse it) or ``a`` (run it, and every later call of
this kind, for the rest of the run) from the terminal. ``--yes`` approves everything without
asking; with no terminal to ask (stdin is not a tty) and no ``--yes``, asks are refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import TYPE_CHECKING, TextIO

from fabric.application.approvals import AutoApprover
from fabric.application.ports import Approver
from fabric.domain.policy import ApprovalAnswer, ApprovalRequest

if TYPE_CHECKING:
    from .render import Progress

BY_CLI, BY_YES = "cli", "cli --yes"
_ANSWERS = {
    "y": ApprovalAnswer(True, BY_CLI),
    "yes": ApprovalAnswer(True, BY_CLI),
    "n": ApprovalAnswer(False, BY_CLI),
    "no": ApprovalAnswer(False, BY_CLI),
    "a": ApprovalAnswer(True, BY_CLI, "run"),
    "always": ApprovalAnswer(True, BY_CLI, "run"),
}
_QUESTION = "run it? [y]es / [n]o / [a]lways for this run: "


def cli_approver(*, yes: bool, progress: Progress | None) -> Approver | None:
    """``--yes``: approve all; a terminal: ask there; else None (asks are refused)."""
    if yes:
        return AutoApprover(BY_YES)
    if sys.stdin.isatty():
        return TerminalApprover(progress=progress)
    return None


class TerminalApprover:
    """Asks at the terminal: the question on ``err``, the answer read from ``stdin`` (a tty)
    without blocking the event loop, so the policy's timeout and Ctrl-C still work."""

    def __init__(
        self,
        *,
        progress: Progress | None = None,
        err: TextIO | None = None,
        stdin: TextIO | None = None,
    ) -> None:
        self._progress = progress
        self._err = err or sys.stderr
        self._fd = (stdin or sys.stdin).fileno()

    async def request(self, request: ApprovalRequest) -> ApprovalAnswer:
        if self._progress is not None:
            self._progress.pause()
        self._say(_describe(request))
        answered = False
        try:
            while True:
                self._say(_QUESTION, end="")
                line = await self._read_line()
                if line is None:  # end of input (Ctrl-D): no
                    self._say("")
                    answered = True
                    return ApprovalAnswer(False, BY_CLI)
                answer = _ANSWERS.get(line.strip().lower())
                if answer is not None:
                    answered = True
                    return answer
                self._say("please answer y, n or a")
        finally:
            if not answered:  # timed out or cancelled: end the prompt's line
                self._say("\n(no answer: the call is not run)")

    async def _read_line(self) -> str | None:
        """One line typed at the terminal (None at end of input)."""
        loop = asyncio.get_running_loop()
        got: asyncio.Future[str | None] = loop.create_future()
        chunks: list[bytes] = []

        def readable() -> None:
            data = os.read(self._fd, 4096)
            chunks.append(data)
            if (not data or b"\n" in data) and not got.done():
                text = b"".join(chunks).decode("utf-8", errors="replace")
                got.set_result(text if data or text else None)

        loop.add_reader(self._fd, readable)
        try:
            return await got
        finally:
            loop.remove_reader(self._fd)

    def _say(self, text: str, end: str = "\n") -> None:
        self._err.write(text + end)
        self._err.flush()


def _describe(request: ApprovalRequest) -> str:
    arguments = json.dumps(dict(request.arguments), ensure_ascii=False, indent=2)
    lines = [
        "",
        f"approval needed · step {request.step} · {request.tool}",
        *(f"    {line}" for line in arguments.splitlines()),
        f"  rule: {request.rule or '(the policy default)'}",
        f"  why:  {request.reason}",
    ]
    if request.timeout is not None:
        lines.append(f"  no answer within {request.timeout:g} s refuses the call")
    return "\n".join(lines)
